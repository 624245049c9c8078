"""The ladder over rounds: each used round's Capacity per side, the rows it derives (plateau,
capacity within the SLO, cost per million requests), and their section."""

from __future__ import annotations

import collections
import math
from typing import List, Optional, Sequence, Tuple

from .constants import LADDER_GATE_NAMES, LADDER_METRICS, LADDER_PASS, NamedTuple
from .errors import RouterLatencyError
from .words import fmt_hundredths, fmt_value, metric_title, plural, span_text
from .report import Lines, Panel, ParetoPlot, render_table, Scale, Section, Series
from .runfile import RunFile
from .ladder import Capacity, cost_for, LadderStep, run_capacity, usd_per_million
from .roundset import Rounds
from .gate import GateSettings, Row, row_of
from .judged import row_change_text

__all__ = ["capacity_section", "energy_beside_cost", "format_capacity",
           "format_compare_capacity", "ladder_capacities", "ladder_rows", "Ladders"]


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
    import statistics
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
    lines = format_capacity_rounds(found)
    return Section(key="capacity", blocks=tuple(lines), record=tuple((80, s) for s in lines),
                   json={"capacity": [capacity_json(c, n, side)
                                      for n, side, c in found.capacity]},
                   page=(capacity_panel(found),))


def capacity_panel(found: Ladders) -> Panel:
    """Return the ladders on the report page: the Pareto plot and the sentences under it;
    nothing for runs of fixed passes."""
    plot = pareto_plot(found)
    if not any(item.points for item in plot.faint + plot.bold):
        return Panel(place=30)
    return Panel(place=30, heading="Capacity: throughput against latency",
                 keys=tuple((index, side) for side, index in {found.base: 0, found.new: 1}.items()),
                 note="faint, each round's ladder; bold, the median over rounds of each step; "
                      "dashed red, the SLO; diamond, each side's median capacity within it "
                      "(steps that shed are left out).",
                 items=(plot, Lines(tuple(format_capacity_rounds(found)))))


def pareto_plot(found: Ladders) -> ParetoPlot:
    """Return the Pareto plot of the ladders: each round's steps as (req/s, p95) a faint
    line, per side the median over rounds of each step every round has a bold one, the SLO,
    and each side's median capacity within it marked on it."""
    import statistics
    faint, bold, capacities = [], [], {}
    for side, index in {found.base: 0, found.new: 1}.items():
        ladders = [(n, c) for n, s, c in found.capacity if s == side]
        rounds = [[st for st in c.steps if not st.shed] for _, c in ladders]
        faint += [Series(tuple((st.req_per_s, st.p95_ms) for st in steps), index, False,
                         f"r{n} {side}") for (n, _), steps in zip(ladders, rounds)]
        names = [st.name for st in rounds[0]] if rounds else []
        common = [name for name in names if all(any(st.name == name for st in steps)
                                                for steps in rounds)]
        medians = tuple((statistics.median(st.req_per_s for steps in rounds for st in steps
                                           if st.name == name),
                         statistics.median(st.p95_ms for steps in rounds for st in steps
                                           if st.name == name)) for name in common)
        bold.append(Series(medians, index, False, f"{side}: median over rounds"))
        known = [c.capacity_req_per_s for _, c in ladders if c.capacity_req_per_s is not None]
        if known:
            capacities[side] = (index, statistics.median(known))
    slo = next((c.slo_p95_ms for _, _, c in found.capacity), None)
    return ParetoPlot(
        title="Throughput against p95, per ladder step", label="throughput against p95",
        x=Scale("throughput, req/s (routed)"), y=Scale("p95 latency, ms (log scale)", log=True),
        faint=tuple(faint), bold=tuple(bold), limit=slo, limit_label=f"SLO: p95 {slo:g} ms"
        if slo else "", marks=tuple((index, value, f"{side} capacity {fmt_value(value)} req/s")
                                    for side, (index, value) in capacities.items()))


def plateau_sentence(capacity: Capacity) -> str:
    """Return where throughput stops growing, in a sentence, or that it did not."""
    who = "requests" if capacity.open_loop else "callers"
    counted = [s for s in capacity.steps if not s.shed]
    shed = [s for s in capacity.steps if s.shed]
    limit = f"; the router shed from {shed[0].title} (its admission limit)" if shed else ""
    if capacity.plateau is None or capacity.plateau_req_per_s is None:  # both, or neither
        if not counted:
            return "no step was measured without shedding: no plateau" + limit
        return (f"throughput still grew at the last step counted ({counted[-1].title}, "
                f"{fmt_hundredths(counted[-1].req_per_s)} req/s): no plateau within the ladder"
                + limit)
    more = "the rate" if capacity.open_loop else "callers"
    return (f"throughput stops growing from {capacity.plateau.title} at "
            f"{fmt_hundredths(capacity.plateau_req_per_s)} req/s; beyond, {who} queue (p50 grows "
            f"with {more})")


def knee_sentence(capacity: Capacity) -> str:
    """Return the knee in a sentence: where latency starts to grow faster than throughput."""
    if capacity.knee is None:
        return "no knee: p50 never grew faster than throughput from one step to the next"
    low, high = capacity.knee
    return (f"the knee is at {low.title}: beyond, latency grows faster than throughput (to "
            f"{high.title}: p50 x{high.p50_ms / low.p50_ms:.2f}, {fmt_value(low.p50_ms)} -> "
            f"{fmt_value(high.p50_ms)} ms, for req/s x{high.req_per_s / low.req_per_s:.2f})")


def capacity_sentence(capacity: Capacity) -> str:
    """Return capacity within the SLO in a sentence, saying how it was found."""
    if capacity.slo_p95_ms is None:
        return "capacity within an SLO: none given (--slo-p95-ms)"
    what = "open loop, latency from the schedule" if capacity.open_loop else "closed loop"
    if capacity.capacity_req_per_s is None:
        return f"capacity within p95 <= {capacity.slo_p95_ms:g} ms: none ({capacity.capacity_how})"
    return (f"capacity within p95 <= {capacity.slo_p95_ms:g} ms: "
            f"{fmt_hundredths(capacity.capacity_req_per_s)} req/s ({what}), "
            f"{capacity.capacity_how}")


def cost_sentence(capacity: Capacity, cost: tuple) -> Optional[str]:
    """Return USD per million routed requests at capacity with its arithmetic, or None
    without a cost."""
    if not cost:
        return None
    usd, unit = cost
    served = capacity.served_req_per_s
    at = "capacity within the SLO" if capacity.slo_p95_ms is not None else "the plateau"
    if served is None:
        return f"cost per million requests: no {at} to count it at"
    return (f"cost at {at}: USD {usd:g} per {unit}-hour / ({fmt_hundredths(served)} req/s x 3600) "
            f"x 10^6 = USD {usd_per_million(usd, served):.4g} per million routed requests")


def energy_beside_cost(run: RunFile, capacity: Capacity, cost: tuple) -> List[str]:
    """Return, with a cost per hour, the router's GPUs' energy per routed request at the step
    nearest the throughput the cost is counted at, and a million requests' kWh; [] without
    a cost or a sampled energy."""
    served = capacity.served_req_per_s
    if not cost or served is None:
        return []
    steps = [(abs(step.req_per_s - served), step, item.environment.energy_j)
             for step in capacity.steps for item in (run.pass_named(step.name),)
             if item is not None]
    known = sorted((gap, step.title, joules) for gap, step, joules in steps if joules)
    if not known:
        return []
    _, title, joules = known[0]
    return [f"energy beside the cost: the router's GPUs {joules:.4g} J per routed request at "
            f"{title} (the step nearest {fmt_hundredths(served)} req/s) = "
            f"{joules / 3.6:.4g} kWh per million routed requests"]


def format_capacity(capacity: Capacity, cost: tuple = ()) -> List[str]:
    """Return a ladder's steps as a table and what they give, in sentences."""
    knee = capacity.knee[0] if capacity.knee else None
    rows = [[s.title, fmt_hundredths(s.req_per_s), fmt_hundredths(s.p50_ms),
             fmt_hundredths(s.p95_ms),
             str(s.shed), " ".join(word for word, hit in (
                 ("plateau", s is capacity.plateau), ("knee", s is knee),
                 ("shed: not counted", s.shed > 0)) if hit)]
            for s in capacity.steps]
    lines = [f"ladder: {plural(len(capacity.steps), 'step')}, margin "
             f"{capacity.margin_pct:g}%; stopped: {capacity.stop}"]
    lines += render_table(["step", "req/s", "p50 ms", "p95 ms", "shed", ""], rows,
                          right=[False, True, True, True, True, False])
    lines += [plateau_sentence(capacity), knee_sentence(capacity), capacity_sentence(capacity)]
    lines += [line for line in (cost_sentence(capacity, cost),) if line]
    if capacity.longest_gap_s is not None:
        lines.append(f"steps back to back: at most {capacity.longest_gap_s:g} s between two")
    return lines


def format_compare_capacity(runs: Sequence[RunFile], slo_p95_ms: Optional[float],
                            costs: Sequence[tuple]) -> List[str]:
    """Return, for two ladder runs, each one's ladder and the ratio of their capacity and
    of their cost per million requests (B over A); nothing unless both are ladders."""
    found = [c for c in (run_capacity(run, slo_p95_ms) for run in runs) if c is not None]
    if len(found) < len(runs):
        return []
    lines = []
    for run, capacity in zip(runs, found):
        lines += ["", f"{run.label}: " + format_capacity(capacity, cost_for(costs, run.label))[0]]
        lines += format_capacity(capacity, cost_for(costs, run.label))[1:]
    (a, b), labels = found, [run.label for run in runs]
    served = [v for v in (a.served_req_per_s, b.served_req_per_s) if v is not None]
    what = "capacity within the SLO" if a.slo_p95_ms is not None else "plateau req/s"
    if len(served) == 2:
        lines += ["", f"{what}, {labels[1]}/{labels[0]}: {served[1] / served[0]:.3g}"]
        prices = [price for price in (cost_for(costs, label) for label in labels) if price]
        if len(prices) == len(labels):
            usd = [usd_per_million(p[0], v) for p, v in zip(prices, served)]
            lines.append(f"cost per million requests, {labels[1]}/{labels[0]}: "
                         f"{usd[1] / usd[0]:.3g} (USD {usd[1]:.4g} against {usd[0]:.4g})")
    return lines
