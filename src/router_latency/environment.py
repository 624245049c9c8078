"""Environment and order: each round's surroundings per side (load, router CPUs, GPU state,
restarts, flags), the start order's balance and effect, the outlier rounds, and their
sections."""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .constants import NamedTuple
from .words import fmt_value, span_text, fmt_reading
from .report import Block, Lines, Panel, Section, Table
from .stats import composite_log_ratios, order_effect, OrderEffect, outlier_rounds
from .gpu import GPU_RANGED
from .runfile import RunFile
from .captured import PassEnvironment
from .requests import pass_title
from .phases import Thresholds
from .roundset import Rounds
from .gate import Row

__all__ = ["environment_rows", "environment_section", "order_and_outliers",
           "order_balance", "order_section", "OrderAndOutliers", "RoundOrder"]

OUTLIER_MIN_ROUNDS = 5  # below this, a median/MAD outlier is a guess


class OrderAndOutliers(NamedTuple):
    """The crossover order effect and the outlier rounds, on the gated rows' composite."""
    order_effect: Optional[OrderEffect]  # None: no gated row, or no round of one start order
    outliers: List[int]  # rounds whose composite is an outlier (median/MAD)
    # (round, its composite change %, the median's %), descriptive
    outlier_changes: Tuple[Tuple[int, float, float], ...]


def order_and_outliers(used: Sequence[int], rows: Sequence[Row],
                       first: RoundOrder) -> OrderAndOutliers:
    """Return (the crossover order effect, outlier rounds, (round, its change %, the median
    change %) of each), all on the per-round mean of the gated rows' worse-direction log
    ratios; first: which side started each round (order_balance).

    Outliers are described, never judged again without them: a verdict recomputed after
    choosing what to drop is a second test, and the two together fail more often than
    either. The gate's answer to a noisy round is the wider interval it gives.
    """
    import statistics
    gated = [r.worse_series for r in rows if r.gated]
    if not gated:
        return OrderAndOutliers(order_effect=None, outliers=[], outlier_changes=())
    composite = dict(zip(used, composite_log_ratios(gated)))
    effect = order_effect([composite[n] for n in first.base_first],
                          [composite[n] for n in first.new_first]) \
        if first.base_first and first.new_first and len(used) > 2 else None
    outliers = [used[i] for i in outlier_rounds([composite[n] for n in used])] \
        if len(used) >= OUTLIER_MIN_ROUNDS else []
    centre = 100 * math.expm1(statistics.median(composite.values()))
    return OrderAndOutliers(order_effect=effect, outliers=outliers, outlier_changes=tuple(
        (n, 100 * math.expm1(composite[n]), centre) for n in outliers))


def suspect_fields(run: RunFile, envs: Sequence[PassEnvironment]) -> dict:
    """Return one round's side's router CPU per request, foreign vCPUs, GPU state ranges, slow
    passes and cpufreq governors: those fields of its EnvironmentRow, by name."""
    def span(values: Iterable[Optional[float]]) -> Tuple[Optional[float], Optional[float]]:
        known = [v for v in values if v is not None]
        return (min(known), max(known)) if known else (None, None)

    foreign = [e.foreign_vcpus for e in envs if e.foreign_vcpus is not None]
    limit = run.thresholds.max_foreign_cpus
    router_low, router_high = span(e.router_cpu_ms for e in envs)
    # memory used is not here: the gpu_mib range of all devices together
    gpu = {field.key: span(v for e in envs for v in e.gpu_state.get(field.key, ()))
           for field in GPU_RANGED}
    return {"router_cpu_ms_min": router_low, "router_cpu_ms_max": router_high,
            "foreign_vcpus_max": max(foreign) if foreign else None,
            "max_foreign_cpus": limit,
            "above_foreign_limit": bool(foreign) and max(foreign) > limit,
            "gpu_ranges": {key: found for key, found in gpu.items() if found != (None, None)},
            "slow_passes": tuple(p.name for p in run.passes
                                 if not p.discarded and run.slow_windows(p)),
            "governors": tuple(run.host_settings.governors if run.host_settings else ())}


def suspect_flags(row: EnvironmentRow) -> List[str]:
    """Return the flags of an environment row's suspect figures."""
    flags = []
    if row.above_foreign_limit:
        flags.append(f"foreign cpus above {row.max_foreign_cpus:g}")
    if row.slow_passes:
        flags.append("slow phase: " + ", ".join(pass_title(n) for n in row.slow_passes))
    slow_governors = [g for g in row.governors if g != "performance"]
    if slow_governors:
        flags.append(f"governor {'/'.join(slow_governors)}")
    return flags


def side_environment(number: int, side: str, run: RunFile) -> EnvironmentRow:
    """Return a round's side's environment row, without its flags: load, CPU set, GPU
    memory, faults and driver CPU over its passes, and the suspect fields."""
    envs = [p.environment for p in run.passes]
    lows = [e.load_min for e in envs if e.load_min is not None]
    highs = [e.load_max for e in envs if e.load_max is not None]
    peaks = [e.peak_load for e in envs if e.peak_load is not None]
    cpus = sorted({e.router_cpus for e in envs if e.router_cpus is not None})
    gpu = [v for e in envs for v in e.gpu_mib]
    faults = [e.faults for e in envs if e.faults is not None]
    cpu_s = [e.driver_cpu_s for e in envs if e.driver_cpu_s is not None]
    walls = [e.wall_s for e in envs if e.driver_cpu_s is not None and e.wall_s]
    return EnvironmentRow(
        round=number, side=side, load_min=min(lows) if lows else None,
        load_max=max(highs) if highs else None, router_cpus=" ".join(cpus) if cpus else None,
        gpu_mib_min=min(gpu) if gpu else None, gpu_mib_max=max(gpu) if gpu else None,
        faults=math.fsum(faults) if faults else None,
        discarded_attempts=sum(e.discarded_attempts for e in envs),
        driver_cpu_s=round(math.fsum(cpu_s), 3) if cpu_s else None,
        driver_cpu_pct=round(100 * math.fsum(cpu_s) / math.fsum(walls), 1)
        if walls and math.fsum(walls) > 0 else None,
        above_load_limit=bool(peaks) and run.max_load is not None and max(peaks) > run.max_load,
        max_load=run.max_load, **suspect_fields(run, envs))


def environment_flags(row: EnvironmentRow, usual_cpus: Optional[str]) -> Tuple[str, ...]:
    """Return a row's flags: a CPU set other than its side's usual one, restarts and faults,
    load above the limit, discarded attempts, then its suspect figures."""
    flags = [f"cpuset differs (usually {usual_cpus})"] \
        if row.router_cpus and row.router_cpus != usual_cpus else []
    if row.faults:
        flags.append("restart/fault")
    if row.above_load_limit:
        flags.append(f"load above {row.max_load:g}")
    if row.discarded_attempts:
        flags.append("discarded attempts")
    return tuple(flags + suspect_flags(row))


def environment_rows(rounds: Rounds) -> List[EnvironmentRow]:
    """Return one EnvironmentRow per round and side: load, CPU set, GPU memory, faults,
    driver CPU, and flags."""
    runs, base, new, _ = rounds
    rows = [side_environment(number, side, sides[side])
            for number, sides in runs.items() for side in (base, new)]
    usual = {}
    for side in (base, new):  # the CPU set most rounds of a side ran on
        seen = [r.router_cpus for r in rows if r.side == side and r.router_cpus]
        usual[side] = max(set(seen), key=seen.count) if seen else None
    return [row._replace(flags=environment_flags(row, usual[row.side])) for row in rows]


class OrderDifference(NamedTuple):
    """A pass's mean p50 difference, new - base, over the rounds each side started first."""
    pass_name: str
    base_first: Optional[float]  # None: no used round that side started
    new_first: Optional[float]


class RoundOrder(NamedTuple):
    """Which side started each round, and the paired p50 difference by that order."""
    first: Dict[str, Optional[str]]  # "r<N>" -> the side that started, None: unknown
    base_first: List[int]  # used rounds the base side started
    new_first: List[int]
    unknown: List[int]  # used rounds whose start order the files do not tell
    balanced: bool  # each side started about half the used rounds
    p50_difference_by_order: List[OrderDifference]  # per pass


def order_balance(rounds: Rounds, rows: Sequence[Row]) -> RoundOrder:
    """Return which side started first in each round and the paired p50 difference by order."""
    runs = rounds.runs
    base, new, used = rounds.base, rounds.new, rounds.used
    first = {}
    for number, sides in runs.items():
        b, n = sides[base], sides[new]
        # -1: base started first, 1: new did, 0: together or unknown
        if b.started_unix is not None and n.started_unix is not None:
            order = (b.started_unix > n.started_unix) - (b.started_unix < n.started_unix)
        elif b.started_utc and n.started_utc:  # ISO times in UTC: their text sorts as time
            order = (b.started_utc > n.started_utc) - (b.started_utc < n.started_utc)
        else:
            order = 0
        first[number] = None if order == 0 else base if order < 0 else new
    base_first = [r for r in used if first[r] == base]
    new_first = [r for r in used if first[r] == new]
    effects = []
    for row in rows:
        if row.metric != "p50_ms":
            continue
        diffs = dict(zip(used, (n - b for b, n in zip(row.base_values, row.new_values))))
        mean = {key: (math.fsum(diffs[r] for r in group) / len(group) if group else None)
                for key, group in (("base_first", base_first), ("new_first", new_first))}
        effects.append(OrderDifference(row.pass_name, **mean))
    unknown = [r for r in used if first[r] is None]
    return RoundOrder(first={f"r{k}": v for k, v in first.items()}, base_first=base_first,
                      new_first=new_first, unknown=unknown,
                      balanced=not unknown and abs(len(base_first) - len(new_first)) <= 1,
                      p50_difference_by_order=effects)


def environment_blocks(rows: Sequence[EnvironmentRow]) -> List[Block]:
    """Return the per-round environment tables, a blank line apart, and which columns no run
    recorded."""
    tables, empty = environment_tables(rows)
    blocks: List[Block] = []
    for table in tables:
        blocks += ([""] if blocks else []) + [table]
    if empty:
        blocks += ["", f"not recorded in any run: {', '.join(empty)}"]
    return blocks


class EnvironmentTables(NamedTuple):
    """A rounds report's environment as Tables, and the columns no run recorded."""
    tables: List[Table]  # per round; then router CPU and GPU state where any run recorded them
    not_recorded: List[str]  # the names of the columns left out: all n/a in every run


def environment_tables(rows: Sequence[EnvironmentRow]) -> EnvironmentTables:
    """Return (the environment Tables, the names of the columns left out): the per-round
    table, and that of router CPU and GPU state where the runs recorded any; a column no run
    recorded (all n/a: GPU fields on a node without a GPU) is left out."""
    span = span_text
    table = []
    for row in rows:
        cpu = "n/a" if row.driver_cpu_s is None else (
            f"{row.driver_cpu_s:.2f} s" + (f" ({row.driver_cpu_pct:.0f}%)"
                                          if row.driver_cpu_pct is not None else ""))
        table.append([f"r{row.round}", row.side, span(row.load_min, row.load_max),
                      row.router_cpus or "n/a", span(row.gpu_mib_min, row.gpu_mib_max),
                      "n/a" if row.faults is None else f"{row.faults:g}",
                      str(row.discarded_attempts), cpu, ", ".join(row.flags) or "-"])
    tables = [Table("", ["round", "side", "load", "router cpus", "gpu MiB", "restarts/faults",
                         "discarded", "driver cpu", "flags"], table,
                    [False, False, True, False, True, True, True, True, False])]
    tables += router_and_gpu_tables(rows)
    kept: List[Table] = []
    empty: List[str] = []
    for item in tables:
        item, dropped = without_empty_columns(item)
        kept.append(item)
        empty += [name for name in dropped if name not in empty]
    return EnvironmentTables(tables=kept, not_recorded=empty)


def without_empty_columns(table: Table) -> Tuple[Table, List[str]]:
    """Return (the table without its columns of only n/a, the names of those columns); the
    first two columns (round, side) always stay."""
    keep = [i for i in range(len(table.header))
            if i < 2 or any(row[i] != "n/a" for row in table.rows) or not table.rows]
    dropped = [name for i, name in enumerate(table.header) if i not in keep]
    return (Table(table.caption, [table.header[i] for i in keep],
                  [[row[i] for i in keep] for row in table.rows],
                  [table.right[i] for i in keep]), dropped)


def router_and_gpu_tables(rows: Sequence[EnvironmentRow]) -> List[Table]:
    """Return the per-round Table of router CPU per request, foreign vCPUs, GPU state ranges
    and slow passes; none when no run recorded any."""
    if not any(r.router_cpu_ms_min is not None or r.gpu_ranges
               or r.foreign_vcpus_max is not None or r.slow_passes for r in rows):
        return []
    table = [[f"r{r.round}", r.side, span_text(r.router_cpu_ms_min, r.router_cpu_ms_max),
              fmt_value(r.foreign_vcpus_max)]
             + [span_text(*r.gpu_range(f.key), fmt_reading) for f in GPU_RANGED]
             + [", ".join(pass_title(n) for n in r.slow_passes) or "-"]
             for r in rows]
    return [Table("", ["round", "side", "router cpu ms/req", "foreign vCPUs (max)",
                       *(f.column for f in GPU_RANGED), "slow phases"], table,
                  [False, False] + [True] * (2 + len(GPU_RANGED)) + [False])]


def format_order(order: RoundOrder, found: OrderAndOutliers, base: str, new: str) -> List[str]:
    """Return the lines on start order balance, its effect, and outlier rounds."""

    def names(group: list) -> str:
        return ", ".join(f"r{n}" for n in group) or "none"

    lines = [f"order: {base} first in {names(order.base_first)}; {new} first in "
             f"{names(order.new_first)}" + (f"; unknown in {names(order.unknown)}"
                                            if order.unknown else "")
             + ("; balanced" if order.balanced else "")]
    if not order.balanced:
        lines.append("warning: start order unbalanced: rounds should alternate which side "
                     "starts first")
    effects = [f"{pass_title(e.pass_name)} {fmt_value(e.base_first)} / "
               f"{fmt_value(e.new_first)}" for e in order.p50_difference_by_order]
    if order.base_first and order.new_first and effects:
        lines.append(f"mean p50 {new} - {base} when {base} / {new} started first: "
                     + "; ".join(effects))
    effect = found.order_effect
    if effect is not None:
        lines.append(f"order effect (crossover, gated rows): running second costs "
                     f"{100 * math.expm1(effect.estimate):+.1f}% "
                     f"[{100 * math.expm1(effect.low):+.1f}%, "
                     f"{100 * math.expm1(effect.high):+.1f}%]")
    if found.outliers:
        lines.append("outlier rounds (median/MAD of the gated rows' mean; described only, the "
                     "verdict stands on every round): " + ", ".join(
                         f"r{n} {change:+.1f}% against the median {centre:+.1f}%"
                         for n, change, centre in found.outlier_changes))
    return lines


def order_json(order: RoundOrder) -> dict:
    """Return the start order as the rounds JSON holds it."""
    return {**order._asdict(), "p50_difference_by_order": [
        {"pass": e.pass_name, "base_first": e.base_first, "new_first": e.new_first}
        for e in order.p50_difference_by_order]}


def environment_section(rows: Sequence[EnvironmentRow]) -> Section:
    """Return the surroundings of each round and side as the report's section (JSON:
    environment); a blank line below it in text."""
    return Section(key="environment", title="Environment",
                   blocks=(*environment_blocks(rows), ""),
                   json={"environment": [row.to_json() for row in rows]},
                   page=(environment_panel(rows),), record=((40, faults_sentence(rows)),))


def faults_sentence(rows: Sequence[EnvironmentRow]) -> str:
    """Return the rounds and sides whose router restarted or whose device faulted."""
    faults = [row for row in rows if row.faults]
    if faults:
        return "restarts and device faults: " + ", ".join(
            f"r{row.round} {row.side} {row.faults:g}" for row in faults)
    read = sum(row.faults is not None for row in rows)
    if not read:  # no run read the restart and fault series: nothing is known of them
        return "restarts and device faults: not captured"
    return "restarts and device faults: none" + (
        "" if read == len(rows) else
        f" in the {read} of {len(rows)} runs that captured them")


def environment_panel(rows: Sequence[EnvironmentRow]) -> Panel:
    """Return the environment on the report page: its tables, then the closing list, which
    starts with the columns no run recorded."""
    tables, empty = environment_tables(rows)
    lines = (f"not recorded in any run: {', '.join(empty)}",) if empty else ()
    return Panel(place=80, heading="Environment", apart=True, items=(*tables, Lines(lines)))


def order_section(order: RoundOrder, found: OrderAndOutliers, base: str, new: str) -> Section:
    """Return the start order, its effect and the outlier rounds as the report's section
    (JSON: order, order_effect, outliers, outlier_changes); it runs on in text."""
    lines = format_order(order, found, base, new)
    return Section(key="order", blocks=tuple(lines), apart=False,
                   page=(Panel(place=83, items=(Lines(tuple(lines)),)),),
                   json={"order": order_json(order),
                         "order_effect": None if found.order_effect is None
                         else found.order_effect._asdict(),
                         "outliers": list(found.outliers),
                         "outlier_changes": [{"round": n, "change_pct": c, "median_pct": m}
                                             for n, c, m in found.outlier_changes]})


class EnvironmentRow(NamedTuple):
    """One round's side of the rounds report's environment: its passes' surroundings over
    the run (load, CPU set, GPU memory and state, faults, driver and router CPU), and the
    flags of what was suspect."""
    round: int
    side: str
    load_min: Optional[float] = None
    load_max: Optional[float] = None
    router_cpus: Optional[str] = None  # the CPU sets seen, space-separated
    gpu_mib_min: Optional[float] = None  # memory used, summed over devices
    gpu_mib_max: Optional[float] = None
    faults: Optional[float] = None  # increases of restart/fault series; None: not read
    discarded_attempts: int = 0
    driver_cpu_s: Optional[float] = None
    driver_cpu_pct: Optional[float] = None  # of the passes' wall time
    above_load_limit: bool = False
    max_load: Optional[float] = None
    router_cpu_ms_min: Optional[float] = None  # the router's CPU time per request
    router_cpu_ms_max: Optional[float] = None
    foreign_vcpus_max: Optional[float] = None
    max_foreign_cpus: float = Thresholds().max_foreign_cpus
    above_foreign_limit: bool = False
    # GPU_RANGED key -> (lowest, highest) over devices, before and after every pass
    gpu_ranges: dict[str, tuple[Optional[float], Optional[float]]] = {}
    slow_passes: tuple[str, ...] = ()  # the names of passes with a slow phase
    governors: tuple[str, ...] = ()  # the cpufreq governors of the driver's and router's CPUs
    flags: tuple[str, ...] = ()

    def gpu_range(self, key: str) -> tuple[Optional[float], Optional[float]]:
        """Return (lowest, highest) of a GPU_RANGED figure; (None, None) when not read."""
        return self.gpu_ranges.get(key, (None, None))

    def to_json(self) -> dict:
        """Return the row as rounds --format json writes it: the GPU ranges flat, by key."""
        document: dict = {}
        for key, value in self._asdict().items():
            if key == "gpu_ranges":
                for field in GPU_RANGED:
                    low, high = self.gpu_range(field.key)
                    document.update({f"gpu_{field.key}_min": low, f"gpu_{field.key}_max": high})
            else:
                document[key] = list(value) if isinstance(value, tuple) else value
        return document
