"""The ladder over rounds: each used round's Capacity per side, the rows it derives (plateau,
capacity within the SLO, cost per million requests), and their section."""

from __future__ import annotations

import collections
import math
import statistics
from typing import List, NamedTuple, Optional, Sequence, Tuple

from .constants import LADDER_GATE_NAMES, LADDER_METRICS, LADDER_PASS
from .errors import RouterLatencyError
from .words import fmt_value, metric_title, plural, span_text
from .report import Section
from .ladder import Capacity, cost_for, LadderStep, run_capacity, usd_per_million
from .roundset import Rounds
from .gate import GateSettings, Row, row_of
from .judged import row_change_text

__all__ = ["capacity_section", "format_capacity_rounds", "ladder_capacities", "ladder_rows",
           "Ladders"]


def ladder_figure(capacity: Capacity, metric: str, cost: tuple) -> Optional[float]:
    """Return one of LADDER_METRICS of a ladder run, None where it has none."""
    if metric == "plateau_req_per_s":
        return capacity.plateau_req_per_s
    if metric == "capacity_req_per_s":
        return capacity.capacity_req_per_s
    served = capacity.served_req_per_s
    return usd_per_million(cost[0], served) if cost and served else None


def ladder_capacities(rounds: Rounds,
                      settings: GateSettings) -> Tuple[Tuple[int, str, Capacity], ...]:
    """Return (round, side, Capacity) of every used round of ladder runs, () otherwise."""
    runs, base, new, used = rounds
    found = [(n, side, run_capacity(runs[n][side], settings.slo_p95_ms))
             for n in used for side in (base, new)]
    known = tuple((n, side, c) for n, side, c in found if c is not None)
    return known if found and len(known) == len(found) else ()


def ladder_rows(rounds: Rounds, settings: GateSettings) -> List[Row]:
    """Return the rows of what ladders derive, each where every used round has it on both
    sides; raise for a gated one that some round lacks."""
    runs, base, new, used = rounds
    capacities = {(n, side): c for n, side, c in ladder_capacities(rounds, settings)}
    rows = []
    for metric in LADDER_METRICS:
        values = {side: [None if (n, side) not in capacities else ladder_figure(
            capacities[(n, side)], metric, cost_for(settings.cost_per_hour, side))
            for n in used] for side in (base, new)}
        if all(v is not None for side in values.values() for v in side):
            rows.append(row_of(LADDER_PASS, metric, values[base], values[new], settings))
        elif settings.gates(LADDER_PASS, metric):
            gate = next(k for k, v in LADDER_GATE_NAMES.items() if v == metric)
            missing = [f"r{n} {side}" for side in values for n, v in zip(used, values[side])
                       if v is None]
            why = ("the runs are not ladders (run --ladder)" if not capacities else
                   f"{', '.join(missing)} has none" + (
                       "" if metric != "usd_per_million" else " (--cost-per-hour SIDE=USD)")
                   + ("" if metric == "plateau_req_per_s" or settings.slo_p95_ms
                      or any(c.slo_p95_ms for c in capacities.values())
                      else "; no SLO (--slo-p95-ms)"))
            raise RouterLatencyError(f"no {metric_title(metric)} row to gate: {why}",
                                     "--gate " + gate)
    return rows


def most_common_title(steps: Sequence[Optional[LadderStep]]) -> str:
    """Return the step most rounds name, with how many: 4 callers (3 of 3 rounds)."""
    titles = collections.Counter(s.title if s else "none" for s in steps)
    title, count = titles.most_common(1)[0]
    return f"{title} ({count} of {plural(len(steps), 'round')})"


def median_span(values: Sequence[Optional[float]], unit: str) -> str:
    """Return the median of figures over rounds with their range: 387 req/s (380-391 over
    3 rounds)."""
    known = [v for v in values if v is not None]
    if not known:
        return "n/a"
    return (f"{fmt_value(statistics.median(known))} {unit} "
            f"({span_text(min(known), max(known))} over {plural(len(known), 'round')})")


def side_capacity_sentences(ladders: Ladders, side: str) -> List[str]:
    """Return what a side's ladders derive over the used rounds, in sentences: the plateau,
    the knee, capacity within the SLO and cost per million requests."""
    found = [c for _, s, c in ladders.capacity if s == side]
    if not found:
        return []
    who = "requests" if found[0].open_loop else "callers"
    slo = found[0].slo_p95_ms
    sentences = [
        f"{side}: throughput stops growing from {most_common_title([c.plateau for c in found])}"
        f" at {median_span([c.plateau_req_per_s for c in found], 'req/s')}; beyond, {who} queue "
        f"(p50 grows with {'the rate' if found[0].open_loop else 'callers'})",
        f"{side}: the knee (beyond it p50 grows faster than throughput) at "
        f"{most_common_title([c.knee[0] if c.knee else None for c in found])}"]
    if slo is not None and all(c.capacity_req_per_s is None for c in found):
        sentences.append(f"{side}: capacity within p95 <= {slo:g} ms: none in any round "
                         f"({found[0].capacity_how} in r{ladders.used[0]})")
    elif slo is not None:
        interpolated = sum(c.capacity_how.startswith("interpolated") for c in found)
        sentences.append(
            f"{side}: capacity within p95 <= {slo:g} ms: "
            f"{median_span([c.capacity_req_per_s for c in found], 'req/s')}"
            + (f", interpolated between steps in {interpolated} of {len(found)}"
               if interpolated else ", each a measured step") + (
                   " (open loop)" if found[0].open_loop else ""))
    cost = cost_for(ladders.cost_per_hour, side)
    if cost:
        at = "capacity" if slo is not None else "the plateau"
        sentences.append(
            f"{side}: USD {cost[0]:g} per {cost[1]}-hour / (req/s at {at} x 3600) x 10^6 = USD "
            + median_span([ladder_figure(c, 'usd_per_million', cost) for c in found],
                          "per million routed requests"))
    return sentences


def format_capacity_rounds(found: Ladders) -> List[str]:
    """Return both sides' ladder sentences and the ratio of their costs, or nothing for runs
    of fixed passes."""
    lines = [line for side in (found.base, found.new)
             for line in side_capacity_sentences(found, side)]
    cost = next((r for r in found.rows if r.metric == "usd_per_million"), None)
    if cost is not None:
        lines.append(f"cost per million requests, {found.new}/{found.base}: "
                     f"{math.exp(cost.log_ratio.mean):.3g} [{math.exp(cost.log_ratio.low):.3g}, "
                     f"{math.exp(cost.log_ratio.high):.3g}] ({row_change_text(cost)})")
    stops = sorted({c.stop.split(":")[0] for _, _, c in found.capacity})
    return ([f"ladders stopped: {'; '.join(stops)}"] + lines + missing_ladder_rows(found)) \
        if lines else []


def missing_ladder_rows(found: Ladders) -> List[str]:
    """Return why a ladder row is not in the table: which rounds and sides lack its figure."""
    shown = {r.metric for r in found.rows if r.pass_name == LADDER_PASS}
    notes = []
    for metric in (m for m in LADDER_METRICS if m not in shown):
        costs = {side: cost_for(found.cost_per_hour, side)
                 for side in (found.base, found.new)}
        lacking = [f"r{n} {side}" for n, side, c in found.capacity
                   if ladder_figure(c, metric, costs[side]) is None]
        why = ("no --cost-per-hour SIDE=USD for " + " and ".join(s for s, c in costs.items()
                                                                 if not c)
               if metric == "usd_per_million" and not all(costs.values())
               else f"none in {', '.join(lacking[:6])}{', ...' if len(lacking) > 6 else ''}")
        notes.append(f"no {metric_title(metric)} row: {why}")
    return notes


def capacity_json(capacity: Capacity, number: int, side: str) -> dict:
    """Return what one round's ladder of one side derives, as JSON."""
    return {"round": number, "side": side, "open_loop": capacity.open_loop,
            "margin_pct": capacity.margin_pct, "slo_p95_ms": capacity.slo_p95_ms,
            "steps": [s._asdict() for s in capacity.steps],
            "plateau": capacity.plateau and capacity.plateau.name,
            "plateau_req_per_s": capacity.plateau_req_per_s,
            "knee": capacity.knee and capacity.knee[0].name,
            "capacity_req_per_s": capacity.capacity_req_per_s,
            "capacity_how": capacity.capacity_how, "stop": capacity.stop,
            "longest_gap_s": capacity.longest_gap_s}


class Ladders(NamedTuple):
    """What the ladders of the used rounds derive, as the report shows it."""
    base: str
    new: str
    used: Tuple[int, ...]
    rows: Tuple[Row, ...]  # every row of the report: the ladder's own among them
    cost_per_hour: Tuple[Tuple[Optional[str], float, str], ...]  # --cost-per-hour
    capacity: Tuple[Tuple[int, str, Capacity], ...]  # (round, side, Capacity), used rounds


def capacity_section(found: Ladders) -> Section:
    """Return both sides' ladders over the rounds as the report's section (JSON: capacity);
    nothing drawn for runs of fixed passes."""
    return Section(key="capacity", blocks=tuple(format_capacity_rounds(found)),
                   json={"capacity": [capacity_json(c, n, side)
                                      for n, side, c in found.capacity]})
