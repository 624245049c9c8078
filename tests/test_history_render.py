"""Tests of history_render.py: the history report as text, Markdown, JSON and one page."""

import math
import re
import xml.etree.ElementTree as ElementTree

from router_latency.gate import GateOutcome
from router_latency.history import Change, change_of, HistoryReport, RowTrend, TrendPoint
from router_latency.history_render import (format_history, format_history_markdown,
                                           history_json, history_page)

BASELINE = Change(0.0, 0.0, 0.0, 0.0, 1.0)
STEP = change_of(math.log(1.1), 0.0004, 4.0)  # +10.0%, its 95% interval from t(4)


def report(label="v1 <b>", status="fail"):
    """A row of three entries: the baseline (rounds), a step of +10% (a change point), and a
    single run after it; one entry left out and a note."""
    points = (
        TrendPoint("aaaa111", label, "2026-01-01T10:00:00Z", "rounds", "pass", 10.0, 9.5, 10.5,
                   None, BASELINE),
        TrendPoint("bbbb222", "", "2026-01-02T10:00:00Z", "rounds", "fail", 11.0, 10.8, 11.2,
                   STEP, STEP, change_point=True),
        TrendPoint("cccc333", "", "2026-01-03T10:00:00Z", "run", "", 11.1, None, None, None,
                   STEP))
    row = RowTrend("sequential", "p50_ms", points, STEP, 0.01, status,
                   (("bbbb222", math.log(1.1)),))
    outcome = GateOutcome(status, ("Sequential p50 drifted +10.0%",) if status == "fail" else (),
                          1 if status == "fail" else 0)
    return HistoryReport("h.jsonl", "aaaa111", "cccc333", 5.0, (row,),
                         (("dddd444", "another corpus"),), ("a note",), outcome)


def pct(value):
    return f"{100 * math.expm1(value):+.1f}%"


def test_the_text_report_leads_with_the_verdict_then_each_rows_series():
    step = f"{pct(STEP.mean)} [{pct(STEP.low)}, {pct(STEP.high)}]"
    assert step.startswith("+10.0% [")
    lines = format_history(report())
    assert lines[:4] == [
        "DRIFT FAIL: 3 commits like cccc333 since aaaa111, tolerance 5% (+ slower; for req/s, "
        "of the time per request)",
        "  Sequential p50 drifted +10.0%",
        "",
        f"Sequential p50: FAIL, drift {step}",
    ]
    header, *rows = lines[4:8]
    assert header.split("  ")[0] == "commit" and "its folder's verdict" in header
    assert rows[0].startswith("aaaa111 (v1 <b>)  2026-01-01") and "0 (baseline)" in rows[0]
    assert rows[0].split()[-1] == "pass"
    assert "10.0 [9.50, 10.5]" in rows[0]
    # its step is the drift so far
    assert re.split(r"  +", rows[1])[3:] == [step, step, "step", "fail"]
    assert "11.1 (one run)" in rows[2] and rows[2].endswith("run")
    assert lines[8:] == [
        "",
        "Sequential p50: change points (Holm over 1 step, family-wise 5%): bbbb222",
        "left out: dddd444: another corpus",
        "(--allow-mismatch corpus|node|config compares them anyway, where a change of that "
        "kind is the change under test)",
        "note: a note",
    ]


def test_the_markdown_neither_notifies_nor_links_and_lists_the_details():
    lines = format_history_markdown(report(label="v1 @team #12"))
    assert lines[0] == "**Drift: FAIL**: 3 commits like cccc333 since aaaa111, tolerance 5% " \
                       "(+ slower; for req/s, of the time per request)"
    assert lines[2] == "- Sequential p50 drifted +10.0%"
    table = [line for line in lines if line.startswith("| aaaa111")]
    assert table and "(v1 @&#8203;team \\#&#8203;12)" in table[0]  # as every outside cell
    assert lines[-1] == "- note: a note"


def test_a_label_is_text_from_outside_in_every_markdown_cell():
    # a label (or a commit name) that Markdown would read as markup stays as typed: italics,
    # code, a link and a cell break are escaped (it went into the table raw)
    lines = format_history_markdown(report(label="*v1* `x` [a](b) <i> | c"))
    (row,) = [line for line in lines if line.startswith("| aaaa111")]
    assert "(\\*v1\\* \\`x\\` \\[a\\](b) \\<i\\> \\| c)" in row
    assert row.count(" | ") == 6  # seven cells: the label's bar is no cell break


def test_the_json_holds_each_change_as_a_percent_and_a_log_ratio_with_its_error():
    document = history_json(report())
    assert document["schema"] == "router-latency-history-report/1"
    assert (document["status"], document["exit_code"]) == ("fail", 1)
    assert document["left_out"] == [{"commit": "dddd444", "why": "another corpus"}]
    (row,) = document["rows"]
    assert (row["pass"], row["metric"], row["status"]) == ("sequential", "p50_ms", "fail")
    drift = row["drift"]
    assert math.isclose(drift["pct"], 10.0) and drift["worse_log"] == STEP.mean
    assert math.isclose(drift["se_log"], 0.02) and drift["df"] == 4.0
    assert math.isclose(drift["low_pct"], 100 * math.expm1(STEP.low))
    first, second, single = row["points"]
    assert first["step"] is None and first["cumulative"]["pct"] == 0.0
    assert second["change_point"] is True and single["level_low"] is None
    assert row["most"] == [{"commit": "bbbb222", "worse_log": math.log(1.1)}]


def test_the_page_is_one_xml_document_with_two_plots_a_row_and_text_escaped():
    page = history_page(report(label="v1 <b>&"))
    root = ElementTree.fromstring(page.split("\n", 1)[1])  # polyglot XHTML: XML reads it
    svg = "{http://www.w3.org/2000/svg}"
    assert [s.get("aria-label") for s in root.iter(f"{svg}svg")] == [
        "Sequential p50: the series", "Sequential p50: cumulative change"]
    assert "<b>&" not in page and "v1 &lt;b&gt;&amp;" in page
    assert "DRIFT FAIL" in page and "<script" not in page
    passed = history_page(report(status="pass"))
    assert "DRIFT PASS" in passed and "<ul></ul>" not in passed
