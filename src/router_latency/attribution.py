"""Where the time goes: a pass's time by part (its signals, the router's own histograms,
the latency outside the signals)."""

from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from .stats import percentile, percentiles
from .runfile import CapturedEnvironment, PassRecord, Request, RunFile
from .prometheus import Histogram, histograms_of

__all__ = ["part_values", "pass_attribution", "PassAttribution"]


# Where the time goes: each signal's time from the answers, the router's histograms, and the
# client's latency beside them.

PART_STATS = ("p50", "p95", "mean")
# the router's own time per request where the answers report no signal times: its signals'
# and its decision's histograms (a runtime call is inside the signal that made it)
ROUTER_OWN_HISTOGRAMS = ("llm_signal_extraction_latency_seconds",
                         "llm_decision_evaluation_latency_seconds")
HISTOGRAM_PARTS = {  # a histogram without a phase or signal_type label, as its part is named
    "llm_signal_extraction_latency_seconds": "signals",
    "llm_decision_evaluation_latency_seconds": "decision",
    "vsr_model_runtime_request_duration_seconds": "runtime",
    "vsr_model_runtime_transport_seconds": "transport",
    "vllm_srun_queue_duration_seconds": "runtime_queue",
    "vllm_sr_runtime_queue_duration_seconds": "runtime_queue",  # the runtime's other name
}


class PartFigures(NamedTuple):
    """One part of a pass's time: a signal the answers reported, or a router histogram."""
    kind: str  # "signal" (from the answers) or "router" (from its histograms)
    name: str
    p50_ms: Optional[float]  # router: interpolated within its buckets
    p95_ms: Optional[float]
    mean_ms: Optional[float]  # per observation
    per_request_ms: Optional[float]  # its whole time over the pass, per routed request
    observations: int  # (a field named count would hide tuple.count)
    source: str = ""  # the histogram it was read from; "" for the answers


class PassAttribution(NamedTuple):
    """A pass's time by part, beside the client's latency."""
    pass_name: str
    requests: int  # routed requests
    client_mean_ms: Optional[float]
    client_p95_ms: Optional[float]
    parts: Tuple[PartFigures, ...]  # PartFigures, signals first
    signals_ms: Optional[float]  # the signals' time per request, summed: None without any
    outside_p50_ms: Optional[float]  # per request: its latency minus its signals' times
    outside_mean_ms: Optional[float]

    @property
    def unexplained_ms(self) -> Optional[float]:
        """The client's mean latency not covered by the signals' summed time; negative
        where they overlap (signals evaluated in parallel)."""
        if self.client_mean_ms is None or self.signals_ms is None:
            return None
        return self.client_mean_ms - self.signals_ms


def signal_parts(requests: Sequence[Request], names: Sequence[str]) -> List[PartFigures]:
    """Return each signal's figures over the routed requests that reported it."""
    routed = [r for r in requests if r.routed]
    parts = []
    for i, name in enumerate(names):
        times = [ms for r in routed if len(r.signal_ms) > i and (ms := r.signal_ms[i]) is not None]
        if times:
            figures = percentiles(times, (50, 95))
            parts.append(PartFigures("signal", name, round(figures[0], 4), round(figures[1], 4),
                                     round(math.fsum(times) / len(times), 4),
                                     round(math.fsum(times) / len(routed), 4), len(times)))
    return parts


def histogram_part(histogram: Histogram) -> str:
    """Return the part a router histogram series stands for: its phase, its signal type, or
    a short name of the histogram."""
    labels = dict(histogram.labels)
    return labels.get("phase") or labels.get("signal_type") or HISTOGRAM_PARTS.get(
        histogram.name, histogram.name)


def router_parts(environment: CapturedEnvironment, routed: int) -> List[PartFigures]:
    """Return the figures of each part of the router's histograms over a pass: the series of
    one part (deployments, surfaces) added together, bucket by bucket."""
    deltas = (environment.get("metrics") or {}).get("histograms")
    merged: dict = {}
    sources: dict = {}
    for histogram in histograms_of(deltas if isinstance(deltas, dict) else {}):
        key = histogram_part(histogram)
        sources.setdefault(key, histogram.name)
        count, total, buckets = merged.get(key, (0.0, 0.0, {}))
        for bound, cumulative in histogram.buckets:
            buckets[bound] = buckets.get(bound, 0.0) + cumulative
        merged[key] = (count + histogram.observations, total + histogram.sum, buckets)
    parts = []
    for key, (count, total, buckets) in merged.items():
        if count <= 0:
            continue
        whole = Histogram(key, (), count, total, tuple(sorted(buckets.items())))
        p50, p95 = (None if v is None else round(1000 * v, 4)
                    for v in (whole.quantile(q, resolved=True) for q in (0.5, 0.95)))
        parts.append(PartFigures(
            "router", key, p50, p95, round(1000 * (total / count), 4),  # its mean, count > 0
            round(1000 * total / routed, 4) if routed else None, int(count), sources[key]))
    return parts


def pass_attribution(run: RunFile, item: PassRecord) -> PassAttribution:
    """Return a pass's time by part: its signals from the answers, the router's histograms,
    and per request the latency outside the signals."""
    requests = item.requests
    signals = signal_parts(requests, run.signal_names)
    routed = [r for r in requests if r.routed]
    outside = [r.latency_ms - math.fsum(v for v in r.signal_ms if v is not None)
               for r in routed if r.signal_ms and r.latency_ms is not None]
    summary = item.summary
    client_mean = summary.mean_ms if summary else None
    # a histogram of a signal the answers report says less than the answers: left out
    reported = {p.name for p in signals}
    router = [p for p in router_parts(item.attempt.environment, len(routed))
              if p.name not in reported]
    outside_mean = round(math.fsum(outside) / len(outside), 4) if outside else None
    own = [ms for p in router if p.source in ROUTER_OWN_HISTOGRAMS
           and (ms := p.per_request_ms) is not None]
    if not outside and own and client_mean is not None:  # per pass, from the histograms
        outside_mean = round(client_mean - math.fsum(own), 4)
    return PassAttribution(
        item.name, len(routed), client_mean, summary.p95_ms if summary else None,
        tuple(signals + router),
        round(math.fsum(p.per_request_ms or 0.0 for p in signals), 4) if signals else None,
        round(percentile(outside, 50), 4) if outside else None, outside_mean)


def part_values(attribution: PassAttribution) -> Dict[str, Optional[float]]:
    """Return {row metric: value} of a pass's parts: 'signal:pii:p95', 'router:forward:mean',
    and 'outside:p50' / 'outside:mean' (the latency outside the signals)."""
    values = {}
    for part in attribution.parts:
        for stat in PART_STATS:
            values[f"{part.kind}:{part.name}:{stat}"] = getattr(part, f"{stat}_ms")
    values["outside:p50"] = attribution.outside_p50_ms
    values["outside:mean"] = attribution.outside_mean_ms
    return values
