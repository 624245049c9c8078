"""JUnit XML and CSV."""

from __future__ import annotations

import io
import math
import re
from typing import List, Sequence

from .words import fmt_signed, fmt_value, metric_title, p_text
from .runfile import PassRecord
from .requests import pass_title
from .gate import Row, row_word, undecided_text
from .rounds import RoundsReport
from .render_text import verdict_line
from .report import Check
from .judged import row_change_text

__all__ = ["junit_xml", "requests_csv", "xml_safe"]


def xml_safe(text: str) -> str:
    """Return text without the characters XML 1.0 cannot hold (control characters, lone
    surrogates): a router's decision or a prompt may contain them."""
    return re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]", "\ufffd", text)


def row_interval_text(row: Row) -> str:
    """Return a row's change with its interval as every report writes it: + is slower."""
    return (f"change {row_change_text(row)}, + is slower (new - base "
            f"{fmt_signed(row.diff.mean)} [{fmt_value(row.diff.low)}, "
            f"{fmt_value(row.diff.high)}]; t interval over {row.rounds} rounds, the one its "
            f"word judges)")


def junit_cases(report: RoundsReport) -> List[Check]:
    """Return a Check per test case: each gated row, the gated rows together, each section's
    checks (each round's decisions, each pass's errors), each round left out, and the verdict,
    which carries every reason of the gate."""
    cases: List[Check] = []
    tolerance = f"tolerance {report.settings.tolerance_pct:g}%"
    for row in (r for r in report.rows if r.gated):
        text = f"{row_word(row)}: {row_interval_text(row)}; {tolerance}"
        by_verdict = {"worse": "failure", "inconclusive": "skipped"}
        if row.verdict == "inconclusive":
            text += f"; {undecided_text(row, report.settings)}"
        cases.append(Check(group="rows",
                           name=f"{pass_title(row.pass_name)} {metric_title(row.metric)}",
                           outcome=by_verdict.get(row.verdict, "passed"), message=text,
                           details=""))
    test = report.test
    if test is not None and test.composite is not None:
        cases.append(Check(
            group="rows", name="gated rows together",
            outcome="failure" if test.composite_worse else "passed",
            message=f"{100 * math.expm1(test.composite.mean):+.1f}% "
            f"[{100 * math.expm1(test.composite.low):+.1f}%, "
            f"{100 * math.expm1(test.composite.high):+.1f}%] per round, one-sided "
            f"{p_text(test.composite_p)} of worse than the {tolerance} (not of any change; level "
            f"{100 * test.level:.3g}%)",
            details=""))
    cases += [check for section in report.sections for check in section.checks]
    for left in report.left_out:
        failed = any(r.startswith(f"the {report.new} side failed in r{left.round} (")
                     for r in report.reasons)
        cases.append(Check(group="rounds", name=f"r{left.round} left out",
                           outcome="failure" if failed else "skipped", message=left.why,
                           details=""))
    outcome = {"pass": "passed", "fail": "failure"}.get(report.status, "skipped")
    cases.append(Check(group="gate", name="verdict", outcome=outcome,
                       message=verdict_line(report), details="\n".join(report.reasons)))
    return cases


def junit_xml(report: RoundsReport) -> bytes:
    """Return the rounds report as JUnit XML: one test case per gated row, per round's
    decisions, per pass's errors, per round left out, and the verdict."""
    # imported here: 5-8 ms of every start of the tool, and only --junit writes XML
    import xml.etree.ElementTree as ElementTree
    cases = junit_cases(report)
    counts = {"tests": str(len(cases)),
              "failures": str(sum(c.outcome == "failure" for c in cases)),
              "errors": "0", "skipped": str(sum(c.outcome == "skipped" for c in cases))}
    name = xml_safe(f"router-latency rounds: {report.new} against {report.base}")
    top = ElementTree.Element("testsuites", {"name": name, **counts})
    suite = ElementTree.SubElement(top, "testsuite", {"name": name, **counts})
    properties = ElementTree.SubElement(suite, "properties")
    for key, value in (("status", report.status), ("base", report.base), ("new", report.new),
                       ("rounds", " ".join(f"r{n}" for n in report.used))):
        ElementTree.SubElement(properties, "property", {"name": key, "value": xml_safe(value)})
    for group, title, outcome, message, details in cases:
        case = ElementTree.SubElement(suite, "testcase", {
            "classname": f"router-latency.{group}", "name": xml_safe(title), "time": "0"})
        if outcome == "passed":
            ElementTree.SubElement(case, "system-out").text = xml_safe(message)
            continue
        result = ElementTree.SubElement(case, outcome, {"message": xml_safe(message)})
        if outcome == "failure":
            result.set("type", "regression" if group == "rows" else group)
        result.text = xml_safe((details if isinstance(details, str) else "\n".join(details))
                               or message)
    ElementTree.indent(top)
    return ElementTree.tostring(top, encoding="utf-8", xml_declaration=True) + b"\n"


def requests_csv(passes: Sequence[PassRecord]) -> bytes:
    """Return one CSV line per request of the measured passes (the timings that count)."""
    import csv
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["pass", "id", "start_ms", "latency_ms", "status", "decision", "error"])
    for item in passes:
        for r in item.requests:
            writer.writerow([item.name, r.id, r.start_ms, r.latency_ms, r.status, r.decision,
                             r.error])
    return buffer.getvalue().encode("utf-8", "replace")
