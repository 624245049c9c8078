"""The noise of the rounds taken apart, a plan in node time, and the instances' speed groups.

Each row's round-to-round spread (the log standard deviation of one round's change) has two
sources: the statistic's own sampling noise within one router instance, which more requests
per pass narrow, and the instance-to-instance (round-to-round) part, which only more rounds
(fresh instances) narrow. Each pass is split into its sendings (--repeat, --duration) or, for
a pass that sends the corpus once, into two halves interleaved by prompt (even and odd ids);
the parts are paired, new minus base per sending (the same prompts, the same place in the
pass), so that a warm-up both sides share and the prompts' differences cancel, and
variance.py takes them apart, each part with its interval: the within part (scaled to a whole
pass; it includes the drift within an instance that resampling requests would miss), the
between part the rest of the spread, held at 0, "not told apart", where the within part
explains the whole spread.

The plan: the requests per pass and rounds that would decide at the least node time, each
round costed from what the run files measured (start-up to ready, warm-up, each pass's wall
time, and the gap between runs: stopping one router and starting the next)."""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

from .constants import MAX_PLAN_ROUNDS, NamedTuple, ROW_METRICS
from .words import metric_title, plural
from .report import Lines, Panel, Section
from .stats import percentiles, rounds_needed
from .variance import CONFIDENCE, NoiseParts, noise_parts, Part
from .runfile import PassRecord, RunFile
from .requests import pass_title, Request
from .roundset import Rounds
from .gate import (BEYOND_LIMIT, DECIDE_PROBABILITY, GateOutcome, GateSettings, missed_text, Row,
                   spread_bound)

__all__ = ["MIN_MODE_ROUNDS", "MODE_GAP_SDS", "noise_findings", "noise_json", "NoiseFindings",
           "pass_within", "plan_section", "speed_groups"]


PLAN_PASS_POWER = 0.9  # an unchanged pair passes this often under the plan (every gated row)
PLAN_DETECT_POWER = 0.8  # a gated row slowed by the target alone is found this often
# the plan is made at this one-sided upper confidence bound of each part (as "detects" plugs
# in a bound of the spread), so that its two rates hold over about this share of pilots
PLAN_CONFIDENCE = 0.8
MAX_REPEAT = 64  # the most sendings of the corpus per pass the plan proposes
# the instances a side's pool may have (run_rounds.sh --instances): ports and memory bound it
INSTANCE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
PLAN_GPUS = (1, 8)  # the nodes --plan costs: one GPU, and one instance per GPU on eight
DURATION_SCALES = (0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # of a --duration pass's length
MODE_GAP_SDS = 3.0  # a gap between two instances' speeds this many within-noise SDs apart
MIN_MODE_ROUNDS = 4  # fewer rounds of a side say nothing of groups
QUANTILES = {"p50_ms": 50.0, "p95_ms": 95.0, "p99_ms": 99.0}
# one `rounds --sequential` look of run_rounds.sh --until-decided, in seconds, where the files
# ran none (a fixed design): about 0.9 s a call on a small node (issue 41 measured it)
LOOK_S = 0.9
LOOK_SEEN = 0.3  # a gap between rounds this share of LOOK_S past the gap within: a look ran
# a pool's instance after its first, where the files hold no pool: from one instance's run to
# the next's (the driver's own start, run_rounds.sh's steps between them), in seconds; a run
# of one instance a round starts its driver while its router starts. bench/pools.py measured
# 0.36-0.41 s a step on a loaded 2-core machine (the tool byte-compiled once, as run_rounds.sh
# runs it); a node with free cores for the driver takes less
INSTANCE_S = 0.4
TOGETHER_WORDS = "; both sides' pools up at once (--together)"


class RowNoise(NamedTuple):
    """A row's spread taken apart: log standard deviations of one round's change."""
    pass_name: str
    metric: str
    parts: NoiseParts  # within one instance, between instances and rounds, with intervals
    split: str  # how a pass was split: "sendings" or "halves" (interleaved by prompt)

    @property
    def within(self) -> float:
        """From the noise within one instance: more requests per pass narrow it."""
        return self.parts.within.value

    @property
    def between(self) -> float:
        """From instance to instance and round to round: only more rounds narrow it."""
        return self.parts.between

    @property
    def capped(self) -> bool:
        """The between part held at 0: the within part explains the whole spread, the two
        are not told apart (what a cap to the spread said before the nested model)."""
        return self.parts.rounds.value == 0.0

    # in percent of the log scale (100 x the log standard deviation), where the two parts add
    # in squares to the spread as printed beside them (spread^2 = within^2 + between^2)
    @property
    def within_pct(self) -> float:
        return 100 * self.within

    @property
    def between_pct(self) -> float:
        return 100 * self.between


class NodeCost(NamedTuple):
    """What one run of a side took on the node, medians over the used runs, in seconds."""
    ready_s: float  # start-up to ready (a pool's: its slowest instance's)
    other_s: float  # warm-up, the timer's floor, load pauses: the rest before and between passes
    gap_s: float  # from one run's end to the next run's start: stop, start, looks
    passes_s: float  # every pass's wall time
    requests: int  # requests of a pass as measured (its median)
    repeat: Optional[int]  # sendings of the corpus per pass; None: --duration passes
    # a round's sequential look (`rounds --sequential` between rounds, --until-decided): the
    # gap between rounds past the gap within one, or LOOK_S where the files ran none
    look_s: float = 0.0
    look_measured: bool = False
    # in a pool, from one instance's run to the next's (the driver's start, the script's
    # steps): measured where the files hold pools, else INSTANCE_S
    instance_s: float = INSTANCE_S
    instance_measured: bool = False
    together: bool = False  # the files' pools of both sides were up at once (--together)

    def pool_run_s(self, scale: float, instances: int, gpus: int = 1) -> float:
        """Seconds one side's pool of `instances` takes: its start-up (to ready, and the gap
        to the next) once, each instance's warm-up and passes, up to `gpus` instances at
        once (--concurrent, one GPU each), and the step from one to the next; one instance:
        a side's run."""
        waves = -(-instances // gpus)
        return self.ready_s + self.gap_s + waves * (self.other_s + self.passes_s * scale) + (
            waves - 1) * self.instance_s

    def round_s(self, scale: float, instances: int = 1, gpus: int = 1,
                together: bool = False) -> float:
        """Seconds one round takes: both sides' pools (one side's after the other's, or with
        `together` both up at once: one start-up, their 2K instances one after another) and
        the look after it."""
        if together:
            return self.pool_run_s(scale, 2 * instances) + self.look_s
        return 2 * self.pool_run_s(scale, instances, gpus) + self.look_s


class NodePlan(NamedTuple):
    """The rounds, instances a side and requests per pass that decide at the least node
    time."""
    rounds: int
    requests_per_pass: int
    node_minutes: float
    repeat: Optional[int]  # run -n that gives those requests; None: --duration passes
    scale: float  # requests per pass against the runs'
    # the rounds at that scale at the low and high ends of the parts' CONFIDENCE intervals
    # (None: past 1,000): what the pilot supports
    rounds_range: Optional[Tuple[int, Optional[int]]] = None
    instances: int = 1  # a side's pool each round (run_rounds.sh --instances)
    gpus: int = 1  # the GPUs it assumes, one instance at a time on each


class SpeedGroup(NamedTuple):
    """Rounds of a side whose instances ran at about one speed."""
    rounds: Tuple[int, ...]
    low: float
    high: float


class InstanceModes(NamedTuple):
    """A side's rounds in speed groups (a pass's p50): instances that keep their own speed."""
    side: str
    pass_name: str
    groups: Tuple[SpeedGroup, ...]


class NoiseFindings(NamedTuple):
    """The rows' noise, the plan (None: none within 1,000 rounds) and the speed groups."""
    rows: Tuple[RowNoise, ...]
    cost: Optional[NodeCost]
    plan: Optional[NodePlan]  # on one GPU
    modes: Tuple[InstanceModes, ...]
    single: Optional[NodePlan] = None  # the plan with one instance a side and round
    on_gpus: Tuple[Tuple[int, Optional[NodePlan]], ...] = ()  # (GPUs, plan) per PLAN_GPUS

    def of(self, row: Row) -> Optional[RowNoise]:
        for item in self.rows:
            if (item.pass_name, item.metric) == (row.pass_name, row.metric):
                return item
        return None


def pass_parts(record: PassRecord) -> Tuple[List[List[Request]], str]:
    """Return a pass's routed requests split into its sendings, or, when it sent the corpus
    once, into two halves interleaved by prompt (even and odd ids: halves in send order
    differ in their prompts and in their place in the pass, and both read as within noise);
    parts under half the largest (a cut-off last sending of a --duration pass) are left
    out."""
    requests = [r for r in record.requests if r.routed and r.latency_ms is not None
                and r.start_ms is not None]
    sendings = sorted({r.rep for r in requests})
    if len(sendings) >= 2:
        parts = [[r for r in requests if r.rep == k] for k in sendings]
        largest = max(len(p) for p in parts)
        return [p for p in parts if 2 * len(p) >= largest], "sendings"
    return [[r for r in requests if r.id % 2 == k] for k in (0, 1)], "halves"


def part_value(part: Sequence[Request], metric: str, split: str = "sendings") -> Optional[float]:
    """Return a row's statistic of one part of a pass; None when it has none."""
    timed = [(r.start_ms, r.latency_ms) for r in part
             if r.start_ms is not None and r.latency_ms is not None]
    latencies = [latency for _, latency in timed]
    if len(latencies) < 2:
        return None
    if metric == "req_per_s" and split == "halves":
        # interleaved halves share one span: their requests over their summed latency move
        # as a pass's req/s does at a fixed concurrency
        total = math.fsum(latencies)
        return 1000 * len(latencies) / total if total > 0 else None
    if metric == "req_per_s":  # its requests over the time from its first send to its last answer
        span = max(start + latency for start, latency in timed) - min(s for s, _ in timed)
        return 1000 * len(latencies) / span if span > 0 else None
    if metric == "mean_ms":
        return math.fsum(latencies) / len(latencies)
    return percentiles(latencies, [QUANTILES[metric]])[0]


def pass_within(record: Optional[PassRecord], metric: str) -> Optional[Tuple[float, str]]:
    """Return the variance of a whole pass's log statistic from within its instance (the
    parts' variance over their count) and how it was split; None when it cannot be split."""
    import statistics
    if record is None or record.discarded or not record.requests:
        return None
    parts, split = pass_parts(record)
    values = [part_value(p, metric, split) for p in parts]
    logs = [math.log(v) for v in values if v is not None and v > 0]
    if len(logs) < 2 or len(logs) < len(parts):
        return None
    return statistics.variance(logs) / len(logs), split


def run_within(run: RunFile, name: str, metric: str) -> Optional[Tuple[float, str]]:
    """Return pass_within of a run's pass; for a pool, of the mean of its instances' log
    statistics (their within variances added, over K^2)."""
    if not run.pool:
        return pass_within(run.pass_named(name), metric)
    found = [pass_within(i.pass_named(name), metric) for i in run.pool]
    if any(f is None for f in found):
        return None
    return (math.fsum(f[0] for f in found if f is not None) / len(found) ** 2,
            next(f[1] for f in found if f is not None))


def side_within(rounds: Rounds, side: str, name: str, metric: str) -> Optional[Tuple[float, str]]:
    """Return a side's within-instance variance of a pass's statistic, pooled over the used
    rounds, and the split; None when a round's pass cannot be split."""
    import statistics
    runs, used = rounds.runs, rounds.used
    found = [run_within(runs[n][side], name, metric) for n in used]
    if not found or any(f is None for f in found):
        return None
    return (statistics.fmean(f[0] for f in found if f is not None),
            next(f[1] for f in found if f is not None))


def part_logs(record: Optional[PassRecord], metric: str) -> Optional[Tuple[List[float], str]]:
    """Return the log statistic of each part of a pass and how it was split; None when it
    cannot be split."""
    if record is None or record.discarded or not record.requests:
        return None
    parts, split = pass_parts(record)
    values = [part_value(p, metric, split) for p in parts]
    if len(values) < 2 or any(v is None or v <= 0 for v in values):
        return None
    return [math.log(v) for v in values if v is not None], split


def paired_table(rounds: Rounds, row: Row) -> Optional[Tuple[Dict[Tuple[int, int, int], float],
                                                           str]]:
    """Return a row's paired differences, new minus base per sending (or half) of each used
    round, keyed (round, instance 0, sending), and the split; None when a pass cannot be
    split alike on both sides."""
    table: Dict[Tuple[int, int, int], float] = {}
    split = ""
    for n in rounds.used:
        found = [part_logs(rounds.runs[n][side].pass_named(row.pass_name), row.metric)
                 for side in rounds.sides]
        if found[0] is None or found[1] is None or found[0][1] != found[1][1]:
            return None
        (base, split), (new, _) = found[0], found[1]
        for k, (b, v) in enumerate(zip(base, new)):
            table[(n, 0, k)] = v - b
        if min(len(base), len(new)) < 2:
            return None
    return table, split


def row_noise(rounds: Rounds, row: Row) -> Optional[RowNoise]:
    """Return a client row's spread taken apart; None for a row no pass splits (ladder
    rows, the router's parts) or fewer than 2 rounds."""
    if row.metric not in ROW_METRICS or len(rounds.used) < 2:
        return None
    paired = paired_table(rounds, row)
    if paired is None:
        return None
    # the row's own spread tops the model, so that the parts add up to the spread judged
    top = row.spread ** 2
    return RowNoise(row.pass_name, row.metric, noise_parts(paired[0], top=top), paired[1])


def run_span(run: RunFile) -> Optional[Tuple[float, float, float]]:
    """Return (start, end, seconds in passes) of a run from its recorded times."""
    measured = [p for p in run.passes if not p.discarded and p.summary is not None
                and p.attempt.started_unix is not None]
    if run.started_unix is None or not measured:
        return None
    ends = [(p.attempt.started_unix or 0.0) + p.measured.wall_s for p in measured]
    return run.started_unix, max(ends), math.fsum(p.measured.wall_s for p in measured)


def side_ready_s(run: RunFile) -> Optional[float]:
    """Return a side's start-up to ready in a round: its run's own wait, or a pool's slowest
    instance's start to ready as run_rounds.sh recorded it (the fact ready_s); None where
    not recorded."""
    if not run.pool:
        return run.ready_after_s
    found = [i.instance.facts.get("ready_s") if i.instance is not None else None
             for i in run.pool]
    numbers = [float(v) for v in found if isinstance(v, (int, float))]
    return max(numbers) if numbers and len(numbers) == len(found) else None


class Timed(NamedTuple):
    """One instance's run on the node's clock, for the cost of a round."""
    start: float
    end: float
    inside: float  # seconds in passes
    own_ready: float  # start-up to ready inside its span (a run of one instance a round)
    ready_before: float  # its pool's start-up before its span (a pool's first run)
    round: int
    side: str
    pooled: bool


def timed_runs(rounds: Rounds) -> Optional[List[Timed]]:
    """Return every used run (a pool's instances each) in start order; None when a run's
    times or a side's start-up are not recorded."""
    found: List[Timed] = []
    for n in rounds.used:
        for side in rounds.sides:
            run = rounds.runs[n][side]
            ready = side_ready_s(run)
            spans = [run_span(i) for i in (run.pool or (run,))]
            if ready is None or any(s is None for s in spans):
                return None
            first = min(s[0] for s in spans if s is not None)
            for span in spans:
                if span is not None:
                    found.append(Timed(*span, 0.0 if run.pool else ready,
                                       ready if run.pool and span[0] == first else 0.0, n,
                                       side, bool(run.pool)))
    return sorted(found)


def node_cost(rounds: Rounds) -> Optional[NodeCost]:
    """Return what one side's run took on the node, medians over the used runs; None when
    the files do not record it (no start time, no ready time). A pool's instances are timed
    each: its start-up once (before its first run), the step from one instance's run to the
    next apart (instance_s), and its side's gap with the start-up taken out."""
    import statistics
    runs, sides, used = rounds.runs, rounds.sides, rounds.used
    timed = timed_runs(rounds)
    if not timed:
        return None
    ready = [side_ready_s(runs[n][s]) for n in used for s in sides]
    # both sides' pools up at once (--together): in a round, the sides alternate more than once
    together = any(sum(1 for a, b in zip(inround, inround[1:]) if a.side != b.side) > 1
                   for inround in ([t for t in timed if t.round == n] for n in used))
    # a gap within a round (base to new) holds a stop and a start; one between rounds also
    # holds the look --until-decided makes after each round: costed apart, so that a plan
    # of many rounds counts its looks (about 0.9 s each on a small node); a step within a
    # pool (or --together's round) is an instance's
    within_gaps: List[float] = []
    between_gaps: List[float] = []
    steps: List[float] = []
    for before, after in zip(timed, timed[1:]):
        if after.start < before.end:
            continue
        gap = after.start - before.end - after.ready_before
        if after.round == before.round and after.pooled and (
                after.side == before.side or together):
            steps.append(gap)
        else:
            (within_gaps if after.round == before.round else between_gaps).append(gap)
    gaps = within_gaps or between_gaps
    gap_s = max(0.0, statistics.median(gaps)) if gaps else 0.0
    extra = statistics.median(between_gaps) - gap_s if between_gaps and within_gaps else 0.0
    look_measured = extra >= LOOK_SEEN * LOOK_S
    chosen = [i for n in used for s in sides for i in (runs[n][s].pool or (runs[n][s],))]
    first = chosen[0]
    return NodeCost(
        ready_s=statistics.median(r for r in ready if r is not None),
        other_s=max(0.0, statistics.median(t.end - t.start - t.inside for t in timed)
                    - statistics.median(t.own_ready for t in timed)),
        gap_s=gap_s,
        passes_s=statistics.median(t.inside for t in timed),
        requests=int(statistics.median(p.measured.requests for r in chosen for p in r.passes
                                       if not p.discarded and p.summary is not None)),
        repeat=None if first.settings.duration_s else first.settings.repeat,
        look_s=extra if look_measured else LOOK_S, look_measured=look_measured,
        instance_s=max(0.0, statistics.median(steps)) if steps else INSTANCE_S,
        instance_measured=bool(steps), together=together)


def rounds_for(spreads: Sequence[float], settings: GateSettings) -> Optional[int]:
    """Return the rounds at which every gated row of these spreads is decided as planned: an
    unchanged pair passes PLAN_PASS_POWER of the time (each row within the tolerance at the
    gate's one-sided level, Bonferroni over the rows), and a row slowed by the target alone
    is found PLAN_DETECT_POWER of the time (at Holm's first level); None past 1,000."""
    m = len(spreads)
    tolerance, target = settings.tolerance_log, math.log1p(settings.target_pct / 100)
    room = target - tolerance  # as the rows plan theirs: the whole target past no room
    needed = []
    for spread in spreads:
        if tolerance > 0:  # at tolerance 0 nothing passes: only the slowdown is planned for
            needed.append(rounds_needed(spread, tolerance, alpha=settings.alpha / 2,
                                        power=1 - (1 - PLAN_PASS_POWER) / m, sided=1,
                                        max_rounds=MAX_PLAN_ROUNDS))
        needed.append(rounds_needed(spread, room if room > 0 else target,
                                    alpha=settings.alpha / 2 / m, power=PLAN_DETECT_POWER,
                                    sided=1, max_rounds=MAX_PLAN_ROUNDS))
    return None if any(n is None for n in needed) else max(n for n in needed if n)


def plan_scales(cost: NodeCost) -> List[Tuple[float, int, Optional[int]]]:
    """Return the candidate (scale, requests per pass, repeat) of the plan."""
    if cost.repeat is not None:
        per_sending = cost.requests / cost.repeat
        return [(k / cost.repeat, round(per_sending * k), k) for k in range(1, MAX_REPEAT + 1)]
    return [(k, round(cost.requests * k), None) for k in DURATION_SCALES]


def planned_spread(row: Row, found: Optional[RowNoise], scale: float, end: str,
                   instances: int = 1) -> float:
    """Return a row's spread with `instances` a side and `scale` times the requests per pass,
    at one end of what the pilot supports: "plan" (each part at its PLAN_CONFIDENCE upper
    bound on its degrees of freedom, the between part on the rounds'), "low" or "high" (the
    ends of the parts' CONFIDENCE intervals): spread^2(K, s) = rounds^2 + (instances^2 +
    within^2 / s) / K. Runs of one instance a round cannot tell what a round shares from what
    an instance adds; the between part is counted as between instances (rounds^2 = 0), the
    best case for K, as the instances' own speeds (speed groups) suggest. A row no pass splits
    keeps its spread (its bound), as if more requests per pass narrowed none of it."""
    if found is None:
        spread = row.spread if end == "low" else spread_bound(
            row.spread, row.rounds - 1, PLAN_CONFIDENCE if end == "plan" else (1 + CONFIDENCE) / 2)
        return spread / math.sqrt(instances)
    parts = found.parts
    if end == "plan":
        between = spread_bound(parts.rounds.value, row.rounds - 1, PLAN_CONFIDENCE)
        within = spread_bound(parts.within.value, max(1, int(parts.within.df)), PLAN_CONFIDENCE)
    elif end == "low":
        between, within = parts.rounds.low, parts.within.low
    else:
        between, within = parts.rounds.high, parts.within.high
    return math.sqrt((between ** 2 + within ** 2 / scale) / instances)


def node_plan(gated: Sequence[Row], noise: Dict[Tuple[str, str], RowNoise],
              cost: NodeCost, settings: GateSettings, *, gpus: int = 1,
              counts: Sequence[int] = INSTANCE_COUNTS) -> Optional[NodePlan]:
    """Return the rounds, instances a side (of `counts`) and requests per pass that decide as
    rounds_for() plans at the least node time, at each part's PLAN_CONFIDENCE upper bound:
    each round two pools, one side's after the other's, each costed by NodeCost.pool_run_s on
    `gpus` GPUs, and the look; with the range of rounds the pilot's intervals support; None
    when none decides within MAX_PLAN_ROUNDS rounds."""
    best: Optional[NodePlan] = None
    for instances in counts:
        for scale, requests, repeat in plan_scales(cost):
            spreads = [planned_spread(row, noise.get((row.pass_name, row.metric)), scale,
                                      "plan", instances) for row in gated]
            rounds = rounds_for(spreads, settings)
            if rounds is None:
                continue
            minutes = rounds * cost.round_s(scale, instances, gpus) / 60
            if best is None or minutes < best.node_minutes * 0.999:
                best = NodePlan(rounds, requests, minutes, repeat, scale, instances=instances,
                                gpus=gpus)
    if best is None:
        return None
    low, high = (rounds_for([planned_spread(row, noise.get((row.pass_name, row.metric)),
                                            best.scale, end, best.instances) for row in gated],
                            settings)
                 for end in ("low", "high"))
    return best._replace(rounds_range=(low or 3, high))


def speed_groups(values: Sequence[Tuple[int, float]], gap: float) -> List[SpeedGroup]:
    """Return the (round, value) pairs in groups split where two neighbouring speeds (in
    order) lie more than `gap` apart on the log scale."""
    ordered = sorted(values, key=lambda item: item[1])
    groups: List[List[Tuple[int, float]]] = [[ordered[0]]]
    for before, item in zip(ordered, ordered[1:]):
        if math.log(item[1] / before[1]) > gap:
            groups.append([])
        groups[-1].append(item)
    return [SpeedGroup(tuple(sorted(n for n, _ in g)), g[0][1], g[-1][1]) for g in groups]


def instance_modes(rounds: Rounds, rows: Sequence[Row],
                   settings: GateSettings) -> List[InstanceModes]:
    """Return each side's speed groups per pass (its p50 over the rounds): neighbouring
    instances farther apart than MODE_GAP_SDS times their within-instance noise and the
    tolerance; only where a side has MIN_MODE_ROUNDS rounds."""
    sides, used = rounds.sides, rounds.used
    if len(used) < MIN_MODE_ROUNDS:
        return []
    found = []
    for row in rows:
        if row.metric != "p50_ms":
            continue
        for side, values in zip(sides, (row.base_values, row.new_values)):
            within = side_within(rounds, side, row.pass_name, row.metric)
            if within is None:
                continue
            gap = max(MODE_GAP_SDS * math.sqrt(2 * within[0]), settings.tolerance_log)
            groups = speed_groups(list(zip(used, values)), gap)
            if len(groups) > 1:
                found.append(InstanceModes(side, row.pass_name, tuple(groups)))
    return found


def noise_findings(rounds: Rounds, rows: Sequence[Row], settings: GateSettings) -> NoiseFindings:
    """Return the rows' noise taken apart, the plan and the speed groups of the used rounds."""
    noise = [n for n in (row_noise(rounds, r) for r in rows) if n is not None]
    cost = node_cost(rounds)
    gated = [r for r in rows if r.gated]
    by_row = {(n.pass_name, n.metric): n for n in noise}
    if cost is None or not gated:
        return NoiseFindings(tuple(noise), cost, None,
                             tuple(instance_modes(rounds, rows, settings)))
    on_gpus = tuple((gpus, node_plan(gated, by_row, cost, settings, gpus=gpus,
                                     counts=[k for k in INSTANCE_COUNTS if k % gpus == 0]
                                     if gpus > 1 else INSTANCE_COUNTS))
                    for gpus in PLAN_GPUS)
    return NoiseFindings(tuple(noise), cost, on_gpus[0][1],
                         tuple(instance_modes(rounds, rows, settings)),
                         node_plan(gated, by_row, cost, settings, counts=(1,)), on_gpus)


def plan_sentence(findings: Optional[NoiseFindings]) -> Optional[str]:
    """Return the plan in one sentence ("about N rounds of M requests per pass, about K
    minutes on this node"); None without one."""
    plan = None if findings is None else findings.plan
    if plan is None:
        return None
    pool = f" of {plan.instances} instances a side" if plan.instances > 1 else ""
    return (f"about {plural(plan.rounds, 'round')}{pool} of {plan.requests_per_pass:,} requests "
            f"per pass, about {minutes_text(plan.node_minutes)} minutes on this node")


def minutes_text(minutes: float) -> str:
    """Return node minutes as the plan prints them: one decimal under 10."""
    return f"{minutes:.1f}" if minutes < 10 else f"{minutes:,.0f}"


def pool_lines(findings: NoiseFindings) -> List[str]:
    """Return what a pool of instances buys: one instance a round, the plan's K on one GPU,
    and one instance per GPU on eight; nothing when the plan is one instance a round."""
    plan, single = findings.plan, findings.single
    if plan is None or plan.instances == 1:
        return []
    lines = ["what a pool buys (the between part counted as between instances, which runs "
             "of one instance a round cannot tell from what a round shares: the best case "
             "for pools): one instance a round: "
             + (f"about {plural(single.rounds, 'round')}, {minutes_text(single.node_minutes)} "
                f"minutes" if single is not None else "more than 1,000 rounds")]
    for gpus, item in findings.on_gpus:
        if item is None:
            continue
        where = ("on one GPU" if gpus == 1 else
                 f"one per GPU on {gpus} GPUs (run_rounds.sh --gpus all --concurrent)")
        lines.append(f"{item.instances} instances a round {where}: about "
                     f"{plural(item.rounds, 'round')}, {minutes_text(item.node_minutes)} minutes")
    return lines


def main_part(item: RowNoise) -> str:
    """Return which part of a row's spread is the larger, and what narrows it: only where
    the data show it (variance.larger_part)."""
    if item.parts.larger == "between":
        return "mostly between instances: more rounds narrow it, more requests per pass do not"
    if item.parts.larger == "within":
        return "mostly within the pass: more requests per pass narrow it"
    if item.capped:
        return ("the two parts not told apart: the plan counts on more rounds alone for this "
                "row")
    return "which part is the larger is not told apart at these rounds"


def part_text(part: Part) -> str:
    """Return a part, x 100, with its interval: "4.2% [3.1, 6.4]"."""
    high = "inf" if not math.isfinite(part.high) else f"{100 * part.high:.1f}"
    return f"{100 * part.value:.1f}% [{100 * part.low:.1f}, {high}]"


def noise_lines(findings: NoiseFindings, rows: Sequence[Row], settings: GateSettings) -> List[str]:
    """Return the noise of each gated row, the plan and the speed groups, in sentences: what
    --plan and the report page print."""
    lines = []
    for row in rows:
        item = findings.of(row)
        if row.gated and item is not None:
            parts = item.parts
            split = "halves by prompt" if item.split == "halves" else item.split
            between = (f"between instances {part_text(parts.rounds)}" if not item.capped else
                       f"between instances not told apart from it (at most "
                       f"{100 * parts.rounds.high:.1f}%)")
            lines.append(f"{pass_title(row.pass_name)} {metric_title(row.metric)}: spread "
                         f"{100 * row.spread:.1f}% = within one instance "
                         f"{part_text(parts.within)} (its {split}, new minus base) and "
                         f"{between} (log standard deviations x 100, {CONFIDENCE:.0%} "
                         f"intervals: their squares add): {main_part(item)}")
    cost, sentence = findings.cost, plan_sentence(findings)
    if cost is not None:
        lines.append(f"a side's run took {cost.pool_run_s(1, 1):.1f} s on this node: start-up to "
                     f"ready {cost.ready_s:.1f} s, warm-up and the rest {cost.other_s:.1f} s, "
                     f"passes {cost.passes_s:.1f} s ({cost.requests:,} requests a pass), "
                     f"between runs {cost.gap_s:.1f} s; a look after each round (--until-"
                     f"decided) {cost.look_s:.1f} s"
                     f"{'' if cost.look_measured else ' (not run here: its usual cost)'}; in a "
                     f"pool, from one instance's run to the next {cost.instance_s:.1f} s"
                     f"{'' if cost.instance_measured else ' (no pool here: its usual cost)'}"
                     f"{TOGETHER_WORDS if cost.together else ''}")
    if sentence is not None and findings.plan is not None:
        pool = (f" --instances {findings.plan.instances}" if findings.plan.instances > 1
                else "")
        how = (f" (run_rounds.sh{pool})" if findings.plan.repeat is None and pool else
               "" if findings.plan.repeat is None else
               f" (run -n {findings.plan.repeat}; run_rounds.sh --requests-per-pass "
               f"{findings.plan.requests_per_pass}{pool})")
        passes = (f"an unchanged pair passes {PLAN_PASS_POWER:.0%} of the time and "
                  if settings.tolerance_pct > 0 else "")
        lines.append(f"plan: {sentence}{how}: {passes}a {settings.target_pct:g}% slowdown of "
                     f"one gated row is found {PLAN_DETECT_POWER:.0%} of the time, planned at "
                     f"an {PLAN_CONFIDENCE:.0%} upper bound of each part of the noise, so that "
                     f"it keeps both in about {PLAN_CONFIDENCE:.0%} of pilots or more"
                     f"{range_text(findings.plan)}")
        lines += pool_lines(findings)
    elif cost is not None:
        lines.append(f"plan: more than 1,000 rounds at any requests per pass and pool of up to "
                     f"{INSTANCE_COUNTS[-1]} instances")
    for mode in findings.modes:
        groups = "; ".join(f"{', '.join(f'r{n}' for n in g.rounds)} at {span(g)} ms"
                           for g in mode.groups)
        lines.append(f"speed groups: {mode.side}'s instances ran at "
                     f"{plural(len(mode.groups), 'speed')} ({pass_title(mode.pass_name)} p50: "
                     f"{groups}): a property of the node or the router's start (clocks, "
                     f"placement, threads) worth pinning before a change is judged "
                     f"(docs/gpu-node.md)")
    return lines


def span(group: SpeedGroup) -> str:
    """Return a group's speeds, one figure or low-high."""
    low, high = f"{group.low:.3g}", f"{group.high:.3g}"
    return low if low == high else f"{low}-{high}"


def noise_json(findings: Optional[NoiseFindings], row: Row) -> Optional[dict]:
    """Return a row's noise as the rounds JSON holds it; None for a row without one."""
    item = None if findings is None else findings.of(row)
    if item is None:
        return None
    return {"within_pct": item.within_pct, "between_pct": item.between_pct, "split": item.split,
            "capped": item.capped, "within": part_json(item.parts.within),
            "between": part_json(item.parts.rounds),
            "instances": None if item.parts.instances is None else
            part_json(item.parts.instances), "rounds": part_json(item.parts.rounds)}


def part_json(part: Part) -> dict:
    """Return a part as the rounds JSON holds it, x 100 (null for an unbounded end)."""
    return {"pct": 100 * part.value, "low_pct": 100 * part.low,
            "high_pct": 100 * part.high if math.isfinite(part.high) else None, "df": part.df,
            "told_apart": part.told_apart}


def range_text(plan: NodePlan) -> str:
    """Return the range of rounds the pilot supports, in words ("" without one)."""
    if plan.rounds_range is None:
        return ""
    low, high = plan.rounds_range
    top = BEYOND_LIMIT if high is None else f"{high:,}"
    return (f"; the pilot's {CONFIDENCE:.0%} intervals of the parts support anywhere from "
            f"{low:,} to {top} rounds")


def plan_json(findings: Optional[NoiseFindings]) -> Optional[dict]:
    """Return the plan, what it costs a round, and the speed groups as the rounds JSON holds
    them; None without rows."""
    if findings is None:
        return None
    plan, cost = findings.plan, findings.cost
    return {"rounds": None if plan is None else plan.rounds,
            "instances": None if plan is None else plan.instances,
            "requests_per_pass": None if plan is None else plan.requests_per_pass,
            "node_minutes": None if plan is None else plan.node_minutes,
            "repeat": None if plan is None else plan.repeat,
            "scale": None if plan is None else plan.scale,
            "rounds_range": None if plan is None or plan.rounds_range is None
            else list(plan.rounds_range),
            "gpus": {str(gpus): None if item is None else {
                "instances": item.instances, "rounds": item.rounds,
                "requests_per_pass": item.requests_per_pass, "node_minutes": item.node_minutes}
                for gpus, item in findings.on_gpus},
            "side_run": None if cost is None else cost._asdict(),
            "speed_groups": [{"side": m.side, "pass": m.pass_name,
                              "groups": [g._asdict() for g in m.groups]} for m in findings.modes]}


def more_rounds_text(more_rounds: Optional[int]) -> str:
    """Return the one "more rounds" figure in words, as the undecided line and --plan say it."""
    what = (f"{BEYOND_LIMIT} more rounds would be needed" if more_rounds is None else
            f"about {plural(more_rounds, 'more round')} would decide it")
    return (f"{what} {DECIDE_PROBABILITY:.0%} of the time, over the change and spread these "
            f"rounds support (not their point values)")


def undecided_line(noise: Optional[NoiseFindings], settings: GateSettings, outcome: GateOutcome,
                   more_rounds: Optional[int], rows: Sequence[Row]) -> List[str]:
    """Return the line a CI job shows for exit 3: how many more rounds would decide it, one
    figure (gate.more_rounds), the same --plan and the JSON give; a fresh run's own plan
    (an unchanged pair passing, a --max-mde slowdown found) is --plan's."""
    if outcome.status != "inconclusive" or not rows:
        return []
    if outcome.futility:  # the look stops: no more rounds of this plan
        return [f"stop: {outcome.futility}; {missed_text(outcome)}"]
    if more_rounds is None and not outcome.undecided:
        return []
    fresh = "; a fresh run's plan: rounds --plan" if plan_sentence(noise) else ""
    return [f"undecided: {more_rounds_text(more_rounds)}{fresh}"]


def plan_section(noise: Optional[NoiseFindings], settings: GateSettings, outcome: GateOutcome,
                 more_rounds: Optional[int], rows: Sequence[Row]) -> Section:
    """Return the plan as the report's section (JSON: plan): its headline, under an
    inconclusive verdict, says how many more rounds would decide it; --plan draws the noise
    of each gated row, the plan and the speed groups below its table."""
    line = undecided_line(noise, settings, outcome, more_rounds, rows)
    lines = () if noise is None else tuple(noise_lines(noise, rows, settings))
    if outcome.status == "inconclusive" and outcome.undecided:
        lines = (f"more rounds: {more_rounds_text(more_rounds)}", *lines)
    return Section(key="plan", headline=tuple(line),
                   json={"plan": plan_json(noise), "more_rounds": more_rounds,
                         "futility": outcome.futility or None},
                   plan=() if noise is None else ("", *lines),
                   page=(Panel(place=20, heading="Noise and a plan", items=(Lines(lines),))
                         if lines else Panel(place=20),))
