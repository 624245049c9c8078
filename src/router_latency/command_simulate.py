"""The simulate command: its parser, the argument types only it uses, and its handler, which
serves the simulated router (simulator.py) until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import errno
import math
import os
import signal
import threading
from typing import Any, List, Mapping, Sequence, Tuple

from .constants import (EXIT_OK, MAX_SIGNALS, PREVIEW_PATH, ROUTER_MAX_CONCURRENCY,
                        SIGNAL_NAME_PATTERN)
from .errors import RouterLatencyError
from .files import write_atomic
from .client import bracketed
from .simulator import (signal_error_spec, SignalModel, SignalTime, SimulatedAnswers,
                        SkippedSignals, Stall, start_simulator)
from .console import emit, SignalRelay
from .command_options import (HelpFormatter, non_negative_float, non_negative_int, positive_int,
                              whole_number)

__all__ = ["add_simulate_parser", "cmd_simulate", "signals_text"]


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
    p.add_argument("--instance-sd", type=non_negative_float, default=0.0, metavar="PCT",
                   help="give this instance its own speed: its delay and jitter times a "
                        "log-normal draw of this log standard deviation (in %%), seeded by "
                        "--seed and the ROUND, SIDE and INSTANCE run_rounds.sh gives it")
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
    p.add_argument("--split-stages", type=share_value, default=0.0, metavar="FRACTION",
                   help="share of prompts whose request stage an admission limit splits: a "
                        "later decisions call (vsr_model_runtime_stage_decision_calls_total"
                        "{round=\"later\"}) and one more delay")


def instance_speed(sd_pct: float, seed: int, environ: Mapping[str, str]) -> float:
    """Return an instance's time factor: exp of a normal draw of sd_pct / 100, seeded by the
    seed and the instance run_rounds.sh names (ROUND, SIDE, INSTANCE); 1 without a spread."""
    import random
    if not sd_pct:
        return 1.0
    key = ":".join([str(seed)] + [environ.get(n, "") for n in ("ROUND", "SIDE", "INSTANCE")])
    return math.exp(random.Random(key).gauss(0.0, sd_pct / 100))


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
                                     split_share=args.split_stages,
                                     signal_errors=args.signal_errors or SkippedSignals()),
                                 signals=SignalModel(args.signals or (),
                                                     args.parallel_signals),
                                 speed=instance_speed(args.instance_sd, args.seed, os.environ))
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
          f"{f', this instance x{router.speed:.3f}' if args.instance_sd else ''}"
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
