"""Markdown: the verdict in bold, the table, then the details, for a pull request."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from .words import plural
from .gate import missed_text
from .compare import CompareReport
from .rounds import RoundsReport
from .render_text import compare_caveat, compare_parts, format_closing, rounds_table_parts
from .report import Block, md_text, render_table, Section, Table

__all__ = ["format_compare_markdown", "format_rounds_markdown"]


def markdown_table(table: Optional[Table]) -> List[str]:
    """Return a table as Markdown; no lines for no table."""
    return [] if table is None else render_table(table.header, table.rows, markdown=True,
                                                 right=table.right)


def markdown_blocks(blocks: Sequence[Block]) -> List[str]:
    """Return a report's details as Markdown: each table a Markdown table (its caption, if
    any, in bold above it), a line starting with ** kept as a caption, every other line a
    list item (an indented line nested), blocks apart; blank lines leave nothing."""
    out: List[str] = []
    previous = None
    for block in blocks:
        parts: List[Tuple[str, List[str]]]  # (kind, its lines)
        if isinstance(block, Table):
            parts = [("caption", [f"**{block.caption}**"])] if block.caption else []
            parts.append(("table", markdown_table(block)))
        elif not block.strip():
            continue
        elif block.startswith("**"):
            parts = [("caption", [block])]
        else:
            parts = [("list", [("  - " if block.startswith("  ") else "- ")
                               + md_text(block.strip())])]
        for kind, lines in parts:
            # a caption, and each table, stands apart; list items run on
            if previous is not None and (kind != previous or kind != "list"):
                out.append("")
            out += lines
            previous = kind
    return out


def section_blocks(sections: Sequence[Section], *, per_round: bool = False) -> List[Block]:
    """Return the sections' blocks in order, each under its title as a caption, for
    markdown_blocks: in Markdown a section stands in its order, beside the table or not."""
    blocks: List[Block] = []
    for section in sections:
        if section.blocks and (per_round or not section.on_request):
            blocks += ([f"**{section.title}**"] if section.title else []) + list(section.blocks)
        blocks += [notice.text for notice in section.notices]
    return blocks


def markdown_verdict(status: str, reasons: Sequence[str], what: str) -> List[str]:
    """Return a Markdown report's first lines: the verdict in bold, its reasons as a list."""
    lines = [f"**Verdict: {status.upper()}**: {md_text(what)}"]
    return lines + ([""] + [f"- {md_text(r)}" for r in reasons] if reasons else [])


def format_rounds_markdown(report: RoundsReport, *, per_round: bool = False) -> List[str]:
    """Return the rounds report as Markdown: the verdict, the table, then the details."""
    above, table, below = rounds_table_parts(report)
    rule, unsure = report.settings.rule, len(report.outcome.undecided)
    missed = missed_text(report.outcome)  # a job summary's first line says what it may miss
    # the verdict's line a headline (a check's title): a rule's caveat heads the list below it
    what = ((f"not a pass: {missed}; " if report.status == "inconclusive"
             else f"{missed}; " if missed else "")
            + f"{report.new} against {report.base}, {plural(len(report.used), 'round')} used"
            + (f" (round {report.look.rounds} of at most {report.look.max_rounds})"
               if report.look else "")
            + (f"; {plural(unsure, 'inconclusive gated row')}"
               if unsure and report.status == "pass" else ""))
    details: List[Block] = [*above, *below]
    details += section_blocks(report.sections, per_round=per_round)
    details += format_closing(report)
    details += [line for section in report.sections for line in section.headline]
    # the sections' leads after the verdict: a job summary's first line is it
    leads = [line for section in report.sections for line in section.lead]
    caveat = [rule.text] if rule.option else []
    return (markdown_verdict(report.status, caveat + list(report.reasons), what) + [""]
            + [part for line in leads for part in (f"**{md_text(line)}**", "")]
            + (markdown_table(table) + [""] if table else []) + markdown_blocks(details))


def format_compare_markdown(report: CompareReport) -> List[str]:
    """Return the comparison as Markdown: the verdict, the table, then the details."""
    above, table, below = compare_parts(report)
    what = f"{report.b_label or 'B'} against {report.a_label or 'A'}, {compare_caveat(report)}"
    return (markdown_verdict(report.status, report.reasons, what) + [""]
            + markdown_table(table) + [""] + markdown_blocks(above + below))
