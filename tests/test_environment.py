"""Tests of environment.py: each round's surroundings per side, the start order's balance
and effect, the outlier rounds, and their sections."""

import math

import pytest

from router_latency.gate import Row
from router_latency.report import text_lines
from router_latency.roundset import Rounds
from router_latency.runfile import load_run
from router_latency.stats import Interval
from router_latency.environment import (environment_rows, environment_section,
                                        order_and_outliers, order_balance, order_section)
from conftest import make_run, three_rounds

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


def loaded_rounds(folder, numbers=(1, 2, 3)):
    return Rounds({n: {side: load_run(str(folder / f"r{n}-{side}.json"))
                       for side in ("cpu", "gpu")} for n in numbers}, "cpu", "gpu",
                  tuple(numbers))


def test_each_rounds_side_has_its_surroundings_and_flags_what_was_unusual(tmp_path):
    # r2's cpu router ran on other cores, r2's gpu side above the load limit (120), r3's gpu
    # router restarted once; only the gpu sides read the restart series and GPU memory
    three_rounds(tmp_path, flagged=True)
    rows = environment_rows(loaded_rounds(tmp_path))
    assert [(r.round, r.side, r.flags) for r in rows] == [
        (1, "cpu", ()), (1, "gpu", ()),
        (2, "cpu", ("cpuset differs (usually 0-15)",)), (2, "gpu", ("load above 120",)),
        (3, "cpu", ()), (3, "gpu", ("restart/fault",))]
    assert [r.faults for r in rows] == [None, 0.0, None, 0.0, None, 1.0]
    gpu = rows[3]
    assert (gpu.load_min, gpu.load_max, gpu.above_load_limit) == (1.0, 130.0, True)
    assert (gpu.gpu_mib_min, gpu.gpu_mib_max, gpu.router_cpus) == (1024.0, 1100.0, "16-31")
    # 0.015 s of driver CPU over 101 requests at 100 req/s: 1.5% of the pass's 1.01 s
    assert (gpu.driver_cpu_s, gpu.driver_cpu_pct) == (0.015, 1.5)


def test_the_environment_section_draws_the_table_and_gives_the_record_its_faults(tmp_path):
    three_rounds(tmp_path, flagged=True)
    rows = environment_rows(loaded_rounds(tmp_path))
    section = environment_section(rows)
    assert section.key == "environment" and section.title == "Environment"
    lines = text_lines(section.blocks)
    assert lines[0].split() == ["round", "side", "load", "router", "cpus", "gpu", "MiB",
                                "restarts/faults", "discarded", "driver", "cpu", "flags"]
    assert lines[4].split() == ["r2", "gpu", "1.00-130", "16-31", "1,024-1,100", "0", "0",
                                "0.01", "s", "(2%)", "load", "above", "120"]
    assert lines[-1] == ""  # a blank line below it in text
    assert section.json == {"environment": [row.to_json() for row in rows]}
    assert section.record == ((40, "restarts and device faults: r3 gpu 1"),)
    assert section.page[0].place == 80


def test_a_column_no_run_recorded_is_left_out_and_named(tmp_path):
    for n in (1, 2):
        for side in ("cpu", "gpu"):
            make_run(tmp_path / f"r{n}-{side}.json", label=side, started_unix=10.0 * n)
    lines = text_lines(environment_section(environment_rows(
        loaded_rounds(tmp_path, (1, 2)))).blocks)
    assert lines[0].split() == ["round", "side", "discarded", "flags"]
    assert lines[-2] == "not recorded in any run: load, router cpus, gpu MiB, restarts/faults, " \
                        "driver cpu"


def p50_row(base_values, new_values, gated=True):
    flat = Interval(0.0, 0.0, 0.0, len(base_values) - 1)
    return Row("sequential", "p50_ms", gated, 10.0, 10.0, flat, flat, 1.0, 1.0, 1.0, 0,
               len(base_values), 0.5, None, None, "same", tuple(base_values),
               tuple(new_values))


def test_the_start_order_says_who_started_each_round_and_the_p50_difference_by_order(
        tmp_path):
    three_rounds(tmp_path)  # cpu started r1 and r3, gpu r2
    rounds = loaded_rounds(tmp_path)
    order = order_balance(rounds, [p50_row((10, 10, 10), (11, 14, 13))])
    assert order.first == {"r1": "cpu", "r2": "gpu", "r3": "cpu"}
    assert (order.base_first, order.new_first, order.unknown) == ([1, 3], [2], [])
    assert order.balanced
    (difference,) = order.p50_difference_by_order
    # new - base: 1 and 3 where cpu started (mean 2), 4 where gpu did
    assert (difference.pass_name, difference.base_first, difference.new_first) == \
        ("sequential", 2.0, 4.0)
    # only the rounds used count: r1 left out, each side started one
    partial = order_balance(rounds._replace(used=(2, 3)), [])
    assert (partial.base_first, partial.new_first, partial.balanced) == ([3], [2], True)
    assert order_balance(rounds._replace(used=(1, 3)), []).balanced is False  # 2 to 0


def test_a_round_whose_sides_started_together_has_an_unknown_order(tmp_path):
    for side in ("cpu", "gpu"):
        make_run(tmp_path / f"r1-{side}.json", label=side, started_unix=5.0)
    order = order_balance(loaded_rounds(tmp_path, (1,)), [])
    assert order.first == {"r1": None} and order.unknown == [1] and not order.balanced
    section = order_section(order, order_and_outliers((1,), [], order), "cpu", "gpu")
    assert list(section.blocks) == [
        "order: cpu first in none; gpu first in none; unknown in r1",
        "warning: start order unbalanced: rounds should alternate which side starts first"]


def test_an_outlier_round_is_described_against_the_median_and_the_order_effect_estimated(
        tmp_path):
    # six rounds alternating who starts; the gated p50's new side doubles in r6 alone
    for n in range(1, 7):
        for side, offset in (("cpu", 0.0), ("gpu", 1.0 if n % 2 else -1.0)):
            make_run(tmp_path / f"r{n}-{side}.json", label=side, started_unix=10.0 * n + offset)
    rounds = loaded_rounds(tmp_path, range(1, 7))
    new = (10.0, 10.1, 9.9, 10.0, 10.05, 20.0)
    rows = [p50_row((10.0,) * 6, new)]
    order = order_balance(rounds, rows)
    found = order_and_outliers(rounds.used, rows, order)
    assert found.outliers == [6]
    ((number, change, median),) = found.outlier_changes
    logs = sorted(math.log(v / 10.0) for v in new)
    assert number == 6 and math.isclose(change, 100.0)
    assert math.isclose(median, 100 * math.expm1((logs[2] + logs[3]) / 2))
    assert found.order_effect is not None
    lines = order_section(order, found, "cpu", "gpu").blocks
    assert lines[0] == "order: cpu first in r1, r3, r5; gpu first in r2, r4, r6; balanced"
    assert lines[-1] == "outlier rounds (median/MAD of the gated rows' mean; described only, " \
                        f"the verdict stands on every round): r6 +100.0% against the median " \
                        f"{median:+.1f}%"
    # an ungated row is never judged, nor its rounds called outliers
    assert order_and_outliers(rounds.used, [p50_row((10.0,) * 6, new, gated=False)], order) \
        == (None, [], ())
