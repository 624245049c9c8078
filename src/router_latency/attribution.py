"""Where the time goes: a pass's time by part (its signals, the router's own histograms,
the latency outside the signals)."""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

from .constants import NamedTuple
from .words import change_text, fmt_signed, fmt_value
from .report import Bar, Block, Group, Heading, Note, Panel, Section, StackedBars, Table
from .stats import percentile, percentiles
from .runfile import PassRecord, RunFile
from .captured import CapturedEnvironment
from .requests import pass_title, Request
from .roundset import Rounds
from .prometheus import Histogram, histograms_of
from .gate import GateSettings, Row, row_of, row_word
from .noise import noise_json, NoiseFindings
from .judged import row_change_text, row_json

__all__ = ["attribution_rows", "breakdown_section", "decomposition_text", "gated_part_rows",
           "part_title", "part_values", "pass_attribution", "PassBreakdown",
           "split_part_rows"]


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
    "vsr_model_runtime_bundle_wait_seconds": "bundle_wait",
    "vsr_model_runtime_bundle_question_wait_seconds": "bundle_question_wait",
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
        times = [ms for r in routed if len(r.signal_ms) > i for ms in (r.signal_ms[i],)
                 if ms is not None]
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
           for ms in (p.per_request_ms,) if ms is not None]
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


def part_title(metric: str) -> str:
    """Return how a part's row is named: 'pii p95', 'router forward mean', 'outside p50'."""
    kind, _, rest = metric.partition(":")
    name, _, stat = rest.rpartition(":")
    return {"signal": f"{name} {stat}", "router": f"router {name} {stat}"}.get(
        kind, f"outside the signals {rest}")


class PassBreakdown(NamedTuple):
    """Where one pass's time went on each side, and what of it changed."""
    pass_name: str
    rows: Tuple[Row, ...]  # Row per part and statistic, the part that moved most first
    # (metric, median over the used rounds) of the base side's parts
    base: Tuple[Tuple[str, float], ...]
    new: Tuple[Tuple[str, float], ...]
    client: Tuple[float, float]  # (base, new) median client mean latency
    sentence: str


def attribution_rows(rounds: Rounds, settings: GateSettings) -> List[PassBreakdown]:
    """Return PassBreakdowns of the passes whose answers or histograms reported parts:
    a row per part and statistic measured in every used round on both sides, with the
    latency rows' estimator and interval; advisory unless --gate names them."""
    runs = rounds.runs
    base, new, used = rounds.base, rounds.new, rounds.used
    first = runs[used[0]][base]
    found = []
    for item in sorted(first.passes, key=lambda p: p.order):
        figures = {}
        for side in (base, new):
            sides = [runs[r][side] for r in used]
            passes = [p for run in sides for p in (run.pass_named(item.name),)
                      if p is not None and not p.discarded and p.summary is not None]
            if len(passes) < len(sides):  # a used round without it measured
                break
            figures[side] = [pass_attribution(run, p) for run, p in zip(sides, passes)]
        else:
            breakdown = pass_breakdown(item.name, figures[base], figures[new], settings,
                                       (base, new))
            if breakdown.rows:
                found.append(breakdown)
    return found


def pass_breakdown(name: str, base: Sequence[PassAttribution], new: Sequence[PassAttribution],
                   settings: GateSettings, sides: tuple = ("base", "new")) -> PassBreakdown:
    """Return one pass's breakdown from its attributions, round by round on each side; a
    signal only one side reported is said in the sentence, not left out in silence."""
    import statistics
    # the parts each round measured: one that some round lacks, or at 0 ms, makes no row
    base_values, new_values = ([{m: ms for m, ms in part_values(a).items() if ms is not None}
                                for a in side] for side in (base, new))
    metrics = [m for m in base_values[0]
               if all(v.get(m, 0.0) > 0 for v in (*base_values, *new_values))]
    rows = [row_of(name, m, [v[m] for v in base_values], [v[m] for v in new_values], settings)
            for m in metrics]
    rows.sort(key=lambda r: -abs(r.diff.mean))
    medians = [tuple((m, statistics.median(v[m] for v in side)) for m in metrics)
               for side in (base_values, new_values)]
    # a round's passes all answered (side_problems): each has its client mean
    client_base, client_new = (
        statistics.median(a.client_mean_ms for a in side if a.client_mean_ms is not None)
        for side in (base, new))
    reported = [{p.name for a in side for p in a.parts if p.kind == "signal"}
                for side in (base, new)]
    one_sided = [f"{part} reported by {side} only" for side, mine, other in (
        (sides[0], reported[0], reported[1]), (sides[1], reported[1], reported[0]))
        for part in sorted(mine - other)]
    sentence = breakdown_sentence(name, rows, base, new, settings)
    return PassBreakdown(pass_name=name, rows=tuple(rows), base=medians[0], new=medians[1],
                         client=(client_base, client_new),
                         sentence="; ".join(filter(None, [sentence, *one_sided])))


def breakdown_sentence(name: str, rows: Sequence[Row], base: Sequence[PassAttribution],
                       new: Sequence[PassAttribution], settings: GateSettings) -> str:
    """Return the change of a pass's client p95 and what moved with it, in words: each
    signal's p95 change and the latency outside the signals, the part that moved most first,
    then the router's parts in ms.

    They are ordered, and "most of the change" is said, on means, which add up where
    percentiles do not: the part whose time per request shifted most, when its shift is at
    least half the client's shift in mean latency (medians over rounds)."""
    import statistics
    values = [(a.client_p95_ms, b.client_p95_ms) for a, b in zip(base, new)]
    if any(a is None or b is None or a <= 0 or b <= 0 for a, b in values):
        return ""
    client = row_of(name, "p95_ms", [a for a, _ in values], [b for _, b in values], settings)
    whole = statistics.median(b.client_mean_ms for b in new if b.client_mean_ms is not None) \
        - statistics.median(a.client_mean_ms for a in base if a.client_mean_ms is not None)
    moved = []  # (shift of the mean per request, words)
    for row in rows:
        kind, _, rest = row.metric.partition(":")
        if kind == "signal" and row.metric.endswith(":p95"):
            part = rest.split(":")[0]
            moved.append((signal_shift(part, base, new), f"{part} {row_change_words(row)}"))
        elif row.metric == "outside:mean":
            moved.append((row.new_median - row.base_median,  # its p95 is not measured
                          f"outside the signals (mean) {row_change_words(row)}"))
    moved.sort(key=lambda m: -abs(m[0]))
    said = [words + (" (most of the change)" if i == 0 and whole and shift / whole >= 0.5
                     else "") for i, (shift, words) in enumerate(moved)]
    said += [f"{r.metric.split(':')[1]} {fmt_signed(r.diff.mean)} ms" for r in rows
             if r.metric.startswith("router:") and r.metric.endswith(":mean")][:3]
    return (f"{pass_title(name)} p95 {row_change_words(client)}"
            + (": " + ", ".join(said) if said else ""))


def signal_shift(name: str, base: Sequence[PassAttribution],
                 new: Sequence[PassAttribution]) -> float:
    """Return the shift of a signal's time per request, new - base, medians over rounds."""
    import statistics

    def per_request(side: Sequence[PassAttribution]) -> float:
        return statistics.median(next((p.per_request_ms for p in a.parts
                                       if p.kind == "signal" and p.name == name
                                       and p.per_request_ms is not None), 0.0)
                                 for a in side)
    return per_request(new) - per_request(base)


def row_change_words(row: Row) -> str:
    """Return a row's change in the words compare and rounds use: '1.41x slower [1.33,
    1.49]' (the interval in the direction of the words)."""
    return change_text(row.speedup, row.speedup_low, row.speedup_high)


def gated_part_rows(breakdowns: Sequence[PassBreakdown]) -> List[Row]:
    """Return the parts' rows --gate names: the others are advisory, outside the gate."""
    return [r for b in breakdowns for r in b.rows if r.gated]


def split_part_rows(judged: Sequence[Row], breakdowns: Sequence[PassBreakdown]
                    ) -> Tuple[List[Row], List[PassBreakdown]]:
    """Return (the latency rows, the breakdowns) of the rows the gate judged: a part's row
    (its metric 'signal:pii:p95', never a latency metric's name) goes back to its pass."""
    parts = {(r.pass_name, r.metric): r for r in judged if ":" in r.metric}
    return ([r for r in judged if ":" not in r.metric],
            [b._replace(rows=tuple(parts.get((r.pass_name, r.metric), r) for r in b.rows))
             for b in breakdowns])


def breakdown_blocks(breakdowns: Sequence[PassBreakdown], base: str, new: str) -> List[Block]:
    """Return where each pass's time went: the sentence, the table of the parts' rows
    (advisory unless gated), and the decomposition beside the client's latency."""
    if not breakdowns:
        return []
    lines: List[Block] = [
        f"where the time goes: each signal's time as the answers report it, the router's "
        f"histograms (per observation; p50 and p95 interpolated within buckets), and the "
        f"latency outside the signals; rows as above, advisory unless --gate names them "
        f"(signal:NAME:STAT, router:PART:STAT); the sentence gives each signal's p95 and "
        f"the mean outside the signals; each side's last line subtracts medians over "
        f"rounds (client mean less the signals'), where the outside row is the median of "
        f"each round's own difference, so the two may differ a little"]
    for breakdown in breakdowns:
        lines += ["", breakdown.sentence or pass_title(breakdown.pass_name)]
        table = [[part_title(row.metric) + ("*" if row.gated else ""),
                  fmt_value(row.base_median), fmt_value(row.new_median),
                  f"{fmt_signed(row.diff.mean)} [{fmt_value(row.diff.low)}, "
                  f"{fmt_value(row.diff.high)}]", row_change_text(row), row_word(row)]
                 for row in breakdown.rows]
        lines.append(Table("", ["part", f"{base} ms", f"{new} ms", f"{new} - {base} [95% CI]",
                                "change [95% CI]", "verdict"], table,
                           [False, True, True, True, True, False]))
        lines += [decomposition_text(side, dict(parts), client)
                  for side, parts, client in ((base, breakdown.base, breakdown.client[0]),
                                              (new, breakdown.new, breakdown.client[1]))]
    return lines


def decomposition_text(side: str, medians: dict, client_ms: Optional[float]) -> str:
    """Return one side's decomposition of a pass's mean latency, medians over rounds: the
    signals' mean times summed beside the client's mean, and what is left unexplained (or by
    how much the signals overlap); the router's histograms, which may overlap the signals,
    beside them."""
    signals = {m.split(":")[1]: v for m, v in medians.items()
               if m.startswith("signal:") and m.endswith(":mean")}
    router = {m.split(":")[1]: v for m, v in medians.items()
              if m.startswith("router:") and m.endswith(":mean")}
    text = f"{side}: client mean {fmt_value(client_ms)} ms"
    if signals and client_ms is not None:
        total = math.fsum(signals.values())
        listed = ", ".join(f"{name} {fmt_value(v)}" for name, v in signals.items())
        left = client_ms - total
        text += (f"; signals summed {fmt_value(total)} ms ({listed}); "
                 + (f"unexplained {fmt_value(left)} ms (wire, HTTP, admission, the router's "
                    f"other work)" if left >= 0 else
                    f"the signals' sum exceeds it by {fmt_value(-left)} ms: they overlap "
                    f"(evaluated in parallel), so no sum is forced"))
    if router:
        text += ("; router histograms, mean per observation (may overlap the signals): "
                 + ", ".join(f"{name} {fmt_value(v)} ms" for name, v in router.items()))
    if not signals and medians.get("outside:mean") is not None:
        text += (f"; outside the router's signal and decision time, per pass from its "
                 f"histograms: {fmt_value(medians['outside:mean'])} ms")
    return text


def breakdowns_json(breakdowns: Sequence[PassBreakdown],
                    noise: Optional[NoiseFindings]) -> list:
    """Return where each pass's time went as JSON: its parts' rows as those of the table."""
    return [{"pass": b.pass_name, "sentence": b.sentence,
             "client_mean_ms": {"base": b.client[0], "new": b.client[1]},
             "base": dict(b.base), "new": dict(b.new),
             "rows": [{**row_json(r), "noise": noise_json(noise, r)} for r in b.rows]}
            for b in breakdowns]


def breakdown_section(breakdowns: Sequence[PassBreakdown], base: str, new: str,
                      noise: Optional[NoiseFindings]) -> Section:
    """Return where the time goes as the report's section (JSON: breakdowns)."""
    return Section(key="breakdowns", blocks=tuple(breakdown_blocks(breakdowns, base, new)),
                   json={"breakdowns": breakdowns_json(breakdowns, noise)},
                   page=(breakdown_panel(breakdowns, base, new),),
                   record=tuple((90, most_changed_sentence(b)) for b in breakdowns
                                if any(r.metric.endswith(":mean") for r in b.rows)))


def most_changed_sentence(breakdown: PassBreakdown) -> str:
    """Return which part of a pass's time changed most, on means (which add up)."""
    row = max((r for r in breakdown.rows if r.metric.endswith(":mean")),
              key=lambda r: abs(r.diff.mean))
    name = part_title(row.metric).rsplit(" ", 1)[0]
    return (f"{pass_title(breakdown.pass_name)}: {name} changed most, {row_change_text(row)}, "
            f"{fmt_signed(row.diff.mean)} ms per request [{fmt_value(row.diff.low)}, "
            f"{fmt_value(row.diff.high)}]")


def breakdown_panel(breakdowns: Sequence[PassBreakdown], base: str, new: str) -> Panel:
    """Return where the time goes on the report page, a group per pass: its sentence, its
    time per request on each side as stacked bars, the interval of the change of each part
    and each side's decomposition."""
    if not breakdowns:
        return Panel(place=50)
    groups = []
    for breakdown in breakdowns:
        rows = [[part_title(r.metric), fmt_value(r.base_median), fmt_value(r.new_median),
                 f"{fmt_signed(r.diff.mean)} [{fmt_value(r.diff.low)}, {fmt_value(r.diff.high)}]",
                 row_change_text(r), row_word(r)]
                for r in breakdown.rows if r.metric.endswith(":mean")]
        sides = ((base, breakdown.base, breakdown.client[0]),
                 (new, breakdown.new, breakdown.client[1]))
        groups.append(Group((
            Heading(pass_title(breakdown.pass_name), 3), Note(breakdown.sentence, small=False),
            time_bars(breakdown, base, new),
            Table("", ["part (mean)", f"{base} ms", f"{new} ms", f"{new} - {base} [95% CI]",
                       "change [95% CI]", "verdict"], rows,
                  [False, True, True, True, True, False]),
            *(Note(decomposition_text(side, dict(parts), client))
              for side, parts, client in sides))))
    return Panel(place=50, heading="Where the time goes", items=tuple(groups),
                 note="Each signal's time as the answers report it, and what is left of the "
                      "client's mean latency; rows advisory unless --gate names them.")


def time_bars(breakdown: PassBreakdown, base: str, new: str) -> StackedBars:
    """Return a pass's time per request on each side as stacked bars: each signal's mean
    time, then what is left of the client's mean latency; a mark at the client's mean, so
    that signals that overlap (in parallel) show past it, not forced in."""
    names = tuple(m.split(":")[1] for m, _ in breakdown.base if m.startswith("signal:")
                  and m.endswith(":mean"))
    bars = []
    for side, parts, client in ((base, dict(breakdown.base), breakdown.client[0]),
                                (new, dict(breakdown.new), breakdown.client[1])):
        times = [(name, parts.get(f"signal:{name}:mean", 0.0)) for name in names]
        rest = client - math.fsum(t for _, t in times)
        bars.append(Bar(side, tuple(times + ([("rest", rest)] if rest > 0 else [])), client,
                        f"client mean {fmt_value(client)} ms"))
    return StackedBars(f"{pass_title(breakdown.pass_name)}: time per request", names, "rest",
                       "ms", tuple(bars), "ms per request, medians over rounds; | the client's "
                       "mean latency")
