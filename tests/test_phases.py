"""Tests of phases.py: slow phases within a pass: windows, which stand out, what they share."""

import pytest

from router_latency.requests import Request
from router_latency.phases import (phase_windows, PhaseWindow, slow_windows, SlowPhase,
                                   Thresholds)


def request_at(start_ms, latency_ms, error=None):
    return Request(0, start_ms, latency_ms, None if error else 200, None if error else "d",
                      error)


def test_phase_windows_by_hand():
    # 11 sequential requests 10 ms apart; windows of 4: 4, 4, and a remainder of 3 (>= 2)
    requests = [request_at(10.0 * i, 5.0 + i, "timeout" if i == 5 else None) for i in range(11)]
    windows = phase_windows(requests, 4)
    assert [(w.first, w.requests, w.errors) for w in windows] == [(0, 4, 0), (4, 4, 1),
                                                                 (8, 3, 0)]
    # spans: to the next window's first send, the last to the last answer (100 + 15 ms)
    assert [w.start_s for w in windows] == [0.0, 0.04, 0.08]
    assert [w.span_s for w in windows] == [0.04, 0.04, 0.035]
    assert [w.req_per_s for w in windows] == [100.0, 75.0, round(3 / 0.035, 2)]
    assert windows[1].p50_ms == 11.0  # 9, 11 and 12 ms answered; the 10 ms one failed
    assert windows[0].p95_ms == pytest.approx(7.85)
    # a remainder under half a window joins the last window
    assert [w.requests for w in phase_windows(requests, 5)] == [5, 6]
    assert phase_windows(requests, 20)[0].requests == 11
    assert phase_windows([request_at(None, 1.0)], 4) == ()


def window(p95, rate):
    return PhaseWindow(0, 10, 0, 0.0, 0.1, p95 / 2, p95, rate)


def test_slow_windows_against_the_pass_median():
    rule = Thresholds()
    # median p95 15, median rate 100: 31 > 2 x 15 is slow, 30 is not; 49 < 50 is slow
    windows = [window(15, 100), window(15, 100), window(31, 100), window(30, 100),
               window(15, 49), window(15, 50)]
    assert slow_windows(windows, rule) == (2, 4)
    assert slow_windows(windows, Thresholds(slow_p95_factor=1.9, slow_rate_factor=0.4)) \
        == (2, 3)
    assert slow_windows(windows[:2], rule) == ()  # two windows make no baseline
    # a window of failures only has no p95, and its rate 0 is slow
    assert slow_windows([window(15, 100)] * 3 + [PhaseWindow(0, 10, 10, 0.0, 0.1, None,
                                                                   None, 0.0)], rule) == (3,)


@pytest.mark.parametrize("relative", [False, True])
def test_a_phase_slow_by_its_rate_whose_windows_failed_every_request_has_its_evidence(relative):
    # every request of the slow window failed (a router shedding with 429s): it has no p95,
    # and its evidence raised ValueError (max of nothing), a traceback out of `run`
    windows = [PhaseWindow(i * 10, 10, 0, float(i), 1.0, 5.0, 6.0, 10.0) for i in range(4)]
    windows[2] = windows[2]._replace(errors=10, p50_ms=None, p95_ms=None, req_per_s=0.0)
    judged = [w._replace(p95_ms=None if w.p95_ms is None else 1.0,
                         req_per_s=None if w.req_per_s is None else
                         (0.0 if w.errors else 1.0)) for w in windows]
    phase = SlowPhase((2,), tuple(judged), relative=relative, by_rate=True)
    evidence = phase.evidence(windows)
    assert ("pace 0%" if relative else "rate down to 0.000 req/s") in evidence
    assert "p95" not in evidence
