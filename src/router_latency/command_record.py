"""The record command: its parser, the --section argument and its handler."""

from __future__ import annotations

import argparse
import re
from typing import Any, Optional, Tuple

from .errors import RouterLatencyError
from .files import check_distinct_files, check_writable_target, write_atomic
from .gate import combined_exit, GateSettings
from .record import record_section
from .render_text import verdict_line
from .formats import COMMAND_OUTPUTS
from .console import emit
from .command_options import (add_file_options, add_ladder_options, checked_costs, HelpFormatter,
                              non_negative_float, side_name, SIDE_PATTERN)

__all__ = ["add_record_parser"]


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
    return combined_exit(section.report.exit_code for section in sections)
