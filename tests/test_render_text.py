"""Tests of render_text.py: the reports as aligned text tables."""

import math

import pytest

from router_latency.constants import ROUTER_MAX_CONCURRENCY
from router_latency.stats import sample_spread
from router_latency.runfile import load_run, RunSettings
from router_latency.gate import GateSettings
from router_latency.rounds import find_round_files, judge_rounds, Overload, run_overload
from router_latency.render_text import format_plan, overload_note, rounds_table_parts
from conftest import assert_tables_as_github_reads_them, run_with, three_rounds

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


def test_a_table_parser_finds_tables_run_together(tmp_path):
    # the check itself: two tables with no blank line between read as one
    joined = "| a | b |\n|:---|---:|\n| 1 | 2 |\n| c | d | e |\n|:---|---:|---:|\n| 3 | 4 | 5 |\n"
    with pytest.raises(AssertionError):
        assert_tables_as_github_reads_them(joined)
    assert_tables_as_github_reads_them(joined.replace("| 2 |\n", "| 2 |\n\n"))


def overloaded(run, count):
    item = run.passes[0]
    requests = tuple(r._replace(status=429, decision=None, error="http_4xx", code="OVERLOADED")
                     if i < count else r for i, r in enumerate(item.requests))
    attempt = item.attempt._replace(requests=requests)
    return run._replace(passes=(item._replace(attempt=attempt),) + run.passes[1:])


@pytest.mark.parametrize("shed, settings, expected", [
    (0, {"router_max_concurrency": 4, "timeout_s": 5.0}, None),
    (1, {"router_max_concurrency": 4, "timeout_s": 5.0}, Overload(1, 4, 5.0)),
    (3, {}, Overload(3, ROUTER_MAX_CONCURRENCY, None)),
    (2, {"router_max_concurrency": 1, "timeout_s": 10.0}, Overload(2, 1, 10.0)),
])
def test_the_overload_is_counted_in_analysis_and_read_with_its_settings(tmp_path, shed,
                                                                        settings, expected):
    run = overloaded(run_with(tmp_path), shed)._replace(settings=RunSettings(**settings))
    assert run_overload(run) == expected
    lines = overload_note(run_overload(run))
    assert len(lines) == (0 if expected is None else 2)
    if expected is not None:
        assert lines[0].startswith(f"{shed} request{'s' if shed > 1 else ''} answered 429 "
                                   f"OVERLOADED")
        assert f"declared {expected.declared_limit} with --router-max-concurrency" in lines[0]
        assert ("s here)" in lines[1]) == (expected.timeout_s is not None)


@pytest.mark.parametrize("base", [(10, 20, 30, 100), (11, 19, 35, 90), (10, 20, 30, 101)])
def test_each_row_carries_the_spread_the_plan_prints(tmp_path, base):
    three_rounds(tmp_path, base=base)
    files = find_round_files(str(tmp_path), "cpu", "gpu")
    runs = {n: {s: load_run(p) for s, p in sides.items()} for n, sides in files.items()}
    report = judge_rounds(runs, "cpu", "gpu", GateSettings())
    for row in report.rows:
        logs = [math.log(n / b) for b, n in zip(row.base_values, row.new_values)]
        assert row.spread == sample_spread(logs)
    # the plan prints the field: a row given another spread prints it
    # (100 x the log standard deviation, as the noise lines take it apart)
    changed = report._replace(rows=tuple(r._replace(spread=0.5) for r in report.rows))
    table = [line.split() for line in format_plan(changed)[3:3 + len(report.rows)]]
    assert all("50.0%" in cells for cells in table)


@pytest.mark.parametrize("detectable, said", [
    (None, "any change"), (math.inf, "none yet"), (24.0, ">= 24%"), (2000.0, "more than 10x")])
def test_the_gated_rows_together_say_any_change_only_without_a_spread(tmp_path, detectable,
                                                                     said):
    # before: "detects any change" where a look's boundary could not reject (the figure
    # infinite), below rows that each said "none yet"
    three_rounds(tmp_path)
    files = find_round_files(str(tmp_path), "cpu", "gpu")
    runs = {n: {s: load_run(p) for s, p in sides.items()} for n, sides in files.items()}
    report = judge_rounds(runs, "cpu", "gpu", GateSettings())
    test = report.test._replace(composite_detectable_pct=detectable)
    below = rounds_table_parts(report._replace(test=test))[2]
    assert below[0].endswith(f"every gated row slowing together: detects {said}")
