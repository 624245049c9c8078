"""Tests of judged.py: a judged row's change, its JSON and its pass cell, and each round's
values as the report's per-round section."""

import math

from router_latency.gate import Row
from router_latency.report import text_lines
from router_latency.stats import Interval
from router_latency.judged import (pass_cell, per_round_section, row_change_text, row_json,
                                   rows_json)


def row(pass_name="sequential", metric="p50_ms", *, speedup=1.25, low=1.0, high=1.6,
        judged=None, base_values=(10.0, 12.0), new_values=(8.0, 9.6), **fields):
    """A judged row made by hand: new 20% faster than base in each of two rounds."""
    log = Interval(math.log(0.8), math.log(0.7), math.log(0.9), 1)
    return Row(pass_name, metric, True, 11.0, 8.8, Interval(-2.2, -3.0, -1.4, 1), log,
               speedup, low, high, 0, 2, 0.01, 5.0, 3, "better", base_values, new_values,
               judged=judged, **fields)


def test_an_unjudged_rows_change_is_its_speedup_with_its_interval_as_time_per_request():
    # a speedup of 1.25 is -20% of time; its interval [1.0, 1.6] is [-37.5%, +0.0%]
    assert row_change_text(row()) == "-20.0% [-37.5%, +0.0%]"


def test_a_judged_rows_change_is_the_interval_its_word_judges():
    # the worse-direction log ratio: +10% [+5%, +20%], whatever the 95% interval said
    judged = Interval(math.log(1.1), math.log(1.05), math.log(1.2), 1)
    assert row_change_text(row(judged=judged)) == "+10.0% [+5.0%, +20.0%]"


def test_a_look_without_a_bound_says_so_beside_the_change():
    judged = Interval(math.log(1.1), -math.inf, math.inf, 1)
    assert row_change_text(row(judged=judged)) == "-20.0% [no bound at this look]"


def test_a_rows_json_holds_its_figures_word_and_judged_interval_in_percent():
    judged = Interval(math.log(1.1), math.log(1.05), math.inf, 1)
    document = row_json(row(judged=judged, held_by_holm=True))
    assert document["pass"] == "sequential" and document["metric"] == "p50_ms"
    assert document["diff"] == {"mean": -2.2, "low": -3.0, "high": -1.4, "df": 1,
                                "confidence": 0.95}
    assert document["log_ratio"] == {"mean": math.log(0.8), "low": math.log(0.7),
                                     "high": math.log(0.9), "df": 1}
    assert document["change_pct"] == 100 * (math.exp(math.log(0.8)) - 1)  # latency: -20%
    assert document["word"] == "better (Holm)" and document["verdict"] == "better"
    assert document["change_text"] == row_change_text(row(judged=judged))
    low, high = document["judged_interval_pct"]
    assert math.isclose(low, 5.0) and high is None  # an end without a bound is null
    assert document["base_values"] == [10.0, 12.0] and document["new_values"] == [8.0, 9.6]
    assert row_json(row())["judged_interval_pct"] is None


def test_rows_json_gives_every_row_its_noise_null_without_findings():
    rows = [row(), row(metric="p95_ms")]
    assert rows_json(rows, None) == [{**row_json(r), "noise": None} for r in rows]


def test_a_passs_title_stands_on_its_first_row_only():
    rows = [row(metric="p50_ms"), row(metric="p95_ms"), row("c4", "p50_ms"),
            row("ladder", "plateau_req_per_s"), row("ladder", "capacity_req_per_s")]
    assert [pass_cell(r, rows) for r in rows] == ["Sequential", "", "Conc 4", "Ladder", ""]


def test_each_rounds_values_are_a_section_drawn_on_request_beside_the_table():
    rows = [row(), row(metric="p95_ms", base_values=(15.0, 150.0), new_values=(14.0, 1.5))]
    section = per_round_section(rows, (1, 3), "cpu", "gpu")
    assert section.key == "per_round" and section.on_request and section.beside_table
    assert text_lines(section.blocks) == [
        "pass        metric  r1 cpu / gpu  r3 cpu / gpu",
        "Sequential  p50 ms   10.0 / 8.00   12.0 / 9.60",
        "            p95 ms   15.0 / 14.0    150 / 1.50",
    ]
    assert per_round_section([], (1, 3), "cpu", "gpu").blocks == ()
