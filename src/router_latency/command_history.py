"""The history command: its parser, the argument types only it uses and its handler
(`history add`, `history report`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, List

from .constants import EXIT_OK, lazy_pattern
from .errors import RouterLatencyError
from .files import check_distinct_files, check_writable_target, write_atomic
from .gate import GateSettings
from .history import (add_entries, EntryTags, entry_of_folder, entry_of_run,
                      folders_oldest_first, history_report, LIKE_FIELDS, read_history,
                      TrendSettings)
from .formats import COMMAND_OUTPUTS, formats_help
from .console import emit
from .command_options import HelpFormatter

__all__ = ["add_history_parser"]


HISTORY_NAME = lazy_pattern(r"^[A-Za-z0-9][A-Za-z0-9_./+-]{0,199}$")  # a commit, branch or side


def history_name(text: str) -> str:
    if not HISTORY_NAME.match(text):
        raise argparse.ArgumentTypeError(f"expected 1 to 200 letters, digits or _./+- (not "
                                         f"starting with one of those signs), got {text!r}")
    return text


def history_percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"expected a percentage from 0 to 1000, got {text!r}")
    return value


def history_date(text: str) -> str:
    """Return an ISO 8601 date or time as UTC text: 2026-01-31 or 2026-01-31T12:00:00Z."""
    import datetime
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 date, got {text!r}") from None
    if when.tzinfo is not None:
        try:  # 9999-12-31T23:59:59-01:00 is past the year 9999 in UTC
            when = when.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        except OverflowError:
            raise argparse.ArgumentTypeError(f"expected an ISO 8601 date from the year 1 to "
                                             f"9999 in UTC, got {text!r}") from None
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def history_label(text: str) -> str:
    if not text.strip() or len(text) > 200 or not text.isprintable():
        raise argparse.ArgumentTypeError("expected a label of 1 to 200 printable characters")
    return text


def add_history_parser(commands: Any) -> None:
    """Add the history command."""
    p = commands.add_parser(
        "history", help="keep judged rounds across commits; report and gate the drift",
        formatter_class=HelpFormatter,
        epilog="examples: history add --history perf.jsonl --dir results --base main --new "
               "merge --commit $SHA --branch main; history report --history perf.jsonl --gate "
               "--html drift.html. Exit codes of report --gate: 0 the drift of every gated "
               "row shown within the tolerance; 1 shown worse; 3 cannot tell; 2 bad input.")
    p.add_argument("action", choices=("add", "report"),
                   help="add: record a judged rounds folder (or a run) under a commit; "
                        "report: the trend of each gated row, and with --gate the drift gate")
    p.add_argument("--history", required=True, metavar="FILE",
                   help="the store: one JSON line per commit, appended")
    what = p.add_argument_group("history add")
    what.add_argument("--dir", help="a rounds folder of r<N>-<side>.json files, judged as "
                                    "`rounds` judges it")
    what.add_argument("--each", metavar="FOLDER",
                      help="a folder of rounds folders, each added under its folder's name as "
                           "the commit, the oldest (first round's start) first")
    what.add_argument("--run", metavar="FILE",
                      help="a single run: a level in the series, marked, without a paired step")
    what.add_argument("--base", type=history_name, help="the base side of the folders")
    what.add_argument("--new", type=history_name, help="the side under test: the commit")
    what.add_argument("--commit", type=history_name, help="the commit the new side ran")
    what.add_argument("--base-commit", type=history_name,
                      help="the commit the base side ran (the report notes a gap in the chain)")
    what.add_argument("--date", type=history_date,
                      help="ISO 8601 date of the commit (default: the first round's start)")
    what.add_argument("--label", type=history_label, help="a name for it: a release, say")
    what.add_argument("--node-class", type=history_name,
                      help="the node's class (h200, say): compared instead of its host name")
    what.add_argument("--allow-incomplete", action="store_true", help="use interrupted runs")
    shown = p.add_argument_group("history report")
    shown.add_argument("--baseline", metavar="COMMIT_OR_LABEL",
                       help="count the drift from this entry (default: the base of the first)")
    shown.add_argument("--gate", action="store_true",
                       help="exit 1 when a gated row's drift is shown worse than the "
                            "tolerance, 3 when not shown within it, 0 when shown within")
    shown.add_argument("--allow-mismatch", action="append", default=[], choices=LIKE_FIELDS,
                       metavar="FIELD", help="keep entries that differ from the last one in "
                                             f"this ({', '.join(LIKE_FIELDS)}; repeatable)")
    formats = COMMAND_OUTPUTS["history"].formats
    shown.add_argument("--format", choices=tuple(formats), default="text",
                       help=formats_help(formats))
    for name, exporter in COMMAND_OUTPUTS["history"].files.items():
        shown.add_argument(f"--{name}", metavar="FILE", help=exporter.about)
    p.add_argument("--branch", type=history_name,
                   help="add: the branch recorded; report: only entries of this branch")
    p.add_argument("--tolerance", type=history_percent, default=5.0, metavar="PCT",
                   help="percent: add: the folder's gate; report: the drift's tolerance")
    p.set_defaults(func=cmd_history)


ADD_ONLY = ("dir", "each", "run", "base", "new", "commit", "base_commit", "date", "label",
            "node_class", "allow_incomplete")
REPORT_ONLY = ("baseline", "gate", "allow_mismatch", "html")


def refuse_others(args: argparse.Namespace, names: List[str], owner: str) -> None:
    """Raise when an option of the other action (owner: add or report) was given."""
    for name in names:
        if getattr(args, name) not in (None, False, []):
            raise RouterLatencyError(f"--{name.replace('_', '-')} is an option of history "
                                     f"{owner}", f"history {args.action}")


def cmd_history(args: argparse.Namespace) -> int:
    if args.action == "add":
        refuse_others(args, list(REPORT_ONLY) + (["format"] if args.format != "text" else []),
                      "report")
        return history_add(args)
    refuse_others(args, list(ADD_ONLY), "add")
    return history_show(args)


def history_add(args: argparse.Namespace) -> int:
    sources = [name for name in ("dir", "each", "run") if getattr(args, name)]
    if len(sources) != 1:
        raise RouterLatencyError("give one of --dir, --each or --run", "history add")
    if (args.commit is None) != bool(args.each):
        raise RouterLatencyError("--each takes each commit from its folder's name; --dir and "
                                 "--run need --commit", "history add")
    if args.each and (args.label or args.base_commit or args.date):
        raise RouterLatencyError("--label, --base-commit and --date name one commit, not "
                                 "those of --each", "history add")
    if not args.run and (not args.base or not args.new or args.base == args.new):
        raise RouterLatencyError("--base and --new name the two sides, each a different one",
                                 "history add")
    check_writable_target(args.history, force=True)
    settings = GateSettings(tolerance_pct=args.tolerance, allow_incomplete=args.allow_incomplete)
    tags = EntryTags(commit=args.commit or "", base_commit=args.base_commit or "",
                     branch=args.branch or "", date=args.date or "", label=args.label or "",
                     node_class=args.node_class or "")
    if args.run:
        entries = [entry_of_run(args.run, tags)]
    elif args.dir:
        entries = [entry_of_folder(args.dir, args.base, args.new, tags, settings)]
    else:
        entries = [entry_of_folder(folder, args.base, args.new,
                                   tags._replace(commit=Path(folder).name), settings)
                   for folder in folders_oldest_first(args.each, args.base)]
    check_distinct_files([("source", e.source) for e in entries if e.kind == "run"],
                         [("--history", args.history)])
    add_entries(args.history, entries)
    emit([f"added {entry.commit}: {entry.kind}"
                     + (f", {entry.verdict.upper()} on its own" if entry.verdict else "")
                     + f" ({entry.source})" for entry in entries])
    return EXIT_OK


def history_show(args: argparse.Namespace) -> int:
    outputs = [("--html", args.html)]
    if args.html:
        check_writable_target(args.html, force=True)
        check_distinct_files([("--history", args.history)], outputs)
    report = history_report(args.history, read_history(args.history), TrendSettings(
        baseline=args.baseline, tolerance_pct=args.tolerance, branch=args.branch,
        allow_mismatch=tuple(args.allow_mismatch)))
    history_outputs = COMMAND_OUTPUTS["history"]
    if args.html:
        write_atomic(args.html, history_outputs.files["html"].data(report))
    emit(history_outputs.formats[args.format].lines(report, None))
    return report.exit_code if args.gate else EXIT_OK

