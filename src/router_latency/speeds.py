"""What separates the instances' speed groups: where a side's instances (of pools, or one a
round) fall into groups of speed, the fact each instance recorded (its GPU, its cores, its
NUMA node, ...) whose every value lies in one group, or none."""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

from .constants import NamedTuple
from .report import Lines, Panel, Section
from .requests import pass_title
from .runfile import RunFile
from .roundset import Rounds
from .noise import MIN_MODE_ROUNDS, MODE_GAP_SDS, pass_within, speed_groups

__all__ = ["speeds_section"]


# the facts tried, in this order, before the others an instance recorded; the instance's
# number, port, start order and times are its own and tell nothing of a group
PREFERRED = ("gpu", "gpu_bus_id", "numa_nodes", "cores", "thread_cpus")
NOT_GROUPING = ("port", "start_order", "ready_s", "gpu_used_mib")

Fact = Union[str, float, None]


class InstanceSpeed(NamedTuple):
    """One instance of a side: its round, number, a pass's p50 and what it recorded."""
    round: int
    number: int
    p50_ms: float
    facts: Dict[str, Fact]


class SpeedSplit(NamedTuple):
    """A side's instances in speed groups and the recorded fact that separates them."""
    side: str
    pass_name: str
    groups: Tuple[Tuple[InstanceSpeed, ...], ...]  # slowest last
    fact: Optional[str]  # None: nothing recorded separates them
    tried: Tuple[str, ...]  # the facts the instances recorded


def instance_facts(run: RunFile) -> Dict[str, Fact]:
    """Return what an instance recorded that could make it differ."""
    item = run.instance
    if item is None:
        return {}
    return {"gpu": item.gpu, "cores": item.cores, **item.facts}


def side_instances(rounds: Rounds, side: str, name: str) -> List[Tuple[InstanceSpeed, float]]:
    """Return each instance of a side in the used rounds with its within-noise variance of
    a pass's p50 (0 where its pass cannot be split: the tolerance alone then sets the gap)."""
    found = []
    for n in rounds.used:
        run = rounds.runs[n][side]
        for number, item in enumerate(run.pool or (run,), 1):
            record = item.pass_named(name)
            if record is None or record.summary is None or record.summary.p50_ms is None:
                continue
            within = pass_within(record, "p50_ms")
            found.append((InstanceSpeed(n, number, record.summary.p50_ms,
                                        instance_facts(item)), within[0] if within else 0.0))
    return found


def separating_fact(groups: Sequence[Sequence[InstanceSpeed]]) -> Tuple[Optional[str],
                                                                        Tuple[str, ...]]:
    """Return the first recorded fact each of whose values lies in one group alone (and that
    takes fewer values than there are instances), and every fact tried."""
    everyone = [i for group in groups for i in group]
    names = sorted({k for i in everyone for k, v in i.facts.items() if v is not None}
                   - set(NOT_GROUPING),
                   key=lambda k: (PREFERRED.index(k) if k in PREFERRED else len(PREFERRED), k))
    for name in names:
        where: Dict[Fact, int] = {}
        separates = all(i.facts.get(name) is not None for i in everyone)
        for g, group in enumerate(groups):
            for item in group:
                separates = separates and where.setdefault(item.facts.get(name), g) == g
        if separates and len(where) < len(everyone):
            return name, tuple(names)
    return None, tuple(names)


def speed_splits(rounds: Rounds, pass_names: Sequence[str],
                 tolerance_log: float) -> List[SpeedSplit]:
    """Return each side's instances in speed groups per pass (neighbours farther apart than
    MODE_GAP_SDS times their within-instance noise and the tolerance), where a side has
    MIN_MODE_ROUNDS instances or more and more than one group."""
    splits = []
    for name in pass_names:
        for side in rounds.sides:
            found = side_instances(rounds, side, name)
            if len(found) < MIN_MODE_ROUNDS:
                continue
            within = math.fsum(v for _, v in found) / len(found)
            gap = max(MODE_GAP_SDS * math.sqrt(2 * within), tolerance_log)
            grouped = speed_groups([(k, i.p50_ms) for k, (i, _) in enumerate(found)], gap)
            if len(grouped) < 2:
                continue
            groups = tuple(tuple(found[k][0] for k in g.rounds) for g in grouped)
            fact, tried = separating_fact(groups)
            splits.append(SpeedSplit(side, name, groups, fact, tried))
    return splits


def split_line(split: SpeedSplit) -> str:
    """Return a speed split in a sentence: the groups and what separates them, or not."""
    def shown(group: Sequence[InstanceSpeed]) -> str:
        low, high = f"{group[0].p50_ms:.3g}", f"{group[-1].p50_ms:.3g}"
        speed = low if low == high else f"{low}-{high}"
        if split.fact is None:
            return f"{len(group)} at {speed} ms"
        values = sorted({str(i.facts[split.fact]) for i in group})
        return f"{split.fact} {', '.join(values)}: {len(group)} at {speed} ms"
    groups = "; ".join(shown(g) for g in split.groups)
    head = (f"instance speeds: {split.side}'s instances of {pass_title(split.pass_name)} ran "
            f"at {len(split.groups)} speeds ({groups})")
    if split.fact is not None:
        return f"{head}: what separates them is its {split.fact}"
    tried = f" ({', '.join(split.tried)})" if split.tried else ""
    return (f"{head}: nothing the instances recorded{tried} separates them: a property not "
            f"recorded (the router's start, a neighbour), worth pinning down")


def speeds_section(rounds: Rounds, pass_names: Sequence[str], tolerance_log: float) -> Section:
    """Return the instances' speed groups and what separates them as the report's section
    (JSON: instance_speeds); --plan and the page draw its lines. Only pools or runs that
    recorded their instance (run --instance) are looked at: one instance a round without
    facts has its speed groups in the plan's section."""
    if not any(run.instance is not None or run.pool for sides in rounds.runs.values()
               for run in sides.values()):
        return Section(key="instance_speeds")
    splits = speed_splits(rounds, pass_names, tolerance_log)
    lines = tuple(split_line(s) for s in splits)
    return Section(
        key="instance_speeds",
        json={"instance_speeds": [
            {"side": s.side, "pass": s.pass_name, "separated_by": s.fact,
             "tried": list(s.tried),
             "groups": [[{"round": i.round, "instance": i.number, "p50_ms": i.p50_ms,
                          "facts": i.facts} for i in g] for g in s.groups]} for s in splits]},
        plan=("", *lines) if lines else (),
        page=(Panel(place=21, items=(Lines(lines),)),) if lines else ())
