"""Tests of compare.py: two runs side by side as one report object."""

import types

from router_latency.errors import Notice
from router_latency.report import text_lines
from router_latency.runfile import load_run
from router_latency.compare import (compare_runs, decision_agreement, DecisionChange,
                                    floor_warnings, sampled_selections)
from conftest import make_run, two_runs


def test_two_runs_side_by_side_figures_changes_and_decisions(tmp_path):
    # A: sequential 10/20/30 ms at 100 req/s, Conc 4 12/25/40 at 300; B: 4/8/9 at 250,
    # 5/9/12 at 700, its last request timed out; decisions x, y, z against x, y, w
    a, b = (load_run(path) for path in two_runs(tmp_path))
    report = compare_runs(a, b, prompts_text={2: "why"})
    passes, details = report.sections
    assert passes.key == "passes" and text_lines(passes.blocks) == [
        "pass        metric     A     B  B - A  change, + slower",
        "Sequential  p50 ms  10.0  4.00  -6.00            -60.0%",
        "            p95 ms  20.0  8.00  -12.0            -60.0%",
        "            p99 ms  30.0  9.00  -21.0            -70.0%",
        "            req/s    100   250   +150            -60.0%",
        "            errors     0     1     +1",
        "Conc 4      p50 ms  12.0  5.00  -7.00            -58.3%",
        "            p95 ms  25.0  9.00  -16.0            -64.0%",
        "            p99 ms  40.0  12.0  -28.0            -70.0%",
        "            req/s    300   700   +400            -57.1%",
        "            errors     0     1     +1",
    ]
    assert details.key == "details" and list(details.blocks) == [
        "errors in Sequential: B timeout 1",
        "errors in Conc 4: B timeout 1",
        "",
        "decisions: 99/101 inputs agree (sequential pass)",
        '  #2 "why": z -> w',
        "  #100: d -> (no decision)",  # a failed request never agrees
        "A consistency: 0 inputs changed decision between passes",
        "B consistency: 0 inputs changed decision between passes",
    ]
    assert report.changes == (DecisionChange(2, "z", "w", "why"), DecisionChange(100, "d", None))
    assert (report.compared, report.unmeasured, report.warnings) == (101, 0, ())
    assert (report.a_label, report.b_label, report.corpus_count) == ("cpu", "rocm", 101)
    # decisions that differ pass unless asked to fail
    assert (report.status, report.exit_code, report.reasons) == ("pass", 0, ())
    failed = compare_runs(a, b, fail_on_decision_change=True)
    assert (failed.status, failed.exit_code, failed.reasons) == (
        "fail", 1, ("decisions differ in 2 inputs (sequential pass, --fail-on-decision-change)",))


def test_a_pass_discarded_on_either_side_has_no_figures_and_a_pass_one_side_lacks_no_row(
        tmp_path):
    a = load_run(make_run(tmp_path / "a.json", passes={1: (10, 20, 30, 100),
                                                       4: (12, 25, 40, 300)}, discarded=(4,)))
    b = load_run(make_run(tmp_path / "b.json", passes={1: (10, 20, 30, 100),
                                                       4: (12, 25, 40, 300),
                                                       16: (12, 25, 40, 300)}))
    rows = text_lines(compare_runs(a, b).sections[0].blocks)
    assert [row.split("  ")[0] for row in rows if not row.startswith(" ")] == \
        ["pass", "Sequential", "Conc 4"]
    assert rows[-1] == "Conc 4      discarded"


def test_decisions_agree_only_where_both_sides_answered_the_same():
    base = {1: "a", 2: "b", 3: None, 4: "x"}
    new = {1: "a", 2: "c", 3: None, 5: "y"}
    agreement = decision_agreement(base, new)
    assert agreement.compared == 3  # inputs 1, 2, 3: those both measured
    assert agreement.differ == [2, 3]  # a failure on both sides is no agreement
    assert decision_agreement({}, new) == (0, [])


def test_a_p50_difference_below_the_drivers_floor_is_a_warning():
    runs = [types.SimpleNamespace(floor_spread_ms=0.2), types.SimpleNamespace(floor_spread_ms=0.5),
            types.SimpleNamespace(floor_spread_ms=None)]
    p50s = [("Sequential", 10.0, 10.3), ("Conc 4", 10.0, 10.5), ("Conc 16", None, 3.0)]
    assert floor_warnings(p50s, runs) == [Notice(
        "floor", "warning: Sequential p50 differs by 0.300 ms, less than the driver's own "
                 "spread on loopback (0.500 ms, p90 - p10): below what this driver resolves")]
    assert floor_warnings(p50s, runs[2:]) == []  # no floor measured: nothing to say


def test_selections_the_router_sampled_are_counted_by_input_with_their_models(tmp_path):
    run = load_run(make_run(tmp_path / "a.json", decisions=[
        "math|~qwen3", "code|~llama|~qwen3", "math", "math|~qwen3"]))
    assert sampled_selections(run) == (3, ("llama", "qwen3"))
    plain = load_run(make_run(tmp_path / "b.json", decisions=["math"]))
    assert sampled_selections(plain) == (0, ())
