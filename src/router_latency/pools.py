"""Pools: a side's round measured on several router instances (run_rounds.sh --instances K),
each in its own run file r<N>-<side>@<i>.json, read as one run of that side and round.

The judged statistic of a pool's pass is the mean over its instances of the log statistic
(the geometric mean: the plan's nested model, docs/gpu-node.md), so that the instances of a
round, measured at the same time as the other side's, are paired against them within the
round; counts (requests, errors, degraded answers) add up, and the requests of every instance
stay in the pool's pass for the findings that read requests. The instances' own runs are kept
beside it (RunFile.pool) for the noise between them and what could make them differ."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .constants import lazy_pattern
from .errors import RouterLatencyError
from .requests import PassSummary
from .runfile import load_run, PassRecord, RunFile

__all__ = ["check_pools", "instance_file_side", "load_side", "pool_placement", "SINGLE_PLACEMENT"]


# an instance's file: r<N>-<side>@<i>.json; '@' is in no side name (letters, digits, '.',
# '_', '-'), so an older reader finds no r<N>-<side>.json and refuses the folder rather than
# judging one instance as the round
INSTANCE_FILE = lazy_pattern(r"^r(\d+)-(.+)@(\d+)\.json$")
INSTANCE_SIDE = lazy_pattern(r"^(.+)@(\d+)$")
GEOMETRIC = ("p50_ms", "p95_ms", "p99_ms", "mean_ms", "req_per_s", "service_p50_ms",
             "service_p95_ms", "service_p99_ms", "behind_p99_ms")


def instance_file_side(side_text: str) -> Tuple[str, Optional[int]]:
    """Return (side, instance number) of a round file's side text ("gpu@2": gpu, 2); the
    number is None for a side's whole round (r<N>-<side>.json)."""
    match = INSTANCE_SIDE.match(side_text)
    if match is None:
        return side_text, None
    return match.group(1), int(match.group(2))


SINGLE_PLACEMENT = "1"  # pool_placement of one instance a round (today's files)


def pool_placement(run: RunFile) -> str:
    """Return what like with like compares of a side's round's instances: their count, and
    the GPUs they were placed on where placed ("8 on GPUs 0,1,2,3,4,5,6,7"); "1" for one
    instance a round."""
    members = run.pool or (run,)
    gpus = [m.instance.gpu for m in members if m.instance is not None and m.instance.gpu]
    return f"{len(members)}" + (f" on GPUs {','.join(gpus)}" if gpus else "")


def geometric_mean(values: Sequence[Optional[float]]) -> Optional[float]:
    """Return the geometric mean; None when any value is missing or not above 0."""
    if any(v is None or v <= 0 for v in values):
        return None
    return math.exp(math.fsum(math.log(v) for v in values if v is not None) / len(values))


def added(counts: Sequence[Dict[str, int]]) -> Dict[str, int]:
    """Return counts by kind added up."""
    total: Dict[str, int] = {}
    for count in counts:
        for kind, n in count.items():
            total[kind] = total.get(kind, 0) + n
    return total


def nested_added(counts: Sequence[Dict[str, Dict[str, int]]]) -> Dict[str, Dict[str, int]]:
    """Return counts by kind and code added up."""
    kinds = sorted({kind for count in counts for kind in count})
    return {kind: added([count.get(kind, {}) for count in counts]) for kind in kinds}


def pool_summary(summaries: Sequence[PassSummary]) -> PassSummary:
    """Return a pool's pass summary: its instances' statistics' geometric mean, their counts
    added, the extremes, and the wall time of every instance's pass."""
    first = summaries[0]
    return first._replace(
        requests=sum(s.requests for s in summaries), ok=sum(s.ok for s in summaries),
        errors=added([s.errors for s in summaries]),
        min_ms=min((s.min_ms for s in summaries if s.min_ms is not None), default=None),
        max_ms=max((s.max_ms for s in summaries if s.max_ms is not None), default=None),
        wall_s=math.fsum(s.wall_s for s in summaries),
        rejected=sum(s.rejected for s in summaries),
        error_codes=nested_added([s.error_codes for s in summaries]),
        degraded=sum(s.degraded for s in summaries),
        degraded_signals=nested_added([s.degraded_signals for s in summaries]),
        **{field: geometric_mean([getattr(s, field) for s in summaries])
           for field in GEOMETRIC})


def pool_pass(records: Sequence[PassRecord]) -> PassRecord:
    """Return a pool's pass from its instances' (a discarded instance discards it)."""
    discarded = next((r for r in records if r.discarded or r.summary is None), None)
    if discarded is not None:
        return discarded
    first = records[0]
    hashes: List[str] = []
    for record in records:
        hashes += [h for h in record.attempt.config_hashes if h not in hashes]
    attempt = first.attempt._replace(
        summary=pool_summary([r.measured for r in records]),
        requests=tuple(q for r in records for q in r.requests),
        config_hashes=tuple(hashes), windows=())
    return first._replace(interrupted=any(r.interrupted for r in records), attempt=attempt,
                          discarded_attempts=tuple(a for r in records
                                                   for a in r.discarded_attempts))


def pool_run(instances: Sequence[RunFile]) -> RunFile:
    """Return one run of a side's round from its instances' runs (in instance order): the
    passes every instance measured, pooled; complete only when every instance is."""
    first = instances[0]
    names = [p.name for p in first.passes if all(i.pass_named(p.name) for i in instances)]
    ready = [i.ready_after_s for i in instances]
    started = [i.started_unix for i in instances if i.started_unix is not None]
    return first._replace(
        complete=all(i.complete for i in instances) and all(
            len(i.passes) == len(names) for i in instances),
        passes=tuple(pool_pass([i.pass_named(n) for i in instances])  # type: ignore[misc]
                     for n in names),
        started_unix=min(started) if started else None,
        ended_utc=max(i.ended_utc for i in instances),
        ready_after_s=None if any(r is None for r in ready) else max(ready),  # type: ignore
        pool=tuple(instances))


def load_side(path: str) -> RunFile:
    """Return the run of a side's round: the file itself, or for a pool's first instance
    (r<N>-<side>@1.json) every instance of that round and side in its folder, pooled."""
    match = INSTANCE_FILE.match(Path(path).name)
    if match is None:
        return load_run(path)
    number, side = match.group(1), match.group(2)
    folder = Path(path).parent
    found = {}
    for entry in folder.iterdir():
        other = INSTANCE_FILE.match(entry.name)
        if other and (other.group(1), other.group(2)) == (number, side):
            found[int(other.group(3))] = str(entry)
    count = max(found)
    missing = [i for i in range(1, count + 1) if i not in found]
    if missing:
        raise RouterLatencyError(f"round {number} of side {side} has instances "
                                 f"{', '.join(map(str, sorted(found)))} but not "
                                 f"{', '.join(map(str, missing))}", str(folder))
    runs = []
    for i in range(1, count + 1):
        run = load_run(found[i])
        recorded = run.instance
        if recorded is not None and (recorded.round, recorded.side, recorded.number,
                                     recorded.pool_size) != (int(number), side, i, count):
            raise RouterLatencyError(
                f"the file names instance {i} of {count} of {side} in round {number}, its "
                f"run instance {recorded.number} of {recorded.pool_size} of {recorded.side} in "
                f"round {recorded.round}", found[i])
        runs.append(run)
    return pool_run(runs)


def check_pools(runs: Dict[int, Dict[str, RunFile]]) -> None:
    """Raise unless every round's sides have pools of one size: a round's instances are
    paired against the other side's of the same round, and rounds compare like with like."""
    sizes = {(n, side): max(1, len(run.pool)) for n, sides in runs.items()
             for side, run in sides.items()}
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"r{n} {side} {k}" for (n, side), k in sorted(sizes.items()))
        raise RouterLatencyError(f"the rounds' pools differ in size ({shown}): every side of "
                                 f"every round needs as many instances")
