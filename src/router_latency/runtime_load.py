"""The model runtime's load over each pass, as the router and its runtime count it: request
bundling's split stages, replicas and exchanges in flight, the runtime's queue and the
questions it dropped at their deadline; and where it explains a change (a split stage or a
dropped question beside a slower or more degraded side): the rounds report's section."""

from __future__ import annotations

import math
import re
from typing import Dict, List, Optional, Sequence

from .constants import lazy_pattern, NamedTuple, RUNTIME_COUNTERS, RUNTIME_GAUGES
from .report import Block, Section, Table
from .runfile import PassRecord
from .requests import pass_title
from .roundset import Rounds
from .gate import Row
from .judged import row_change_text

__all__ = ["runtime_load_section"]

LATER_CALLS = lazy_pattern(r'^vsr_model_runtime_stage_decision_calls_total\{.*round="later"')
FIRST_CALLS = lazy_pattern(r'^vsr_model_runtime_stage_decision_calls_total\{.*round="first"')


class PassLoad(NamedTuple):
    """What the runtime's counters and gauges said of one pass (None: not exposed)."""
    requests: int  # the pass's routed requests
    first_calls: Optional[float]  # a stage's one decisions call, over the pass
    later_calls: Optional[float]  # further calls of a stage an admission limit split
    dropped: Optional[float]  # questions the runtime dropped at their deadline
    rows_per_forward: Optional[float]  # the runtime's batch rows, mean per forward
    replicas_ready: Optional[float]  # gauges as read after the pass
    inflight: Optional[float]
    queue_depth: Optional[float]

    @property
    def later_per_request(self) -> Optional[float]:
        if self.later_calls is None or not self.requests:
            return None
        return self.later_calls / self.requests


def _summed(values: Dict[str, float], pattern: re.Pattern[str]) -> Optional[float]:
    found = [v for series, v in values.items() if pattern.search(series)]
    return math.fsum(found) if found else None


def pass_load(item: PassRecord) -> Optional[PassLoad]:
    """Return a pass's runtime load from the metrics it captured, or None where the router
    exposed none of it (an older router, or no --metrics-url)."""
    metrics = item.attempt.environment.get("metrics") or {}
    deltas, gauges = metrics.get("deltas") or {}, metrics.get("gauges") or {}
    load = {s: v for s, v in deltas.items() if RUNTIME_COUNTERS.match(s.split("{", 1)[0])}
    gauges = {s: v for s, v in gauges.items() if RUNTIME_GAUGES.match(s.split("{", 1)[0])}
    if not load and not gauges:
        return None
    rows = _summed(load, re.compile(r"_batch_rows_sum\b"))
    forwards = _summed(load, re.compile(r"_batch_rows_count\b"))
    return PassLoad(
        sum(r.routed for r in item.requests), _summed(load, FIRST_CALLS),
        _summed(load, LATER_CALLS), _summed(load, re.compile(r"_deadline_dropped_questions")),
        rows / forwards if rows is not None and forwards else None,
        _summed(gauges, re.compile(r"_replica_ready\b")),
        _summed(gauges, re.compile(r"_replica_inflight\b")),
        _summed(gauges, re.compile(r"_queue_depth\b")))


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    import statistics
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _figure(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None else f"{round(value, digits):g}"


class SideLoad(NamedTuple):
    """A side's runtime load in one pass: the median over the rounds used."""
    later_per_request: Optional[float]
    dropped: Optional[float]
    degraded: int  # the side's degraded answers in that pass, over the rounds used
    rows_per_forward: Optional[float]
    replicas_ready: Optional[float]
    inflight: Optional[float]
    queue_depth: Optional[float]


def side_loads(rounds: Rounds) -> Dict[str, Dict[str, SideLoad]]:
    """Return {pass name: {side: SideLoad}} of the passes whose runs exposed a load."""
    found: Dict[str, Dict[str, SideLoad]] = {}
    names = dict.fromkeys(p.name for n in rounds.used for run in rounds.runs[n].values()
                          for p in run.passes)
    for name in names:
        for side in (rounds.base, rounds.new):
            # no assignment expressions: the one file parses under 3.7 to say its floor
            named = [rounds.runs[n][side].pass_named(name) for n in rounds.used]
            items = [item for item in named if item is not None]
            loads = [load for load in map(pass_load, items) if load is not None]
            if not loads:
                continue
            found.setdefault(name, {})[side] = SideLoad(
                _median([x.later_per_request for x in loads]), _median([x.dropped for x in loads]),
                sum(bool(r.degraded) for item in items for r in item.requests),
                _median([x.rows_per_forward for x in loads]),
                _median([x.replicas_ready for x in loads]), _median([x.inflight for x in loads]),
                _median([x.queue_depth for x in loads]))
    return found


def explanations(loads: Dict[str, Dict[str, SideLoad]], rows: Sequence[Row], base: str,
                 new: str) -> List[str]:
    """Return the lines that name a split stage or a dropped question on the new side beside
    its slower rows, or its larger degraded share, in the same pass."""
    lines = []
    for name, sides in loads.items():
        if base not in sides or new not in sides:
            continue
        was, now = sides[base], sides[new]
        slower = [f"{row.metric.replace('_ms', '').replace('_', ' ')} {row_change_text(row)}"
                  for row in rows if row.pass_name == name and row.speedup < 1]
        split = (now.later_per_request or 0) > (was.later_per_request or 0)
        dropped = (now.dropped or 0) > (was.dropped or 0)
        if split and slower:
            lines.append(
                f"{new} split request stages in {pass_title(name)}: "
                f"{_figure(now.later_per_request)} later decisions calls per request ({base} "
                f"{_figure(was.later_per_request or 0)}), an admission limit sending a stage's "
                f"questions apart, beside its slower rows: {'; '.join(slower)}")
        if dropped and (slower or now.degraded > was.degraded):
            beside = ([f"its slower rows: {'; '.join(slower)}"] if slower else []) + (
                [f"{now.degraded} degraded answers ({base} {was.degraded})"]
                if now.degraded > was.degraded else [])
            lines.append(
                f"{new}'s runtime dropped {_figure(now.dropped, 0)} questions at their deadline "
                f"in {pass_title(name)} ({base} {_figure(was.dropped or 0, 0)}; median over "
                f"the rounds), beside {' and '.join(beside)}")
    return lines


def runtime_load_section(rounds: Rounds, rows: Sequence[Row]) -> Section:
    """Return the runtime's load per pass and side as the report's section, with the lines
    that explain a change (JSON: runtime_load); nothing where no run exposed it."""
    loads = side_loads(rounds)
    if not loads:
        return Section(key="runtime_load")
    table = Table("the model runtime's load (median over the rounds; gauges after each pass)",
                  ["pass", "side", "later calls/req", "dropped", "rows/forward",
                   "replicas ready", "in flight", "queue depth"],
                  [[pass_title(name), side, _figure(load.later_per_request),
                    _figure(load.dropped, 0), _figure(load.rows_per_forward),
                    _figure(load.replicas_ready, 0), _figure(load.inflight, 0),
                    _figure(load.queue_depth, 0)]
                   for name, sides in loads.items() for side, load in sides.items()],
                  [False, False, True, True, True, True, True, True])
    lines = explanations(loads, rows, rounds.base, rounds.new)
    blocks: List[Block] = [*lines, table]
    return Section(key="runtime_load", title="The model runtime's load", blocks=tuple(blocks),
                   json={"runtime_load": {name: {side: load._asdict()
                                                 for side, load in sides.items()}
                                          for name, sides in loads.items()},
                         "runtime_load_explains": lines})
