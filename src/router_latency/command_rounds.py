"""The rounds command: its parser, the --gate list, its handler, the warnings it also says
on stderr (LOUD_WARNINGS), and the Markdown appended to GitHub's job summary."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any, Callable, Sequence, Tuple

from .constants import (EXIT_OK, LADDER_GATE_NAMES, LADDER_PASS, lazy_pattern, MIN_ROUNDS,
                        ROW_METRICS)
from .errors import RouterLatencyError
from .words import metric_title, visible
from .sequential import MAX_SEQUENTIAL_ROUNDS
from .files import append_whole, check_distinct_files, check_writable_target, write_atomic
from .pools import load_side
from .gate import GateSettings
from .rounds import CHECKED_FIELDS, find_round_files, judge_rounds
from .render_text import format_plan
from .formats import COMMAND_OUTPUTS, RoundsView
from .console import emit, stderr_line
from .command_options import (add_file_options, add_format_option, add_ladder_options,
                              checked_costs, corpus_texts, HelpFormatter, non_negative_float,
                              positive_float, side_name, whole_number)

__all__ = ["add_rounds_parser"]


PART_GATE = lazy_pattern(r"(?:(sequential|c\d+|r[\d.]+):)?((?:signal|router):[A-Za-z0-9_.-]{1,64}"
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
                        "a look after every round from the third (beyond 40 rounds, 40 looks "
                        "spread evenly; between them it waits), exit 3 while undecided "
                        "(rounds/run_rounds.sh --until-decided); more rounds than MAX_ROUNDS "
                        "is an error")
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
    runs = {n: {s: load_side(p) for s, p in sides.items()} for n, sides in files.items()}
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
