"""Tests of passloop.py: the pass loop: targets, schedules, one selector, one thread,
records."""

import pytest

from router_latency.requests import Request
from router_latency.answers import RawResult
from router_latency.passloop import arrival_schedule, records_of


def test_arrival_schedules():
    assert arrival_schedule(4, 100, "constant", 0) == [0, 10_000_000, 20_000_000, 30_000_000]
    poisson = arrival_schedule(20_000, 500, "poisson", 7)
    assert poisson == arrival_schedule(20_000, 500, "poisson", 7)
    assert poisson != arrival_schedule(20_000, 500, "poisson", 8)
    gaps = [b - a for a, b in zip(poisson, poisson[1:])]
    assert all(g >= 0 for g in gaps)
    assert sum(gaps) / len(gaps) == pytest.approx(2_000_000, rel=0.03)  # mean 1/rate


def test_records_of_builds_each_request_with_its_fields_in_order():
    # records_of builds a Request by tuple.__new__, its fields by position: each where its
    # name says, in send order, the times from the pass's first send
    late = RawResult(number=5, scheduled=3_000_000, started=4_000_000, ended=9_000_000,
                     status=200, decision="math|qwen3", error=None, retried=True, code=None,
                     config_hash="a" * 64, reason=None,
                     degraded=(("signal_errors", "pii:a", "slow"),), late_body=True,
                     signal_ms=(1.5, None, 2.0))
    early = RawResult(number=2, scheduled=1_000_000, started=2_000_000, ended=2_500_000,
                      status=502, decision=None, error="malformed", retried=False,
                      code="BAD", reason="cut")
    requests, wall_s = records_of([late, early], open_loop=True, count=4)
    assert requests == [
        Request(id=2, start_ms=0.0, latency_ms=1.5, status=502, decision=None,
                error="malformed", service_ms=0.5, behind_ms=1.0, code="BAD", rep=0,
                retried=False, reason="cut"),
        Request(id=1, start_ms=2.0, latency_ms=6.0, status=200, decision="math|qwen3",
                error=None, service_ms=5.0, behind_ms=1.0, rep=1, retried=True,
                signal_ms=(1.5, None, 2.0), degraded=(("signal_errors", "pii:a", "slow"),),
                late_body=True)]
    assert wall_s == 0.007
    closed, _ = records_of([early])
    assert closed[0].latency_ms == 0.5 and closed[0].service_ms is None and closed[0].id == 2
