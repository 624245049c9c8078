"""Tests of rounds.py: judge_rounds(): interleaved rounds as one report object."""

import math
import random
import signal

import pytest

from router_latency.errors import Notice, RouterLatencyError
from router_latency.requests import Request
from router_latency.roundset import Rounds
from router_latency.gate import ROW_WORDS
from router_latency.rounds import config_hash_findings, judge_rounds, run_outcome, time_windows
from conftest import FIGURES, hashed_rounds, PASSES, rounds_in_memory, run_with

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


def test_the_composite_test_catches_a_slowdown_no_single_row_shows():
    # +10% everywhere; each row's noise is a shift of one pattern (spread 4.2%), so that no
    # row alone is sure of it while their per-round mean, where the noise cancels, is
    pattern = (0.05, -0.05, 0.0325, -0.0325, 0.0)
    keys = [(p, m) for p in PASSES for m in FIGURES]
    noise = {(n, *key): math.exp(pattern[(n + k) % 5]) for n in range(1, 6)
             for k, key in enumerate(keys)}
    report = judge_rounds(rounds_in_memory(5, lambda n, p, m: 1.10 * noise[(n, p, m)]),
                             "base", "new")
    gated = [r for r in report.rows if r.gated]
    assert len(gated) == 9 and report.test.regressions == ()
    assert all(r.p_value > 0.025 for r in gated)
    assert report.test.composite_p < 0.025
    assert report.status == "fail" and report.reasons[0].startswith(
        "the 9 gated rows together are +10.0% [")
    assert 1 < report.test.effective_rows < 9  # shifted patterns: partly alike


def test_holm_names_the_row_that_moved_alone():
    rng = random.Random(3)
    noise = {(n, p, m): math.exp(rng.gauss(0, 0.01)) for n in range(1, 6) for p in PASSES
             for m in FIGURES}
    report = judge_rounds(rounds_in_memory(
        5, lambda n, p, m: (1.30 if (p, m) == ("c16", "p95_ms") else 1.0) * noise[(n, p, m)]),
        "base", "new")
    assert report.test.regressions == (("c16", "p95_ms"),)
    assert "Conc 16 p95 is worse than the tolerance" in report.reasons
    row = next(r for r in report.rows if (r.pass_name, r.metric) == ("c16", "p95_ms"))
    assert row.verdict == "worse" and 29 < row.change_pct < 31
    assert {r.verdict for r in report.rows if r.gated} <= set(ROW_WORDS)


def test_an_outlier_round_is_described_and_its_noise_makes_the_verdict_inconclusive():
    # one slow base round (2x) in six hides a true 1.2x slowdown of every row: today's rule
    # passed it and printed a second verdict without the round; the three-way rule is
    # inconclusive, and the outlier is only described
    slower = lambda n, p, m: 1.2 * (1 + 0.002 * n)  # noqa: E731
    for hiccup_size, count in ((2.0, 6), (1.4, 5), (1.6, 7)):
        hiccup = lambda n, p, m: hiccup_size if n == 3 else 1.0  # noqa: E731
        report = judge_rounds(rounds_in_memory(count, slower, base_factor=hiccup),
                                 "base", "new")
        order = report.section("order")
        assert order.json["outliers"] == [3]
        assert report.status == "inconclusive" and report.exit_code == 3
        assert not hasattr(report, "without_outliers")
        line = order.blocks[-1]
        assert line.startswith("outlier rounds (median/MAD of the gated rows' mean; described "
                               "only, the verdict stands on every round): r3 ")
        assert "verdict would be" not in line
        assert "against the median +2" in line  # the true +20%, and a little drift


def test_an_order_effect_is_estimated_and_warned_about():
    # whichever side starts second is 10% slower; new starts first in even rounds
    second = lambda first: (lambda n, p, m: 1.10 if (n % 2 == 1) == first else 1.0)  # noqa
    report = judge_rounds(rounds_in_memory(6, second(True), base_factor=second(False)),
                             "base", "new")
    effect = report.section("order").json["order_effect"]
    assert math.expm1(effect["estimate"]) == pytest.approx(0.10, abs=0.005)
    assert any(w.kind == "order_effect"
               and w.text.startswith("warning: order effect: the side started second ran +10.")
               for w in report.warnings)
    # the order, not the change: balanced rounds cancel it, never a FAIL; the noise it adds
    # leaves the rows undecided
    assert report.status == "inconclusive"


A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_config_hash_findings_names_each_side_and_warns_when_they_are_the_same(tmp_path):
    hashes, warnings = config_hash_findings(
        Rounds(hashed_rounds(tmp_path, [(A,), (A,)], [(B,), (B,)]), "cpu", "gpu"))
    assert hashes == {"cpu": (A,), "gpu": (B,)} and warnings == ()
    hashes, warnings = config_hash_findings(
        Rounds(hashed_rounds(tmp_path, [(A,), (A,)], [(A,), (A,)]), "cpu", "gpu"))
    assert hashes == {"cpu": (A,), "gpu": (A,)}
    assert warnings == (Notice("same_config", "WARNING: base cpu and new gpu answered with the "
                               "same configuration (x-vsr-config-hash aaaaaaaaaaaa): the gate "
                               "compares a configuration with itself; check which "
                               "configuration each side runs"),)


def test_config_hash_findings_without_hashes(tmp_path):
    assert config_hash_findings(Rounds(hashed_rounds(tmp_path, [(), ()], [(), (B,)]),
                                          "cpu", "gpu")) == ({"cpu": (), "gpu": (B,)}, ())


@pytest.mark.parametrize("base_hashes,where,listed", [
    ([(A,), (C,)], "r2-cpu.json", "aaaaaaaaaaaa in r1; cccccccccccc in r2"),  # between rounds
    ([(A,), (A, C)], "r2-cpu.json", "aaaaaaaaaaaa in r1, r2; cccccccccccc in r2"),  # within
])
def test_config_hash_findings_refuses_a_side_whose_configuration_changed(
        tmp_path, base_hashes, where, listed):
    runs = hashed_rounds(tmp_path, base_hashes, [(B,), (B,)])
    with pytest.raises(RouterLatencyError) as refused:
        config_hash_findings(Rounds(runs, "cpu", "gpu"))
    message = (f"side cpu answered with 2 configurations (x-vsr-config-hash {listed})")
    assert refused.value.args[0] == (f"{message}: its configuration changed between or within "
                                     f"rounds; --allow-config-change judges it anyway")
    assert refused.value.where == str(tmp_path / where)
    hashes, warnings = config_hash_findings(Rounds(runs, "cpu", "gpu"), allow_change=True)
    assert hashes["cpu"] == (A, C)
    assert warnings == (Notice("config_changed", f"warning: {message}"),)


def test_time_windows_hold_the_median_latency_of_each_stretch_of_send_time():
    requests = [Request(i, 10.0 * i, float(i + 1), 200, "d", None) for i in range(4)]
    assert time_windows(requests, 2) == [(0.0075, 1.5), (0.0225, 3.5)]
    assert time_windows([r._replace(start_ms=None) for r in requests], 2) == []


@pytest.mark.parametrize("errors, max_errors, expected", [
    (None, 0, (0, "")),
    ({"timeout": 2}, 2, (0, "")),
    ({"timeout": 2}, 1, (1, "2 requests failed (--max-errors 1)")),
    ({"timeout": 1, "http_5xx": 2}, 0, (1, "3 requests failed (--max-errors 0)")),
])
def test_run_fails_when_more_requests_failed_than_max_errors(tmp_path, errors, max_errors,
                                                             expected):
    assert run_outcome(run_with(tmp_path, errors=errors), max_errors) == expected


def test_run_counts_the_failures_of_every_measured_pass_and_no_discarded_one(tmp_path):
    run = run_with(tmp_path, errors={"timeout": 1},
                   passes={1: (10, 12, 13, 100), 4: (11, 13, 14, 300)})
    assert run_outcome(run, 1) == (1, "2 requests failed (--max-errors 1)")
    kept = run._replace(passes=(run.passes[0], run.passes[1]._replace(discarded=True)))
    assert run_outcome(kept, 1) == (0, "")


@pytest.mark.parametrize("signum, code", [(None, 130), (signal.SIGINT, 130),
                                          (signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                          (int(signal.SIGTERM), 143)])
def test_an_interrupted_run_exits_with_its_signals_code_whatever_failed(tmp_path, signum,
                                                                        code):
    run = run_with(tmp_path, errors={"timeout": 5}, complete=False)
    assert run_outcome(run, 0, signum) == (code, "")
