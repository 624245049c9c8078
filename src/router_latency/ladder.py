"""The ladder: steps of rising load until the router saturates, sheds or passes its SLO; when
to stop climbing, and what a climbed run says of its node (plateau, knee, capacity within the
SLO, cost per million requests). Pure: it reads run files, never a socket."""

from __future__ import annotations

import operator
from typing import List, Optional, Sequence, Tuple, Union

from .constants import NamedTuple
from .words import fmt_hundredths, fmt_value, plural
from .runfile import Ladder, PassRecord, RunFile

__all__ = [
    "Capacity", "cost_for", "CostPerHour", "ladder_levels", "ladder_stop", "LadderStep",
    "run_capacity", "usd_per_million",
]


def ladder_levels(limit: int) -> Tuple[int, ...]:
    """Return --ladder's callers without a list: 1, 2, 4, ... doubling up to `limit` (the
    router's admission limit), and the limit itself: beyond it every caller more is shed."""
    levels = [1]
    while levels[-1] * 2 <= limit:
        levels.append(levels[-1] * 2)
    return tuple(levels) + ((limit,) if levels[-1] != limit else ())


def step_text(item: PassRecord) -> str:
    """Return a ladder step's load in words: 4 callers, 200/s offered."""
    if item.rate is not None:
        return f"{item.rate:g}/s offered"
    return plural(item.concurrency, "caller")


def shed_requests(item: PassRecord) -> int:
    """Return how many of a pass's requests the router shed: 429, OVERLOADED in its body."""
    return sum(r.status == 429 for r in item.requests)


def flat_step(before: tuple, after: tuple, margin_pct: float) -> bool:
    """Return True when a step, (load, req/s) after (load, req/s) before, turned less than
    margin_pct of the load it added into throughput: for callers doubled, throughput within
    the margin of the step before; for a rate 10% up, less than a tenth of that 10%."""
    added = after[0] / before[0] - 1
    return after[1] < before[1] * (1 + margin_pct / 100 * added)


def ladder_stop(passes: Sequence[PassRecord], ladder: Ladder) -> Optional[str]:
    """Return why a ladder stops climbing after its last step, or None to climb on: the
    router shed (its admission limit), answered nothing, p95 passed the SLO, or the step was
    flat (flat_step) against the step measured before."""
    if not passes or passes[-1].discarded:
        return None  # a step discarded for load says nothing of the router
    last = passes[-1]
    shed = shed_requests(last)
    if shed:
        return (f"the router shed {plural(shed, 'request')} at {step_text(last)} (429 "
                f"OVERLOADED): its admission limit (routing_preview.max_concurrency)")
    if not last.measured.ok:
        return f"no request at {step_text(last)} was answered with a decision"
    measured = [p for p in passes if not p.discarded and p.measured.req_per_s]
    p95 = last.measured.p95_ms
    if ladder.slo_p95_ms is not None and p95 is not None and p95 > ladder.slo_p95_ms:
        return (f"p95 {fmt_value(p95)} ms at {step_text(last)} passed the SLO "
                f"(--slo-p95-ms {ladder.slo_p95_ms:g})")
    if len(measured) > 1:
        loads = [p.rate if p.rate is not None else p.concurrency for p in measured[-2:]]
        before = measured[-2].measured.req_per_s
        if flat_step((loads[0], before), (loads[1], last.measured.req_per_s),
                     ladder.margin_pct):
            return (f"throughput stopped growing: {fmt_value(last.measured.req_per_s)} req/s "
                    f"at {step_text(last)} against {fmt_value(before)} req/s at "
                    f"{step_text(measured[-2])}, less than {ladder.margin_pct:g}% of the load "
                    f"added")
    return None


class LadderStep(NamedTuple):
    """One measured step of a ladder: its load and what it gave."""
    name: str
    load: float  # callers, or the offered rate (open loop)
    title: str  # 4 callers, 200/s offered
    req_per_s: float
    p50_ms: float
    p95_ms: float
    shed: int  # requests the router shed (429 OVERLOADED)


class Capacity(NamedTuple):
    """What a ladder run says of its node: where throughput saturates, where latency starts
    to grow faster than throughput, and the most it serves within the SLO."""
    # LadderStep, in the order climbed; those that shed count in no figure
    steps: Tuple[LadderStep, ...]
    open_loop: bool
    margin_pct: float
    slo_p95_ms: Optional[float]
    plateau: Optional[LadderStep]  # where the plateau begins; None: throughput still grew
    plateau_req_per_s: Optional[float]  # its height: the highest req/s of any step
    # (step, next step): beyond it p50 grows faster than throughput
    knee: Optional[Tuple[LadderStep, LadderStep]]
    capacity_req_per_s: Optional[float]  # within the SLO; None without one or none within
    capacity_how: str  # how capacity was found: measured, interpolated, a lower bound
    stop: str  # why the ladder stopped climbing
    longest_gap_s: Optional[float]  # the longest time between two steps, captures included

    @property
    def served_req_per_s(self) -> Optional[float]:
        """The throughput cost is counted at: capacity within the SLO, else the plateau."""
        return self.capacity_req_per_s if self.slo_p95_ms is not None \
            else self.plateau_req_per_s


def ladder_steps(run: RunFile) -> Tuple[LadderStep, ...]:
    """Return a ladder run's measured steps in the order climbed."""
    # a step that answered (req/s above 0) has its percentiles: the reader requires them
    return tuple(LadderStep(p.name, p.rate if p.rate is not None else p.concurrency,
                            step_text(p), s.req_per_s, s.p50_ms, s.p95_ms, shed_requests(p))
                 for p in run.passes if not p.discarded for s in (p.measured,)
                 if s.req_per_s and s.p50_ms is not None and s.p95_ms is not None)


def plateau_of(steps: Sequence[LadderStep],
               margin_pct: float) -> Tuple[Optional[LadderStep], Optional[float]]:
    """Return (the step the plateau begins at, its height: the highest req/s from there), or
    (None, None) while throughput still grew: the plateau begins at the first step whose
    next step was flat (flat_step) and after which no step served more than the margin
    above it."""
    for i, (low, high) in enumerate(zip(steps, steps[1:])):
        top = max(s.req_per_s for s in steps[i:])
        if flat_step((low.load, low.req_per_s), (high.load, high.req_per_s), margin_pct) \
                and top <= low.req_per_s * (1 + margin_pct / 100):
            return low, top
    return None, None


def knee_of(steps: Sequence[LadderStep],
            margin_pct: float) -> Optional[Tuple[LadderStep, LadderStep]]:
    """Return (the first step beyond which p50 grew by a larger factor than throughput, more
    than the margin larger, and the step after it): from there, more load buys waiting."""
    for low, high in zip(steps, steps[1:]):
        if high.p50_ms / low.p50_ms > high.req_per_s / low.req_per_s * (1 + margin_pct / 100):
            return low, high
    return None


def slo_capacity(steps: Sequence[LadderStep], slo_ms: float,
                 plateau: Optional[LadderStep]) -> Tuple[Optional[float], str]:
    """Return (the most req/s with p95 within slo_ms, how it was found): the best step within
    it, or, where the first step beyond it served more, linear in p95 between the two."""
    beyond = next((i for i, s in enumerate(steps) if s.p95_ms > slo_ms), None)
    if beyond == 0:
        return None, (f"the first step ({steps[0].title}) already had p95 "
                      f"{fmt_value(steps[0].p95_ms)} ms, beyond the SLO")
    within = steps[:beyond]
    best = max(within, key=operator.attrgetter("req_per_s"))
    if beyond is None:
        return best.req_per_s, (f"measured at {best.title}: every step within the SLO, " + (
            "and throughput had stopped growing" if plateau is not None else
            "but throughput still grew at the last step: at least this much"))
    low, high = steps[beyond - 1], steps[beyond]
    if high.req_per_s <= best.req_per_s:
        return best.req_per_s, (f"measured at {best.title}; {high.title} passed the SLO "
                                f"without more throughput")
    share = (slo_ms - low.p95_ms) / (high.p95_ms - low.p95_ms)
    found = low.req_per_s + share * (high.req_per_s - low.req_per_s)
    return round(max(found, best.req_per_s), 2), (
        f"interpolated between {low.title} (p95 {fmt_hundredths(low.p95_ms)} ms, "
        f"{fmt_hundredths(low.req_per_s)} req/s) and {high.title} (p95 "
        f"{fmt_hundredths(high.p95_ms)} ms, "
        f"{fmt_hundredths(high.req_per_s)} req/s), linear in p95")


def step_gaps(run: RunFile) -> List[float]:
    """Return the seconds between the end of each measured pass and the start of the next,
    the captures between them included (an upper bound: the start is taken before the
    connections open)."""
    timed = [(p.attempt.started_unix, p.measured.wall_s) for p in run.passes
             if not p.discarded and p.attempt.started_unix is not None]
    return [round(max(b - a - wall_s, 0.0), 3) for (a, wall_s), (b, _) in zip(timed, timed[1:])]


def run_capacity(run: RunFile, slo_p95_ms: Optional[float] = None) -> Optional[Capacity]:
    """Return what a ladder run derives (None for a run of fixed passes); slo_p95_ms, when
    given, replaces the SLO the run climbed with."""
    ladder = run.ladder
    if ladder is None:
        return None
    slo = slo_p95_ms if slo_p95_ms is not None else ladder.slo_p95_ms
    steps = ladder_steps(run)
    counted = [s for s in steps if not s.shed]  # a step that shed measured the limit
    plateau, level = plateau_of(counted, ladder.margin_pct)
    capacity, how = slo_capacity(counted, slo, plateau) if slo is not None and counted else \
        (None, "no SLO given (--slo-p95-ms)" if slo is None else "no step without shedding")
    measured = [p for p in run.passes if not p.discarded]
    stop = ladder_stop(run.passes, ladder) if measured else None
    if stop is None:
        stop = "interrupted" if not run.complete else "the ladder's last step was measured"
    gaps = step_gaps(run)
    return Capacity(steps, any(p.rate is not None for p in run.passes), ladder.margin_pct, slo,
                    plateau, level, knee_of(counted, ladder.margin_pct), capacity, how, stop,
                    max(gaps) if gaps else None)


def usd_per_million(usd_per_hour: float, req_per_s: float) -> float:
    """Return what a million requests cost at req_per_s on a node of usd_per_hour:
    USD/h / (req/s x 3600) x 10^6."""
    return usd_per_hour / (req_per_s * 3600) * 1e6


class CostPerHour(NamedTuple):
    """An entry of --cost-per-hour [SIDE=]USD[/UNIT]: what a node of a side costs an hour."""
    side: Optional[str]  # None: every side
    usd: float
    unit: str  # per what: node, GPU


class HourPrice(NamedTuple):
    """What one side's node costs an hour: US dollars, per what."""
    usd: float
    unit: str


def cost_for(costs: Sequence[Tuple[Optional[str], float, str]],
             side: str) -> Union[HourPrice, Tuple[()]]:
    """Return (USD an hour, per what) of `side` from --cost-per-hour's (side or None, USD,
    unit) entries, () when none is for it."""
    return next((HourPrice(usd, unit) for name, usd, unit in costs if name in (None, side)), ())
