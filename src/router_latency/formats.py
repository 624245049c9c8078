"""What each command prints and writes, one registry entry per command (COMMAND_OUTPUTS): the
command line takes its --format choices, their help, its file options and the dispatch from
there, so that a format or a file is added, or named, in one place (hyperfine's exporters)."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .constants import NamedTuple
from .files import dump_json
from .runfile import RunFile
from .compare import CompareReport
from .render_text import format_compare, format_record, format_rounds
from .capacity import format_compare_capacity
from .render_markdown import format_compare_markdown, format_rounds_markdown
from .render_json import compare_json, COMPARE_SCHEMA, record_json, rounds_json, ROUNDS_SCHEMA
from .render_junit import junit_xml, requests_csv
from .page import report_page
from .history_render import format_history, format_history_markdown, history_json, history_page

__all__ = ["COMMAND_OUTPUTS", "CompareView", "formats_help", "RoundsView"]


class ReportFormat(NamedTuple):
    """One format a command prints its report in: what it is, for --help, and its renderer,
    which takes the report and the command's view of it and returns the lines to print."""
    about: str
    lines: Callable[..., Sequence[str]]


class ReportFile(NamedTuple):
    """One file a command writes (its option is --NAME FILE, NAME its key in the command's
    files): what it holds, for --help, its renderer, which returns the file's bytes, and the
    names that, asked for as a --format, are this file (the error then names its option)."""
    about: str
    data: Callable[..., bytes]
    asked_as: Tuple[str, ...] = ()


class CommandOutputs(NamedTuple):
    """Everything one command prints (its --format choices, text the default) and writes
    beside it (its file options)."""
    formats: Dict[str, ReportFormat]
    files: Dict[str, ReportFile]


def formats_help(formats: Dict[str, ReportFormat]) -> str:
    """Return the help of a --format option: each format with what it is."""
    return "output format: " + ", ".join(f"{name} ({f.about})" for name, f in formats.items())


class CompareView(NamedTuple):
    """What compare's text shows beside its report: the two runs' ladders, when both climbed
    one, within --slo-p95-ms and priced by --cost-per-hour."""
    runs: Tuple[RunFile, RunFile]
    slo_p95_ms: Optional[float] = None
    cost_per_hour: Tuple[Tuple[Optional[str], float, str], ...] = ()


def compare_text(report: CompareReport, view: CompareView) -> List[str]:
    """Return compare's text: the table, then the ladders of two ladder runs."""
    return format_compare(report) + format_compare_capacity(view.runs, view.slo_p95_ms,
                                                            view.cost_per_hour)


class RoundsView(NamedTuple):
    """What rounds shows beside its report: each round's values, with --per-round."""
    per_round: bool = False


def json_lines(document: Any) -> List[str]:
    """Return a report's JSON document as the one block a command prints."""
    return [json.dumps(document, indent=1, allow_nan=False)]


PULL_REQUEST = "the verdict, the table and the details for a pull request"

COMMAND_OUTPUTS: Dict[str, CommandOutputs] = {
    "compare": CommandOutputs(formats={
        "text": ReportFormat("aligned tables", compare_text),
        "markdown": ReportFormat(PULL_REQUEST,
                                 lambda report, view: format_compare_markdown(report)),
        "json": ReportFormat(f"every figure at full precision, schema {COMPARE_SCHEMA}",
                             lambda report, view: json_lines(compare_json(report))),
    }, files={}),
    "rounds": CommandOutputs(formats={
        "text": ReportFormat("aligned tables", lambda report, view: format_rounds(
            report, per_round=view.per_round)),
        "markdown": ReportFormat(PULL_REQUEST, lambda report, view: format_rounds_markdown(
            report, per_round=view.per_round)),
        "json": ReportFormat(f"every figure at full precision, schema {ROUNDS_SCHEMA}",
                             lambda report, view: json_lines(rounds_json(report))),
    }, files={
        "junit": ReportFile("also write JUnit XML: a test case per gated row, per round's "
                            "decisions, ...", lambda report: junit_xml(report),
                            asked_as=("junit", "xml")),
        "html": ReportFile("also write the report page: one HTML file with plots, no network "
                           "needed", lambda report: report_page(report).encode("utf-8"),
                           asked_as=("html",)),
    }),
    "record": CommandOutputs(formats={}, files={
        "json": ReportFile("the record's data file to write",
                           lambda sections: dump_json(record_json(sections))),
        "markdown": ReportFile("the record's document to write", lambda sections: (
            "\n".join(format_record(sections)) + "\n").encode("utf-8")),
    }),
    "history": CommandOutputs(formats={
        "text": ReportFormat("aligned tables", lambda report, view: format_history(report)),
        "markdown": ReportFormat("the drift's verdict and a table per gated row, for a job "
                                 "summary", lambda report, view: format_history_markdown(report)),
        "json": ReportFormat("every figure at full precision",
                             lambda report, view: json_lines(history_json(report))),
    }, files={
        "html": ReportFile("also write the history page: one HTML file plotting each gated "
                           "row's series and cumulative change, no network needed",
                           lambda report: history_page(report).encode("utf-8")),
    }),
    "run": CommandOutputs(formats={}, files={
        "csv": ReportFile("also write one CSV line per request: pass, id, start_ms, "
                          "latency_ms, status, decision, error",
                          lambda run: requests_csv(run.passes), asked_as=("csv",)),
    }),
}
