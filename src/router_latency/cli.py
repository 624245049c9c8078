"""The command line: argparse, the cmd_* handlers, main()."""

from __future__ import annotations

import argparse
import difflib
import errno
import io
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import (Any, Callable, Dict, Iterable, List, NamedTuple, NoReturn, Optional, Sequence,
                    Tuple)

from .constants import (__version__, CACHE_ADVICE, CONFIG_HASH_PATTERN, DEFAULT_DECISION_PATHS,
                        DEFAULT_GLOB, DEFAULT_HISTOGRAMS, DEFAULT_MODEL, EXIT_OK, EXIT_SIGNAL,
                        EXIT_USAGE, EXPECTED_HASH_HEADER, LADDER_GATE_NAMES, LADDER_MARGIN_PCT,
                        LADDER_PASS, MAX_SIGNALS, MIN_ROUNDS, PREVIEW_PATH, PROMPT_KEYS,
                        ROUTER_MAX_CONCURRENCY, ROUTER_TIMEOUT_S, ROW_METRICS,
                        SIGNAL_NAME_PATTERN)
from .errors import RouterLatencyError, SignalInterrupt
from .words import metric_title, scrubbed, visible
from .stats import MAX_SEQUENTIAL_ROUNDS
from .files import (append_whole, check_distinct_files, check_folder_accepts_a_file,
                    check_writable_target, drop_output, rescue_copy, write_atomic, write_output)
from .corpus import (build_corpus, corpus_bytes, CORPUS_FORMATS, default_boundary_cases,
                     load_boundary_cases, load_corpus)
from .cache import cache_text
from .versions import runtime_name_warning
from .runfile import dump_run, Ladder, load_run, RunFile, Thresholds
from .client import bracketed, Endpoint, parse_endpoint, secret_values
from .meaning import SignalTable
from .captures import CaptureSettings, DEFAULT_METRIC_PATTERN, Probe
from .gpu import GPU_TOOLS, resolve_gpu
from .host import container_cgroup, format_cpu_list, parse_cpu_list
from .measuring import (check_plan, LoadGuard, measure_run, plan_passes, Progress, RunContext,
                        RunPlan, say_nothing, settings_record)
from .passloop import PassPlan, Target
from .compare import compare_runs
from .ladder import cost_for, CostPerHour, ladder_levels, run_capacity
from .gate import GateSettings
from .rounds import (CHECKED_FIELDS, find_round_files, judge_rounds, not_found_only, run_outcome,
                     run_overload)
from .record import record_section
from .render_text import (energy_beside_cost, format_capacity, format_host, format_plan,
                          format_rounds, format_run_header, format_run_summary, overload_note,
                          verdict_line)
from .formats import COMMAND_OUTPUTS, CompareView, formats_help, RoundsView
from .history_cli import add_history_parser
from .simulator import (corpus_lines, demo_next_steps, DEMO_SIDES, run_demo, signal_error_spec,
                        SignalModel, SignalTime, SimulatedAnswers, SkippedSignals, Stall,
                        start_simulator)

__all__: List[str] = []


DESCRIPTION = ("Measures a router's /api/v1/routing/preview endpoint with a fixed prompt "
               "corpus, compares two\nruns, and judges interleaved rounds of two "
               "configurations with paired Student-t intervals.")
SIDE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def emit(lines: Iterable[str], stream: Any = None) -> None:
    """Print lines to stdout (or stream). What nobody can take any more (a pipe `| head`
    closed, a full disk) is dropped quietly: the exit code still carries the verdict."""
    stream = stream or sys.stdout
    if stream is None:  # started with the stream closed (>&-): nobody to show it to
        return
    try:
        for line in lines:  # a line may hold line breaks (JSON), no other control character
            stream.write("\n".join(visible(part) for part in line.split("\n")) + "\n")
        stream.flush()
    except OSError:
        drop_output(stream)


def stderr_line(message: str) -> None:
    emit([f"router-latency: {message}"], sys.stderr)


def real_number(*, positive: bool) -> Callable[[str], float]:
    """Return an argparse type: a finite number > 0 (positive) or >= 0."""
    bound = "> 0" if positive else ">= 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}")
        return value

    return parse


def whole_number(low: int, high: Optional[int] = None, *,
                 noun: str = "a whole number") -> Callable[[str], int]:
    """Return an argparse type: a whole number from low (up to high)."""
    bound = f">= {low}" if high is None else f"from {low} to {high}"

    def parse(text: str) -> int:
        if not re.fullmatch(r"\s*\d+\s*", text) or int(text) < low \
                or (high is not None and int(text) > high):
            raise argparse.ArgumentTypeError(f"expected {noun} {bound}, got {text!r}")
        return int(text)

    return parse


positive_float = real_number(positive=True)
non_negative_float = real_number(positive=False)
non_negative_int = whole_number(0)
positive_int = whole_number(1)


class ConcurrencyLevels(argparse.Action):
    """--concurrency 1 4 16 as the published records write it, or 1,4,16: one tuple."""

    def __call__(self, parser, namespace, values, option_string=None):
        levels = [level for part in values for level in part]
        twice = sorted({level for level in levels if levels.count(level) > 1})
        if twice:
            raise argparse.ArgumentError(self, f"concurrency {twice[0]} given twice")
        setattr(namespace, self.dest, tuple(levels))


def concurrency_list(text: str) -> Tuple[int, ...]:
    levels = []
    for part in text.split(","):
        if not re.fullmatch(r"\s*\d+\s*", part) or int(part) < 1 or int(part) > 1024:
            raise argparse.ArgumentTypeError(
                f"expected whole numbers from 1 to 1024 separated by commas, got {text!r}")
        if int(part) in levels:
            raise argparse.ArgumentTypeError(f"concurrency {int(part)} given twice")
        levels.append(int(part))
    return tuple(levels)


TIME_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"


def rate_list(text: str) -> Tuple[float, ...]:
    """Return the requests per second of a --rate list: 50, 50/s, 50/1s, 3000/1m (vegeta's
    frequency/duration), separated by commas."""
    rates = []
    for part in text.split(","):
        # a unit without a number is one of it (50/s); 10/500ms is 20 per second
        found = re.fullmatch(rf"\s*{NUMBER}(?:/{NUMBER}?(ms|s|m|h))?\s*", part)
        rate = float("nan")
        if found:
            count, span, unit = found.groups()
            seconds = float(span or 1) * TIME_UNITS[unit or "s"]
            rate = float(count) / seconds if seconds > 0 else rate
        if not math.isfinite(rate) or not 0 < rate <= 1_000_000:
            raise argparse.ArgumentTypeError(
                f"expected requests per second above 0 separated by commas (50, 50/s, "
                f"3000/1m), got {text!r}")
        if rate in rates:
            raise argparse.ArgumentTypeError(f"rate {part} given twice")
        rates.append(rate)
    return tuple(rates)


def duration_seconds(text: str) -> float:
    """Return the seconds of a --duration: 30, 30s, 500ms, 2m or 1h."""
    found = re.fullmatch(rf"\s*{NUMBER}\s*(ms|s|m|h)?\s*", text)
    seconds = float(found.group(1)) * TIME_UNITS[found.group(2) or "s"] if found else 0.0
    if not 0 < seconds <= 86400:
        raise argparse.ArgumentTypeError(
            f"expected a time above 0 and up to a day: 30, 30s, 500ms, 2m, 1h; got {text!r}")
    return seconds


def variable_name(text: str) -> str:
    """Return the name of an environment variable; the text is not echoed, since a token
    given by mistake must not be printed."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise argparse.ArgumentTypeError("expected the name of an environment variable "
                                         "(letters, digits and '_'), not the token itself")
    return text


def parse_header(text: str) -> Tuple[str, str]:
    """Return (name, value) of a 'Name: value' header argument."""
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
        raise argparse.ArgumentTypeError("expected 'Name: value'")
    if "\r" in value or "\n" in value:
        raise argparse.ArgumentTypeError("a header value cannot span lines")
    if re.search("[\x00-\x08\x0b-\x1f\x7f]", value):  # RFC 9110 5.5: no control but tab
        raise argparse.ArgumentTypeError("a header value cannot hold a control character")
    if name.lower() in ("content-length", "transfer-encoding"):  # a second framing: smuggling
        raise argparse.ArgumentTypeError(f"{name} is set from each request's body, not by "
                                         f"--header")
    return name, value.strip()


def probe_spec(text: str) -> Probe:
    name, sep, command = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not command.strip():
        raise argparse.ArgumentTypeError("expected NAME=COMMAND, NAME of letters, digits, "
                                         "'.', '_' or '-'")
    return Probe(name, command)


def metric_pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None


def side_name(text: str) -> str:
    if not SIDE_PATTERN.match(text) or ".." in text:
        raise argparse.ArgumentTypeError(
            f"a side is letters, digits, '.', '_' or '-' (no '/' or '..'), got {text!r}")
    return text


def histogram_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        raise argparse.ArgumentTypeError(f"expected a Prometheus metric name, got {text!r}")
    return text


PART_GATE = re.compile(r"(?:(sequential|c\d+|r[\d.]+):)?((?:signal|router):[A-Za-z0-9_.-]{1,64}"
                       r":(?:p50|p95|mean))")


def gate_list(text: str) -> Tuple[str, ...]:
    """Return the gated rows of a --gate list: metric names, or pass:metric; a part of the
    time, signal:NAME:STAT or router:PART:STAT (STAT p50, p95 or mean), likewise."""
    names = {metric_title(m): m for m in ROW_METRICS}
    found = []
    for part in (p.strip() for p in text.split(",")):
        match = PART_GATE.fullmatch(part)
        if match:  # a row of where the time goes
            found.append(part)
            continue
        if part in LADDER_GATE_NAMES or part.startswith(f"{LADDER_PASS}:") \
                and part.split(":", 1)[1] in LADDER_GATE_NAMES:  # a ladder's rows
            found.append(LADDER_GATE_NAMES[part.rpartition(":")[2]])
            continue
        scope, _, metric = part.rpartition(":")
        if metric not in names or (scope and not re.fullmatch(r"sequential|c\d+|r[\d.]+",
                                                                scope)):
            raise argparse.ArgumentTypeError(
                f"expected p50, p95, p99, mean or req/s, each optionally after a pass "
                f"(sequential:p99, c16:p95), a ladder's plateau, capacity or cost, or "
                f"signal:NAME:STAT or router:PART:STAT (signal:pii:p95), got {part!r}")
        found.append(f"{scope}:{names[metric]}" if scope else names[metric])
    return tuple(found)


def cost_spec(text: str) -> CostPerHour:
    """Return (side or None, USD per hour, per what) of a --cost-per-hour [SIDE=]USD[/UNIT]:
    rocm=2.50, cpu=0.90/node, 3.20/GPU."""
    side, sep, rest = text.rpartition("=")
    found = re.fullmatch(rf"\s*\$?{NUMBER}\s*(?:/\s*([A-Za-z][A-Za-z0-9 _-]{{0,31}}))?\s*", rest)
    usd = float(found.group(1)) if found else 0.0
    if not found or not usd > 0 or (sep and not SIDE_PATTERN.match(side)):
        raise argparse.ArgumentTypeError(
            f"expected [SIDE=]USD[/UNIT], US dollars an hour above 0 (rocm=2.50, cpu=0.90/node, "
            f"3.20/GPU), got {text!r}")
    return CostPerHour(side if sep else None, usd, (found.group(2) or "node").strip())


def decision_names(text: str) -> Tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected decision names separated by commas")
    return names


def index_list(text: str) -> Tuple[int, ...]:
    try:
        return tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected GPU indexes separated by commas, got {text!r}") from None


def cpu_list_text(text: str) -> str:
    try:
        return format_cpu_list(parse_cpu_list(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a CPU list such as 0-11,24, got {text!r}") \
            from None


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


def config_hash_text(text: str) -> str:
    if not CONFIG_HASH_PATTERN.fullmatch(text):
        raise argparse.ArgumentTypeError("expected the router's config hash: 64 lowercase hex "
                                         "digits")
    return text


def sampling_seed_value(text: str) -> Optional[int]:
    if text == "off":
        return None
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -2 ** 63 <= value < 2 ** 63:
        raise argparse.ArgumentTypeError("expected a signed 64-bit whole number, or off")
    return value


def share_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, got {text!r}")
    return value


def label_text(text: str) -> str:
    if not text.strip() or len(text) > 200:
        raise argparse.ArgumentTypeError("expected a label of 1 to 200 characters")
    return text


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default in the help only where there is one to show."""

    def _get_help_string(self, action: argparse.Action) -> Optional[str]:
        if action.default is None or action.default is False or action.default == []:
            return action.help or ""
        return super()._get_help_string(action)


# a --format asked for that is a file of its own: the command and the option that write it
FORMAT_FILES = {asked: (command, f"--{name} FILE")
                for command, outputs in COMMAND_OUTPUTS.items()
                for name, exporter in outputs.files.items() for asked in exporter.asked_as}


def add_format_option(p: Any, command: str, more_help: str = "") -> None:
    """Add the command's --format option: its choices and their help from its registry entry,
    text the default."""
    formats = COMMAND_OUTPUTS[command].formats
    p.add_argument("--format", choices=tuple(formats), default="text",
                   help=formats_help(formats) + more_help)


def add_file_options(p: Any, command: str, *, required: bool = False) -> None:
    """Add the --NAME FILE option of each file the command writes, from its registry entry."""
    for name, exporter in COMMAND_OUTPUTS[command].files.items():
        p.add_argument(f"--{name}", required=required,
                       **({} if required else {"metavar": "FILE"}), help=exporter.about)


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


def add_corpus_parser(commands: Any) -> None:
    p = commands.add_parser("corpus", help="build the prompt corpus from a router repo",
                            formatter_class=HelpFormatter,
                            epilog="example: corpus --repo ../semantic-router --out corpus.json")
    p.add_argument("--repo", required=True, help="router repo checkout (reads DIR/e2e)")
    p.add_argument("-o", "--out", required=True, help="corpus file to write")
    p.add_argument("--glob", default=DEFAULT_GLOB, help="data files, relative to the repo")
    p.add_argument("--key", action="append", default=[], help="another prompt key (repeatable)")
    p.add_argument("--data-format", choices=CORPUS_FORMATS, default="json",
                   help="how each data file is read: json, prompts under the keys at any depth; "
                        "list, a JSON list of prompts; jsonl, a JSON value a line (a string is "
                        "a prompt); lines, one prompt a line of UTF-8 text")
    p.add_argument("--boundary", help="boundary-case file (default: the built-in cases, whose "
                                      "editable copy is corpus/boundary_cases.json)")
    p.add_argument("--no-boundary", action="store_true", help="append no boundary cases")
    p.add_argument("--force", action="store_true", help="overwrite an existing corpus file")
    p.set_defaults(func=cmd_corpus)


def add_run_parser(commands: Any) -> None:
    p = commands.add_parser("run", help="measure one router with the corpus",
                            formatter_class=HelpFormatter,
                            epilog="example: run --url http://127.0.0.1:8801 --corpus corpus.json "
                                   "--out results/r1-cpu.json --label cpu")
    add_send_options(p.add_argument_group("what to send"))
    passes = p.add_argument_group("passes")
    passes.add_argument("--warmup", type=non_negative_int, default=20,
                        help="warm-up requests, not recorded")
    add_pass_options(passes)
    passes.add_argument("--max-errors", type=non_negative_int, default=0,
                        help="failed requests allowed before exit 1 (rejections a boundary "
                             "case expects are not failures; a degraded answer counts as one)")
    passes.add_argument("--allow-degraded", action="store_true",
                        help="do not count degraded answers (a 200 with signal_errors, "
                             "applied_unknown_policies or decision_error) against --max-errors")
    passes.add_argument("--router-max-concurrency", type=positive_int,
                        default=ROUTER_MAX_CONCURRENCY, metavar="N",
                        help="previews the router admits at once (its global.services.api."
                             "routing_preview.max_concurrency); a pass with more callers is "
                             "warned about, since the router sheds the rest with 429 "
                             "OVERLOADED")
    passes.add_argument("--wait-ready", type=non_negative_float, metavar="SECONDS",
                        help="wait up to this long for the router to answer before starting")
    record = p.add_argument_group("what to record around each pass")
    add_load_options(record)
    add_capture_options(record)
    add_suspect_options(record)
    output = p.add_argument_group("output")
    output.add_argument("-o", "--out", required=True, help="run file to write")
    output.add_argument("--label", required=True, type=label_text,
                        help="name of this side or run")
    add_file_options(output, "run")
    output.add_argument("--force", action="store_true",
                        help="overwrite an existing run or CSV file")
    output.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    output.add_argument("--check", action="store_true",
                        help="check the options, the corpus and the output path, then exit 0 "
                             "without contacting the router (rounds/run_rounds.sh does this "
                             "before it starts one)")
    p.set_defaults(func=cmd_run)


def add_send_options(send: Any) -> None:
    """Add run's options of what it sends, and to where."""
    send.add_argument("--url", required=True, help="router URL; a base URL gets "
                                                   f"{PREVIEW_PATH} appended")
    send.add_argument("--corpus", required=True, help="corpus file from the corpus command")
    send.add_argument("--model", default=DEFAULT_MODEL,
                      help="model field of each request: one of the router's auto names "
                           "(vllm-sr/auto, auto, MoM unless configured) or entrypoints; "
                           "default none: the router uses its default")
    send.add_argument("--expect-config-hash", type=config_hash_text, metavar="HASH",
                      help="the configuration the router must serve (its x-vsr-config-hash), "
                           f"sent as {EXPECTED_HASH_HEADER}: a router serving another answers "
                           "412, and the run stops before any pass")
    send.add_argument("--sampling-seed", type=sampling_seed_value, default=0, metavar="N",
                      help="preview_context.sampling_seed of every request, so that a model "
                           "selection that samples draws the same model each time; 'off' sends "
                           "none")
    send.add_argument("-H", "--header", action="append", default=[], type=parse_header,
                      help="extra header 'Name: value' (repeatable; values never stored)")
    send.add_argument("--token-env", type=variable_name, metavar="VAR",
                      help="send 'Authorization: Bearer' with the value of this environment "
                           "variable (e.g. VSR_MGMT_TOKEN; never stored or printed)")
    send.add_argument("--timeout", type=positive_float, default=30.0,
                      help="seconds per request; keep it above the router's "
                           f"request_timeout_seconds (default {ROUTER_TIMEOUT_S}): a request "
                           "given up on earlier keeps its router slot until its inference "
                           "ends, and new sends can meet 429 OVERLOADED")
    send.add_argument("--insecure", action="store_true",
                      help="do not verify HTTPS certificates (recorded in the file)")


def add_pass_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--concurrency", type=concurrency_list, nargs="+",
                   action=ConcurrencyLevels, metavar="LEVELS",
                   help="closed-loop passes, one per level (1 = sequential): 1 4 16 or "
                        "1,4,16; default 1,4,16, none when --rate is given")
    p.add_argument("--rate", type=rate_list, default=(),
                   help="open-loop passes at these requests per second (50, 50/s, 3000/1m), "
                        "sending on a schedule; latency counts from the scheduled time")
    length = p.add_mutually_exclusive_group()
    length.add_argument("-n", "--repeat", type=positive_int, default=1, metavar="N",
                        help="send the corpus N times in each pass")
    length.add_argument("-d", "--duration", type=duration_seconds, metavar="TIME",
                        help="cycle the corpus in each pass until TIME is up (30, 30s, 2m); "
                             "with --rate, the schedule runs that long")
    p.add_argument("--arrival", choices=("constant", "poisson"), default="constant",
                   help="spacing of the scheduled sends of --rate passes")
    p.add_argument("--seed", type=int, default=0, help="seed of the poisson schedule")
    p.add_argument("--connections", type=positive_int, default=64,
                   help="the most connections a --rate pass opens")
    p.add_argument("--ladder", action="store_true",
                   help="climb a ladder of load, one pass a step: the --concurrency levels "
                        "(default 1, 2, 4, ... up to --router-max-concurrency) or the --rate "
                        "rates, in order, stopping when throughput stops growing, the router "
                        "sheds or p95 passes --slo-p95-ms (docs/capacity.md)")
    p.add_argument("--ladder-margin", type=non_negative_float, default=LADDER_MARGIN_PCT,
                   metavar="PCT", help="a ladder step adding less throughput than this "
                                       "percentage over the one before ends the climb")
    p.add_argument("--slo-p95-ms", type=positive_float, metavar="MS",
                   help="the latency objective: a ladder stops when a step's p95 passes it, "
                        "and capacity is the most req/s within it")
    p.add_argument("--cost-per-hour", type=cost_spec, metavar="[SIDE=]USD[/UNIT]",
                   action="append", default=[],
                   help="what the node costs an hour (2.50, 2.50/GPU; SIDE= names the label "
                        "it is for): a ladder prints USD per million routed requests at "
                        "capacity")
    p.add_argument("--decision-path", action="append",
                   help="dotted path to the decision in the response (repeatable, joined by |); "
                        "default decision_result.decision_name|routing_decision|decision "
                        "plus selected_model when present")


def add_load_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-load", type=non_negative_float, default=120.0,
                   help="discard a pass whose 1-minute load average exceeded this")
    p.add_argument("--load-retries", type=non_negative_int, default=2,
                   help="retries of a pass discarded for load")
    p.add_argument("--load-pause", type=non_negative_float, default=30.0,
                   help="seconds to wait before such a retry")
    p.add_argument("--loadavg-file", help="read the load from this file (default: the system's)")


def add_capture_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--probe", action="append", default=[], type=probe_spec,
                   metavar="NAME=COMMAND",
                   help="shell command run before and after each pass; exit code and the first "
                        "4 KB of stdout are stored (repeatable)")
    p.add_argument("--probe-timeout", type=positive_float, default=10.0,
                   help="seconds a probe, GPU tool or metrics scrape may take")
    names = [tool.name for tool in GPU_TOOLS]
    p.add_argument("--gpu", choices=("auto", *(tool.choice for tool in GPU_TOOLS), "none"),
                   default="auto",
                   help=f"record GPU temperature, clocks, power, use and memory before and after "
                        f"each pass with {', '.join(names[:-1])} or {names[-1]} (auto: the "
                        f"first of them on PATH)")
    p.add_argument("--gpu-index", type=index_list, metavar="N[,N...]",
                   help="the router's GPUs, by the tool's own index: only these are read "
                        "before and after; every GPU is sampled, these marked (default: all)")
    p.add_argument("--sample-ms", type=real_number(positive=False), default=250.0,
                   metavar="MS",
                   help="sample through each pass every MS ms: GPUs (nvidia-smi's looping "
                        "query), the router's CPU, the load; 0: off (default 250)")
    router = p.add_mutually_exclusive_group()
    router.add_argument("--router-pid", type=positive_int,
                        help="the router's process: its CPU set, and the CPU time of it, its "
                             "threads and its children")
    router.add_argument("--router-session", type=positive_int, metavar="SID",
                        help="the router's process session (setsid; run_rounds.sh passes its "
                             "start command's): the CPU time of every process in it")
    router.add_argument("--router-cgroup", metavar="PATH",
                        help="the router's cgroup v2 folder: cpuset.cpus.effective and "
                             "cpu.stat usage_usec")
    router.add_argument("--router-container", metavar="NAME",
                        help="the router's Docker container: its cgroup, found with docker "
                             "inspect")
    p.add_argument("--router-cpus", type=cpu_list_text, metavar="LIST",
                   help="the router's CPUs ('0-11'), instead of its cgroup's or process's set, "
                        "for the foreign vCPUs on them")
    p.add_argument("--metrics-url", help="router's Prometheus endpoint, scraped before and "
                                         "after each pass; a URL without a path gets /metrics")
    p.add_argument("--metric", action="append", type=metric_pattern, metavar="REGEX",
                   help="keep series whose name matches (repeatable; default: names "
                        f"matching {DEFAULT_METRIC_PATTERN})")
    p.add_argument("--histogram", action="append", type=histogram_name, metavar="NAME",
                   help="also keep this histogram's buckets, sum and count per pass "
                        "(repeatable; always: " + ", ".join(DEFAULT_HISTOGRAMS) + ")")
    p.add_argument("--no-signals", action="store_true",
                   help="do not record the router's per-signal times (metrics.<signal>."
                        "execution_time_ms of each answer)")


def add_suspect_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-foreign-cpus", type=non_negative_float, default=1.0,
                   help="flag a pass where other processes used more vCPUs of the router's CPUs")
    p.add_argument("--window", type=positive_int, default=50, metavar="REQUESTS",
                   help="requests per window of each pass's time series")
    p.add_argument("--slow-p95", type=positive_float, default=2.0, metavar="FACTOR",
                   help="a slow phase: a window's p95 above FACTOR times the pass's median "
                        "window p95")
    p.add_argument("--slow-rate", type=non_negative_float, default=0.5, metavar="FACTOR",
                   help="... or its req/s below FACTOR times the median window req/s")


def add_compare_parser(commands: Any) -> None:
    p = commands.add_parser("compare", help="two runs side by side",
                            formatter_class=HelpFormatter,
                            epilog="example: compare results/r1-cpu.json results/r1-rocm.json "
                                   "(or --base r1-cpu.json --new r1-rocm.json)")
    p.add_argument("a", nargs="?", help="run file A (the base)")
    p.add_argument("b", nargs="?", help="run file B")
    p.add_argument("--base", dest="base_file", metavar="FILE", help="run file A, by name")
    p.add_argument("--new", dest="new_file", metavar="FILE", help="run file B, by name")
    p.add_argument("--corpus", help="corpus file, to show the text of differing inputs")
    p.add_argument("--allow-corpus-mismatch", action="store_true",
                   help="compare runs of different corpora")
    p.add_argument("--allow-incomplete", action="store_true", help="accept interrupted runs")
    p.add_argument("--fail-on-decision-change", action="store_true",
                   help="exit 1 when any decision differs")
    add_format_option(p, "compare")
    add_ladder_options(p)
    p.set_defaults(func=cmd_compare)


def add_ladder_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slo-p95-ms", type=positive_float, metavar="MS",
                   help="ladder runs: capacity within this p95 (default: the SLO they climbed "
                        "with)")
    p.add_argument("--cost-per-hour", type=cost_spec, metavar="SIDE=USD[/UNIT]",
                   action="append", default=[],
                   help="ladder runs: what a side's node costs an hour (rocm=2.50/GPU; "
                        "repeatable; USD alone: both sides), for a row of USD per million "
                        "routed requests at capacity")


def add_rounds_parser(commands: Any) -> None:
    p = commands.add_parser("rounds", help="judge interleaved rounds of two sides",
                            formatter_class=HelpFormatter,
                            epilog="example: rounds --dir results --base cpu --new rocm. "
                                   "Exit codes: 0 pass: every gated row shown within the "
                                   "tolerance; 1 failed: a gated row shown worse, a changed "
                                   "decision, a failed new side or more failed requests than "
                                   "the base; 2 bad input; 3 inconclusive: a gated row not "
                                   "decided either way (the report says how many more rounds "
                                   "would decide it), fewer than 3 usable rounds or a failed "
                                   "base side.")
    p.add_argument("--dir", required=True, help="folder of r<N>-<side>.json files")
    p.add_argument("--base", required=True, type=side_name, help="the reference side")
    p.add_argument("--new", required=True, type=side_name, help="the side under test")
    p.add_argument("--tolerance", type=non_negative_float, default=5.0,
                   help="percent change within which a row is 'same'")
    p.add_argument("--gate", type=gate_list, default="p50,p95,req/s",
                   help="rows that can fail the gate: p50, p95, p99, mean, req/s of every pass, "
                        "PASS:METRIC (c16:p95), signal:NAME:STAT or router:PART:STAT")
    add_ladder_options(p)
    p.add_argument("--max-mde", type=positive_float, metavar="PCT",
                   help="with --strict, the largest detectable change an inconclusive gated "
                        "row may have before the result is inconclusive (default twice the "
                        "tolerance, 10 at tolerance 0)")
    p.add_argument("--strict", action="store_true",
                   help="with --pass-unless-worse: exit 3 when a gated row is inconclusive "
                        "and could not detect --max-mde")
    p.add_argument("--pass-unless-worse", action="store_true",
                   help="the old rule: PASS unless a gated row is shown worse (an undecided "
                        "row passes; the report's first line says so)")
    p.add_argument("--allow-mismatch", action="append", default=[], choices=CHECKED_FIELDS,
                   metavar="FIELD", help="accept runs that differ in this field "
                                         f"({', '.join(CHECKED_FIELDS)}; repeatable)")
    p.add_argument("--sequential", type=whole_number(MIN_ROUNDS, MAX_SEQUENTIAL_ROUNDS),
                   metavar="MAX_ROUNDS",
                   help="judge a look of a group-sequential plan of at most MAX_ROUNDS rounds: "
                        "exit 3 while undecided (rounds/run_rounds.sh --until-decided); more "
                        "rounds than MAX_ROUNDS is an error")
    p.add_argument("--plan", action="store_true",
                   help="print each row's spread (taken apart: within one instance, "
                        "between instances), the rounds a target needs and a plan in node "
                        "time (for planning from A/A rounds)")
    p.add_argument("--per-round", action="store_true", help="add each round's values")
    p.add_argument("--allow-incomplete", action="store_true", help="use interrupted runs")
    p.add_argument("--allow-config-change", action="store_true",
                   help="judge a side whose configuration (x-vsr-config-hash) changed between "
                        "or within rounds")
    p.add_argument("--decisions", choices=("gate", "report"), default="gate",
                   help="gate: a decision that differs between the sides fails; report: "
                        "agreement is reported in full and the latency rows alone decide the "
                        "exit code (two configurations whose decisions differ on purpose)")
    add_format_option(p, "rounds", "; with GITHUB_STEP_SUMMARY set, the Markdown is also "
                                   "appended there")
    p.add_argument("--corpus", help="corpus file of the runs, to show the text and length of "
                                    "the inputs that got slower")
    add_file_options(p, "rounds")
    p.set_defaults(func=cmd_rounds)


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


def record_spec(text: str) -> Tuple[str, str, Optional[str], Optional[str]]:
    """Return (name, folder, base or None, new or None) of a --section NAME=DIR[:BASE:NEW]."""
    name, sep, rest = text.partition("=")
    parts = rest.split(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not parts[0] \
            or len(parts) not in (1, 3) or any(not SIDE_PATTERN.match(p) for p in parts[1:]):
        raise argparse.ArgumentTypeError(
            f"expected NAME=DIR or NAME=DIR:BASE:NEW (NAME of letters, digits, '.', '_' or "
            f"'-'), got {text!r}")
    return (name, parts[0], *((parts[1], parts[2]) if len(parts) == 3 else (None, None)))


def add_record_parser(commands: Any) -> None:
    p = commands.add_parser("record", help="write the published record of judged rounds",
                            formatter_class=HelpFormatter,
                            epilog="example: record --section shipped_image=results/shipped "
                                   "--section stack_b_image=results/stack-b --base cpu "
                                   "--new rocm --json record.json --markdown record.md")
    p.add_argument("--section", action="append", required=True, type=record_spec,
                   metavar="NAME=DIR[:BASE:NEW]",
                   help="a rounds folder and the name of its section (repeatable)")
    p.add_argument("--base", type=side_name, help="base side of sections that name none")
    p.add_argument("--new", type=side_name, help="new side of sections that name none")
    p.add_argument("--tolerance", type=non_negative_float, default=5.0,
                   help="percent change within which a row is 'same'")
    p.add_argument("--allow-incomplete", action="store_true", help="use interrupted runs")
    add_ladder_options(p)
    add_file_options(p, "record", required=True)
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=cmd_record)


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
                add_record_parser):
        add(commands)
    add_history_parser(commands, HelpFormatter, emit)
    for add in (add_simulate_parser, add_demo_parser):
        add(commands)
    return parser


def no_corpus_files_text(repo: Path, pattern: str) -> str:
    """Return why a corpus found no data file, and what to give instead."""
    text = f"no file matches {pattern}"
    if pattern != DEFAULT_GLOB or (repo / "e2e").is_dir():
        return text
    # a folder inside the repository (its e2e/ itself, say) or another folder altogether
    top = next((p for p in repo.resolve().parents if (p / "e2e").is_dir()), None)
    return (f"{text}: the folder has no e2e/; give the router repository's top folder"
            + (f" ({top})" if top else "") + " as --repo, or say where the data is with --glob")


def cmd_corpus(args: argparse.Namespace) -> int:
    check_writable_target(args.out, args.force)
    if args.no_boundary:
        boundary = []
    elif args.boundary:
        boundary = load_boundary_cases(Path(args.boundary))
    else:
        boundary = default_boundary_cases()
    keys = list(PROMPT_KEYS) + [k for k in args.key if k not in PROMPT_KEYS]
    check_distinct_files([("--boundary", args.boundary)], [("--out", args.out)])
    corpus = build_corpus(Path(args.repo), pattern=args.glob, keys=keys, boundary=boundary,
                          warn=lambda m: stderr_line(f"warning: {m}"), form=args.data_format)
    if not corpus["files"]:
        raise RouterLatencyError(no_corpus_files_text(Path(args.repo), args.glob), args.repo)
    check_distinct_files([("data file", str(Path(args.repo) / rel)) for rel in corpus["files"]],
                         [("--out", args.out)])
    data = corpus_bytes(corpus)
    write_output(args.out, data)
    emit(corpus_lines(corpus, data, args.repo, args.out),
         sys.stderr if args.out == "-" else sys.stdout)
    return EXIT_OK


def token_header(variable: Optional[str], endpoint: Endpoint,
                 headers: Sequence[Tuple[str, str]]) -> Tuple[Tuple[str, str], ...]:
    """Return the Authorization header of --token-env VAR, () without it; raise when VAR is
    unset or empty, or Authorization is already set. The token itself is never shown."""
    if variable is None:
        return ()
    # an upper-case name is a variable's; anything else might be a token typed by mistake
    name = variable if re.fullmatch(r"[A-Z_][A-Z0-9_]{0,63}", variable) else None
    token = os.environ.get(variable, "").strip()
    if not token:
        raise RouterLatencyError(f"environment variable {name} is not set or empty" if name
                                 else "the variable it names is not set or empty", "--token-env")
    if not all(" " < c <= "~" for c in token):
        raise RouterLatencyError(f"the value of {name or 'the variable'} is not a token: "
                                 f"spaces, line breaks or characters beyond printable ASCII",
                                 "--token-env")
    if endpoint.authorization or any(n.lower() == "authorization" for n, _ in headers):
        raise RouterLatencyError("Authorization is already set (user:pass@ in --url or "
                                 "--header); --token-env would send it twice", "--token-env")
    return (("Authorization", f"Bearer {token}"),)


def ladder_or_levels(args: argparse.Namespace) -> Tuple[int, ...]:
    """Return the closed-loop levels of `run`: a ladder's steps, climbing, or the passes;
    raise for a ladder that does not climb or climbs both callers and rates."""
    if not args.ladder:
        defaults: Dict[str, object] = {"ladder_margin": LADDER_MARGIN_PCT, "slo_p95_ms": None,
                                       "cost_per_hour": []}
        for option, default in defaults.items():
            if getattr(args, option) != default:
                raise RouterLatencyError("only a ladder uses it: add --ladder",
                                         f"--{option.replace('_', '-')}")
        return args.concurrency or (() if args.rate else (1, 4, 16))
    if args.concurrency and args.rate:
        raise RouterLatencyError("a ladder climbs callers or rates, not both", "--ladder")
    steps = args.concurrency or args.rate or ladder_levels(args.router_max_concurrency)
    if list(steps) != sorted(steps):
        raise RouterLatencyError(f"a ladder climbs: expected rising steps, got "
                                 f"{', '.join(f'{v:g}' for v in steps)}",
                                 "--rate" if args.rate else "--concurrency")
    return () if args.rate else tuple(steps)


class RunArguments(NamedTuple):
    """What `run`'s arguments ask for, checked: the router, the passes, the load guard, the
    captures and what makes a pass suspect."""
    target: Target
    plan: RunPlan
    guard: LoadGuard
    capture: CaptureSettings
    thresholds: Thresholds


def run_arguments(args: argparse.Namespace) -> RunArguments:
    """Return (Target, RunPlan, LoadGuard, CaptureSettings, Thresholds) of `run`'s arguments,
    checked."""
    endpoint = parse_endpoint(args.url)
    headers = tuple(args.header) + token_header(args.token_env, endpoint, args.header)
    if args.expect_config_hash:
        headers += ((EXPECTED_HASH_HEADER, args.expect_config_hash),)
    target = Target(endpoint, headers, args.model, args.timeout,
                    args.insecure, tuple(args.decision_path or DEFAULT_DECISION_PATHS),
                    args.sampling_seed, None if args.no_signals else SignalTable())
    metrics = parse_endpoint(args.metrics_url, default_path="/metrics",
                             option="--metrics-url") if args.metrics_url else None
    if args.router_cgroup and not Path(args.router_cgroup).is_dir():
        raise RouterLatencyError("not a cgroup folder", "--router-cgroup")
    if args.router_pid and not Path(f"/proc/{args.router_pid}").exists():
        raise RouterLatencyError(f"no process {args.router_pid}", "--router-pid")
    cgroup = container_cgroup(args.router_container, timeout=args.probe_timeout) \
        if args.router_container else args.router_cgroup
    capture = CaptureSettings(
        probes=tuple(args.probe), probe_timeout=args.probe_timeout, gpu=resolve_gpu(args.gpu),
        metrics=metrics, metric_patterns=tuple(args.metric
                                               or [re.compile(DEFAULT_METRIC_PATTERN)]),
        router_pid=args.router_pid, router_session=args.router_session, router_cgroup=cgroup,
        sample_ms=args.sample_ms,
        router_container=args.router_container, router_cpu_list=args.router_cpus,
        gpu_indexes=args.gpu_index or (),
        hidden_variables=(args.token_env,) if args.token_env else (),
        secrets=secret_values(endpoint, headers) + (secret_values(metrics, ()) if metrics
                                                    else ()),
        histograms=tuple(dict.fromkeys(DEFAULT_HISTOGRAMS + tuple(args.histogram or ()))))
    passes = plan_passes(ladder_or_levels(args), args.rate, model=PassPlan(
        "", args.connections, arrival=args.arrival, seed=args.seed, repeat=args.repeat,
        duration=args.duration))
    plan = RunPlan(passes, warmup=args.warmup, wait_ready=args.wait_ready,
                   max_errors=args.max_errors,
                   router_max_concurrency=args.router_max_concurrency,
                   ladder=Ladder(args.ladder_margin, args.slo_p95_ms) if args.ladder else None)
    guard = LoadGuard(max_load=args.max_load, retries=args.load_retries,
                      pause=args.load_pause, loadavg_file=args.loadavg_file)
    thresholds = Thresholds(args.window, args.slow_p95, args.slow_rate, args.max_foreign_cpus)
    return RunArguments(target, plan, guard, capture, thresholds)


class SignalRelay:
    """Set an event when one of the signals comes: the handler only notes the signal and
    writes a byte to a pipe, and a thread of its own sets the event.

    A handler that calls Event.set() itself waits on the event's lock, which the main thread
    (where Python runs handlers) may hold at that moment: inside the event's wait(), or in
    the set() of a signal that came just before (Ctrl-C, then the driver's SIGTERM close
    behind it). It then waits on itself, forever: the run never saves its file and its
    driver waits for it. The handlers are installed at once, in the main thread only; with
    keep_ignored, a signal ignored at the start stays ignored (SIGHUP under nohup)."""

    def __init__(self, event: threading.Event, signums: Iterable[int], *,
                 keep_ignored: bool = False) -> None:
        self.event = event
        self.caught: list = []  # the signals, in the order they came
        self.previous: dict = {}
        self.read_end, self.write_end = os.pipe()
        os.set_blocking(self.write_end, False)  # a storm of signals never blocks a handler
        self.thread = threading.Thread(target=self._relay, daemon=True)
        if threading.current_thread() is threading.main_thread():
            for signum in signums:
                if not keep_ignored or signal.getsignal(signum) is not signal.SIG_IGN:
                    self.previous[signum] = signal.signal(signum, self._on_signal)
        self.thread.start()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.caught.append(signum)
        try:
            os.write(self.write_end, b"!")
        except OSError:  # the pipe is full: a byte is there already
            pass

    def _relay(self) -> None:
        if os.read(self.read_end, 1):  # empty: restore() closed the pipe, no signal came
            self.event.set()

    def restore(self) -> None:
        """Put the handlers back and end the relay's thread."""
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        os.close(self.write_end)
        self.thread.join()
        os.close(self.read_end)


def run_outputs(args: argparse.Namespace) -> List[Tuple[str, str]]:
    """Return (option, path) of each file `run` was asked to write beside the run file."""
    return [(f"--{name}", getattr(args, name)) for name in COMMAND_OUTPUTS["run"].files
            if getattr(args, name)]


def cmd_run(args: argparse.Namespace) -> int:
    check_distinct_files([("--corpus", args.corpus), ("--loadavg-file", args.loadavg_file)],
                         [("--out", args.out)] + run_outputs(args))
    for _, path in [("--out", args.out)] + run_outputs(args):
        check_writable_target(path, args.force)
        check_folder_accepts_a_file(path)
    corpus = load_corpus(args.corpus)
    target, plan, guard, capture, thresholds = run_arguments(args)
    checked_costs(args.cost_per_hour, (args.label,))
    check_plan(plan, len(corpus.prompts))
    if args.check:
        if not args.quiet:
            emit([f"run {args.label}: checked: corpus {corpus.sha256[:12]} "
                  f"({len(corpus.prompts)} prompts), {target.endpoint.shown}, {args.out} "
                  f"writable; nothing sent"])
        return EXIT_OK
    progress = Progress(enabled=not args.quiet and sys.stderr is not None
                        and sys.stderr.isatty())
    if progress.enabled:  # a terminal: say what is measured before the passes start
        emit([format_run_header(args.label, len(corpus.prompts), corpus.sha256,
                                target.endpoint.shown, settings_record(target, plan, guard,
                                                                       thresholds))],
             sys.stderr if args.out == "-" else sys.stdout)
    stop = threading.Event()
    # under nohup SIGHUP is ignored, and stays so: the run goes on to its end
    relay = SignalRelay(stop, EXIT_SIGNAL, keep_ignored=True)
    caught = relay.caught
    try:  # the handlers stay while the file is written: a signal then must not cut it off
        try:  # what the router, a probe or the network said never shows a secret
            run = measure_run(RunContext(
                target, plan, guard, capture, thresholds, stop=stop, progress=progress,
                notify=say_nothing if args.quiet else
                (lambda m: stderr_line(scrubbed(m, capture.secrets)))),
                corpus, label=args.label)
        except RouterLatencyError as exc:
            raise RouterLatencyError(scrubbed(exc.args[0], capture.secrets),
                                     exc.where) from None
        if run is None:
            stderr_line("interrupted before anything was measured; nothing written")
            return EXIT_SIGNAL[caught[0]] if caught else EXIT_SIGNAL[signal.SIGINT]
        return report_run(args, run, caught, header_shown=progress.enabled)
    finally:
        relay.restore()


def write_run_files(args: argparse.Namespace, run: RunFile) -> Optional[str]:
    """Write the run file, then the other files asked for; return what failed, None when
    nothing did (a run file that cannot be written is kept in a rescue copy)."""
    try:
        write_output(args.out, dump_run(run))
    except RouterLatencyError as exc:
        return f"{exc}; {rescue_copy(dump_run(run), args.out)}"
    for option, path in run_outputs(args):
        try:
            write_atomic(path, COMMAND_OUTPUTS["run"].files[option[2:]].data(run))
        except RouterLatencyError as exc:
            return f"{exc}; the run file {args.out} was written"
    return None


def run_summary_lines(args: argparse.Namespace, run: RunFile, *, header_shown: bool,
                      written: bool) -> List[str]:
    """Return what `run` prints of what it measured: its header (unless shown before the
    passes), the passes' table, the host, the ladder, the configuration and what it wrote."""
    lines = [] if header_shown else [format_run_header(
        run.label, run.corpus_count, run.corpus_sha256, run.url, run.settings)]
    lines += format_run_summary(run.passes, run.thresholds) + format_host(run.host_settings)
    capacity = run_capacity(run)
    if capacity is not None:
        lines += [""] + format_capacity(capacity, cost_for(args.cost_per_hour, run.label)) \
            + energy_beside_cost(run, capacity, cost_for(args.cost_per_hour, run.label))
    if run.config_hashes:
        lines.append(f"config: x-vsr-config-hash {' then '.join(run.config_hashes)}")
    lines.append(f"result cache: {cache_text(run.cache_finding)}")
    if written and args.out != "-":
        lines.append(f"wrote {args.out}" + ("" if run.complete
                                            else " (incomplete: interrupted)")
                     + "".join(f" and {path}" for _, path in run_outputs(args)))
    return lines


def run_warnings(run: RunFile) -> List[str]:
    """Return what `run` says on stderr of what went wrong: a wrong path (every answer 404),
    requests shed for overload, a result cache that answered."""
    not_found = not_found_only(run)
    lines = [f"{not_found} requests answered 404 Not Found at {run.url}: is the path right? "
             f"(a URL without a path gets {PREVIEW_PATH})"] if not_found else []
    lines += overload_note(run_overload(run))
    if run.cache_finding["detected"]:
        lines.append(f"warning: {cache_text(run.cache_finding)}; the figures measure cache "
                     f"hits, not the router's work: {CACHE_ADVICE}")
    series: List[str] = []
    for item in run.passes:
        metrics = item.attempt.environment.get("metrics") or {}
        series += [*(metrics.get("deltas") or {}), *(metrics.get("histograms") or {})]
    renamed = runtime_name_warning(series, os.environ)
    return lines + ([renamed] if renamed else [])


def report_run(args: argparse.Namespace, run: RunFile, caught: list, *,
               header_shown: bool = False) -> int:
    """Write the run file, print its table and return the run's exit code: 2 when a file
    could not be written, else run_outcome()'s (a signal's when the run was interrupted, 1
    when more requests failed than --max-errors allows)."""
    write_failure = write_run_files(args, run)
    if not args.quiet:
        emit(run_summary_lines(args, run, header_shown=header_shown,
                               written=write_failure is None),
             sys.stderr if args.out == "-" else sys.stdout)
    for line in run_warnings(run):
        stderr_line(line)
    if write_failure is not None:
        stderr_line(f"error: {write_failure}")
        return EXIT_USAGE
    code, reason = run_outcome(run, args.max_errors, caught[0] if caught else None,
                               allow_degraded=args.allow_degraded)
    if reason and not args.quiet:
        stderr_line(reason)
    return code


def compared_files(args: argparse.Namespace) -> Tuple[str, str]:
    """Return the two run files of `compare`: given as A B, or as --base A --new B."""
    named = [path for path in (args.base_file, args.new_file) if path is not None]
    given = [path for path in (args.a, args.b) if path is not None]
    if named and given or len(named + given) != 2 or len(named) == 1:
        raise RouterLatencyError("give two run files: A B, or --base A --new B", "compare")
    first, second = named or given
    return first, second


def cmd_compare(args: argparse.Namespace) -> int:
    args.a, args.b = compared_files(args)
    a, b = load_run(args.a), load_run(args.b)
    for run in (a, b):
        if not run.complete and not args.allow_incomplete:
            raise RouterLatencyError("incomplete run (interrupted); --allow-incomplete "
                                     "compares it anyway", run.path)
    if a.corpus_sha256 != b.corpus_sha256 and not args.allow_corpus_mismatch:
        raise RouterLatencyError(
            f"the runs used different corpora ({a.corpus_sha256[:12]} and "
            f"{b.corpus_sha256[:12]}); --allow-corpus-mismatch compares them anyway", args.b)
    texts = corpus_texts(args.corpus, a.corpus_sha256) if args.corpus else None
    report = compare_runs(a, b, prompts_text=texts,
                          fail_on_decision_change=args.fail_on_decision_change)
    view = CompareView((a, b), args.slo_p95_ms,
                       checked_costs(args.cost_per_hour, (a.label, b.label)))
    emit(COMMAND_OUTPUTS["compare"].formats[args.format].lines(report, view))
    return report.exit_code


def corpus_texts(path: str, sha256: str) -> Dict[int, str]:
    """Return {prompt id: text} of the corpus the runs used; raise for any other file."""
    # a bad or different corpus must not put the wrong text beside an input
    corpus = load_corpus(path)
    if corpus.sha256 != sha256:
        raise RouterLatencyError(f"not the corpus of the runs (sha256 {corpus.sha256[:12]}, "
                                 f"the runs used {sha256[:12]})", path)
    return {p.id: p.text for p in corpus.prompts}


def checked_costs(costs: Sequence[CostPerHour], sides: Sequence[str]) -> Tuple[CostPerHour, ...]:
    """Return --cost-per-hour's entries; raise for one naming no side measured or a side
    priced twice."""
    named = [side for side, _, _ in costs]
    for side in named:
        if side is not None and side not in sides:
            raise RouterLatencyError(f"{side} is not a side measured ({', '.join(sides)})",
                                     "--cost-per-hour")
    if len(set(named)) < len(named) or (None in named and len(named) > 1):
        raise RouterLatencyError("a side priced twice", "--cost-per-hour")
    return tuple(costs)


# the warnings rounds also says on stderr, whatever its --format and wherever that goes: those
# that make the verdict itself doubtful (a configuration that changed or is the same on both
# sides, a result cache that answered)
LOUD_WARNINGS = frozenset({"config_changed", "same_config", "result_cache"})


def cmd_rounds(args: argparse.Namespace) -> int:
    if args.base == args.new:
        raise RouterLatencyError("--base and --new name the same side", "--new")
    rounds_outputs = COMMAND_OUTPUTS["rounds"]
    outputs = [(f"--{name}", getattr(args, name)) for name in rounds_outputs.files]
    for _, path in outputs:
        if path:
            check_writable_target(path, force=True)
    files = find_round_files(args.dir, args.base, args.new)
    check_distinct_files(
        [("round file", p) for sides in files.values() for p in sides.values()]
        + [("--corpus", args.corpus)],
        outputs + [("GITHUB_STEP_SUMMARY", os.environ.get("GITHUB_STEP_SUMMARY"))])
    runs = {n: {s: load_run(p) for s, p in sides.items()} for n, sides in files.items()}
    texts = corpus_texts(args.corpus, runs[min(runs)][args.base].corpus_sha256) \
        if args.corpus else None
    settings = GateSettings(
        tolerance_pct=args.tolerance, gate=args.gate, strict=args.strict,
        max_mde_pct=args.max_mde, allow_incomplete=args.allow_incomplete,
        allow_mismatch=tuple(args.allow_mismatch), sequential_max=args.sequential,
        allow_config_change=args.allow_config_change, slo_p95_ms=args.slo_p95_ms,
        cost_per_hour=checked_costs(args.cost_per_hour, (args.base, args.new)),
        pass_unless_worse=args.pass_unless_worse, decisions=args.decisions)
    try:
        report = judge_rounds(runs, args.base, args.new, settings, prompts_text=texts)
    except RouterLatencyError as exc:
        raise RouterLatencyError(exc.args[0], exc.where or args.dir) from None
    for warning in report.config_warnings + report.warnings:
        if warning.kind in LOUD_WARNINGS:  # also where --format json goes to a file
            stderr_line(warning.text)
    for name, exporter in rounds_outputs.files.items():
        if getattr(args, name):
            write_atomic(getattr(args, name), exporter.data(report))
    view = RoundsView(per_round=args.per_round)
    if not args.plan:
        append_step_summary(lambda: rounds_outputs.formats["markdown"].lines(report, view))
    if args.plan:
        emit(format_plan(report))
        return EXIT_OK
    emit(rounds_outputs.formats[args.format].lines(report, view))
    return report.exit_code


def cmd_record(args: argparse.Namespace) -> int:
    files = COMMAND_OUTPUTS["record"].files
    outputs = [(f"--{name}", getattr(args, name)) for name in files]
    for _, path in outputs:
        check_writable_target(path, args.force)
    names = [name for name, *_ in args.section]
    if len(set(names)) < len(names):
        raise RouterLatencyError("a section name given twice", "--section")
    sections = []
    for name, folder, base, new in args.section:
        base, new = base or args.base, new or args.new
        if not base or not new:
            raise RouterLatencyError(f"section {name} names no sides: give NAME=DIR:BASE:NEW "
                                     f"or --base and --new", "--section")
        sections.append(record_section(name, folder, base, new, GateSettings(
            tolerance_pct=args.tolerance, allow_incomplete=args.allow_incomplete,
            slo_p95_ms=args.slo_p95_ms,
            cost_per_hour=checked_costs(args.cost_per_hour, (base, new)))))
    check_distinct_files([("round file", run.path) for section in sections
                          for sides in section.runs.values() for run in sides.values()],
                         outputs)
    for (_, path), exporter in zip(outputs, files.values()):
        write_atomic(path, exporter.data(sections))
    for section in sections:
        emit([f"{section.name}: {verdict_line(section.report)}"])
    emit([f"wrote {' and '.join(path for _, path in outputs)}"])
    return max(section.report.exit_code for section in sections)


def append_step_summary(lines: Callable[[], Sequence[str]]) -> None:
    """Append the Markdown report lines() renders to GitHub's job summary when
    GITHUB_STEP_SUMMARY names it, in one write, so that steps running side by side do not
    interleave, whole or not at all (append_whole); a missing or unwritable file is a
    warning, never a failure of the gate's result."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    # the report is rendered only where GitHub asks for it
    data = ("\n".join(visible(line) for line in lines()) + "\n\n").encode("utf-8", "replace")
    failed = append_whole(path, data)
    if failed is not None:
        stderr_line(f"warning: cannot append to GITHUB_STEP_SUMMARY: {failed} ({path})")


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
