"""The run command: its parser, the argument types only it uses, its arguments mapped into
the pass's settings (run_arguments), and its handler, which measures one router, writes the
run file and prints its table."""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .constants import (CACHE_ADVICE, CONFIG_HASH_PATTERN, DEFAULT_DECISION_PATHS,
                        DEFAULT_HISTOGRAMS, DEFAULT_MODEL, EXIT_OK, EXIT_SIGNAL, EXIT_USAGE,
                        EXPECTED_HASH_HEADER, LADDER_MARGIN_PCT, NamedTuple, PREVIEW_PATH,
                        ROUTER_MAX_CONCURRENCY, ROUTER_TIMEOUT_S)
from .errors import RouterLatencyError
from .words import scrubbed
from .files import (check_distinct_files, check_folder_accepts_a_file, check_writable_target,
                    rescue_copy, write_atomic, write_output)
from .corpus import load_corpus
from .cache import cache_text
from .versions import runtime_name_warning
from .instance import Instance, INSTANCE_FACT
from .runfile import dump_run, Ladder, RouterRef, RunFile
from .stall import stall_text
from .phases import Thresholds
from .ladder import cost_for, ladder_levels, run_capacity
from .meaning import SignalTable
from .client import Endpoint, parse_endpoint, secret_values
from .captures import CaptureSettings, DEFAULT_METRIC_PATTERN, Probe
from .host import container_cgroup, format_cpu_list, parse_cpu_list
from .gpu import GPU_TOOLS, resolve_gpu
from .measuring import (check_plan, LoadGuard, measure_run, plan_passes, Progress, RunContext,
                        RunPlan, say_nothing, settings_record)
from .passloop import PassPlan, Target
from .rounds import not_found_only, run_outcome, run_overload
from .render_text import format_host, format_run_header, format_run_summary, overload_note
from .capacity import energy_beside_cost, format_capacity
from .formats import COMMAND_OUTPUTS
from .console import emit, SignalRelay, stderr_line
from .command_options import (add_file_options, checked_costs, cost_spec, HelpFormatter,
                              non_negative_float, non_negative_int, NUMBER, positive_float,
                              positive_int, real_number)

__all__ = ["add_run_parser", "cmd_run"]


TIME_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}  # of --rate and --duration


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


def histogram_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        raise argparse.ArgumentTypeError(f"expected a Prometheus metric name, got {text!r}")
    return text


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


INSTANCE_WHOLE = ("round", "number", "count", "port")


def instance_item(text: str) -> Tuple[str, Any]:
    """Return one --instance KEY=VALUE: a whole number for round, number, count and port, a
    text for side, gpu and cores, a fact's number where it reads as one, else its text."""
    key, equals, value = text.partition("=")
    if not equals or not INSTANCE_FACT.fullmatch(key):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with a lowercase key, got {text!r}")
    if key in INSTANCE_WHOLE:
        if not value.isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"{key} must be a whole number >= 1, got {value!r}")
        return key, int(value)
    if key in ("side", "gpu", "cores"):
        return key, value
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        if math.isfinite(number):
            return key, number
    return key, value


def instance_of(items: Sequence[Tuple[str, Any]]) -> Optional[Instance]:
    """Return the run's Instance from its --instance items; None without any."""
    if not items:
        return None
    given = dict(items)
    missing = [k for k in ("round", "side", "number", "count") if k not in given]
    if missing:
        raise RouterLatencyError(f"--instance needs {', '.join(missing)} too")
    if given["number"] > given["count"]:
        raise RouterLatencyError(f"--instance number={given['number']} is past "
                                 f"count={given['count']}")
    return Instance(given["round"], given["side"], given["number"], given["count"],
                    given.get("port"), given.get("gpu"), given.get("cores"),
                    {k: v for k, v in given.items()
                     if k not in ("round", "side", "number", "count", "port", "gpu", "cores")})


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


def label_text(text: str) -> str:
    if not text.strip() or len(text) > 200:
        raise argparse.ArgumentTypeError("expected a label of 1 to 200 characters")
    return text


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
    output.add_argument("--instance", action="append", type=instance_item, default=[],
                        metavar="KEY=VALUE",
                        help="the run measured one instance of a pool (run_rounds.sh "
                             "--instances): round, side, number, count, port, gpu, cores, and "
                             "any other lowercase name as a fact that could make it differ "
                             "(repeatable; written as the run file's instance, run/3)")
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
    instance = instance_of(args.instance)
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
        return report_run(args, run._replace(instance=instance), caught,
                          header_shown=progress.enabled)
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
    if stall_text(run.passes):
        lines.append(stall_text(run.passes))
    if told_text(run.router):
        lines.append(f"router settings: {told_text(run.router)}")
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


def told_text(router: RouterRef) -> str:
    """Return the settings the router told, in words ('' for an older file)."""
    told = router.get("told")
    if not isinstance(told, dict) or not told:
        return ""
    return "; ".join(
        f"{name} {setting.get('value')} ({setting.get('source')})"
        if isinstance(setting, dict) and setting.get("value") is not None
        else f"{name} not recorded"
        + (f" ({setting.get('source')})" if isinstance(setting, dict)
           and setting.get("source") not in (None, "not recorded") else "")
        for name, setting in told.items())
