"""The command line: argparse, the cmd_* handlers, main()."""

from __future__ import annotations

import argparse
import difflib
import errno
import io
import re
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, List, NoReturn, Optional, Sequence, Tuple

from .constants import (__version__, EXIT_OK, EXIT_SIGNAL, EXIT_USAGE, MAX_SIGNALS, MIN_ROUNDS,
                        PREVIEW_PATH, ROUTER_MAX_CONCURRENCY, SIGNAL_NAME_PATTERN)
from .errors import RouterLatencyError, SignalInterrupt
from .files import write_atomic
from .wire import bracketed
from .render_text import format_rounds
from .formats import COMMAND_OUTPUTS
from .console import emit, SignalRelay, stderr_line
from .command_options import (HelpFormatter, non_negative_float, non_negative_int, positive_int,
                              whole_number)
from .command_corpus import add_corpus_parser
from .command_run import add_run_parser, cmd_run
from .command_compare import add_compare_parser
from .command_rounds import add_rounds_parser
from .command_record import add_record_parser
from .command_history import add_history_parser
from .simulator import (demo_next_steps, DEMO_SIDES, run_demo, signal_error_spec, SignalModel,
                        SignalTime, SimulatedAnswers, SkippedSignals, Stall, start_simulator)

__all__: List[str] = []


DESCRIPTION = ("Measures a router's /api/v1/routing/preview endpoint with a fixed prompt "
               "corpus, compares two\nruns, and judges interleaved rounds of two "
               "configurations with paired Student-t intervals.")


def decision_names(text: str) -> Tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected decision names separated by commas")
    return names


def signal_spec(text: str) -> Tuple[SignalTime, ...]:
    """Return --signals domain:3,pii:5 as (name, ms) pairs."""
    pairs: List[SignalTime] = []
    for part in (p.strip() for p in text.split(",")):
        name, _, ms = part.partition(":")
        try:
            value = float(ms)
        except ValueError:
            value = -1.0
        if not SIGNAL_NAME_PATTERN.fullmatch(name) or ":" in name or not 0 <= value < 1e6 \
                or name in dict(pairs):
            raise argparse.ArgumentTypeError(
                f"expected NAME:MS pairs separated by commas (domain:3,pii:5,guard:2), each "
                f"name once, got {part!r}")
        pairs.append(SignalTime(name, value))
    if len(pairs) > MAX_SIGNALS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SIGNALS} signals")
    return tuple(pairs)


def signals_text(pairs: Sequence[SignalTime], parallel: bool) -> str:
    if not pairs:
        return ""
    shown = ", ".join(f"{name} {ms:g} ms" for name, ms in pairs)
    return f", signals {shown} {'in parallel' if parallel else 'one after another'}"


def stall_spec(text: str) -> Stall:
    parts = text.split(":")
    try:
        every, length, extra = int(parts[0]), int(parts[1]), float(parts[2])
    except (ValueError, IndexError):
        every = length = 0
        extra = -1.0
    if len(parts) != 3 or not 0 < length <= every or not 0 <= extra < 1e6:
        raise argparse.ArgumentTypeError(
            f"expected EVERY:LENGTH:MS, LENGTH of every EVERY previews waiting MS more, "
            f"got {text!r}")
    return Stall(every, length, extra)


def signal_errors_spec(text: str) -> SkippedSignals:
    try:
        return signal_error_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def share_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, got {text!r}")
    return value


# a --format asked for that is a file of its own: the command and the option that write it
FORMAT_FILES = {asked: (command, f"--{name} FILE")
                for command, outputs in COMMAND_OUTPUTS.items()
                for name, exporter in outputs.files.items() for asked in exporter.asked_as}


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: router-latency: error: ...; a mistyped
    option is named first, with the closest real one, whatever else is missing."""

    words: Sequence[str] = ()  # the arguments this parser was given

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.words = list(sys.argv[1:] if args is None else args)
        known, extras = super().parse_known_args(args, namespace)
        if self._subparsers is None and any(w.startswith("--") for w in extras):
            self.error(self.mistyped_option() or f"unrecognized arguments: {' '.join(extras)}")
        return known, extras

    def error(self, message: str) -> NoReturn:
        message = self.mistyped_option() or message
        found = re.match(r"argument --format: invalid choice: '([^']*)'", message)
        if found and found.group(1).lower() in FORMAT_FILES:
            command, wanted = FORMAT_FILES[found.group(1).lower()]
            where = "" if wanted.split()[0] in self._option_string_actions else f" of {command}"
            message += f"; {found.group(1)} is a file of its own: {wanted}{where}"
        self.exit(EXIT_USAGE, f"router-latency: error: {message} ({self.prog})\n")

    def mistyped_option(self) -> str:
        """Return the error for the first option this parser does not know, naming the
        closest one it does; '' when there is none."""
        known = [o for o in self._option_string_actions if o.startswith("--")]
        for word in self.words:
            if word == "--":
                break
            option = word.split("=", 1)[0]
            if not option.startswith("--") or option in self._option_string_actions \
                    or any(o.startswith(option) for o in known):  # an abbreviation
                continue
            close = difflib.get_close_matches(option, known, n=1, cutoff=0.75)
            return f"unrecognized option {option}" + (f": did you mean {close[0]}?"
                                                      if close else "")
        return ""

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:  # --help | head: argparse's own writes, and the flush at exit, stay quiet
            emit([message.rstrip("\n")], file or sys.stderr)


def add_simulate_parser(commands: Any) -> None:
    p = commands.add_parser("simulate", help="serve a simulated routing preview",
                            formatter_class=HelpFormatter,
                            epilog="example: simulate --port 8801 --delay-ms 20 --serial")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=whole_number(0, 65535, noun="a port"), default=8801,
                   help="port (0 picks a free one)")
    p.add_argument("--delay-ms", type=non_negative_float, default=2.0, help="time per request")
    p.add_argument("--jitter-ms", type=non_negative_float, default=0.0,
                   help="extra uniform random time per request, up to this")
    served = p.add_mutually_exclusive_group()
    served.add_argument("--serial", action="store_true",
                        help="one request at a time, like one GPU")
    served.add_argument("--workers", type=whole_number(1, 1024), metavar="N",
                        help="N requests served at once, the rest wait, like N GPU processes: "
                             "throughput stops at N x 1000 / delay req/s")
    p.add_argument("--decisions", type=decision_names, default="math,code,general,pii_block",
                   help="decision names, picked by a hash of the prompt")
    p.add_argument("--seed", type=int, default=0, help="seed of the jitter")
    p.add_argument("--max-concurrency", type=positive_int, default=ROUTER_MAX_CONCURRENCY,
                   help="previews in flight at once; beyond it 429 OVERLOADED at once, as the "
                        "router's routing_preview.max_concurrency")
    p.add_argument("--stall", type=stall_spec, metavar="EVERY:LENGTH:MS",
                   help="a slow phase now and then: of every EVERY previews, the last LENGTH "
                        "wait MS more")
    p.add_argument("--startup-s", type=non_negative_float, default=0.0, metavar="SECONDS",
                   help="start-up time: /ready answers 503 and previews carry no decision "
                        "result this long, as a router loading its classifiers")
    p.add_argument("--no-decision-share", type=share_value, default=0.1, metavar="FRACTION",
                   help="share of prompts no decision matches, answered by the default "
                        "route (decision_name \"\")")
    p.add_argument("--cache", type=non_negative_int, default=0, metavar="ENTRIES",
                   help="a result cache of this many prompts, as the router's "
                        "VLLM_SRUN_RESULT_CACHE (0: none): a repeated prompt answers at once")
    p.add_argument("--per-kb-ms", type=non_negative_float, default=0.0, metavar="MS",
                   help="more time per KB of prompt, as a transformer's forward grows with "
                        "the input")
    p.add_argument("--metrics-port", type=whole_number(0, 65535, noun="a port"), default=0,
                   help="port of the Prometheus metrics, apart from the API as the router's "
                        "-metrics-port (0 picks a free one)")
    p.add_argument("--signals", type=signal_spec, metavar="NAME:MS,...",
                   help="signals each preview runs and reports (metrics.<signal>."
                        "execution_time_ms; llm_signal_extraction_latency_seconds on /metrics)"
                        ", with their time in ms (each +-10%%): domain:3,pii:5,guard:2; "
                        "without it, none is modelled: domain, jailbreak, pii, fact_check and "
                        "user_feedback report equal shares of the preview's time")
    p.add_argument("--signal-errors", type=signal_errors_spec, metavar="SHARE[:FASTER]",
                   help="a share of prompts whose signal fails: answered 200 with "
                        "signal_errors and applied_unknown_policies (classifier:intent), "
                        "FASTER less of their time (0.2:0.3: 20%% of previews, 30%% faster)")
    p.add_argument("--parallel-signals", action="store_true",
                   help="run the signals at once: a preview takes the longest, not the sum")
    add_today_options(p)
    p.add_argument("--url-file", help="write the server's URL here once it listens")
    p.set_defaults(func=cmd_simulate)


def add_demo_parser(commands: Any) -> None:
    p = commands.add_parser("demo", help="the whole method on two simulated routers",
                            formatter_class=HelpFormatter)
    p.add_argument("--rounds", type=whole_number(MIN_ROUNDS, 50), default=4,
                   help="interleaved rounds")
    p.add_argument("--keep", "--dir", dest="keep", metavar="DIR",
                   help="keep the corpus and run files in DIR (default: a temporary folder, "
                        "deleted at the end)")
    p.set_defaults(func=cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="router-latency", description=DESCRIPTION,
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="exit codes: 0 ok, 1 gate failed, 2 bad input, 3 inconclusive "
                           "(rounds), 130/143/129 interrupted")
    parser.add_argument("--version", action="version", version=f"router-latency {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser,
                                     metavar="{corpus,run,compare,rounds,record,history,"
                                             "simulate,demo}")
    for add in (add_corpus_parser, add_run_parser, add_compare_parser, add_rounds_parser,
                add_record_parser, add_history_parser, add_simulate_parser, add_demo_parser):
        add(commands)  # in this order in --help
    return parser


def add_today_options(p: argparse.ArgumentParser) -> None:
    """Add simulate's options for what newer routers answer (simulator.simulated_today)."""
    p.add_argument("--runtime", choices=("vllm-srun", "vllm-sr-runtime"),
                   help="also serve the model runtime's own metrics under this name "
                        "(vllm_srun_* or vllm_sr_runtime_*); with --cache, its result cache "
                        "counter replaces the router's")
    p.add_argument("--phased-startup", action="store_true",
                   help="start as newer routers do: previews answer 503 "
                        "CLASSIFIER_UNAVAILABLE and /ready says its phase and pending "
                        "models during --startup-s")
    p.add_argument("--sampled-share", type=share_value, default=0.0, metavar="FRACTION",
                   help="share of prompts whose selected model the router samples "
                        "(selection_provenance.sampled), drawn anew each time")
    p.add_argument("--partial-share", type=share_value, default=0.0, metavar="FRACTION",
                   help="share of prompts answered 503 with the answer and a decision_error "
                        "(the decision failed after the signals ran)")


def cmd_simulate(args: argparse.Namespace) -> int:
    try:
        router = start_simulator(args.host, args.port, delay_ms=args.delay_ms,
                                 jitter_ms=args.jitter_ms, serial=args.serial,
                                 decisions=args.decisions, seed=args.seed,
                                 max_concurrency=args.max_concurrency, stall=args.stall,
                                 workers=args.workers, answers=SimulatedAnswers(
                                     args.startup_s, args.no_decision_share, args.cache,
                                     args.per_kb_ms, args.metrics_port,
                                     runtime=args.runtime, phased_startup=args.phased_startup,
                                     sampled_share=args.sampled_share,
                                     partial_share=args.partial_share,
                                     signal_errors=args.signal_errors or SkippedSignals()),
                                 signals=SignalModel(args.signals or (),
                                                     args.parallel_signals))
    except OSError as exc:  # a port in use, an address not on this host, a name unknown
        option = "--port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
        # create_server adds "(while attempting to bind on address ...)": said already
        reason = (exc.strerror or str(exc)).split(" (while attempting")[0]
        raise RouterLatencyError(f"cannot listen on {bracketed(args.host)}:{args.port}: "
                                 f"{reason}", option) from None
    if args.url_file:
        write_atomic(args.url_file, (router.url + "\n").encode())
    emit([f"simulated router at {router.url}{PREVIEW_PATH} (delay {args.delay_ms:g} ms, "
          f"jitter {args.jitter_ms:g} ms{', serial' if args.serial else ''}"
          f"{f', {args.workers} workers' if args.workers else ''}"
          f"{signals_text(args.signals or (), args.parallel_signals)}, at most "
          f"{args.max_concurrency} at once; x-vsr-config-hash {router.config_hash}); Ctrl-C "
          f"stops", f"metrics at {router.metrics_url}"
          + (f"; a result cache of {args.cache} prompts" if args.cache else "")
          + (f"; {args.signal_errors.share:.0%} of previews with signal_errors, "
             f"{args.signal_errors.faster:.0%} faster" if args.signal_errors else "")])
    stopped = threading.Event()
    relay = SignalRelay(stopped, (signal.SIGTERM,))
    try:
        while not stopped.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        relay.restore()
        router.stop()
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the whole method on two simulated routers: corpus, interleaved rounds, rounds."""
    keep = args.keep is not None
    work = Path(args.keep) if keep else Path(tempfile.mkdtemp(prefix="router-latency-demo-"))
    if keep:
        try:
            work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file there, a folder that cannot be made
            raise RouterLatencyError(f"cannot make the folder: {exc.strerror}", args.keep)
        if any(work.glob("r*-*.json")) or (work / "corpus.json").exists():
            raise RouterLatencyError("already holds demo files; use an empty folder", args.keep)
    where = f"in {work}" if keep else f"in {work} (deleted at the end; --keep DIR keeps them)"
    try:
        profiles = ", ".join(f"{side} {p['delay_ms']:g} ms + up to {p['jitter_ms']:g} ms jitter"
                             + signals_text(p["signals"].times_ms, p["signals"].parallel)
                             for side, p in DEMO_SIDES.items())
        emit([f"demo: two simulated routers, serial like one GPU process each: {profiles}; "
              f"{args.rounds} rounds {where}",
              "(the simulated routers run inside the driver's process here, so 'router cpus' "
              "and 'driver cpu' are that process's)"])
        report = run_demo(work, args.rounds, lambda line: emit([line]))
        emit(["", *format_rounds(report)])
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    emit(["", f"the corpus and run files are kept in {work}" if keep else
          f"the corpus and run files were deleted with {work}; --keep DIR keeps them",
          *demo_next_steps(bool(__package__))])  # the package, not the one file
    return report.exit_code


def raise_interrupt(signum: int, frame: Any) -> None:
    """The handler of SIGTERM and SIGHUP outside run and simulate."""
    raise SignalInterrupt(signum)


def main(argv: Optional[Sequence[str]] = None, *, program: bool = False) -> int:
    """Run the command line; return the exit code. program: run as the program (the file, the
    console script, python -m), not called from Python."""
    previous: dict = {}
    try:
        if program and threading.current_thread() is threading.main_thread():
            # the early handler each entry installs (the top of the file, __main__.run) exits
            # at once; from here on an interrupt is a KeyboardInterrupt, which the commands
            # and the end of main handle
            signal.signal(signal.SIGINT, signal.default_int_handler)
        for stream in (sys.stdout, sys.stderr):
            try:  # a path or label of bytes that are not UTF-8 is shown escaped, never a crash
                if isinstance(stream, io.TextIOWrapper):  # not a stream put in its place
                    stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        if args.func not in (cmd_run, cmd_simulate) \
                and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):  # run and simulate handle their own
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    previous[signum] = signal.signal(signum, raise_interrupt)
        return args.func(args)
    except RouterLatencyError as exc:
        stderr_line(f"error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        caught = exc.signum if isinstance(exc, SignalInterrupt) else int(signal.SIGINT)
        stderr_line(f"interrupted by {signal.Signals(caught).name}; a file being written was "
                    f"finished or removed, none is left half-written")
        return EXIT_SIGNAL[signal.Signals(caught)]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def console_main() -> None:
    """The command's entry (the console script, `python router_latency.py`): main's exit code.
    A Ctrl-C pressed again while Python joins the last threads would end it by SIGINT with a
    traceback, after the file was written and the code chosen: from here on it is ignored."""
    status = main(program=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(status)
