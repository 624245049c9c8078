"""The run file: its records, each with its writer (to_json) beside its reader (from_json)."""

from __future__ import annotations

import json
import math
import operator
import os
import re
from typing import Any, Callable, cast, Iterator, Optional, Sequence, TypedDict

from .constants import (__version__, CACHE_SERIES, CONFIG_HASH_PATTERN, LADDER_MARGIN_PCT,
                        MAX_FILE_NUMBER, MAX_LATENCY_MS, MAX_SIGNALS, NamedTuple,
                        ROUTER_MAX_CONCURRENCY, RUNTIME_COUNTERS, SIGNAL_NAME_PATTERN)
from .errors import checked_number, checked_object, checked_text, is_whole, RouterLatencyError
from .gpu import check_telemetry, GpuReading, GPU_FIELDS, gpu_readings
from .cache import CacheFinding, checked_cache, result_cache_finding
from .versions import without_sampled
from .degraded import degraded_summary_from_json, UNKNOWN_ANSWERS_METRIC
from .requests import (checked_error_codes, ERROR_KINDS, pass_name, pass_summary, pass_title,
                       PassSummary, Request)
from .phases import content_slow_windows, PhaseWindow, Thresholds
from .captured import CapturedEnvironment, LoadRange, PassEnvironment, RouterCpu
from .files import check_schema, read_json
from .instance import Instance

__all__ = [
    "Attempt", "Captures", "CpuSettings", "dump_run", "Floor", "HostSettings", "Ladder",
    "load_run", "PassRecord", "RouterRef", "RouterSetting", "RunFile", "RunSettings", "Warmup",
]


# The run file (schema router-latency/run/1) has one owner: this section. Each record type
# holds its fields, its writer (to_json) and its reader (from_json) side by side, as pyperf
# keeps Run._as_json beside _json_load, so adding a field is one change here and in the
# round-trip test. The reader validates field by field and names the file and field it
# rejects; what it reads, the writer writes back byte for byte.

RUN_SCHEMA = "router-latency/run/1"
# a run with degraded answers (Request.degraded): a tool that reads only run/1 would count
# them as plain successes, so such a file says it needs a newer reader; run/1 still reads
RUN_SCHEMA_DEGRADED = "router-latency/run/2"
# a run of one instance of a pool (Instance: its round, side, number, port, GPU, cores and what
# could make it differ): a run/2 reader would take it for a side's whole round; run/1 and
# run/2 still read
RUN_SCHEMA_INSTANCES = "router-latency/run/3"


# The objects a run file keeps as JSON, as read and written whole: what each holds.

class CorpusRef(TypedDict):
    """Which corpus a run sent: where it was read, its digest, its prompts."""
    path: str
    sha256: str
    count: int


class ToolRef(TypedDict):
    name: str
    version: str


class DriverRef(TypedDict, total=False):
    pid: int
    cpu_affinity: Optional[list[int]]


class RouterSetting(TypedDict):
    """A setting that shapes the router's timing, as it told it (readiness.router_told):
    its value (None: not told) and where it was read, or why not."""
    value: Optional[str]
    source: str


class RouterRef(TypedDict, total=False):
    """The router as the run was told of it (--router-*); each None when not."""
    pid: Optional[int]
    session: Optional[int]  # --router-session: run_rounds.sh's start command's session
    cgroup: Optional[str]
    container: Optional[str]
    cpus: Optional[str]
    # the signal deadline and the runtime's threads: {name: RouterSetting}; absent in older
    # files
    told: dict[str, RouterSetting]


class Attempt(NamedTuple):
    """One measured attempt at a pass and what surrounded it."""
    rate: Optional[float]  # open loop: requests per second
    arrival: Optional[str]  # open loop: constant or poisson
    started_utc: str
    started_unix: Optional[float]
    load: LoadRange  # 1-minute load average: start, end, min, max, samples
    driver_cpu_s: Optional[float]
    environment: CapturedEnvironment  # router_cpus, and probes, gpu, metrics where captured
    summary: Optional[PassSummary]
    requests: tuple[Request, ...]  # in send order
    # x-vsr-config-hash values of the answers, distinct, in the order first seen; more than
    # one is a configuration reload in the middle of the measurement
    config_hashes: tuple[str, ...] = ()
    router_cpu: Optional[RouterCpu] = None  # with a router to read (--router-*)
    windows: tuple[PhaseWindow, ...] = ()  # the pass's time series

    @property
    def measured(self) -> PassSummary:
        """The summary of a measured attempt: every attempt the pass loop makes has one, and
        the reader requires it of a pass not discarded; only a discarded pass may lack it."""
        if self.summary is None:
            raise ValueError("an attempt without a summary read as measured")
        return self.summary

    def to_json(self, requests: Any = None) -> dict:
        """Return the attempt as JSON; `requests` stands in for the records when given."""
        document: dict[str, Any] = {
            "rate": self.rate, "arrival": self.arrival, "started_utc": self.started_utc,
            "started_unix": self.started_unix, "load": self.load,
            "driver_cpu_s": self.driver_cpu_s, "environment": self.environment}
        if self.config_hashes:
            document["config_hashes"] = list(self.config_hashes)
        document["router_cpu"] = None if self.router_cpu is None else self.router_cpu.to_json()
        document["summary"] = None if self.summary is None else self.summary.to_json()
        document["windows"] = [w.to_json() for w in self.windows]
        document["requests"] = [r.to_json() for r in self.requests] if requests is None \
            else requests
        return document

    @classmethod
    def from_json(cls, raw: dict, where: str, count: int, *, measured: bool) -> "Attempt":
        load = checked_object(raw, "load", where)
        for key in ("min", "max", "start", "end"):
            checked_number(load.get(key), f"{where}.load.{key}", nullable=True)
        environment = checked_object(raw, "environment", where)
        _check_environment(environment, f"{where}.environment")
        summary = PassSummary.from_json(raw.get("summary"), f"{where}.summary") \
            if measured or raw.get("summary") is not None else None
        requests, windows = raw.get("requests", []), raw.get("windows", [])
        for key, value in (("requests", requests), ("windows", windows)):
            if not isinstance(value, list):
                raise RouterLatencyError("expected a list", f"{where}.{key}")
        hashes = raw.get("config_hashes", [])
        if not isinstance(hashes, list) or not all(
                isinstance(h, str) and CONFIG_HASH_PATTERN.fullmatch(h) for h in hashes):
            raise RouterLatencyError("expected a list of 64 lowercase hex digits",
                                     f"{where}.config_hashes")
        if not is_whole(load.get("samples", 0)):
            raise RouterLatencyError("expected a whole number >= 0 up to 2^53",
                                     f"{where}.load.samples")
        attempt = cls(
            checked_number(raw.get("rate"), f"{where}.rate", nullable=True, positive=True),
            checked_text(raw, "arrival", where), _checked_string(raw, "started_utc", where),
            checked_number(raw.get("started_unix"), f"{where}.started_unix", nullable=True),
            # as written by LoadSampler.stop and environment_record; the reader checked the
            # numbers the analysis computes with (above and in _check_environment)
            cast(LoadRange, load), checked_number(raw.get("driver_cpu_s"),
                                                  f"{where}.driver_cpu_s", nullable=True),
            cast(CapturedEnvironment, environment), summary,
            tuple(Request.from_json(r, f"{where}.requests[{j}]", count)
                  for j, r in enumerate(requests)), tuple(hashes),
            RouterCpu.from_json(raw.get("router_cpu"), f"{where}.router_cpu"),
            tuple(PhaseWindow.from_json(w, f"{where}.windows[{j}]")
                  for j, w in enumerate(windows)))
        if summary is not None:
            _check_agrees(attempt, where)
        return attempt


def _check_agrees(attempt: Attempt, where: str) -> None:
    """Raise unless an attempt's records are unique and its summary is what they give: a
    file edited by hand, emptied or copied together must not be judged."""
    seen: set = set()
    for j, request in enumerate(attempt.requests):
        if (request.id, request.rep) in seen:
            sending = f" (repetition {request.rep})" if request.rep else ""
            raise RouterLatencyError(f"prompt {request.id}{sending} measured twice in one pass",
                                     f"{where}.requests[{j}].id")
        seen.add((request.id, request.rep))
    summary = attempt.measured
    expected = pass_summary(attempt.requests, summary.wall_s)
    counted = ("requests", "ok", "errors", "rejected", "error_codes", "degraded",
               "degraded_signals")
    for field in counted:
        if getattr(summary, field) != getattr(expected, field):
            raise RouterLatencyError(
                f"the summary says {getattr(summary, field)!r}, its records give "
                f"{getattr(expected, field)!r}", f"{where}.summary.{field}")
    for field in PassSummary._fields[3:]:
        if field in counted:
            continue
        found, wanted = getattr(summary, field), getattr(expected, field)
        if field == "wall_s" or (found is None and wanted is None):
            continue
        # req/s was rounded to 0.01 from the unrounded wall time, which the file keeps to 1 us:
        # allow one step of the rounding and what the wall time's rounding moves
        slack = 0.011 + abs(wanted or 0) * 6e-7 / max(summary.wall_s, 1e-9) \
            if field == "req_per_s" else 1e-3 + 1e-6 * abs(wanted or 0)
        if found is None or wanted is None or abs(found - wanted) > slack:
            raise RouterLatencyError(f"the summary says {found!r}, its records give {wanted!r}",
                                     f"{where}.summary.{field}")


def _check_environment(environment: dict, where: str) -> None:
    """Raise when the figures the analysis reads from a pass's environment are not numbers."""
    checked_text(environment, "router_cpus", where)
    gpu = checked_object(environment, "gpu", where)
    for moment in ("before", "after"):
        GpuReading.from_json(gpu.get(moment), f"{where}.gpu.{moment}")
    check_telemetry(environment.get("telemetry"), f"{where}.telemetry")
    deltas = checked_object(environment, "metrics", where).get("deltas")
    for series, delta in (deltas.items() if isinstance(deltas, dict) else ()):
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) \
                or not abs(delta) <= MAX_FILE_NUMBER:  # NaN and inf fail too
            raise RouterLatencyError("expected a number from -2^53 to 2^53",
                                     f"{where}.metrics.deltas.{series}")
    histograms = checked_object(environment, "metrics", where).get("histograms")
    for series, delta in (histograms.items() if isinstance(histograms, dict) else ()):
        checked_number(delta, f"{where}.metrics.histograms.{series}", maximum=MAX_FILE_NUMBER)


def _gpu_values(environment: CapturedEnvironment) -> dict[str, tuple[float, ...]]:
    """Return GPU_FIELDS key -> the values read over devices, before and after a pass."""
    readings = gpu_readings(environment)
    values = {field.key: tuple(v for reading in readings for v in reading.figures(field.key))
              for field in GPU_FIELDS}
    return {key: found for key, found in values.items() if found}


def _load_range(attempt: Attempt) -> tuple[Optional[float], Optional[float]]:
    load = attempt.load
    known = [v for v in (load.get("min"), load.get("max"), load.get("start"), load.get("end"))
             if v is not None]
    return (min(known), max(known)) if known else (None, None)


class PassRecord(NamedTuple):
    """One pass of a run: the attempt whose timings count, and those discarded for load."""
    name: str
    concurrency: int  # closed loop: the callers; open loop: the most connections
    discarded: bool  # every attempt was above the load limit: no timings
    interrupted: bool
    attempt: Attempt  # for a discarded pass, the last attempt without its requests
    discarded_attempts: tuple[Attempt, ...] = ()

    @property
    def summary(self) -> Optional[PassSummary]:
        return self.attempt.summary

    @property
    def measured(self) -> PassSummary:
        """The summary of a pass not discarded (Attempt.measured)."""
        return self.attempt.measured

    @property
    def requests(self) -> tuple[Request, ...]:
        return self.attempt.requests

    @property
    def rate(self) -> Optional[float]:
        return self.attempt.rate

    @property
    def order(self) -> tuple[bool, float]:
        """Closed-loop passes by concurrency, then open-loop passes by rate."""
        return (self.rate is not None, self.rate or self.concurrency)

    @property
    def decisions(self) -> dict[int, Optional[str]]:
        """Return prompt id -> the decision of its first answered repetition, or None when
        every repetition failed; a rejection its prompt expected has no decision to agree on
        and is left out."""
        found: dict[int, Optional[str]] = {}
        for r in sorted(self.requests, key=operator.attrgetter("rep")):
            if r.outcome != "expected_rejection" and found.get(r.id) is None:
                found[r.id] = without_sampled(r.decision) if r.error is None else None
        return found

    @property
    def decision_sets(self) -> dict[int, set[str]]:
        """Return prompt id -> the set of decisions its answered repetitions got."""
        found: dict[int, set[str]] = {}
        for r in self.requests:
            decision = without_sampled(r.decision) if r.error is None else None
            answered = {decision} if decision is not None else set()
            found.setdefault(r.id, set()).update(answered)
        return found

    @property
    def environment(self) -> PassEnvironment:
        load_min, load_max = _load_range(self.attempt)
        peaks = [p for p in (load_max, *(_load_range(a)[1] for a in self.discarded_attempts))
                 if p is not None]
        environment = self.attempt.environment
        cpus = environment.get("router_cpus")
        gpu_mib = [reading.total_mib for reading in gpu_readings(environment)
                   if reading.total_mib is not None]
        deltas = (environment.get("metrics") or {}).get("deltas")
        # kept beside the faults, not counted as one: the router's unknown answers (each
        # degraded answer is counted as such, Request.degraded) and the result caches'
        # lookups (kept always, for the cache finding: CACHE_SERIES), and the runtime's load
        # counters (RUNTIME_COUNTERS: its stage calls, dispatches and dropped questions)
        faults = math.fsum(max(d, 0.0) for series, d in deltas.items()
                           if not series.startswith(UNKNOWN_ANSWERS_METRIC)
                           and not CACHE_SERIES.match(series.split("{", 1)[0])
                           and not RUNTIME_COUNTERS.match(series.split("{", 1)[0])) \
            if isinstance(deltas, dict) else None
        router_cpu = self.attempt.router_cpu or RouterCpu()
        return PassEnvironment(
            load_min, load_max, max(peaks) if peaks else None, len(self.discarded_attempts),
            self.attempt.driver_cpu_s, self.summary.wall_s if self.summary else None,
            cpus if isinstance(cpus, str) else None, tuple(gpu_mib), faults,
            router_cpu.per_request_ms, router_cpu.foreign_vcpus, _gpu_values(environment),
            ((environment.get("telemetry") or {}).get("energy") or {}).get("per_request_j"))

    def to_json(self, requests: Any = None, attempts: Any = None) -> dict:
        return {"name": self.name, "concurrency": self.concurrency,
                "discarded": self.discarded, "interrupted": self.interrupted,
                **self.attempt.to_json(requests),
                "discarded_attempts": attempts if attempts is not None
                else [a.to_json() for a in self.discarded_attempts]}

    @classmethod
    def from_json(cls, raw: Any, where: str, count: int) -> "PassRecord":
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object", where)
        concurrency = raw.get("concurrency")
        if not is_whole(concurrency, 1):
            raise RouterLatencyError("expected a whole number >= 1 up to 2^53",
                                     f"{where}.concurrency")
        discarded = raw.get("discarded")
        if not isinstance(discarded, bool):
            raise RouterLatencyError("expected true or false", f"{where}.discarded")
        attempts = raw.get("discarded_attempts") or []
        if not isinstance(attempts, list):
            raise RouterLatencyError("expected a list", f"{where}.discarded_attempts")
        if not isinstance(raw.get("interrupted", False), bool):
            raise RouterLatencyError("expected true or false", f"{where}.interrupted")
        attempt = Attempt.from_json(raw, where, count, measured=not discarded)
        return cls(pass_name(concurrency, attempt.rate), concurrency, discarded,
                   raw.get("interrupted", False), attempt,
                   tuple(Attempt.from_json(a, f"{where}.discarded_attempts[{i}]", count,
                                           measured=True)
                         if isinstance(a, dict) else _not_an_object(
                             f"{where}.discarded_attempts[{i}]")
                         for i, a in enumerate(attempts)))


def _not_an_object(where: str) -> Any:
    raise RouterLatencyError("expected an object", where)


class Ladder(NamedTuple):
    """How a ladder of load climbs (run --ladder): one pass per step, the next step only while
    the last one turned more than margin_pct of the load it added into throughput (callers
    doubled: more than margin_pct more req/s), shed nothing (429 OVERLOADED) and kept p95
    within slo_p95_ms. The run file keeps it as settings.ladder."""
    margin_pct: float = LADDER_MARGIN_PCT
    slo_p95_ms: Optional[float] = None

    def to_json(self) -> dict:
        return self._asdict()

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Optional["Ladder"]:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object or null", where)
        return cls(checked_number(raw.get("margin_pct"), f"{where}.margin_pct"),
                   checked_number(raw.get("slo_p95_ms"), f"{where}.slo_p95_ms",
                                  nullable=True, positive=True))


def _checked_list(raw: Any, key: str, where: str,
                  item: Callable[[Any], bool]) -> tuple[Any, ...]:
    """Return raw[key] (a list, [] when absent) as a tuple; raise unless each item passes."""
    # Any: raw JSON items, of the kind that `item` checked (the caller's field says which)
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(item(v) for v in value):
        raise RouterLatencyError("expected a list of the right kind", f"{where}.{key}")
    return tuple(value)


def _checked_whole(raw: Any, key: str, where: str, default: Optional[int] = None,
                   minimum: int = 0) -> Optional[int]:
    """Return raw[key] when a whole number, `default` when absent, None when null."""
    value = raw.get(key, default)
    if value is not None and not is_whole(value, minimum):
        raise RouterLatencyError(f"expected a whole number >= {minimum} up to 2^53 or null",
                                 f"{where}.{key}")
    return value


def _checked_repeat(raw: dict, where: str) -> int:
    """Return the times each pass sent the corpus: 1 when absent, as older files are."""
    repeat = raw.get("repeat", 1)
    if not is_whole(repeat, 1):
        raise RouterLatencyError("expected a whole number >= 1 up to 2^53", f"{where}.repeat")
    return repeat


class RunSettings(NamedTuple):
    """How a run was asked to measure (the run file's settings): its plan, its load guard, its
    target's timeout and decision paths, and what makes a pass suspect. An older file without
    a field reads as its default."""
    warmup: Optional[int] = None  # warm-up requests
    concurrency: tuple[int, ...] = ()  # the closed-loop passes' callers
    rates: tuple[float, ...] = ()  # the open-loop passes' requests per second
    repeat: int = 1  # times each pass sends the corpus
    duration_s: Optional[float] = None  # or: seconds each pass cycles the corpus
    arrival: Optional[str] = None  # open loop: constant or poisson
    seed: Optional[int] = None  # of the poisson schedule
    connections: Optional[int] = None  # open loop: the most connections
    timeout_s: Optional[float] = None
    decision_paths: tuple[str, ...] = ()
    max_load: Optional[float] = None  # the load guard's limit
    load_retries: Optional[int] = None
    load_pause_s: Optional[float] = None
    max_errors: Optional[int] = None
    wait_ready_s: Optional[float] = None
    router_max_concurrency: Optional[int] = ROUTER_MAX_CONCURRENCY  # as declared by the user
    sampling_seed: Optional[int] = None
    expected_config_hash: Optional[str] = None
    percentile_method: Optional[str] = None
    latency: Optional[str] = None  # what a latency counts from and to
    thresholds: Thresholds = Thresholds()  # written flat, its fields beside the others
    ladder: Optional[Ladder] = None  # run --ladder; written only then

    def to_json(self) -> dict:
        document = self._asdict()
        for key in ("concurrency", "rates", "decision_paths"):
            document[key] = list(document[key])
        document.update(document.pop("thresholds")._asdict())
        ladder = document.pop("ladder")
        if ladder is not None:
            document["ladder"] = ladder.to_json()
        return document

    @classmethod
    def from_json(cls, raw: dict, where: str) -> "RunSettings":
        thresholds = Thresholds(*(
            default if raw.get(key) is None else
            checked_number(raw[key], f"{where}.{key}", positive=key == "window_requests")
            for key, default in Thresholds._field_defaults.items()))
        if not is_whole(thresholds.window_requests, 1):
            raise RouterLatencyError("expected a whole number >= 1 up to 2^53",
                                     f"{where}.window_requests")
        values: dict[str, Any] = {
            key: checked_number(raw.get(key), f"{where}.{key}", nullable=True,
                                positive=key == "duration_s")
            for key in ("duration_s", "timeout_s", "max_load", "load_pause_s", "wait_ready_s")}
        values.update({key: _checked_whole(raw, key, where)
                       for key in ("warmup", "seed", "connections", "load_retries",
                                   "max_errors", "sampling_seed")})
        values.update({key: checked_text(raw, key, where) for key in (
            "arrival", "expected_config_hash", "percentile_method", "latency")})
        return cls(
            concurrency=_checked_list(raw, "concurrency", where, lambda v: is_whole(v, 1)),
            rates=_checked_list(raw, "rates", where, lambda v: not isinstance(v, bool) and
                                isinstance(v, (int, float)) and 0 < v <= MAX_FILE_NUMBER),
            repeat=_checked_repeat(raw, where),
            decision_paths=_checked_list(raw, "decision_paths", where,
                                         lambda v: isinstance(v, str)),
            router_max_concurrency=_checked_whole(raw, "router_max_concurrency", where,
                                                  ROUTER_MAX_CONCURRENCY, 1),
            thresholds=thresholds, ladder=Ladder.from_json(raw.get("ladder"), f"{where}.ladder"),
            **values)


def _present(record: Any) -> dict:
    """Return a record's fields that hold a value, in order: what it writes of itself."""
    return {key: value for key, value in record._asdict().items()
            if value is not None and value != () and value != {} and value is not False}


class Floor(NamedTuple):
    """The driver's own latency on loopback (measure_floor) and its clock's resolution."""
    requests: Optional[int] = None
    ok: Optional[int] = None
    timer_resolution_ns: Optional[int] = None  # the smallest step seen of perf_counter_ns
    clock_resolution_ns: Optional[int] = None  # as the clock declares it
    p10_ms: Optional[float] = None  # the percentiles only where a request was answered
    p50_ms: Optional[float] = None
    p90_ms: Optional[float] = None
    p99_ms: Optional[float] = None
    spread_ms: Optional[float] = None  # p90 - p10: what a p50 difference must clear

    def to_json(self) -> dict:
        return _present(self)

    @classmethod
    def from_json(cls, raw: dict, where: str) -> "Floor":
        wholes = {key: _checked_whole(raw, key, where) for key in cls._fields[:4]}
        return cls(**wholes, **{key: checked_number(raw.get(key), f"{where}.{key}",
                                                    nullable=True, maximum=MAX_LATENCY_MS)
                                for key in cls._fields[4:]})


class Warmup(NamedTuple):
    """The counts of the warm-up requests (warm_up), as count_outcomes gives them."""
    requests: Optional[int] = None
    ok: Optional[int] = None
    errors: Optional[dict[str, int]] = None  # error kind -> count
    rejected: int = 0  # expected rejections
    error_codes: dict[str, dict[str, int]] = {}  # error kind -> {the router's code -> count}
    all_failed: bool = False  # not one request succeeded
    # x-vsr-config-hash values, distinct, in the order first seen; more than one: a reload
    config_hashes: tuple[str, ...] = ()
    degraded: int = 0  # answers that skipped a signal, and their counts (PassSummary's)
    degraded_signals: dict[str, dict[str, int]] = {}

    def to_json(self) -> dict:
        # the counts always (errors even when {}), the rest only where it holds something
        document = {key: value for key, value in self._asdict().items()
                    if value is not None and (key in ("requests", "ok", "errors") or value)}
        if "config_hashes" in document:
            document["config_hashes"] = list(self.config_hashes)
        return document

    @classmethod
    def from_json(cls, raw: dict, where: str) -> "Warmup":
        errors = raw.get("errors")
        if errors is not None and not (isinstance(errors, dict) and all(
                k in ERROR_KINDS and is_whole(v) for k, v in errors.items())):
            raise RouterLatencyError("expected an object of counts by error kind",
                                     f"{where}.errors")
        hashes = raw.get("config_hashes", [])
        if not isinstance(hashes, list) or not all(
                isinstance(h, str) and CONFIG_HASH_PATTERN.fullmatch(h) for h in hashes):
            raise RouterLatencyError("expected a list of 64 lowercase hex digits",
                                     f"{where}.config_hashes")
        if not isinstance(raw.get("all_failed", False), bool):
            raise RouterLatencyError("expected true or false", f"{where}.all_failed")
        return cls(_checked_whole(raw, "requests", where), _checked_whole(raw, "ok", where),
                   errors, _checked_whole(raw, "rejected", where, 0) or 0,
                   checked_error_codes(raw, errors or {}, f"{where}.error_codes"),
                   raw.get("all_failed", False), tuple(hashes),
                   *degraded_summary_from_json(raw, where))


class CpuSettings(NamedTuple):
    """The cpufreq settings of one side's CPUs (cpufreq_settings): each value's CPU list."""
    cpus: str  # the CPU list, '0-3,8'
    governors: dict[str, str] = {}  # cpufreq governor -> the CPUs that run it
    boost: dict[str, str] = {}  # "on" or "off" -> the CPUs

    def to_json(self) -> dict:
        return self._asdict()

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Optional["CpuSettings"]:
        if raw is None:
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("cpus"), str):
            raise RouterLatencyError("expected an object with a CPU list or null", where)
        maps = {}
        for key in ("governors", "boost"):
            value = raw.get(key, {})
            if not isinstance(value, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                raise RouterLatencyError("expected an object of CPU lists", f"{where}.{key}")
            maps[key] = value
        return cls(raw["cpus"], **maps)


class HostSettings(NamedTuple):
    """The host's settings that move latency, read once per run (host_settings)."""
    cpu_model: Optional[str] = None
    kernel: Optional[str] = None
    python: Optional[str] = None
    tool_version: Optional[str] = None
    driver: Optional[CpuSettings] = None  # where the driver may run
    router: Optional[CpuSettings] = None  # where the router runs, when known

    @property
    def governors(self) -> list[str]:
        """Return the cpufreq governors either side's CPUs run, sorted."""
        return sorted({g for side in (self.driver, self.router) if side for g in side.governors})

    def to_json(self) -> dict:
        return {**self._asdict(), **{role: None if cpus is None else cpus.to_json()
                                     for role, cpus in (("driver", self.driver),
                                                        ("router", self.router))}}

    @classmethod
    def from_json(cls, raw: dict, where: str) -> Optional["HostSettings"]:
        """Return the record; None for a file without host settings (written as {})."""
        if not raw:
            return None
        texts: dict[str, Any] = {key: checked_text(raw, key, where) for key in cls._fields[:4]}
        return cls(**texts, driver=CpuSettings.from_json(raw.get("driver"), f"{where}.driver"),
                   router=CpuSettings.from_json(raw.get("router"), f"{where}.router"))


class Captures(NamedTuple):
    """What a run captured around each pass (--probe, --gpu, --metrics-url, --histogram)."""
    probes: tuple[str, ...] = ()  # the probes' names
    gpu: Optional[str] = None  # the GPU tool's command name, rocm-smi say
    gpu_indexes: tuple[int, ...] = ()  # the devices read; all when empty
    histograms: tuple[str, ...] = ()  # the metric histograms kept whole
    metrics_url: Optional[str] = None  # secrets scrubbed
    metric_patterns: tuple[str, ...] = ()  # the patterns of the counters whose deltas count

    def to_json(self) -> dict:
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in self._asdict().items()}

    @classmethod
    def from_json(cls, raw: dict, where: str) -> Optional["Captures"]:
        """Return the record; None for a file without captures (written as {})."""
        if not raw:
            return None
        texts = {key: _checked_list(raw, key, where, lambda v: isinstance(v, str))
                 for key in ("probes", "histograms", "metric_patterns")}
        return cls(gpu=checked_text(raw, "gpu", where),
                   gpu_indexes=_checked_list(raw, "gpu_indexes", where, is_whole),
                   metrics_url=checked_text(raw, "metrics_url", where), **texts)


class RunFile(NamedTuple):
    """A run file: who measured what, how, and every pass."""
    label: str
    complete: bool  # false when the run was interrupted
    corpus: CorpusRef
    passes: tuple[PassRecord, ...]  # in the order measured
    started_utc: str = ""
    started_unix: Optional[float] = None
    ended_utc: str = ""
    url: str = ""
    model: str = ""
    header_names: tuple[str, ...] = ()
    insecure: bool = False
    tool: ToolRef = {"name": "router-latency", "version": __version__}
    python: str = ""
    host: str = ""
    driver: DriverRef = {}
    router: RouterRef = {}
    captures: Optional[Captures] = None  # None: none recorded (an older file)
    settings: RunSettings = RunSettings()  # how the run was measured, as asked
    ready_after_s: Optional[float] = None
    floor: Floor = Floor()  # the driver's own latency on loopback
    warmup: Warmup = Warmup()  # counts of the warm-up requests
    host_settings: Optional[HostSettings] = None  # once per run; None: an older file
    result_cache: CacheFinding = {}  # result_cache_finding() as measured; {} in older files
    signal_names: tuple[str, ...] = ()  # the signals the requests' signal_ms are in the order of
    path: str = ""  # where it was read from; not written
    instance: Optional[Instance] = None  # one instance of a pool; None: a side's whole round
    pool: tuple["RunFile", ...] = ()  # a pool's instances' runs (pools.pool_run); not written

    @property
    def cache_finding(self) -> CacheFinding:
        """Whether a result cache answered: as the file records it, else from its data."""
        return self.result_cache or result_cache_finding(self.passes)

    @property
    def corpus_sha256(self) -> str:
        return self.corpus["sha256"]

    @property
    def corpus_count(self) -> int:
        return self.corpus["count"]

    @property
    def max_load(self) -> Optional[float]:
        return self.settings.max_load

    @property
    def floor_spread_ms(self) -> Optional[float]:
        """The driver's own p90 - p10 on loopback, what a p50 difference must clear."""
        return self.floor.spread_ms

    @property
    def thresholds(self) -> Thresholds:
        """What makes a pass suspect, as the run recorded it (the defaults for older files)."""
        return self.settings.thresholds

    def slow_windows(self, item: PassRecord) -> tuple[int, ...]:
        """Return the indexes of a pass's windows in a slow phase, each judged against what
        its prompts take elsewhere in the run."""
        return content_slow_windows(item, self.passes, self.thresholds)

    @property
    def ladder(self) -> Optional[Ladder]:
        """How the run climbed its ladder; None for a run of fixed passes."""
        return self.settings.ladder

    def pass_named(self, name: str) -> Optional[PassRecord]:
        return next((p for p in self.passes if p.name == name), None)

    @property
    def config_hashes(self) -> tuple[str, ...]:
        """The x-vsr-config-hash values the router answered with, distinct, in the order
        first seen over every attempt; more than one: the configuration changed mid-run."""
        seen: list = []
        for h in self.warmup.config_hashes:  # a reload during the warm-up counts
            if h not in seen:
                seen.append(h)
        for item in self.passes:
            for attempt in (*item.discarded_attempts, item.attempt):
                seen += [h for h in attempt.config_hashes if h not in seen]
        return tuple(seen)

    @property
    def degraded(self) -> bool:
        """Whether any answer of the run, warm-up included, was degraded."""
        return bool(self.warmup.degraded) or any(
            r.degraded for p in self.passes for a in (*p.discarded_attempts, p.attempt)
            for r in a.requests)

    def to_json(self, passes: Any = None) -> dict:
        return {"schema": RUN_SCHEMA_INSTANCES if self.instance is not None else
                RUN_SCHEMA_DEGRADED if self.degraded else RUN_SCHEMA,
                "label": self.label, "complete": self.complete,
                "tool": self.tool, "python": self.python, "host": self.host,
                "started_utc": self.started_utc, "started_unix": self.started_unix,
                "ended_utc": self.ended_utc, "url": self.url, "model": self.model,
                "header_names": list(self.header_names), "insecure": self.insecure,
                "driver": self.driver, "router": self.router,
                "captures": self.captures.to_json() if self.captures else {},
                "corpus": self.corpus, "settings": self.settings.to_json(),
                "ready_after_s": self.ready_after_s, "floor": self.floor.to_json(),
                "warmup": self.warmup.to_json(),
                "host_settings": self.host_settings.to_json() if self.host_settings else {},
                **({"result_cache": self.result_cache} if self.result_cache else {}),
                **({"signals": list(self.signal_names)} if self.signal_names else {}),
                **({"instance": self.instance.to_json()} if self.instance else {}),
                "passes": passes if passes is not None else [p.to_json() for p in self.passes]}

    @classmethod
    def from_json(cls, document: Any, path: str) -> "RunFile":
        _check_run_schema(document, path)
        corpus = document.get("corpus")
        if not isinstance(corpus, dict) or not isinstance(corpus.get("sha256"), str) \
                or not re.fullmatch(r"[0-9a-f]{64}", corpus["sha256"]):
            raise RouterLatencyError("expected corpus.sha256, 64 hex digits", f"{path}: corpus")
        count = corpus.get("count")
        if not is_whole(count, 1):
            raise RouterLatencyError("expected a whole number >= 1 up to 2^53",
                                     f"{path}: corpus.count")
        if not isinstance(document.get("complete"), bool):
            raise RouterLatencyError("expected true or false", f"{path}: complete")
        raw_passes = document.get("passes")
        if not isinstance(raw_passes, list):
            raise RouterLatencyError("expected a list", f"{path}: passes")
        passes: list = []
        for i, raw in enumerate(raw_passes):
            item = PassRecord.from_json(raw, f"{path}: passes[{i}]", count)
            if any(p.name == item.name for p in passes):
                raise RouterLatencyError(f"a second {pass_title(item.name)} pass",
                                         f"{path}: passes[{i}]")
            passes.append(item)
        objects = {key: _whole_object(document, key, path) for key in (
            "tool", "driver", "router", "captures", "settings", "floor", "warmup",
            "host_settings")}
        settings = RunSettings.from_json(objects["settings"], f"{path}: settings")
        text = {key: _checked_string(document, key, f"{path}: ") for key in (
            "label", "started_utc", "ended_utc", "url", "model", "python", "host")}
        names = document.get("header_names", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise RouterLatencyError("expected a list of header names", f"{path}: header_names")
        if not isinstance(corpus.get("path", ""), str):
            raise RouterLatencyError("expected a string", f"{path}: corpus.path")
        insecure = document.get("insecure", False)
        if not isinstance(insecure, bool):
            raise RouterLatencyError("expected true or false", f"{path}: insecure")
        return cls(
            # sha256 and count checked above; its path is shown only
            text["label"], document["complete"], cast(CorpusRef, corpus), tuple(passes),
            text["started_utc"],
            checked_number(document.get("started_unix"), f"{path}: started_unix",
                           nullable=True),
            text["ended_utc"], text["url"], text["model"], tuple(names), insecure,
            # tool, driver and router as the run wrote them: shown only (as text)
            _checked_tool(objects["tool"], f"{path}: tool") or cls._field_defaults["tool"],
            text["python"], text["host"],
            cast(DriverRef, _checked_ref(objects["driver"], f"{path}: driver")),
            cast(RouterRef, _checked_ref(objects["router"], f"{path}: router")),
            Captures.from_json(objects["captures"], f"{path}: captures"),
            settings, checked_number(document.get("ready_after_s"), f"{path}: ready_after_s",
                                     nullable=True),
            Floor.from_json(objects["floor"], f"{path}: floor"),
            Warmup.from_json(objects["warmup"], f"{path}: warmup"),
            HostSettings.from_json(objects["host_settings"], f"{path}: host_settings"),
            checked_cache(document.get("result_cache", {}), f"{path}: result_cache"),
            _checked_signal_names(document, passes, path), str(path),
            Instance.from_json(document.get("instance"), f"{path}: instance"))


def _check_run_schema(document: Any, path: str) -> None:
    """Raise unless the document is a run file this version reads: run/3 and later checked
    against run/3 (a later one: upgrade), run/2 against run/2; anything else (run/1, another
    kind of file) against run/1, as before run/2."""
    schema = document.get("schema") if isinstance(document, dict) else None
    version = schema.rpartition("/")[2] if isinstance(schema, str) \
        and schema.startswith("router-latency/run/") else ""
    number = int(version) if version.isdigit() else 1
    check_schema(document, RUN_SCHEMA_INSTANCES if number >= 3 else RUN_SCHEMA_DEGRADED
                 if number == 2 else RUN_SCHEMA, path)


def _whole_object(document: dict, key: str, path: str) -> dict:
    """Return a top-level object of a run file, {} when absent; raise for anything else, null
    included (the tool writes each of them as an object, {} when empty)."""
    if key in document and not isinstance(document[key], dict):
        raise RouterLatencyError("expected an object", f"{path}: {key}")
    return document.get(key, {})


def _checked_string(raw: dict, key: str, where: str) -> str:
    """Return raw[key] when a string, "" when absent; raise for anything else, null included."""
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise RouterLatencyError("expected a string",
                                 f"{where}{key}" if where.endswith(" ") else f"{where}.{key}")
    return value


def _checked_tool(raw: dict, where: str) -> ToolRef:
    """Return the tool's name and version; raise unless both are strings (absent: {})."""
    if raw and not all(isinstance(raw.get(key), str) for key in ("name", "version")):
        raise RouterLatencyError("expected a string name and version", where)
    return cast(ToolRef, raw)


# the driver's and the router's reference: each field a whole number, a list of them or a text
REF_KINDS: dict[str, Callable[[Any], bool]] = {
    "pid": is_whole, "cgroup": lambda v: isinstance(v, str),
    "container": lambda v: isinstance(v, str), "cpus": lambda v: isinstance(v, str),
    "cpu_affinity": lambda v: isinstance(v, list) and all(is_whole(c) for c in v)}


def _checked_ref(raw: dict, where: str) -> dict:
    """Return a driver or router reference; raise where a field it names is of another kind
    (each may be null)."""
    for key, kind in REF_KINDS.items():
        if raw.get(key) is not None and not kind(raw[key]):
            raise RouterLatencyError("a value of the wrong kind", f"{where}.{key}")
    return raw


def _checked_signal_names(document: dict, passes: Sequence[PassRecord],
                          path: str) -> tuple[str, ...]:
    """Return a run's signal names; raise unless distinct names, at least as many as any
    request has times."""
    names = document.get("signals", [])
    if not isinstance(names, list) or len(names) > MAX_SIGNALS or len(set(map(str, names))) \
            != len(names) or not all(isinstance(n, str) and SIGNAL_NAME_PATTERN.fullmatch(n)
                                     for n in names):
        raise RouterLatencyError(f"expected at most {MAX_SIGNALS} distinct signal names",
                                 f"{path}: signals")
    for i, item in enumerate(passes):
        for attempt in (item.attempt, *item.discarded_attempts):
            for request in attempt.requests:
                if len(request.signal_ms) > len(names):
                    raise RouterLatencyError(
                        f"{len(request.signal_ms)} signal times, but {len(names)} signal names",
                        f"{path}: passes[{i}] prompt {request.id}")
    return tuple(names)


def load_run(path: str) -> RunFile:
    """Return a run file's data, validated field by field."""
    return RunFile.from_json(read_json(path), str(path))


def dump_run(run: RunFile) -> Iterator[bytes]:
    """Yield the bytes of a run file: indented, but one line per request record.

    json's indenting encoder is written in Python and builds millions of small strings for a
    100,000-request run; records encoded one by one with the C encoder, and yielded a thousand
    at a time, keep memory and time proportional to the records themselves.
    """
    record_lists: list = []
    token = os.urandom(8).hex()  # no string a router or a user wrote can look like it

    def hollow(requests: tuple) -> str:
        record_lists.append(requests)
        return f"\x00{token} {len(record_lists) - 1}\x00"

    shell = run.to_json(passes=[
        p.to_json(hollow(p.requests), [a.to_json(hollow(a.requests))
                                       for a in p.discarded_attempts])
        for p in run.passes])
    # a lone surrogate (an escaped one in a router's answer, a path or label of bytes that
    # are not UTF-8) is no UTF-8: backslashreplace writes it as its JSON escape, \udcff
    text = json.dumps(shell, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
    for i, part in enumerate(re.split(rf'"\\u0000{token} (\d+)\\u0000"', text)):
        if i % 2 == 0:
            yield part.encode("utf-8", "backslashreplace")
            continue
        records = record_lists[int(part)]
        if not records:
            yield b"[]"
            continue
        for start in range(0, len(records), 1000):
            lines = ",\n".join(encode(r.to_json()) for r in records[start:start + 1000])
            yield (("[\n" if start == 0 else ",\n") + lines).encode("utf-8", "backslashreplace")
        yield b"\n]"
