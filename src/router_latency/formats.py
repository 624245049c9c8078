"""The output formats of each command, one table per command: the command line takes its
--format choices, their help and the options of its files from these tables."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from .files import dump_json
from .runfile import RunFile
from .compare import CompareReport
from .render_text import format_compare, format_compare_capacity, format_record, format_rounds
from .render_markdown import format_compare_markdown, format_rounds_markdown
from .render_json import compare_json, COMPARE_SCHEMA, record_json, rounds_json, ROUNDS_SCHEMA
from .render_junit import junit_xml, requests_csv
from .page import report_page

__all__ = [
    "COMPARE_FORMATS", "CompareView", "formats_help", "RECORD_FILES", "ReportFile", "ROUNDS_FILES",
    "ROUNDS_FORMATS", "RoundsView", "RUN_FILES",
]


# The output formats of each command, one table per command: the command line takes its
# --format choices, their help and the options of its files from these tables and renders
# through them, so that a format is added, or named, in one place (hyperfine's exporters).

class ReportFormat(NamedTuple):
    """One format a command prints its report in: what it is, for --help, and its renderer,
    which takes the report and the command's view of it and returns the lines to print."""
    about: str
    lines: Callable[..., Sequence[str]]


class ReportFile(NamedTuple):
    """One file a command writes (its option is --NAME FILE, NAME its key in the command's
    table): what it holds, for --help, and its renderer, which returns the file's bytes."""
    about: str
    data: Callable[..., bytes]


def formats_help(formats: Dict[str, ReportFormat]) -> str:
    """Return the help of a --format option: each format with what it is."""
    return "output format: " + ", ".join(f"{name} ({f.about})" for name, f in formats.items())


class CompareView(NamedTuple):
    """What compare's text shows beside its report: the two runs' ladders, when both climbed
    one, within --slo-p95-ms and priced by --cost-per-hour."""
    runs: Tuple[RunFile, RunFile]
    slo_p95_ms: Optional[float] = None
    cost_per_hour: Tuple[Tuple[Optional[str], float, str], ...] = ()


def compare_text(report: CompareReport, view: CompareView) -> list:
    """Return compare's text: the table, then the ladders of two ladder runs."""
    return format_compare(report) + format_compare_capacity(view.runs, view.slo_p95_ms,
                                                            view.cost_per_hour)


def json_lines(document: Any) -> list:
    """Return a report's JSON document as the one block a command prints."""
    return [json.dumps(document, indent=1, allow_nan=False)]


COMPARE_FORMATS: Dict[str, ReportFormat] = {
    "text": ReportFormat("aligned tables", compare_text),
    "markdown": ReportFormat("the verdict, the table and the details for a pull request",
                             lambda report, view: format_compare_markdown(report)),
    "json": ReportFormat(f"every figure at full precision, schema {COMPARE_SCHEMA}",
                         lambda report, view: json_lines(compare_json(report))),
}


class RoundsView(NamedTuple):
    """What rounds shows beside its report: each round's values, with --per-round."""
    per_round: bool = False


ROUNDS_FORMATS: Dict[str, ReportFormat] = {
    "text": ReportFormat("aligned tables", lambda report, view: format_rounds(
        report, per_round=view.per_round)),
    "markdown": ReportFormat("the verdict, the table and the details for a pull request",
                             lambda report, view: format_rounds_markdown(
                                 report, per_round=view.per_round)),
    "json": ReportFormat(f"every figure at full precision, schema {ROUNDS_SCHEMA}",
                         lambda report, view: json_lines(rounds_json(report))),
}

RECORD_FILES: Dict[str, ReportFile] = {
    "json": ReportFile("the record's data file to write",
                       lambda sections: dump_json(record_json(sections))),
    "markdown": ReportFile("the record's document to write", lambda sections: (
        "\n".join(format_record(sections)) + "\n").encode("utf-8")),
}

RUN_FILES: Dict[str, ReportFile] = {
    "csv": ReportFile("also write one CSV line per request: pass, id, start_ms, latency_ms, "
                      "status, decision, error", lambda run: requests_csv(run.passes)),
}


# the files rounds writes beside what it prints (their table is here, beside the page's)
ROUNDS_FILES: Dict[str, ReportFile] = {
    "junit": ReportFile("also write JUnit XML: a test case per gated row, per round's "
                        "decisions, ...", lambda report: junit_xml(report)),
    "html": ReportFile("also write the report page: one HTML file with plots, no network "
                       "needed", lambda report: report_page(report).encode("utf-8")),
}
