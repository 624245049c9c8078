"""The compare command: its parser and its handler (two run files, given as A B or as
--base A --new B)."""

from __future__ import annotations

import argparse
from typing import Any, Tuple

from .errors import RouterLatencyError
from .runfile import load_run
from .compare import compare_runs
from .formats import COMMAND_OUTPUTS, CompareView
from .console import emit
from .command_options import (add_format_option, add_ladder_options, checked_costs, corpus_texts,
                              HelpFormatter)

__all__ = ["add_compare_parser"]


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
