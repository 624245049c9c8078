"""The record: judged rounds folders as the sections of a published record, and each
section's sentences generated from the data (per-round ranges, decisions, failures, faults,
surroundings, energy, result caches, capacity, where the time changed most)."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from .errors import RouterLatencyError
from .words import fmt_signed, fmt_value, metric_title, span_text
from .gpu import energy_ranges_sentence
from .cache import cache_sentence
from .runfile import load_run, RunFile
from .requests import pass_title
from .gate import GateSettings
from .judged import row_change_text
from .attribution import part_title, PassBreakdown
from .capacity import format_capacity_rounds
from .rounds import find_round_files, judge_rounds, report_ladders, RoundsReport

__all__ = ["record_section", "record_sentences", "RecordSection"]


class RecordSection(NamedTuple):
    """One judged rounds folder of a published record, and the runs behind it."""
    name: str  # e.g. shipped_image
    folder: str
    report: RoundsReport
    runs: Dict[int, Dict[str, RunFile]]  # {round: {side: RunFile}}


def record_section(name: str, folder: str, base: str, new: str,
                   settings: GateSettings = GateSettings()) -> RecordSection:
    """Return a section of a record: the rounds of `folder` read and judged."""
    files = find_round_files(folder, base, new)
    runs = {n: {s: load_run(p) for s, p in sides.items()} for n, sides in files.items()}
    try:
        report = judge_rounds(runs, base, new, settings)
    except RouterLatencyError as exc:
        raise RouterLatencyError(exc.args[0], exc.where or folder) from None
    return RecordSection(name, folder, report, runs)


def side_ranges(section: RecordSection, side: str) -> Dict[str, Tuple[float, float]]:
    """Return (low, high) per figure over the used rounds' passes of one side: p50 and p95
    of each pass, load, GPU memory, foreign vCPUs and router CPU ms per request."""
    found: Dict[str, Tuple[float, float]] = {}

    def add(key: str, value: Optional[float]) -> None:
        if value is not None:
            low, high = found.get(key, (value, value))
            found[key] = (min(low, value), max(high, value))

    for number in section.report.used:
        for item in section.runs[number][side].passes:
            if item.discarded:
                continue
            add(f"{item.name}:p50_ms", item.measured.p50_ms)
            add(f"{item.name}:p95_ms", item.measured.p95_ms)
            environment = item.environment
            add("load", environment.load_min)
            add("load", environment.load_max)
            for used_mib in environment.gpu_mib:
                add("gpu_mib", used_mib)
            add("foreign_vcpus", environment.foreign_vcpus)
            add("router_cpu_ms", environment.router_cpu_ms)
            add("j_per_request", environment.energy_j)
    return found


def record_sentences(section: RecordSection) -> List[str]:
    """Return the record's sentences of one section: per-round ranges, decisions, failures,
    restarts and faults, GPU memory, load, foreign CPU and router CPU."""
    report = section.report
    ranges = {side: side_ranges(section, side) for side in (report.base, report.new)}
    return (range_sentences(report, ranges) + [agreement_sentence(report),
                                               failed_sentence(report), faults_sentence(report)]
            + surroundings_sentences(report, ranges) + [cache_sentence(cached_runs(section))]
            + format_capacity_rounds(report_ladders(report)) + [
                most_changed_sentence(b) for b in report.breakdowns
                if any(r.metric.endswith(":mean") for r in b.rows)])


def side_span(ranges: dict, side: str, key: str, unit: str = "") -> str:
    """Return one side's range over the rounds of a figure (of side_ranges() per side), or
    'not captured'."""
    low, high = ranges[side].get(key, (None, None))
    return "not captured" if low is None else \
        f"{side} {span_text(low, high)}{unit}".replace("-", "–")


def range_sentences(report: RoundsReport, ranges: dict) -> List[str]:
    """Return, per pass, the range over rounds of each side's p50 and p95."""
    names = [r.pass_name for r in report.rows if r.metric == "p50_ms"]
    return [f"{pass_title(name)} {metric_title(metric)} per round: "
            f"{side_span(ranges, report.base, f'{name}:{metric}', ' ms')}, "
            f"{side_span(ranges, report.new, f'{name}:{metric}', ' ms')}"
            for name in names for metric in ("p50_ms", "p95_ms")]


def agreement_sentence(report: RoundsReport) -> str:
    """Return how the two sides' decisions agreed over the used rounds."""
    used = [a for a in report.agreement if a.used]
    agreed = [a for a in used if a.agree == a.total]
    totals = sorted({a.total for a in used})
    return (f"{agreed[0].agree}/{agreed[0].total} inputs agreed in every pass of every round"
            if used and len(agreed) == len(used) and len(totals) == 1 else
            f"decisions agreed in {len(agreed)} of {len(used)} rounds; "
            + "; ".join(f"r{a.round}: {a.agree}/{a.total}" for a in used if a.agree < a.total))


def failed_sentence(report: RoundsReport) -> str:
    """Return each side's failed requests over the used rounds."""
    failed = {side: sum(b if side == report.base else w for e in report.errors
                        for n, b, w in e.counts if n in report.used)
              for side in (report.base, report.new)}
    degraded = {side: sum(b if side == report.base else w for e in report.degraded
                          for n, b, w in e.counts if n in report.used)
                for side in (report.base, report.new)}
    return ("failed requests: none" if not any(failed.values()) else
            "failed requests: " + ", ".join(f"{s} {c}" for s, c in failed.items())) + (
        "; degraded answers: " + ", ".join(f"{s} {c}" for s, c in degraded.items())
        if any(degraded.values()) else "")


def faults_sentence(report: RoundsReport) -> str:
    """Return the rounds and sides whose router restarted or whose device faulted."""
    faults = [row for row in report.environment if row.faults]
    if faults:
        return "restarts and device faults: " + ", ".join(
            f"r{row.round} {row.side} {row.faults:g}" for row in faults)
    read = sum(row.faults is not None for row in report.environment)
    if not read:  # no run read the restart and fault series: nothing is known of them
        return "restarts and device faults: not captured"
    return "restarts and device faults: none" + (
        "" if read == len(report.environment) else
        f" in the {read} of {len(report.environment)} runs that captured them")


def surroundings_sentences(report: RoundsReport, ranges: dict) -> List[str]:
    """Return each side's range of GPU memory, load, foreign CPU and router CPU."""
    sentences = []
    for key, title, unit in (("gpu_mib", "GPU memory", " MiB"), ("load", "load (1-minute)", ""),
                             ("foreign_vcpus", "other processes on the router's CPUs", " vCPUs"),
                             ("router_cpu_ms", "router CPU time per request", " ms")):
        shown = [side_span(ranges, side, key, unit) for side in (report.base, report.new)]
        shown = [s for s in shown if s != "not captured"]
        sentences.append(f"{title}: {', '.join(shown) if shown else 'not captured'}")
    return sentences + energy_sentence(report, ranges)


def energy_sentence(report: RoundsReport, ranges: dict) -> List[str]:
    """Return each side's range of the router's GPUs' joules per routed request and, beside
    the cost per million requests, the energy of a million requests; [] where no pass
    sampled it."""
    return energy_ranges_sentence([(side, ranges[side]["j_per_request"])
                                   for side in (report.base, report.new)
                                   if ranges[side].get("j_per_request")])


def cached_runs(section: RecordSection) -> List[str]:
    """Return the rounds and sides a result cache answered ("side rN"), for cache_sentence."""
    return [f"{side} r{n}" for n, sides in sorted(section.runs.items())
            for side, run in sorted(sides.items()) if run.cache_finding["detected"]]


def most_changed_sentence(breakdown: PassBreakdown) -> str:
    """Return which part of a pass's time changed most, on means (which add up)."""
    row = max((r for r in breakdown.rows if r.metric.endswith(":mean")),
              key=lambda r: abs(r.diff.mean))
    name = part_title(row.metric).rsplit(" ", 1)[0]
    return (f"{pass_title(breakdown.pass_name)}: {name} changed most, {row_change_text(row)}, "
            f"{fmt_signed(row.diff.mean)} ms per request [{fmt_value(row.diff.low)}, "
            f"{fmt_value(row.diff.high)}]")
