"""Whether a result cache answered a run: by the router's metrics, by timing; its warnings,
the rounds report's section of them and the record's sentence."""

from __future__ import annotations

from typing import Any, cast, List, Optional, Sequence, Tuple, TypedDict

from .constants import CACHE_ADVICE, CACHE_SERIES, lazy_pattern
from .errors import Notice, RouterLatencyError
from .report import BANNER, Lines, Panel, Section

__all__ = [
    "cache_section", "cache_sentence", "cache_signature", "cache_text", "cache_warnings",
    "CacheFinding", "checked_cache", "result_cache_finding", "TIMED",
]

# a hit of either result cache (CACHE_SERIES); the timing test's threshold and the least
# prompts it judges
CACHE_HIT_LABEL = lazy_pattern(r'(?:result|outcome)="hit"')
CACHE_RATIO = 0.5  # a prompt sent again answered in under half its first sending's time
CACHE_MIN_PROMPTS = 10


class TimingCacheTest(TypedDict):
    """The timing test of a result cache (timing_cache_test): how many prompts were compared,
    how many answered faster when sent again, the median ratio, and the call."""
    compared: int
    faster: int
    median_ratio: float
    detected: bool


class CacheFinding(TypedDict, total=False):
    """Whether a result cache answered (result_cache_finding): by metrics, by timing."""
    detected: bool
    metrics: Optional[dict[str, float]]  # hits, lookups
    timing: Optional[TimingCacheTest]


def timing_cache_test(passes: Sequence[Any]) -> Optional[TimingCacheTest]:
    """Return the timing test for a result cache over a run's passes (PassRecords, in the
    order measured), or None when too few prompts were sent twice to judge.

    For each prompt answered more than once in the run (the passes after the first resend
    every prompt; --repeat resends within a pass), ratio = the median latency of its later
    answers / the latency of its first. A cache answers the later sendings from memory: most
    ratios fall far below 1. A router without one answers them as before or slower (later
    passes run more callers at once): it is called a cache when more than half of the prompts
    compared have a ratio below CACHE_RATIO."""
    import statistics
    answered: dict = {}
    for item in passes:
        if item.discarded:
            continue
        for r in sorted(item.requests, key=lambda r: (r.rep, r.start_ms or 0.0)):
            # a degraded answer is faster for the signal it skipped, not for a cache
            if r.error is None and r.outcome is None and not r.degraded and r.latency_ms:
                answered.setdefault(r.id, []).append(r.latency_ms)
    ratios = [statistics.median(later) / first for first, *later in answered.values() if later]
    if len(ratios) < CACHE_MIN_PROMPTS:
        return None
    faster = sum(ratio < CACHE_RATIO for ratio in ratios)
    return {"compared": len(ratios), "faster": faster,
            "median_ratio": round(statistics.median(ratios), 4),
            "detected": faster * 2 > len(ratios)}


def metrics_cache_hits(passes: Sequence[Any]) -> Optional[dict]:
    """Return the result cache's hits and lookups in the router's metrics over the passes, or
    None when no pass captured a cache counter."""
    hits = lookups = 0.0
    seen = False
    for item in passes:
        deltas = (item.attempt.environment.get("metrics") or {}).get("deltas") or {}
        for series, value in deltas.items():
            if CACHE_SERIES.match(series.split("{", 1)[0]):
                seen = True
                lookups += value
                hits += value if CACHE_HIT_LABEL.search(series) else 0.0
    return {"hits": hits, "lookups": lookups} if seen else None


def result_cache_finding(passes: Sequence[Any]) -> CacheFinding:
    """Return whether a result cache answered a run, by the router's metrics and by timing:
    {"detected", "metrics": {hits, lookups} or None, "timing": timing_cache_test() or None}."""
    metrics, timing = metrics_cache_hits(passes), timing_cache_test(passes)
    detected = bool(metrics and metrics["hits"] > 0) or bool(timing and timing["detected"])
    return {"detected": detected, "metrics": metrics, "timing": timing}


TIMED = " by timing"  # cache_signature's mark of a finding that rests on timing alone


def cache_signature(finding: CacheFinding) -> str:
    """Return how a run's result cache finding is compared between runs: decided by the
    router's cache counters where the run scraped them ('detected' when they counted a hit,
    'not detected'), else by timing, marked so ('detected by timing'): a finding inferred from
    timing flips under load between identical sides, and never refuses a comparison alone."""
    metrics = finding.get("metrics")
    if metrics:
        return "detected" if metrics.get("hits", 0) > 0 else "not detected"
    return ("detected" if finding.get("detected") else "not detected") + TIMED


def cache_text(finding: CacheFinding) -> str:
    """Return a result cache finding in words: how it was seen, or why not."""
    metrics, timing = finding.get("metrics"), finding.get("timing")
    ways = []
    if metrics and metrics["hits"] > 0:
        ways.append(f"the router's metrics ({metrics['hits']:,.0f} hits of "
                    f"{metrics['lookups']:,.0f} lookups during the passes)")
    if timing and timing["detected"]:
        ways.append(f"timing ({timing['faster']} of {timing['compared']} prompts sent again "
                    f"answered in under half the time of their first sending)")
    if ways:
        return "a result cache answered: seen by " + " and by ".join(ways)
    seen = [f"metrics: {metrics['hits']:,.0f} hits" if metrics else "metrics not scraped",
            f"timing: {timing['faster']} of {timing['compared']} prompts faster when sent again"
            if timing else "timing: too few prompts sent twice to judge"]
    return f"no result cache detected ({'; '.join(seen)})"


def checked_cache(raw: Any, where: str) -> CacheFinding:
    """Return a run file's result_cache as read, checked: {} or a finding with "detected"."""
    if raw == {}:
        return {}
    if not isinstance(raw, dict) or not isinstance(raw.get("detected"), bool):
        raise RouterLatencyError("expected an object with detected: true or false", where)
    for key in ("metrics", "timing"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise RouterLatencyError("expected an object or null", f"{where}.{key}")
    return cast(CacheFinding, raw)  # detected and the type of both parts checked above


def cache_warnings(named_runs: Sequence[Tuple[str, CacheFinding]]) -> List[Notice]:
    """Return the warnings of runs a result cache answered ((name, a run's finding) pairs, one
    name per side or file): what each saw, and a difference between the sides."""
    seen: dict = {}
    for name, finding in named_runs:
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


def cache_section(warnings: Sequence[Notice]) -> Section:
    """Return the rounds report's result caches section: the warnings of the runs a cache
    answered (cache_warnings), right below the gated table's sections before the other
    warnings; its texts stay in the JSON's "warnings" list, where the warnings section
    lists every warning in order. The page shows them in its banner."""
    return Section(key="result_caches", apart=False, notices=tuple(warnings),
                   page=(Panel(place=BANNER, items=(Lines(tuple(w.text for w in warnings)),)),))


def cache_sentence(cached: Sequence[str]) -> str:
    """Return the record's sentence of the runs a result cache answered ("side rN"), or that
    none did."""
    return ("result caches: none detected (by timing, and by the router's metrics "
            "where they were scraped)" if not cached else
            f"**a result cache answered {', '.join(cached)}**: those figures measure "
            f"cache hits, not the router's work")
