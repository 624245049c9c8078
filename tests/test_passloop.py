"""Tests of passloop.py: the pass loop: targets, schedules, one selector, one thread,
records."""

import pytest

from router_latency.passloop import arrival_schedule


def test_arrival_schedules():
    assert arrival_schedule(4, 100, "constant", 0) == [0, 10_000_000, 20_000_000, 30_000_000]
    poisson = arrival_schedule(20_000, 500, "poisson", 7)
    assert poisson == arrival_schedule(20_000, 500, "poisson", 7)
    assert poisson != arrival_schedule(20_000, 500, "poisson", 8)
    gaps = [b - a for a, b in zip(poisson, poisson[1:])]
    assert all(g >= 0 for g in gaps)
    assert sum(gaps) / len(gaps) == pytest.approx(2_000_000, rel=0.03)  # mean 1/rate
