"""Tests of ladder.py: the ladder: when to stop climbing, plateau, knee, capacity, cost."""

import pytest

from router_latency.words import plural
from router_latency.requests import pass_name
from router_latency.runfile import Ladder
from router_latency.ladder import (flat_step, knee_of, ladder_stop, LadderStep, plateau_of,
                                   slo_capacity, usd_per_million)
from conftest import pass_of


def steps_of(*figures, shed=()):
    """Return LadderSteps of (callers, req/s, p50, p95)."""
    return [LadderStep(pass_name(c), c, plural(c, "caller"), rps, p50, p95,
                          10 if c in shed else 0) for c, rps, p50, p95 in figures]


def test_plateau_knee_and_capacity_by_hand():
    steps = steps_of((1, 100, 9, 10), (2, 190, 10, 12), (4, 300, 12, 40), (8, 320, 24, 90))
    # 4 -> 8 callers doubled the load for 320 / 300 = 1.067x the throughput, under 1.10x, and
    # no later step served more than 330: the plateau begins at 4 callers, 320 high
    begins, level = plateau_of(steps, 10.0)
    assert (begins.load, level) == (4, 320)
    # 4 -> 8: p50 x2.0 against req/s x1.07: the knee; 2 -> 4: p50 x1.2 against x1.58
    assert knee_of(steps, 10.0)[0].load == 4
    # 8 callers passed the 50 ms SLO: (50 - 40) / (90 - 40) = 0.2 of the way from 300 to 320
    found, how = slo_capacity(steps, 50.0, begins)
    assert found == pytest.approx(304.0)
    assert how.startswith("interpolated between 4 callers (p95 40.00 ms, 300.00 req/s) and "
                          "8 callers (p95 90.00 ms, 320.00 req/s)")
    assert usd_per_million(2.5, 304.0) == pytest.approx(2.5 / (304 * 3600) * 1e6)
    assert usd_per_million(2.5, 304.0) == pytest.approx(2.28436, abs=1e-5)


def test_capacity_where_the_slo_is_passed_at_once_never_or_without_more_throughput():
    first_beyond = steps_of((1, 100, 20, 60), (2, 110, 40, 80))
    assert slo_capacity(first_beyond, 50.0, None)[0] is None
    growing = steps_of((1, 100, 9, 10), (2, 200, 9, 11))
    found, how = slo_capacity(growing, 50.0, None)
    assert found == 200 and "at least" in how
    flat = steps_of((1, 100, 9, 10), (2, 101, 18, 20), (4, 99, 36, 70))
    found, how = slo_capacity(flat, 50.0, plateau_of(flat, 10.0)[0])
    assert found == 101 and how.startswith("measured at 2 callers")
    # still growing at the last step: no plateau, and no knee where latency never outgrew it
    assert plateau_of(growing, 10.0) == (None, None)
    assert knee_of(growing, 10.0) is None


@pytest.mark.parametrize("before, after, flat", [
    ((4, 300.0), (8, 320.0), True),  # callers doubled, 6.7% more: under the 10% margin
    ((2, 190.0), (4, 300.0), False),
    ((350, 343.0), (380, 369.0), False),  # a rate 8.6% up, 7.6% more served: it follows
    ((400, 398.0), (500, 401.0), True),  # a rate 25% up, 0.75% more: under 2.5%
    ((1, 100.0), (2, 95.0), True),
])
def test_a_flat_step_turned_less_than_the_margin_of_its_added_load_into_throughput(
        before, after, flat):
    assert flat_step(before, after, 10.0) is flat


@pytest.mark.parametrize("passes, slo, words", [
    ([pass_of(1, 100, 10), pass_of(2, 105, 20)], None, "throughput stopped growing: 105"),
    ([pass_of(1, 100, 10), pass_of(2, 150, 20)], 15.0, "p95 20.0 ms at 2 callers passed"),
    ([pass_of(1, 100, 10), pass_of(2, 200, 10, shed=3)], None,
     "the router shed 3 requests at 2 callers (429 OVERLOADED): its admission limit"),
    ([pass_of(1, 100, 10), pass_of(2, 190, 12)], 50.0, None),
    ([pass_of(1, 100, 10), pass_of(2, 100, 12, discarded=True)], None, None),
    ([pass_of(1, 100, 10), pass_of(2, 100, 12, shed=40)], None,
     "the router shed 40 requests at 2 callers"),
    ([pass_of(1, 100, 10), pass_of(2, 100, 12, connect=True)], None,
     "no request at 2 callers was answered with a decision"),
    ([pass_of(1, 100, 10)], None, None),
])
def test_why_a_ladder_stops_climbing(passes, slo, words):
    why = ladder_stop(passes, Ladder(10.0, slo))
    assert why == words if words is None else words in why
