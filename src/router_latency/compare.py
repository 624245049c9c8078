"""compare_runs(): two runs side by side as one complete report object (CompareReport), with
the decision, warning and part figures and one run's capacity that rounds reuses."""

from __future__ import annotations

import operator
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from .constants import CACHE_ADVICE, EXIT_GATE, EXIT_OK
from .errors import Notice
from .words import fmt_hundredths, fmt_value, plural
from .cache import cache_text
from .versions import sampled_models
from .runfile import pass_title, PassRecord, RunFile
from .measuring import flat_step, ladder_stop, shed_requests, step_text
from .attribution import part_values, pass_attribution

__all__ = [
    "cache_warnings", "Capacity", "compare_runs", "CompareReport", "cost_for", "CostPerHour",
    "decision_agreement", "DecisionChange", "floor_warnings", "LadderStep", "run_capacity",
    "sampled_selections", "usd_per_million", "worse_sign",
]


# compare_runs() and judge_rounds() return complete report objects: every renderer below
# works from a report alone, and the rounds gate's rule is written once, in gate.py.


METRICS = ("p50_ms", "p95_ms", "p99_ms", "req_per_s")  # compared side by side


def worse_sign(metric: str) -> int:
    """Return +1 where a larger value is worse (latency, cost), -1 where it is better (req/s,
    a ladder's plateau and capacity)."""
    return -1 if metric.endswith("req_per_s") else 1


def reference_pass(run: RunFile) -> Optional[PassRecord]:
    """Return the pass decisions are compared in: the sequential (else the first measured)."""
    measured = [p for p in run.passes if not p.discarded]
    if not measured:
        return None
    chosen = run.pass_named("sequential")
    return measured[0] if chosen is None or chosen.discarded else chosen


def reference_decisions(run: RunFile) -> Dict[int, Optional[str]]:
    """Return the decision per prompt id from the sequential pass (else the first measured)."""
    chosen = reference_pass(run)
    return {} if chosen is None else chosen.decisions


def sampled_selections(run: RunFile) -> Tuple[int, Tuple[str, ...]]:
    """Return how many inputs of the reference pass got a selected model the router sampled
    or chose by its state, and which models: left out of decision agreement, which compares
    what the router decided (versions.without_sampled)."""
    chosen = reference_pass(run)
    ids, models = set(), set()
    for r in chosen.requests if chosen is not None else ():
        found = sampled_models(r.decision) if r.error is None else []
        if found:
            ids.add(r.id)
            models.update(found)
    return len(ids), tuple(sorted(models))


def decision_changes(run: RunFile) -> List[int]:
    """Return the prompt ids whose answered decisions differ within a run: between its
    measured passes, or between the repetitions of one pass."""
    seen: Dict[int, set] = {}
    for item in run.passes:
        if not item.discarded:
            for prompt_id, decisions in item.decision_sets.items():
                seen.setdefault(prompt_id, set()).update(decisions)
    return sorted(i for i, decisions in seen.items() if len(decisions) > 1)


class Agreement(NamedTuple):
    compared: int  # inputs measured on both sides
    differ: List[int]  # their ids whose decisions are not the same answered decision


def decision_agreement(base: dict, new: dict) -> Agreement:
    """Return how the decisions of two runs agree over the inputs both measured.

    A failed request has no decision, so it never agrees: a gate must not pass an input
    that one side could not route.
    """
    both = sorted(set(base) & set(new))
    return Agreement(len(both), [i for i in both
                                 if base[i] is None or new[i] is None or base[i] != new[i]])


class DecisionChange(NamedTuple):
    """An input whose decision differs between base and new (None: the request failed)."""
    id: int
    base: Optional[str]
    new: Optional[str]
    text: Optional[str] = None  # the prompt, where the corpus was given
    pass_name: Optional[str] = None  # the first pass where it differs


def floor_warnings(p50s: Sequence[Tuple[str, Optional[float], Optional[float]]],
                   runs: Sequence[RunFile]) -> List[Notice]:
    """Return a warning for each p50 difference smaller than the driver's floor spread.

    p50s: (title, base p50, new p50); the spread is the largest any of the runs measured.
    """
    spreads = [r.floor_spread_ms for r in runs if r.floor_spread_ms is not None]
    if not spreads:
        return []
    spread = max(spreads)
    return [Notice("floor", f"warning: {title} p50 differs by {fmt_value(abs(new - base))} ms, "
                   f"less than the driver's own spread on loopback ({fmt_value(spread)} ms, "
                   f"p90 - p10): below what this driver resolves")
            for title, base, new in p50s
            if base is not None and new is not None and abs(new - base) < spread]


def cache_warnings(named_runs: Sequence[Tuple[str, RunFile]]) -> List[Notice]:
    """Return the warnings of runs a result cache answered ((name, RunFile) pairs, one name
    per side or file): what each saw, and a difference between the sides."""
    seen: dict = {}
    for name, run in named_runs:
        finding = run.cache_finding
        if finding["detected"]:
            seen.setdefault(name.split(" ")[0], []).append((name, finding))
    warnings = [Notice("result_cache", f"warning: {', '.join(n for n, _ in found)}: "
                       f"{cache_text(found[0][1])}; the figures measure cache hits, not the "
                       f"router's work: {CACHE_ADVICE}")
                for found in seen.values()]
    sides = sorted({name.split(" ")[0] for name, _ in named_runs})
    if seen and len(seen) < len(sides):
        warnings.append(Notice(
            "result_cache", f"warning: a result cache answered {', '.join(sorted(seen))} but "
            f"not {', '.join(s for s in sides if s not in seen)}: the comparison measures the "
            f"cache, not the change"))
    return warnings


class ComparePass(NamedTuple):
    name: str
    discarded: bool  # on either side: no figures
    # (metric, A's value, B's value) for p50, p95, p99 and req/s
    figures: Tuple[Tuple[str, Optional[float], Optional[float]], ...] = ()
    errors: Tuple[int, int] = (0, 0)  # failed requests of A and B
    # A's and B's errors by kind and by code
    failures: Tuple[Tuple[Dict[str, int], Dict[str, Dict[str, int]]], ...] = (({}, {}), ({}, {}))
    rejected: Tuple[int, int] = (0, 0)  # expected rejections of A and B
    # (name, A's value, B's value): CPU ms per request, foreign vCPUs
    router_cpu: Tuple[Tuple[str, Optional[float], Optional[float]], ...] = ()
    slow: Tuple[Tuple[int, ...], Tuple[int, ...]] = ((), ())  # A's and B's windows in a slow phase
    windows: Tuple[int, int] = (0, 0)  # how many windows A's and B's time series have
    # (part metric, A's, B's) of where the time goes, the most moved first
    parts: Tuple[Tuple[str, float, float], ...] = ()
    # A's and B's (client mean ms, {part metric: value}) where either reports parts
    decompositions: Tuple[Tuple[Optional[float], Dict[str, Optional[float]]], ...] = ()
    degraded: Tuple[int, int] = (0, 0)  # A's and B's answers that skipped a signal
    # A's and B's degraded answers by signal and reason ({signal: {reason: count}})
    degraded_signals: Tuple[Dict[str, Dict[str, int]], ...] = ({}, {})


def router_cpu_figures(a: PassRecord,
                       b: PassRecord) -> Tuple[Tuple[str, Optional[float], Optional[float]], ...]:
    """Return (name, A's, B's) of the router CPU figures either side measured."""
    ea, eb = a.environment, b.environment
    return tuple(figure for figure in (
        ("router_cpu_ms", ea.router_cpu_ms, eb.router_cpu_ms),
        ("foreign_vcpus", ea.foreign_vcpus, eb.foreign_vcpus))
        if figure[1] is not None or figure[2] is not None)


def compared_parts(a: RunFile, pa: PassRecord, b: RunFile, pb: PassRecord) -> Tuple[
        Tuple[Tuple[str, float, float], ...],
        Tuple[Tuple[Optional[float], Dict[str, Optional[float]]], ...]]:
    """Return (the parts of a pass's time both runs report as (part metric, A's, B's), the
    one that moved most first; each side's (client mean, part values) where either reports
    any); the signals' times are matched by name."""
    sides = [pass_attribution(a, pa), pass_attribution(b, pb)]
    found_a, found_b = (part_values(side) for side in sides)
    both = [(m, a_ms, b_ms) for m, a_ms in found_a.items()
            if a_ms is not None and (b_ms := found_b.get(m)) is not None]
    reported = any(side.parts for side in sides)
    return (tuple(sorted(both, key=lambda f: -abs(f[2] - f[1]))),
            tuple((side.client_mean_ms, part_values(side)) for side in sides) if reported
            else ())


class CompareReport(NamedTuple):
    """Two runs side by side: figures per pass, decision agreement and consistency."""
    a_path: str
    a_label: str
    b_path: str
    b_label: str
    corpus_sha256: Tuple[str, str]  # A's and B's
    corpus_count: int
    passes: Tuple[ComparePass, ...]  # ComparePass
    warnings: Tuple[Notice, ...]  # a result cache that answered, a p50 below the driver's floor
    compared: int  # inputs measured on both sides
    changes: Tuple[DecisionChange, ...]  # DecisionChange, sequential pass
    unmeasured: int  # inputs measured on one side only
    # (tag, ids whose decision changed within that run, sent repeatedly)
    consistency: Tuple[Tuple[str, Tuple[int, ...], bool], ...]
    status: str  # pass or fail
    exit_code: int
    # A's and B's x-vsr-config-hash values, in order seen
    config_hashes: Tuple[Tuple[str, ...], Tuple[str, ...]] = ((), ())
    reasons: Tuple[str, ...] = ()  # why it failed
    # A's and B's sampled selections (sampled_selections): inputs, models; not in agreement
    sampled: Tuple[Tuple[int, Tuple[str, ...]], ...] = ()


def compare_runs(a: RunFile, b: RunFile, *, prompts_text: Optional[dict] = None,
                 fail_on_decision_change: bool = False) -> CompareReport:
    """Return the comparison of run B against run A."""
    passes = []
    for pa in a.passes:
        pb = b.pass_named(pa.name)
        if pb is None:
            continue
        if pa.discarded or pb.discarded:
            passes.append(ComparePass(pa.name, True))
            continue
        sa, sb = pa.measured, pb.measured
        figures = tuple((metric, getattr(sa, metric), getattr(sb, metric))
                        for metric in METRICS)
        passes.append(ComparePass(pa.name, False, figures,
                                  (sum(sa.errors.values()), sum(sb.errors.values())),
                                  tuple((s.errors, s.error_codes) for s in (sa, sb)),
                                  (sa.rejected, sb.rejected),
                                  router_cpu_figures(pa, pb),
                                  (a.slow_windows(pa), b.slow_windows(pb)),
                                  (len(pa.attempt.windows), len(pb.attempt.windows)),
                                  *compared_parts(a, pa, b, pb), (sa.degraded, sb.degraded),
                                  (sa.degraded_signals, sb.degraded_signals)))
    warnings = cache_warnings([("A", a), ("B", b)]) + floor_warnings(
        [(pass_title(p.name), p.figures[0][1], p.figures[0][2]) for p in passes
         if not p.discarded], [a, b])
    da, db = reference_decisions(a), reference_decisions(b)
    agree = decision_agreement(da, db)
    texts = prompts_text or {}
    changes = tuple(DecisionChange(i, da[i], db[i], texts.get(i)) for i in agree.differ)
    failed = bool(changes) and fail_on_decision_change
    return CompareReport(
        a.path, a.label, b.path, b.label, (a.corpus_sha256, b.corpus_sha256), a.corpus_count,
        tuple(passes), tuple(warnings), agree.compared, changes, len(set(da) ^ set(db)),
        tuple((tag, tuple(decision_changes(run)),
               any(r.rep for item in run.passes for r in item.requests))
              for tag, run in (("A", a), ("B", b))),
        "fail" if failed else "pass", EXIT_GATE if failed else EXIT_OK,
        (a.config_hashes, b.config_hashes),
        (f"decisions differ in {plural(len(changes), 'input')} (sequential pass, "
         f"--fail-on-decision-change)",) if failed else (),
        (sampled_selections(a), sampled_selections(b)))


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
                 for p in run.passes if not p.discarded and (s := p.measured).req_per_s
                 and s.p50_ms is not None and s.p95_ms is not None)


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
    timed = [(start, p.measured.wall_s) for p in run.passes
             if not p.discarded and (start := p.attempt.started_unix) is not None]
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
