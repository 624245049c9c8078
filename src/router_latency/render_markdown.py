"""Markdown: the verdict in bold, the table, then the details, for a pull request."""

from __future__ import annotations

from typing import Sequence

from .words import plural
from .compare import CompareReport
from .rounds import RoundsReport
from .render_text import (compare_caveat, decisions_note, format_agreement, format_breakdowns,
                          format_capacity_rounds, format_closing, format_compare,
                          format_environment, format_order, format_outcomes, format_per_round,
                          format_rounds_table, format_slowdowns, gate_rule, md_text,
                          undecided_line)

__all__ = ["format_compare_markdown", "format_rounds_markdown"]


def markdown_blocks(lines: Sequence[str]) -> list:
    """Return text lines as Markdown: table lines kept (tables a blank line apart stay apart),
    a line starting with ** kept as a caption, every other line a list item (an indented line
    nested), blocks apart."""
    out: list = []
    previous, apart = None, False
    for line in lines:
        if not line.strip():
            apart = True  # two tables a blank line apart stay two tables
            continue
        kind = "table" if line.startswith("|") else "caption" if line.startswith("**") \
            else "list"
        if previous is not None and (kind != previous or kind == "caption"
                                     or (kind == "table" and apart)):
            out.append("")
        apart = False
        out.append(("  - " if line.startswith("  ") else "- ") + md_text(line.strip())
                   if kind == "list" else line)
        previous = kind
    return out


def markdown_verdict(status: str, reasons: Sequence[str], what: str) -> list:
    """Return a Markdown report's first lines: the verdict in bold, its reasons as a list."""
    lines = [f"**Verdict: {status.upper()}**: {md_text(what)}"]
    return lines + ([""] + [f"- {md_text(r)}" for r in reasons] if reasons else [])


def format_rounds_markdown(report: RoundsReport, *, per_round: bool = False) -> list:
    """Return the rounds report as Markdown: the verdict, the table, then the details."""
    head = format_rounds_table(report, markdown=True)
    unsure = sum(r.gated and r.verdict == "inconclusive" for r in report.rows)
    what = ((f"{gate_rule(report.settings)}; " if report.settings.pass_unless_worse else "")
            + f"{report.new} against {report.base}, {plural(len(report.used), 'round')} used"
            + (f" (round {report.look[0]} of at most {report.look[1]})" if report.look else "")
            + (f"; {plural(unsure, 'inconclusive gated row')}"
               if unsure and report.status == "pass" else ""))
    details = [line for line in head if not line.startswith("|")]
    details += format_capacity_rounds(report)
    details += format_agreement(report) + format_outcomes(report)
    details += [warning.text for warning in report.warnings]
    details += format_slowdowns(report, markdown=True)
    details += format_breakdowns(report, markdown=True)
    if per_round and report.rows:
        details += ["**Each round**"] + format_per_round(report, markdown=True)
    details += ["**Environment**"] + format_environment(report, markdown=True)
    details += format_order(report) + format_closing(report) + undecided_line(report)
    table = [line for line in head if line.startswith("|")]
    note = decisions_note(report)
    return ([f"**{md_text(note[0])}**", ""] if note else []) \
        + (markdown_verdict(report.status, report.reasons, what) + [""]
            + (table + [""] if table else []) + markdown_blocks(details))


def format_compare_markdown(report: CompareReport) -> list:
    """Return the comparison as Markdown: the verdict, the table, then the details."""
    lines = format_compare(report, markdown=True)
    what = f"{report.b_label or 'B'} against {report.a_label or 'A'}, {compare_caveat(report)}"
    return (markdown_verdict(report.status, report.reasons, what) + [""]
            + [line for line in lines if line.startswith("|")] + [""]
            + markdown_blocks([line for line in lines if not line.startswith("|")]))
