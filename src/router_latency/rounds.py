"""judge_rounds(): interleaved rounds as one complete report object (RoundsReport)."""

from __future__ import annotations

import collections
import math
import re
import signal
from pathlib import Path
from typing import cast, Dict, List, Optional, Sequence, Set, Tuple

from .constants import (EXIT_GATE, EXIT_OK, EXIT_SIGNAL, LADDER_PASS, lazy_pattern, MIN_ROUNDS,
                        NamedTuple, ROW_METRICS, TIME_WINDOWS)
from .errors import Notice, RouterLatencyError
from .words import metric_title, plural
from .stats import OrderEffect, percentiles
from .cache import cache_section, cache_signature, cache_warnings, TIMED
from .degraded import degraded_text
from .runfile import PassRecord, RunFile
from .pools import check_pools, instance_file_side, pool_placement
from .speeds import speeds_section
from .requests import pass_name, pass_title, Request
from .roundset import Rounds
from .compare import floor_warnings
from .gate import (check_look, GateOutcome, gate_rows, GateSettings, GateTest, Look, more_rounds,
                   Row, row_of)
from .noise import noise_findings, NoiseFindings, plan_section
from .report import Grid, LinePlot, Lines, Panel, Scale, Section, Series
from .runtime_load import runtime_load_section
from .stall import stall_notices
from .attribution import (attribution_rows, breakdown_section, gated_part_rows, PassBreakdown,
                          split_part_rows)
from .slower import input_slowdowns, slower_section
from .judged import per_round_section
from .capacity import capacity_section, ladder_capacities, ladder_rows, Ladders
from .outcomes import (degraded_signals, Outcomes, outcomes_section, pass_errors, PassErrors,
                       round_agreement, RoundAgreement, run_outcomes, SideOutcomes)
from .environment import (environment_rows, environment_section, order_and_outliers,
                          order_balance, order_section, OrderAndOutliers, RoundOrder)

__all__ = [
    "CHECKED_FIELDS", "find_round_files", "judge_rounds",
    "not_found_only", "Overload", "RoundsReport",
    "run_outcome", "run_overload", "run_signature", "start_order",
]


ROUND_FILE_PATTERN = lazy_pattern(r"^r(\d+)-(.+)\.json$")


def find_round_files(folder: str, base: str, new: str) -> Dict[int, Dict[str, str]]:
    """Return {round: {side: path}} for r<N>-<side>.json files of the two sides."""
    top = Path(folder)
    if not top.exists():
        raise RouterLatencyError("no such folder", folder)
    if not top.is_dir():
        raise RouterLatencyError("not a folder", folder)
    rounds: Dict[int, Dict[str, str]] = {}
    found: Set[str] = set()  # every side with a round file, to name them when one is missing
    for entry in sorted(top.iterdir()):
        match = ROUND_FILE_PATTERN.match(entry.name)
        # a pool's instances (r<N>-<side>@<i>.json) are found by their first (load_side)
        side, instance = instance_file_side(match.group(2)) if match else ("", None)
        if match:
            found.add(side)
        if not match or side not in (base, new) or (instance or 1) != 1:
            continue
        number = int(match.group(1))
        other = rounds.setdefault(number, {}).get(side)
        if other is not None:
            raise RouterLatencyError(f"round {number} of side {side} twice: {other} and {entry}",
                                     folder)
        rounds[number][side] = str(entry)
    missing = [side for side in (base, new) if side not in found]
    if missing:
        raise RouterLatencyError(
            f"no r<N>-{'.json or r<N>-'.join(missing)}.json files; "
            + (f"the folder holds side{'s' if len(found) > 1 else ''} {', '.join(sorted(found))}"
               if found else "the folder holds no r<N>-<side>.json files"), folder)
    for number, sides in sorted(rounds.items()):
        for side, other_side in ((base, new), (new, base)):
            if side in sides and other_side not in sides:
                raise RouterLatencyError(f"round {number} has no {other_side} side "
                                         f"(r{number}-{other_side}.json)", sides[side])
    return dict(sorted(rounds.items()))


def start_order(round_number: int, sides: Sequence[str]) -> List[str]:
    """Return the order the sides start in a round: round 1 as given, then rotated by one
    each round, so that every side starts first equally often (rounds/run_rounds.sh and the
    demo both follow it)."""
    shift = (round_number - 1) % len(sides)
    return list(sides[shift:]) + list(sides[:shift])


# what must be the same in every run of a comparison (run_signature), each a name that
# --allow-mismatch accepts
CHECKED_FIELDS = ("corpus", "warmup", "passes", "model", "decision_paths", "timeout", "tool",
                  "cache", "instances")


def run_signature(run: RunFile) -> Dict[str, object]:
    """Return what must be the same in every run of a comparison, by CHECKED_FIELDS name.

    "passes" names the passes and how long each was: a pass of the corpus sent three times,
    or cycled for 30 s, has other percentiles than one sending it once. "instances" is a
    side's pool a round and where it was placed (pools.pool_placement): a pool's mean of K
    instances has less noise than one instance, and GPUs differ.
    """
    settings = run.settings
    version = str(run.tool.get("version", ""))
    repeat, duration = settings.repeat, settings.duration_s
    length = f" for {duration:g} s" if duration else f" x{repeat}" if repeat > 1 else ""
    names = " ".join(p.name for p in sorted(run.passes, key=lambda p: p.order))
    if not run.complete and (settings.concurrency or settings.rates):
        # interrupted (a router that ended mid-run): the passes it planned, not those it got to
        names = " ".join([pass_name(c) for c in sorted(settings.concurrency)]
                         + [pass_name(1, r) for r in sorted(settings.rates)])
    ladder = run.ladder
    if ladder is not None:  # a ladder stops where its router saturates: its plan must agree
        names = (f"ladder of {' '.join(pass_name(c) for c in settings.concurrency)}"
                 f"{' '.join(pass_name(64, r) for r in settings.rates)}, margin "
                 f"{ladder.margin_pct:g}%, SLO {ladder.slo_p95_ms or 'none'}")
    return {"corpus": run.corpus_sha256[:12], "warmup": settings.warmup,
            "passes": names + length,
            "model": run.model, "decision_paths": " ".join(settings.decision_paths),
            "timeout": settings.timeout_s, "tool": version.split(".")[0],
            "cache": cache_signature(run.cache_finding), "instances": pool_placement(run)}


def label_names_side(label: str, side: str, number: int) -> bool:
    """Return True when a run's label names its file's side and round: the side itself, or
    the side and its round as the published records write it ('rocm-r1', 'rocm_r1',
    'rocm r1', 'rocm-1'). Another side, or another round's number, does not."""
    if label == side:
        return True
    found = re.fullmatch(re.escape(side) + r"[-_ ](?:r|round)?(\d+)", label, re.IGNORECASE)
    return found is not None and label[:len(side)] == side and int(found.group(1)) == number


def measured_unlike(field: str, value: object, expected: object) -> bool:
    """Return True when two runs' values of a CHECKED_FIELDS field differ (a cache finding by
    its call alone: 'detected' by counters and 'detected by timing' agree)."""
    if field == "cache":
        return str(value).replace(TIMED, "") != str(expected).replace(TIMED, "")
    return value != expected


def check_round_inputs(rounds: Rounds, allow_mismatch: Sequence[str]) -> List[str]:
    """Raise unless every file's label is its side and the runs were measured alike; return
    notes on the differences allowed with --allow-mismatch."""
    runs, base, new, _ = rounds
    for number, sides in runs.items():
        for side, run in sides.items():
            if not label_names_side(run.label, side, number):
                raise RouterLatencyError(
                    f"the run's label is {run.label!r}, but the file name says side {side!r} "
                    f"of round {number}: a copied or renamed file?", f"{run.path}: label")
    reference = runs[min(runs)][base]
    expected = run_signature(reference)
    differences: dict = {}
    for sides in runs.values():
        for run in sides.values():
            for field, value in run_signature(run).items():
                if measured_unlike(field, value, expected[field]):
                    differences.setdefault(field, []).append(
                        f"{Path(run.path).name} {value!r}")
    timed = differences.get("cache") or []
    if "cache" in differences and ("detected" + TIMED in (expected["cache"], *(
            found.split(" ", 1)[1].strip("'") for found in timed))):
        # a cache seen by timing alone: the finding flips under load between identical sides;
        # judged, and said (a cache the counters saw, beside none, still refuses)
        del differences["cache"]
    else:
        timed = []
    refused = [f"{field}: {', '.join(found[:3])}{', ...' if len(found) > 3 else ''} "
               f"({Path(reference.path).name} {expected[field]!r})"
               for field, found in differences.items() if field not in allow_mismatch]
    if refused:
        raise RouterLatencyError(
            "the runs were not measured alike: " + "; ".join(refused)
            + " (--allow-mismatch FIELD accepts a difference on purpose)",
            str(Path(reference.path).parent))
    return [f"note: --allow-mismatch {field}: {', '.join(found[:3])} "
            f"({Path(reference.path).name} {expected[field]!r})"
            for field, found in differences.items()] + ([
        f"note: the result cache finding differs between the runs ({', '.join(timed[:3])}"
        f"{', ...' if len(timed) > 3 else ''}; {Path(reference.path).name} {expected['cache']!r})"
        f" and rests on timing, which a loaded node flips: judged as measured; --metrics-url "
        f"decides it from the router's cache counters"] if timed else [])


COPY_MIN_DISTINCT = 20  # timings with fewer distinct values (made up, not measured) prove no copy


class MeasuredKeys(NamedTuple):
    """What a copy of a run's measurements repeats, each None where it proves nothing."""
    # its start time with every pass's records: (started_unix, ((pass name, requests), ...))
    started: Optional[Tuple[float, Tuple[Tuple[str, Tuple[Request, ...]], ...]]]
    timings: Optional[Tuple[Optional[float], ...]]  # its requests' latencies in send order


def measured_keys(run: RunFile) -> MeasuredKeys:
    """Return what a copy of a run's measurements repeats, each None where it proves nothing:
    its start time with every record, and the timings of its requests in send order."""
    records = tuple((p.name, p.requests) for p in run.passes)
    started = None if run.started_unix is None else (run.started_unix, records)
    timings = tuple(r.latency_ms for p in run.passes for r in p.requests)
    return MeasuredKeys(started=started,
                        timings=timings if len(set(timings)) >= COPY_MIN_DISTINCT else None)


def measured_span(run: RunFile) -> Tuple[Optional[float], Optional[float]]:
    """Return (when the run started, when its last measured pass ended), unix seconds, each
    None when the file does not say."""
    ends = [p.attempt.started_unix + p.summary.wall_s for p in run.passes
            if p.attempt.started_unix is not None and p.summary is not None]
    return run.started_unix, max(ends, default=None)


def check_measured_once(runs: Dict[int, Dict[str, RunFile]]) -> None:
    """Raise unless every round was measured once, one side at a time: no two files hold
    the same measurements (a copied round narrows the interval on data measured once), and
    no run started before the run before it ended (the rounds were not interleaved); a
    pool's instances are runs each."""
    seen: dict = {}
    # a pool's instances are runs each, of their round and side: a side's instances may be
    # measured at once (--concurrent), never beside the other side's (--together alternates)
    files = [(one, (number, side)) for number, sides in runs.items()
             for side, run in sides.items() for one in (run.pool or (run,))]
    for run, _ in files:
        for what, key in zip(("the same start time and records", "the same requests' timings"),
                             measured_keys(run)):
            if key is None:
                continue
            other = seen.setdefault((what, key), run)
            if other is not run:
                raise RouterLatencyError(
                    f"{Path(other.path).name} and {Path(run.path).name} hold {what}: one "
                    f"measurement counted twice would narrow the interval on data measured "
                    f"once; remove the copy", str(Path(run.path).parent))
    spans = sorted(((start, end, run.path, group) for run, group in files
                    for start, end in [measured_span(run)] if start is not None),
                   key=lambda item: item[0])
    # the latest ends so far of two rounds' sides at most (the latest of any side but a run's
    # own is one of them), each with its start and file
    latest: Dict[Tuple[int, str], Tuple[float, float, str]] = {}
    for start, end, path, group in spans:
        for other, (other_end, other_start, other_path) in latest.items():
            if other != group and (start < other_end or start == other_start):
                raise RouterLatencyError(
                    f"{Path(path).name} started before {Path(other_path).name} ended: its "
                    f"sides were not measured one at a time, as interleaved rounds are",
                    str(Path(path).parent))
        if end is not None and (group not in latest or end > latest[group][0]):
            latest[group] = (end, start, path)
            latest = dict(sorted(latest.items(), key=lambda item: -item[1][0])[:2])


def side_problems(run: RunFile, allow_incomplete: bool) -> Tuple[Optional[str], Optional[str]]:
    """Return (why the side failed, why its round is suspect): each None when it did not."""
    if not run.complete and not allow_incomplete:
        return "incomplete run, interrupted (--allow-incomplete uses it)", None
    if not run.passes:
        return "no passes", None
    for item in run.passes:
        if not item.discarded and item.measured.ok == 0:
            return f"{pass_title(item.name)} pass had no successful request", None
    for item in run.passes:
        environment = item.environment
        if item.discarded:
            return None, f"{pass_title(item.name)} pass discarded (load above the limit)"
        if run.max_load is not None and environment.load_max is not None \
                and environment.load_max > run.max_load:
            return None, (f"load reached {environment.load_max:g} during the "
                          f"{pass_title(item.name)} pass (limit {run.max_load:g})")
        if environment.faults:
            return None, (f"restarts or device faults ({environment.faults:g}) during the "
                          f"{pass_title(item.name)} pass")
    return None, None


class PassLatencies(NamedTuple):
    """What the report page draws of one pass of one side in one round."""
    pass_name: str
    round: int
    side: str
    used: bool  # the round is among those judged
    quantiles: Tuple[float, ...]  # latency at 0, 1, ..., 100% of the successful requests (R7)
    # (middle of the window in s from the first send, median latency)
    windows: Tuple[Tuple[float, float], ...]


def time_windows(requests: Sequence[Request],
                 count: int = TIME_WINDOWS) -> List[Tuple[float, float]]:
    """Return (middle in seconds, median latency) of each of count equal windows of send
    time that holds a request."""
    import statistics
    timed = [(r.start_ms, r.latency_ms) for r in requests
             if r.start_ms is not None and r.latency_ms is not None]
    span = max((start for start, _ in timed), default=0.0) or 1.0
    found = collections.defaultdict(list)
    for start, latency in timed:
        found[min(int(start / span * count), count - 1)].append(latency)
    return [((k + 0.5) * span / count / 1000, statistics.median(v))
            for k, v in sorted(found.items())]


def pass_latencies(rounds: Rounds) -> List[PassLatencies]:
    """Return the latency distribution and latency over time of every measured pass."""
    runs = rounds.runs
    base, new, used = rounds.base, rounds.new, rounds.used
    views = []
    for number, sides in runs.items():
        for side in (base, new):
            for item in sorted(sides[side].passes, key=lambda p: p.order):
                # routed answers only, as the percentiles: an expected rejection answered in
                # 0.1 ms would start the plot far left of the latencies it shows
                ok = [r for r in item.requests if r.routed and r.latency_ms is not None]
                if item.discarded or not ok:
                    continue
                quantiles = percentiles([r.latency_ms for r in ok if r.latency_ms is not None],
                                        range(101))
                views.append(PassLatencies(pass_name=item.name, round=number, side=side,
                                           used=number in used, quantiles=tuple(quantiles),
                                           windows=tuple(time_windows(ok))))
    return views


class RoundsReport(NamedTuple):
    """The judged rounds: the core every renderer reads (the settings, the rounds used, the
    gated rows, the overall test, the outcome, the look) and each capability's section."""
    base: str
    new: str
    settings: GateSettings
    corpus_sha256: str
    corpus_count: int
    files: Dict[str, Dict[str, str]]  # "r<N>" -> {side: path}
    used: Tuple[int, ...]  # round numbers judged
    left_out: Tuple[LeftOut, ...]  # rounds not judged
    rows: Tuple[Row, ...]  # Row, empty when fewer than MIN_ROUNDS rounds could be used
    test: Optional[GateTest]
    warnings: Tuple[Notice, ...]  # what the reader must know before trusting the verdict
    notes: Tuple[str, ...]  # differences allowed with --allow-mismatch
    insecure_files: Tuple[str, ...]  # files measured without TLS verification
    look: Optional[Look]  # group-sequential: this look of the plan; None: a fixed design
    outcome: GateOutcome  # what the gate decided: status, reasons, exit code, undecided rows
    # side -> its x-vsr-config-hash values over the rounds
    config_hashes: Dict[str, Tuple[str, ...]] = {}
    # the same configuration on both sides, or one that changed
    config_warnings: Tuple[Notice, ...] = ()
    noise: Optional[NoiseFindings] = None  # each gated row's spread taken apart (its JSON)
    # each capability's finding as every renderer draws it, in the order they draw them
    sections: Tuple[Section, ...] = ()

    def section(self, key: str) -> Section:
        """Return the section of that key."""
        return next(part for part in self.sections if part.key == key)

    # the outcome's, under the names CompareReport gives its own
    @property
    def status(self) -> str:
        """pass, fail or inconclusive."""
        return self.outcome.status

    @property
    def reasons(self) -> Tuple[str, ...]:
        """Why it failed or is inconclusive."""
        return self.outcome.reasons

    @property
    def exit_code(self) -> int:
        return self.outcome.exit_code


class ConfigHashFindings(NamedTuple):
    """The configurations (x-vsr-config-hash) each side answered with, and the warnings."""
    hashes: Dict[str, Tuple[str, ...]]  # side -> its values, distinct, in round order
    warnings: Tuple[Notice, ...]  # a changed configuration allowed, or the same on both sides


def config_hash_findings(rounds: Rounds, allow_change: bool = False) -> ConfigHashFindings:
    """Return ({side: its x-vsr-config-hash values, distinct, in round order}, warnings).

    runs: {round number: {side: RunFile}}, every round read. A side whose hash changed between
    rounds or within a run measured a configuration that changed under it: refused with
    RouterLatencyError unless allow_change (then a warning). Base and new answering with the
    same hash is a gate comparing a configuration with itself, which would pass as 'same': a
    loud warning. Runs of routers that send no hash add nothing.
    """
    runs, base, new, _ = rounds
    hashes, warnings = {}, []
    for side in (base, new):
        rounds_of: dict = {}  # hash -> rounds it answered in, in first-seen order
        first_file: dict = {}
        for number, sides in runs.items():
            for value in sides[side].config_hashes:
                rounds_of.setdefault(value, []).append(number)
                first_file.setdefault(value, sides[side].path)
        hashes[side] = tuple(rounds_of)
        if len(rounds_of) < 2:
            continue
        listed = "; ".join(f"{value[:12]} in {', '.join(f'r{n}' for n in numbers)}"
                           for value, numbers in rounds_of.items())
        message = (f"side {side} answered with {len(rounds_of)} configurations "
                   f"(x-vsr-config-hash {listed})")
        if not allow_change:
            raise RouterLatencyError(f"{message}: its configuration changed between or within "
                                     f"rounds; --allow-config-change judges it anyway",
                                     first_file[hashes[side][1]])
        warnings.append(Notice("config_changed", f"warning: {message}"))
    same = [value for value in hashes[base] if value in hashes[new]]
    if same:
        warnings.append(Notice(
            "same_config", f"WARNING: base {base} and new {new} answered with the same "
            f"configuration (x-vsr-config-hash {same[0][:12]}): the gate compares a "
            f"configuration with itself; check which configuration each side runs"))
    return ConfigHashFindings(hashes=hashes, warnings=tuple(warnings))


class Overload(NamedTuple):
    """The requests a run's router shed with 429 OVERLOADED, and the run's settings that
    bear on it."""
    shed: int
    # --router-max-concurrency, the router's max_concurrency declared (None: not recorded)
    declared_limit: Optional[int]
    timeout_s: Optional[float]  # the client's --timeout; None where the file has none


def run_overload(run: RunFile) -> Optional[Overload]:
    """Return what a run's router shed with 429 OVERLOADED; None when it shed nothing."""
    shed = sum(r.code == "OVERLOADED" for item in run.passes for r in item.requests)
    if not shed:
        return None
    return Overload(shed=shed, declared_limit=run.settings.router_max_concurrency,
                    timeout_s=run.settings.timeout_s)


def not_found_only(run: RunFile) -> int:
    """Return the requests of a run answered 404 Not Found when none answered 2xx (a wrong
    path, not a missing route); 0 otherwise."""
    statuses = [r.status for p in run.passes for r in p.requests]
    routed = any(s is not None and 200 <= s < 300 for s in statuses)
    return 0 if routed else statuses.count(404)


class RunVerdict(NamedTuple):
    """`run`'s exit code and why it is not 0 ('' when it is, or a signal stopped the run)."""
    exit_code: int
    reason: str


def run_outcome(run: RunFile, max_errors: int, signum: Optional[int] = None, *,
                allow_degraded: bool = False) -> RunVerdict:
    """Return (exit code, reason or ''): `run`'s one rule. An interrupted run exits with the
    code of the signal that stopped it (SIGINT's when none was caught: a KeyboardInterrupt);
    else 1 when more requests failed in the measured passes than max_errors allows, a
    degraded answer counted as a failed request unless allow_degraded (--allow-degraded)."""
    if not run.complete:
        return RunVerdict(EXIT_SIGNAL[signal.Signals(signum or signal.SIGINT)], "")
    measured = [p.measured for p in run.passes if not p.discarded]
    failed = sum(sum(s.errors.values()) for s in measured)
    degraded = 0 if allow_degraded else sum(s.degraded for s in measured)
    if failed + degraded > max_errors:
        what = [f"{failed} requests failed"] if failed else []
        what += [f"{plural(degraded, 'answer')} degraded"] if degraded else []
        return RunVerdict(EXIT_GATE, f"{' and '.join(what)} (--max-errors {max_errors}"
                          + ("; --allow-degraded does not count them)" if degraded else ")"))
    return RunVerdict(EXIT_OK, "")


def refuse_a_gate_of_nothing(settings: GateSettings, rows: Sequence[Row]) -> None:
    """Raise for a --gate entry that no row of these rounds answers to, naming what they
    have: such a gate would pass any change (before, `--gate c4:p50` on runs without a
    Conc 4 pass said PASS with no row gated)."""
    for entry in settings.gating_nothing(rows):
        scope, metric = entry.split(":", 1) if entry.count(":") in (1, 3) else ("", entry)
        passes = dict.fromkeys(r.pass_name for r in rows if r.pass_name != LADDER_PASS)
        parts = dict.fromkeys(r.metric for r in rows if ":" in r.metric)
        what = f"{pass_title(scope)} {metric_title(metric)}" if scope else metric_title(metric)
        raise RouterLatencyError(
            f"no {what} row to gate: these rounds' passes are "
            f"{', '.join(pass_title(p) for p in passes) or 'none'}" + (
                "" if ":" not in metric else "; their parts of the time: "
                + (", ".join(parts) or "none (no signal or router times recorded)")),
            "--gate")


def judged_rows(rounds: Rounds, settings: GateSettings) -> List[Row]:
    """Return the rows of the passes every used round measured on both sides."""
    runs = rounds.runs
    base, new, used = rounds.base, rounds.new, rounds.used
    first = runs[used[0]][base]
    names = [p.name for p in sorted(first.passes, key=lambda p: p.order)
             if all(runs[r][s].pass_named(p.name) for r in used for s in (base, new))]

    def named(number: int, side: str, name: str) -> PassRecord:
        # names holds only the passes every used round measured on both sides
        return cast(PassRecord, runs[number][side].pass_named(name))

    rows = []
    for name in names:
        for metric in ROW_METRICS:
            base_values = [getattr(named(r, base, name).summary, metric) for r in used]
            new_values = [getattr(named(r, new, name).summary, metric) for r in used]
            rows.append(row_of(name, metric, base_values, new_values, settings))
        # the router's GPUs' joules per request (telemetry), where every used round has them
        energy = [[named(r, s, name).environment.energy_j for r in used] for s in (base, new)]
        if all(v for side in energy for v in side):
            rows.append(row_of(name, "j_per_request", energy[0], energy[1], settings))
    return rows + ladder_rows(rounds, settings)


class LeftOut(NamedTuple):
    """A round not judged, and why."""
    round: int
    why: str


class UsableRounds(NamedTuple):
    """Which rounds a rounds report judges, and what the sides' failures make of the gate."""
    used: List[int]  # rounds to judge
    left_out: List[LeftOut]
    failures: List[str]  # the new side failed: the gate fails
    doubts: List[str]  # the base side failed: the gate is inconclusive


def usable_rounds(rounds: Rounds, settings: GateSettings) -> UsableRounds:
    """Return (rounds to judge, rounds left out with why, failures, doubts): a side that
    failed leaves its round out and fails the gate (new) or makes it inconclusive (base); a
    suspect round (load, restarts) is only left out."""
    runs, base, new, _ = rounds
    used: List[int] = []
    left_out: List[LeftOut] = []
    failures: List[str] = []
    doubts: List[str] = []
    for number, sides in runs.items():
        (base_failed, base_flag), (new_failed, new_flag) = (
            side_problems(sides[s], settings.allow_incomplete) for s in (base, new))
        why = [f"{Path(sides[s].path).name}: {w}" for s, w in
               ((base, base_failed), (new, new_failed), (base, base_flag), (new, new_flag)) if w]
        if new_failed:
            failures.append(f"the {new} side failed in r{number} ({new_failed})")
        if base_failed:
            doubts.append(f"the {base} side failed in r{number} ({base_failed})")
        if why:
            left_out.append(LeftOut(number, "; ".join(why)))
        else:
            used.append(number)
    return UsableRounds(used=used, left_out=left_out, failures=failures, doubts=doubts)


def check_rounds(rounds: Rounds, settings: GateSettings) -> List[str]:
    """Raise RouterLatencyError for rounds that cannot be judged (fewer than MIN_ROUNDS,
    mislabelled files, runs not measured alike or measured twice, rounds past the plan's
    last look); return the notes on the differences --allow-mismatch allowed."""
    runs = rounds.runs
    if len(runs) < MIN_ROUNDS:
        raise RouterLatencyError(
            f"need at least {MIN_ROUNDS} rounds, found {len(runs)} "
            f"({', '.join(f'r{n}' for n in runs)}): fewer cannot give an interval worth "
            f"gating on")
    check_pools(runs)
    notes = check_round_inputs(rounds, settings.allow_mismatch)
    check_measured_once(runs)
    check_look(rounds, settings)
    return notes


def new_side_failures(errors: Sequence[PassErrors], agreement: Sequence[RoundAgreement],
                      base: str, new: str, settings: GateSettings,
                      degraded: Sequence[Tuple[PassErrors, str]] = ()) -> List[str]:
    """Return how the new side failed besides a failed run: more failed requests than the
    base in a pass, more degraded answers (a signal skipped: as failed requests), and
    (--decisions gate) changed decisions in a used round."""
    failures = [f"{new} failed more requests than {base} in {pass_title(e.pass_name)} "
                f"({', '.join(f'r{n} {b}/{w}' for n, b, w in e.counts if w > b)})"
                for e in errors if any(w > b for _, b, w in e.counts)]
    failures += [f"{new} degraded more answers than {base} in {pass_title(e.pass_name)} "
                 f"({', '.join(f'r{n} {b}/{w}' for n, b, w in e.counts if w > b)}; {signals})"
                 for e, signals in degraded if any(w > b for _, b, w in e.counts)]
    if settings.decisions == "gate":
        failures += [f"decisions differ in r{a.round} ({plural(a.total - a.agree, 'input')})"
                     for a in agreement if a.used and a.agree < a.total]
    return failures


def insecure_files(rounds: Rounds) -> Tuple[str, ...]:
    """Return the names of the round files measured without TLS verification (--insecure)."""
    runs = rounds.runs
    return tuple(sorted({Path(run.path).name for sides in runs.values()
                         for run in sides.values() if run.insecure}))


def judge_rounds(runs: Dict[int, Dict[str, RunFile]], base: str, new: str,
                 settings: GateSettings = GateSettings(), *,
                 prompts_text: Optional[dict] = None) -> RoundsReport:
    """Return the rounds report: input checks, rows with their one estimator and power, the
    gate's family-wise test and outcome, decisions and errors of every pass, order and
    outliers, which inputs got slower (named with prompts_text, {prompt id: text}), the
    page's latencies.

    runs: {round number: {side: RunFile}}. Raises RouterLatencyError for inputs that cannot
    be judged (fewer than MIN_ROUNDS rounds, mislabelled files, runs not measured alike).
    """
    notes = check_rounds(Rounds(runs, base, new), settings)
    used, left_out, failures, doubts = usable_rounds(Rounds(runs, base, new), settings)
    rounds = Rounds(runs, base, new, tuple(used))
    errors, degraded = pass_errors(rounds), pass_errors(rounds, degraded=True)
    agreement = tuple(round_agreement(n, runs[n][base], runs[n][new], n in used) for n in runs)
    failures += new_side_failures(
        errors, agreement, base, new, settings,
        [(e, degraded_text(degraded_signals(rounds, new, e.pass_name))) for e in degraded])
    rows: List[Row] = []
    breakdowns: List[PassBreakdown] = []
    if len(used) < MIN_ROUNDS:
        doubts.append(f"{plural(len(used), 'usable round')}, fewer than {MIN_ROUNDS}")
    else:
        rows = judged_rows(rounds, settings)
        breakdowns = attribution_rows(rounds, settings)
        refuse_a_gate_of_nothing(settings, rows + [r for b in breakdowns for r in b.rows])
    # the parts' rows are advisory: only those --gate names are judged with the latency rows
    judged = gate_rows(rows + gated_part_rows(breakdowns), settings, failures, doubts)
    rows, breakdowns = split_part_rows(judged.rows, breakdowns)
    first = runs[min(runs)][base]
    order = order_balance(rounds, rows)
    found = order_and_outliers(used, rows, order)
    hashes, hash_warnings = config_hash_findings(rounds, settings.allow_config_change)
    outcome = judged.outcome
    noise = noise_findings(rounds, rows, settings) if rows else None
    warnings = tuple(cache_warnings([(f"{side} r{n}", run.cache_finding) for n in sorted(runs)
                                     for side, run in sorted(runs[n].items())])
                     + rounds_warnings(rounds, rows, outcome, found.order_effect, settings))
    outcomes = Outcomes(
        base=base, new=new, used=tuple(used), decisions=settings.decisions, agreement=agreement,
        errors=tuple(errors), degraded=tuple(e for e in degraded
                                             if any(b or w for _, b, w in e.counts)),
        outcomes=tuple(SideOutcomes(round=n, side=s, **run_outcomes(runs[n][s]))
                       for n in used for s in (base, new)))
    sections = rounds_sections(rounds, Findings(rows, breakdowns, outcomes, order, found, outcome,
                                                noise, warnings), settings, prompts_text)
    return RoundsReport(
        base=base, new=new, settings=settings, corpus_sha256=first.corpus_sha256,
        corpus_count=first.corpus_count,
        files={f"r{n}": {s: run.path for s, run in sides.items()} for n, sides in runs.items()},
        used=tuple(used), left_out=tuple(left_out), rows=tuple(rows), test=judged.test,
        warnings=warnings, notes=tuple(notes), insecure_files=insecure_files(rounds),
        look=judged.look, outcome=outcome, config_hashes=hashes, config_warnings=hash_warnings,
        noise=noise, sections=sections)


class Findings(NamedTuple):
    """What judge_rounds found on the way to the outcome, that sections draw."""
    rows: Sequence[Row]  # the gated table's rows
    breakdowns: Sequence[PassBreakdown]  # where each pass's time went
    outcomes: Outcomes  # what the sides' requests came to
    order: RoundOrder  # which side started each round
    order_effect: OrderAndOutliers  # the order effect and the outlier rounds
    outcome: GateOutcome
    noise: Optional[NoiseFindings]
    warnings: Sequence[Notice]


def rounds_sections(rounds: Rounds, found: Findings, settings: GateSettings,
                    prompts_text: Optional[dict]) -> Tuple[Section, ...]:
    """Return each capability's section of the judged rounds, in the order every renderer
    draws them; what a section draws beyond the core is kept only in it. The ladders, the
    slower inputs, the environment and the latencies are computed here, from the rounds."""
    _, base, new, used = rounds
    rows, noise, outcome, warnings = found.rows, found.noise, found.outcome, found.warnings
    ladders = Ladders(base=base, new=new, used=used, rows=tuple(rows),
                      cost_per_hour=settings.cost_per_hour,
                      capacity=ladder_capacities(rounds, settings) if rows else ())
    return (
        capacity_section(ladders), outcomes_section(found.outcomes),
        cache_section([w for w in warnings if w.kind == "result_cache"]),
        Section(key="warnings", apart=False,
                notices=tuple(w for w in warnings if w.kind != "result_cache"),
                json={"warnings": [w.text for w in warnings]},
                page=(Panel(place=82, items=(Lines(tuple(w.text for w in warnings)),)),)),
        slower_section(input_slowdowns(rounds, settings.tolerance_pct, prompts_text), base, new),
        breakdown_section(found.breakdowns, base, new, noise),
        runtime_load_section(rounds, rows),
        per_round_section(rows, used, base, new),
        environment_section(environment_rows(rounds)),
        order_section(found.order, found.order_effect, base, new),
        plan_section(noise, settings, outcome,
                     more_rounds(outcome) if outcome.status == "inconclusive" else None, rows),
        speeds_section(rounds, [r.pass_name for r in rows if r.metric == "p50_ms"],
                       settings.tolerance_log),
        latency_section(pass_latencies(rounds), base, new))


def latency_section(latencies: Sequence[PassLatencies], base: str, new: str) -> Section:
    """Return, per pass, each side's latency distribution and its latency over time as the
    report's section: drawn on the report page only."""
    sides = {base: 0, new: 1}
    plots: List[LinePlot] = []
    for name in dict.fromkeys(v.pass_name for v in latencies):
        views = [v for v in latencies if v.pass_name == name]
        plots += [LinePlot(f"{pass_title(name)}: latency distribution", tuple(
            Series(tuple((q, i) for i, q in enumerate(v.quantiles)), sides[v.side], not v.used,
                   f"r{v.round} {v.side}") for v in views),
            Scale("latency, ms (log scale)", log=True),
            Scale("requests at or below, %", suffix="%")),
            LinePlot(f"{pass_title(name)}: latency over the pass", tuple(
                Series(tuple(v.windows), sides[v.side], not v.used, f"r{v.round} {v.side}")
                for v in views),
                Scale(f"seconds from the first send ({TIME_WINDOWS} windows)"),
                Scale("median latency, ms (log scale)", log=True))]
    return Section(key="latencies", page=(Panel(
        place=40, heading="Latency per pass", items=(Grid(tuple(plots)),),
        keys=tuple((index, f"{side} ({role})")
                   for (side, index), role in zip(sides.items(), ("base", "new"))),
        note="one line per round; dashed: a round left out of the verdict"),))


def rounds_warnings(rounds: Rounds, rows: Sequence[Row], outcome: GateOutcome,
                    effect: Optional[OrderEffect], settings: GateSettings) -> List[Notice]:
    """Return what the reader must know before trusting the verdict."""
    runs, used = rounds.runs, rounds.used
    warnings = floor_warnings([(pass_title(r.pass_name), 0.0, r.diff.mean)
                               for r in rows if r.metric == "p50_ms"],
                              [run for n in used for run in runs[n].values()])
    warnings += settings.rule.warnings(outcome.undecided, settings)
    if effect is not None and effect.p_value < 0.05:
        warnings.append(Notice(
            "order_effect", f"warning: order effect: the side started second ran "
            f"{100 * math.expm1(effect.estimate):+.1f}% [{100 * math.expm1(effect.low):+.1f}%, "
            f"{100 * math.expm1(effect.high):+.1f}%] slower (crossover estimate on the gated "
            f"rows, df {effect.df}): warm-up, heat or a neighbour's job follows the start "
            f"order"))
    warnings += stall_notices([(f"{side} r{n}", runs[n][side].passes) for n in used
                               for side in (rounds.base, rounds.new)])
    return warnings

