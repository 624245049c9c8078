"""Slow phases within a pass: the requests in windows of send order, which windows stand out
against the pass's own median (and by how much), and what the slow windows' prompts share."""

from __future__ import annotations

import math
from typing import Any, Iterator, Optional, Sequence

from .constants import NamedTuple
from .errors import checked_number, is_whole, RouterLatencyError
from .words import fmt_value
from .stats import percentile, rounded_percentiles
from .requests import Request

__all__ = [
    "content_slow_windows", "phase_windows", "PhaseWindow", "slow_phase", "SlowPhase",
    "Thresholds",
]


class Thresholds(NamedTuple):
    """What makes a measured pass suspect; run records them in the file's settings."""
    window_requests: int = 50  # requests per window of a pass's time series
    slow_p95_factor: float = 2.0  # a window's p95 above this times the median window p95
    slow_rate_factor: float = 0.5  # a window's rate below this times the median window rate
    max_foreign_cpus: float = 1.0  # vCPUs other processes used on the router's CPUs


class PhaseWindow(NamedTuple):
    """Consecutive requests of a pass in send order: one point of its time series."""
    first: int  # the index of its first request in send order
    requests: int
    errors: int
    start_s: float  # its first send, from the pass's first send
    span_s: float  # to the next window's first send; the last window, to the last answer
    p50_ms: Optional[float]
    p95_ms: Optional[float]
    req_per_s: Optional[float]  # answered without error, per second of the span

    def to_json(self) -> dict:
        return self._asdict()

    @classmethod
    def from_json(cls, raw: Any, where: str) -> "PhaseWindow":
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object", where)
        for key in ("first", "requests", "errors"):
            if not is_whole(raw.get(key)):
                raise RouterLatencyError("expected a whole number >= 0 up to 2^53",
                                         f"{where}.{key}")
        numbers = [checked_number(raw.get(key), f"{where}.{key}", nullable=key in cls._fields[5:])
                   for key in cls._fields[3:]]
        return cls(raw["first"], raw["requests"], raw["errors"], *numbers)


def phase_windows(requests: Sequence[Request], size: int) -> tuple[PhaseWindow, ...]:
    """Return a pass's time series: windows of `size` requests in send order.

    A remainder under half a window joins the last window, so that no window's p95 rests on a
    handful of requests. Count windows rather than time windows: each holds the same number of
    latencies whatever the rate, and a stall stretches its window instead of emptying it.
    """
    starts = [r.start_ms for r in requests if r.start_ms is not None]
    if size < 1 or not requests or len(starts) < len(requests):
        return ()
    firsts = list(range(0, len(requests), size))
    if len(firsts) > 1 and len(requests) - firsts[-1] < size / 2:
        firsts.pop()
    # open loop: latency counts from the schedule, the answer came service_ms after the send
    ends = [start + taken for start, r in zip(starts, requests)
            for taken in (r.service_ms if r.service_ms is not None else r.latency_ms,)
            if taken is not None]
    windows = []
    for i, first in enumerate(firsts):
        stop = firsts[i + 1] if i + 1 < len(firsts) else len(requests)
        part = requests[first:stop]
        end = starts[stop] if stop < len(requests) else max(ends, default=0.0)
        span_s = max(end - starts[first], 0.0) / 1000
        latencies = [r.latency_ms for r in part
                     if r.error is None and not r.degraded and r.latency_ms is not None]
        figures = rounded_percentiles(latencies, (50, 95), "")
        windows.append(PhaseWindow(
            first, len(part), sum(r.error is not None for r in part),
            round(starts[first] / 1000, 6), round(span_s, 6), figures["p50_ms"],
            figures["p95_ms"], round(len(latencies) / span_s, 2) if span_s > 0 else None))
    return tuple(windows)


def slow_windows(windows: Sequence[PhaseWindow], thresholds: Thresholds) -> tuple[int, ...]:
    """Return the indexes of the windows of a slow phase: p95 above slow_p95_factor times the
    median window p95, or rate below slow_rate_factor times the median window rate.

    The pass's own windows are the baseline, so a pass slow throughout is not a slow phase;
    fewer than 3 windows make no baseline.
    """
    return tuple(i for i, by_p95, by_rate in slow_tests(windows, thresholds)
                 if by_p95 or by_rate)


def slow_tests(windows: Sequence[PhaseWindow],
               thresholds: Thresholds) -> list[tuple[int, bool, bool]]:
    """Return (index, its p95 is above the limit, its rate below it) of each window
    (slow_windows); none for fewer than 3 windows."""
    import statistics
    if len(windows) < 3:
        return []
    p95s = [w.p95_ms for w in windows if w.p95_ms is not None]
    rates = [w.req_per_s for w in windows if w.req_per_s is not None]
    p95_limit = thresholds.slow_p95_factor * statistics.median(p95s) if p95s else None
    rate_limit = thresholds.slow_rate_factor * statistics.median(rates) if rates else None
    return [(i, p95_limit is not None and w.p95_ms is not None and w.p95_ms > p95_limit,
             rate_limit is not None and w.req_per_s is not None and w.req_per_s < rate_limit)
            for i, w in enumerate(windows)]


class SlowPhase(NamedTuple):
    """A pass's slow phase (slow_phase) and the evidence that made it."""
    windows: tuple[int, ...]  # the indexes of its windows; () for none
    # every window as judged: against what its prompts take elsewhere, p95_ms is its p95 over
    # what its prompts' references give (1.0: as expected), req_per_s its pace (those
    # references' time per ms of its span); else the windows' own figures
    judged: tuple[PhaseWindow, ...] = ()
    relative: bool = False  # judged against the prompts' references
    by_p95: bool = False  # a window of it was slow by its p95
    by_rate: bool = False  # ... by its rate or pace

    def evidence(self, windows: Sequence[PhaseWindow]) -> str:
        """Return the figures that made the phase, each against the median window's: judged
        against the prompts' references, with the windows' own figures beside them."""
        import statistics

        def median(values: Iterator[Optional[float]]) -> Optional[float]:
            known = [v for v in values if v is not None]
            return statistics.median(known) if known else None

        chosen = [windows[i] for i in self.windows]
        judged = [self.judged[i] for i in self.windows]
        # a window whose requests all failed has no p95 (a phase slow by its rate alone)
        p95 = (max((w.p95_ms for w in chosen if w.p95_ms is not None), default=None),
               median(w.p95_ms for w in windows))
        rate = (min((w.req_per_s for w in chosen if w.req_per_s is not None), default=None),
                median(w.req_per_s for w in windows))
        parts = []
        if self.by_p95 and self.relative:
            parts.append(f"p95 {max(w.p95_ms for w in judged if w.p95_ms is not None):.2f}x "
                         f"what its prompts take elsewhere in the run, median window "
                         f"{median(w.p95_ms for w in self.judged):.2f}x (p95 "
                         f"{fmt_value(p95[0])} ms, median window {fmt_value(p95[1])} ms)")
        elif self.by_p95:
            parts.append(f"p95 up to {fmt_value(p95[0])} ms, median window "
                         f"{fmt_value(p95[1])} ms")
        if self.by_rate and self.relative:
            pace = min(w.req_per_s for w in judged if w.req_per_s is not None)
            parts.append(f"pace {pace / (median(w.req_per_s for w in self.judged) or pace):.0%} "
                         f"of the median window's, by what its prompts take elsewhere "
                         f"({fmt_value(rate[0])} req/s, median window {fmt_value(rate[1])} "
                         f"req/s)")
        elif self.by_rate:
            parts.append(f"rate down to {fmt_value(rate[0])} req/s, median window "
                         f"{fmt_value(rate[1])} req/s")
        return "; ".join(parts)


def prompt_references(item: Any, passes: Sequence[Any]) -> Optional[list]:
    """Return, for each request of a pass in send order, what its prompt takes elsewhere in
    the run (the median latency of its answers in the other passes, else in its other
    repetitions), or None when a tenth of them have no such answer."""
    import statistics
    elsewhere: dict = {}
    for other in passes:
        if other is not item and not other.discarded:
            for r in other.requests:
                if r.error is None and not r.degraded and r.latency_ms:
                    elsewhere.setdefault(r.id, []).append(r.latency_ms)
    own: dict = {}
    for r in item.requests:
        if r.error is None and not r.degraded and r.latency_ms:
            own.setdefault(r.id, []).append(r.latency_ms)
    found = []
    for r in item.requests:
        others = elsewhere.get(r.id) or [x for x in own.get(r.id, []) if x != r.latency_ms]
        found.append(statistics.median(others) if others else None)
    return None if sum(x is None for x in found) * 10 > len(found) else found


def content_slow_windows(item: Any, passes: Sequence[Any],
                         thresholds: Thresholds) -> tuple[int, ...]:
    """Return the indexes of a pass's slow windows (slow_phase)."""
    return slow_phase(item, passes, thresholds).windows


def slow_phase(item: Any, passes: Sequence[Any], thresholds: Thresholds) -> SlowPhase:
    """Return a pass's slow phase, each window judged against what its own prompts take
    elsewhere in the run (prompt_references): a window is slow when its p95 over the p95 its
    prompts' references give (times the pass's scale) is above slow_p95_factor times the median
    window's, or its pace (the references' sum per second of its span) below slow_rate_factor
    times the median window's, and in that figure of its own it is worse than the median window
    too (a window as fast as the median window is no slow phase, whatever the references say).
    So a window of long prompts, slow by its content, is not a slow phase; a node or router that
    slowed down is. The p95 of the references, not of each request over its own: a prompt whose
    reference is small by where it stood in the other passes (the first request on each
    connection) does not make a window slow. Without references (a single pass sent once),
    the pass's own windows are the baseline (slow_windows)."""
    import statistics
    windows, requests = item.attempt.windows, item.requests
    references = prompt_references(item, passes) if len(windows) >= 3 else None
    if references is None or windows[-1].first + windows[-1].requests > len(requests) \
            or any(r.start_ms is None for r in requests):  # windows not of these requests
        return _slow_phase(windows, windows, thresholds, False)
    ratios = [r.latency_ms / ref
              if r.error is None and not r.degraded and r.latency_ms and ref else None
              for r, ref in zip(requests, references)]
    scale = statistics.median([x for x in ratios if x is not None] or [1.0])
    judged = []
    for number, w in enumerate(windows):
        part = range(w.first, w.first + w.requests)
        expected_p95 = [references[i] for i in part if ratios[i] is not None]
        p95 = w.p95_ms / (scale * percentile(expected_p95, 95)) \
            if expected_p95 and w.p95_ms is not None else None
        # the pace between sends: the last window's span ends at its last send, since the
        # drain after it (fewer callers at the end of a pass) is no slow phase
        last = number == len(windows) - 1
        span_ms = (requests[part[-1]].start_ms - requests[w.first].start_ms) if last \
            else w.span_s * 1000
        expected = math.fsum(references[i] for i in (part[:-1] if last else part)
                             if references[i])
        judged.append(w._replace(p95_ms=p95, req_per_s=expected / span_ms if span_ms > 0
                                 else None))
    return _slow_phase(windows, judged, thresholds, True)


def _slow_phase(windows: Sequence[PhaseWindow], judged: Sequence[PhaseWindow],
                thresholds: Thresholds, relative: bool) -> SlowPhase:
    """Return the SlowPhase of windows judged as `judged` says, each slow window also worse
    than the median window in its own figure of the test that found it."""
    import statistics
    p95s = [w.p95_ms for w in windows if w.p95_ms is not None]
    rates = [w.req_per_s for w in windows if w.req_per_s is not None]
    median_p95 = statistics.median(p95s) if p95s else None
    median_rate = statistics.median(rates) if rates else None
    def worse(value: Optional[float], median: Optional[float], sign: int) -> bool:
        return value is not None and median is not None and (value - median) * sign > 0

    found = [(i, by_p95 and worse(windows[i].p95_ms, median_p95, 1),
              by_rate and worse(windows[i].req_per_s, median_rate, -1))
             for i, by_p95, by_rate in slow_tests(judged, thresholds)]
    found = [f for f in found if f[1] or f[2]]
    return SlowPhase(tuple(i for i, _, _ in found), tuple(judged), relative,
                     any(f[1] for f in found), any(f[2] for f in found))
