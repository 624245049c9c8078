"""The record: judged rounds folders as the sections of a published record, and each
section's sentences generated from the data (per-round ranges, decisions, failures, faults,
surroundings, energy, result caches, capacity, where the time changed most)."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from .constants import NamedTuple
from .errors import RouterLatencyError
from .words import metric_title, span_text
from .gpu import energy_ranges_sentence
from .cache import cache_sentence
from .runfile import RunFile
from .pools import load_side, pool_placement, SINGLE_PLACEMENT
from .requests import pass_title
from .gate import GateSettings
from .rounds import find_round_files, judge_rounds, RoundsReport

__all__ = ["pool_words", "record_section", "record_sentences", "RecordSection",
           "section_placement", "unlike_sections"]


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
    runs = {n: {s: load_side(p) for s, p in sides.items()} for n, sides in files.items()}
    try:
        report = judge_rounds(runs, base, new, settings)
    except RouterLatencyError as exc:
        raise RouterLatencyError(exc.args[0], exc.where or folder) from None
    return RecordSection(name, folder, report, runs)


def section_placement(section: RecordSection) -> str:
    """Return a section's instances a side and round and their GPUs (pools.pool_placement,
    what rounds and history compare like with like), of its first round's base run."""
    return pool_placement(section.runs[min(section.runs)][section.report.base])


def placement_text(placement: str) -> str:
    """Return a placement in words: "one instance a round", "pools of 8 instances a side on
    GPUs 0,1"."""
    if placement == SINGLE_PLACEMENT:
        return "one instance a round"
    count, _, where = placement.partition(" ")
    return f"pools of {count} instances a side{' ' + where if where else ''}"


def pool_words(section: RecordSection) -> str:
    """Return a section's pools in words for its heading; "" for one instance a round (as
    every record before pools)."""
    placement = section_placement(section)
    return "" if placement == SINGLE_PLACEMENT else placement_text(placement)


def unlike_sections(sections: Sequence[RecordSection]) -> List[str]:
    """Return the line that says a record's sections were measured with other pools (their
    count or placement), which their figures are not alike across; none when alike."""
    placements = [(s.name, section_placement(s)) for s in sections]
    if len({p for _, p in placements}) < 2:
        return []
    return ["The sections were not measured alike: " + "; ".join(
        f"{name} with {placement_text(p)}" for name, p in placements)
        + ". A pool's figures are its instances' geometric mean, narrower than one "
          "instance's: compare a section's figures with another's only where both were "
          "measured alike."]


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
    """Return the record's sentences of one section: per-round ranges, then what the report's
    sections give the record (decisions, failed requests, restarts and faults, ladders, where
    the time changed most), with the surroundings and result caches, each at its place."""
    report = section.report
    ranges = {side: side_ranges(section, side) for side in (report.base, report.new)}
    own = ([(10, s) for s in range_sentences(report, ranges)]
           + [(50, s) for s in surroundings_sentences(report, ranges)]
           + [(70, cache_sentence(cached_runs(section)))])
    given = [item for part in report.sections for item in part.record]
    return [sentence for _, sentence in sorted(own + given, key=lambda item: item[0])]


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
