"""Tests of render_json.py: every figure of a report at full precision, as JSON."""

import json
import math

import pytest

from router_latency.constants import __version__
from router_latency.gate import GateSettings
from router_latency.judged import rows_json
from router_latency.runfile import load_run
from router_latency.compare import compare_runs
from router_latency.rounds import judge_rounds
from router_latency.record import record_section
from router_latency.render_text import verdict_line
from router_latency.render_json import (compare_json, COMPARE_SCHEMA, record_json, rounds_json,
                                        ROUNDS_SCHEMA)
from conftest import rounds_in_memory, three_rounds, two_runs, undecided

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


def test_a_comparison_as_json_holds_each_figure_its_difference_and_ratio(tmp_path):
    a, b = two_runs(tmp_path)
    document = compare_json(compare_runs(load_run(a), load_run(b),
                                         fail_on_decision_change=True))
    assert document["schema"] == COMPARE_SCHEMA == "router-latency/compare/1"
    assert document["a"] == {"path": a, "label": "cpu", "corpus_sha256": "a" * 64}
    sequential = document["passes"][0]
    assert sequential["pass"] == "sequential" and not sequential["discarded"]
    assert sequential["metrics"]["p50_ms"] == {"a": 10.0, "b": 4.0, "diff": -6.0, "ratio": 0.4}
    assert sequential["metrics"]["req_per_s"]["ratio"] == 2.5
    assert sequential["errors"] == {"a": 0, "b": 1}
    assert "degraded" not in sequential and "parts" not in sequential  # only where any
    assert document["decisions"] == {
        "pass": "sequential", "compared": 101, "agree": 99, "unmeasured": 0,
        "changes": [{"id": 2, "a": "z", "b": "w", "text": None},
                    {"id": 100, "a": "d", "b": None, "text": None}]}
    assert document["consistency"] == {"A": [], "B": []}
    assert (document["status"], document["exit_code"]) == ("fail", 1)
    assert document["reasons"] == [
        "decisions differ in 2 inputs (sequential pass, --fail-on-decision-change)"]
    json.dumps(document, allow_nan=False)  # a document any parser reads


def test_the_rounds_json_is_the_core_then_every_sections_keys(tmp_path):
    three_rounds(tmp_path)
    report = record_section("s", str(tmp_path), "cpu", "gpu").report
    document = rounds_json(report)
    assert document["schema"] == ROUNDS_SCHEMA == "router-latency/rounds/1"
    assert (document["base"], document["new"], document["used"]) == ("cpu", "gpu", [1, 2, 3])
    assert document["rows"] == rows_json(report.rows, report.noise)
    assert document["verdict"] == verdict_line(report)
    assert (document["status"], document["exit_code"]) == (report.status, report.exit_code)
    section_keys = [key for section in report.sections for key in section.json]
    assert list(document)[-len(section_keys):] == section_keys
    for section in report.sections:
        for key, value in section.json.items():
            assert document[key] == value
    json.dumps(document, allow_nan=False)


def test_what_an_undecided_result_could_have_missed_is_its_percent_and_sentence(tmp_path):
    undecided(tmp_path)  # p50 ratios 0.9, 1.15, 1.0: the worse end +37.3%
    could_miss = rounds_json(record_section("u", str(tmp_path), "cpu", "gpu").report)[
        "could_miss"]
    assert round(could_miss["pct"], 1) == 37.3
    assert could_miss["text"] == "it could have missed a slowdown of up to +37.3% " \
                                 "(Sequential p50)"


def test_a_failed_result_missed_nothing():
    # new 50% slower in every round: a FAIL, which could have missed nothing
    runs = rounds_in_memory(5, lambda n, p, m: 1.5 + 0.01 * n)
    document = rounds_json(judge_rounds(runs, "base", "new", GateSettings()))
    assert document["status"] == "fail" and document["could_miss"] is None


def test_the_record_holds_each_sections_report_and_its_rounds_pass_summaries(tmp_path):
    three_rounds(tmp_path)
    section = record_section("H200", str(tmp_path), "cpu", "gpu")
    document = record_json([section])
    assert document["schema"] == "router-latency/record/1"
    assert document["tool"] == {"name": "router-latency", "version": __version__}
    (name, held), = document["sections"].items()
    assert name == "H200" and held["folder"] == str(tmp_path)
    assert held["report"] == rounds_json(section.report)
    assert list(held["rounds"]) == ["r1", "r2", "r3"]
    cpu = held["rounds"]["r2"]["cpu"]
    assert (cpu["file"], cpu["label"], cpu["complete"]) == (
        str(tmp_path / "r2-cpu.json"), "cpu", True)
    (sequential,) = cpu["passes"]
    assert sequential["name"] == "sequential" and "requests" not in sequential
    assert math.isclose(sequential["summary"]["p50_ms"], 10.0)
