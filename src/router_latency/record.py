"""The record: judged rounds folders as the sections of a published record."""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

from .errors import RouterLatencyError
from .runfile import load_run, RunFile
from .gate import GateSettings
from .rounds import find_round_files, judge_rounds, RoundsReport

__all__ = ["record_section", "RecordSection", "side_ranges"]


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
