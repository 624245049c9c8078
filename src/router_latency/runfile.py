"""The run file: its records, each with its writer (to_json) beside its reader (from_json)."""

from __future__ import annotations

import collections
import json
import math
import operator
import os
import re
import statistics
from typing import Any, Callable, cast, Iterator, NamedTuple, Optional, Sequence, TypedDict

from .constants import (__version__, CACHE_SERIES, CONFIG_HASH_PATTERN, ERROR_CODE_PATTERN,
                        LADDER_MARGIN_PCT, LADDER_PASS, MAX_FILE_NUMBER, MAX_LATENCY_MS,
                        MAX_REASON_CHARS, MAX_SIGNALS, ROUTER_MAX_CONCURRENCY,
                        SIGNAL_NAME_PATTERN)
from .errors import checked_number, checked_object, checked_text, is_whole, RouterLatencyError
from .words import fmt_value
from .gpu import (check_telemetry, GpuCapture, GpuReading, GPU_FIELDS, GPU_RANGED, gpu_readings,
                  TelemetryJson)
from .cache import CacheFinding, checked_cache, result_cache_finding
from .versions import without_sampled
from .degraded import (Degraded, degraded_counts, degraded_from_json, degraded_summary_from_json,
                       degraded_to_json, UNKNOWN_ANSWERS_METRIC)
from .stats import percentile, rounded_percentiles
from .files import check_schema, read_json

__all__ = [
    "Attempt", "CapturedEnvironment", "Captures", "count_outcomes", "CpuSettings", "dump_run",
    "EnvironmentRow", "Floor", "HostSettings", "Ladder", "load_run", "LoadRange", "pass_name",
    "pass_summary", "pass_title", "PassEnvironment", "PassRecord", "phase_windows",
    "PhaseWindow", "ProbeResult", "Request", "RouterCpu", "RunFile", "RunSettings",
    "slow_phase", "SlowPhase", "Thresholds", "Warmup",
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
ERROR_KINDS = ("timeout", "connect", "tls", "reset", "http_3xx", "http_4xx", "http_5xx",
               "bad_json", "no_decision", "too_large", "malformed")
# a request's outcome beside ok and failed: a rejection its prompt expected (not an error, not
# in the percentiles), or a routed answer to a prompt that expected only a rejection
REQUEST_OUTCOMES = ("expected_rejection", "unexpected_routing")


def pass_name(concurrency: int, rate: Optional[float] = None) -> str:
    """Return the name a pass is stored and matched under: sequential, c4, c16, r100."""
    if rate is not None:
        return f"r{rate:g}"
    return "sequential" if concurrency == 1 else f"c{concurrency}"


def pass_title(name: str) -> str:
    """Return how a pass is shown in tables."""
    if name == LADDER_PASS:
        return "Ladder"
    if name.startswith("r"):
        return f"Rate {name[1:]}/s"
    return "Sequential" if name == "sequential" else f"Conc {name[1:]}"


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


class RouterRef(TypedDict, total=False):
    """The router as the run was told of it (--router-*); each None when not."""
    pid: Optional[int]
    session: Optional[int]  # --router-session: run_rounds.sh's start command's session
    cgroup: Optional[str]
    container: Optional[str]
    cpus: Optional[str]


class LoadRange(TypedDict, total=False):
    """The 1-minute load average over an attempt (LoadSampler.stop): None where unread."""
    start: Optional[float]
    end: Optional[float]
    min: Optional[float]
    max: Optional[float]
    samples: int


class ProbeResult(TypedDict, total=False):
    """One probe command's run (run_probe)."""
    exit: Optional[int]
    timed_out: bool
    stdout: str  # its first PROBE_OUTPUT_BYTES
    seconds: float
    interrupted: bool  # only when true


class MetricsCapture(TypedDict, total=False):
    """The router's metrics over a pass: the increase of each kept series and histogram
    series, or why the scrape failed."""
    deltas: dict[str, float]
    histograms: dict[str, float]
    error: str


class CapturedEnvironment(TypedDict, total=False):
    """What a pass recorded of its surroundings (environment_record); each part only where
    it was captured."""
    router_cpus: Optional[str]
    probes: dict[str, dict[str, ProbeResult]]  # "before" and "after" -> probe name -> its run
    gpu: GpuCapture
    metrics: MetricsCapture
    telemetry: TelemetryJson  # sampled through the pass (telemetry.py)


class Request(NamedTuple):
    """One request of a pass as the run file records it."""
    id: int  # the prompt's id in the corpus
    start_ms: Optional[float]  # send time from the pass's first send
    latency_ms: Optional[float]
    status: Optional[int]  # HTTP status, None when no answer came
    decision: Optional[str]
    error: Optional[str]  # None, or one of ERROR_KINDS
    service_ms: Optional[float] = None  # open loop: from the actual send to the answer
    behind_ms: Optional[float] = None  # open loop: how late the send left its schedule
    code: Optional[str] = None  # the router's error code of a failed or rejected request
    outcome: Optional[str] = None  # None, or one of REQUEST_OUTCOMES
    rep: int = 0  # which sending of the prompt in its pass (--repeat, --duration), from 0
    retried: bool = False  # sent again on a new connection: its idle one closed under it
    reason: Optional[str] = None  # a malformed answer: what was wrong with it
    # the router's execution_time_ms per signal, in the order of the run's signal names
    # (RunFile.signal_names); None where the answer did not report that signal
    signal_ms: tuple[Optional[float], ...] = ()
    # a 200 that skipped a signal or whose decision failed: (member, signal, reason) of its
    # signal_errors, applied_unknown_policies and decision_error (degraded.py); () when plain
    degraded: Degraded = ()

    @property
    def routed(self) -> bool:
        """A fully computed answer with a decision: what the percentiles count (a degraded
        answer has its decision, but not every signal computed: not in the percentiles)."""
        return self.error is None and self.outcome != "expected_rejection" and not self.degraded

    def to_json(self) -> dict:
        # rep is written only from the second sending on, so files without repeats keep
        # their bytes
        record: dict[str, Any] = {"id": self.id, **({"rep": self.rep} if self.rep else {}),
                  "start_ms": self.start_ms, "latency_ms": self.latency_ms,
                  "status": self.status, "decision": self.decision, "error": self.error}
        if self.service_ms is not None:
            record["service_ms"] = self.service_ms
            record["behind_ms"] = self.behind_ms
        if self.code is not None:
            record["code"] = self.code
        if self.outcome is not None:
            record["outcome"] = self.outcome
        if self.retried:  # written only when true: files without it read as before
            record["retried"] = True
        if self.reason is not None:
            record["reason"] = self.reason
        if self.signal_ms:  # likewise: files without signals keep their bytes
            record["signal_ms"] = list(self.signal_ms)
        if self.degraded:
            record["degraded"] = degraded_to_json(self.degraded)
        return record

    @classmethod
    def from_json(cls, raw: Any, where: str, count: int) -> "Request":
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object", where)
        prompt_id = raw.get("id")
        if not is_whole(prompt_id) or prompt_id >= count:
            raise RouterLatencyError(f"expected a prompt id from 0 to {count - 1}", f"{where}.id")
        decision, error, status = raw.get("decision"), raw.get("error"), raw.get("status")
        if decision is not None and not isinstance(decision, str):
            raise RouterLatencyError("expected a string or null", f"{where}.decision")
        if error is not None and error not in ERROR_KINDS:
            raise RouterLatencyError(f"expected null or one of {', '.join(ERROR_KINDS)}",
                                     f"{where}.error")
        if status is not None and not is_whole(status):
            raise RouterLatencyError("expected an HTTP status or null", f"{where}.status")
        if error is None and raw.get("latency_ms") is None:  # answered: it took a time
            raise RouterLatencyError("expected a number for a request without error",
                                     f"{where}.latency_ms")
        code, outcome = raw.get("code"), raw.get("outcome")
        if code is not None and not (isinstance(code, str) and ERROR_CODE_PATTERN.fullmatch(code)):
            raise RouterLatencyError("expected an error code or null", f"{where}.code")
        if outcome is not None and outcome not in REQUEST_OUTCOMES:
            raise RouterLatencyError(f"expected null or one of {', '.join(REQUEST_OUTCOMES)}",
                                     f"{where}.outcome")
        rep = raw.get("rep", 0)
        if not is_whole(rep):
            raise RouterLatencyError("expected a whole number >= 0 up to 2^53", f"{where}.rep")
        numbers = [checked_number(raw.get(key), f"{where}.{key}", nullable=True,
                                  maximum=MAX_FILE_NUMBER if key == "start_ms"
                                  else MAX_LATENCY_MS)
                   for key in ("start_ms", "latency_ms", "service_ms", "behind_ms")]
        if numbers[2] is not None and numbers[3] is None:  # open loop: both, or neither
            raise RouterLatencyError("expected a number for a request with a service_ms",
                                     f"{where}.behind_ms")
        retried = raw.get("retried", False)
        if not isinstance(retried, bool):
            raise RouterLatencyError("expected true or false", f"{where}.retried")
        reason = raw.get("reason")
        if reason is not None and not (isinstance(reason, str)
                                       and len(reason) <= MAX_REASON_CHARS):
            raise RouterLatencyError(f"expected a text of at most {MAX_REASON_CHARS} "
                                     f"characters or null", f"{where}.reason")
        degraded = raw.get("degraded")
        if degraded is not None and (error is not None or not is_whole(status)
                                     or not 200 <= status < 300):
            raise RouterLatencyError("expected only on a 2xx answered without error",
                                     f"{where}.degraded")
        return cls(prompt_id, numbers[0], numbers[1], status, decision, error, numbers[2],
                   numbers[3], code, outcome, rep, retried, reason,
                   _checked_signal_ms(raw.get("signal_ms", []), f"{where}.signal_ms"),
                   degraded_from_json(degraded, f"{where}.degraded")
                   if degraded is not None else ())


def _checked_signal_ms(raw: Any, where: str) -> tuple[Optional[float], ...]:
    """Return a request's per-signal times; raise unless a list of numbers >= 0 or nulls."""
    if not isinstance(raw, list) or len(raw) > MAX_SIGNALS:
        raise RouterLatencyError(f"expected a list of at most {MAX_SIGNALS} numbers or nulls",
                                 where)
    return tuple(checked_number(v, f"{where}[{i}]", nullable=True,
                                maximum=MAX_LATENCY_MS) for i, v in enumerate(raw))


def count_outcomes(requests: Sequence[Request]) -> dict:
    """Return requests, ok, the count of each error kind, and where there are any, the
    expected rejections, the degraded answers with their counts by signal and reason
    ({signal: {reason: count}}), and the failures by the router's code ({kind: {code:
    count}})."""
    failed = [r for r in requests if r.error is not None]
    errors = collections.Counter(r.error for r in failed)
    rejected = sum(r.outcome == "expected_rejection" for r in requests)
    degraded = [r.degraded for r in requests if r.degraded and r.error is None]
    counts = {"requests": len(requests),
              "ok": len(requests) - len(failed) - rejected - len(degraded),
              "errors": dict(sorted(errors.items()))}
    if rejected:
        counts["rejected"] = rejected
    if degraded:
        counts["degraded"] = len(degraded)
        counts["degraded_signals"] = degraded_counts(degraded)
    codes = collections.Counter((r.error, r.code) for r in failed if r.code is not None)
    if codes:
        by_kind: dict = {}
        for (kind, code), count in sorted(codes.items()):
            by_kind.setdefault(kind, {})[code] = count
        counts["error_codes"] = by_kind
    return counts


class PassSummary(NamedTuple):
    """Counts, percentiles and throughput of one pass."""
    requests: int
    ok: int
    errors: dict[str, int]  # error kind -> count
    p50_ms: Optional[float]
    p95_ms: Optional[float]
    p99_ms: Optional[float]
    mean_ms: Optional[float]
    min_ms: Optional[float]
    max_ms: Optional[float]
    req_per_s: Optional[float]
    wall_s: float
    service_p50_ms: Optional[float] = None  # open loop only, up to behind_p99_ms
    service_p95_ms: Optional[float] = None
    service_p99_ms: Optional[float] = None
    behind_p99_ms: Optional[float] = None
    rejected: int = 0  # expected rejections: neither ok nor errors, not in the percentiles
    error_codes: dict[str, dict[str, int]] = {}  # error kind -> {the router's code -> count}
    # answered with a decision but not every signal computed: neither ok nor errors, not in
    # the percentiles; and their counts, signal -> {reason -> answers}
    degraded: int = 0
    degraded_signals: dict[str, dict[str, int]] = {}

    def to_json(self) -> dict:
        document = self._asdict()
        if self.behind_p99_ms is None:
            for key in ("service_p50_ms", "service_p95_ms", "service_p99_ms", "behind_p99_ms"):
                del document[key]
        for key in ("rejected", "error_codes", "degraded", "degraded_signals"):
            if not document[key]:
                del document[key]
        return document

    @classmethod
    def from_json(cls, raw: Any, where: str) -> "PassSummary":
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object", where)
        for key in ("requests", "ok", "rejected"):
            if not is_whole(raw.get(key, 0 if key == "rejected" else None)):
                raise RouterLatencyError("expected a whole number >= 0 up to 2^53",
                                         f"{where}.{key}")
        values = {key: checked_number(raw.get(key), f"{where}.{key}", nullable=True,
                                      maximum=MAX_LATENCY_MS if key.endswith("_ms")
                                      else MAX_FILE_NUMBER)
                  for key in cls._fields[3:]
                  if key not in ("rejected", "error_codes", "degraded", "degraded_signals")}
        if raw["ok"] > 0 and values["p50_ms"] is None:
            raise RouterLatencyError("missing although requests succeeded", f"{where}.p50_ms")
        errors = raw.get("errors")
        if not isinstance(errors, dict) or not all(is_whole(v) for v in errors.values()):
            raise RouterLatencyError("expected an object of counts", f"{where}.errors")
        rejected = raw.get("rejected", 0)
        degraded, by_signal = degraded_summary_from_json(raw, where)
        if raw["ok"] + sum(errors.values()) + rejected + degraded != raw["requests"]:
            raise RouterLatencyError(f"ok + errors{' + rejected' if rejected else ''}"
                                     f"{' + degraded' if degraded else ''} does not add up "
                                     f"to requests", where)
        values["wall_s"] = values["wall_s"] or 0.0
        return cls(raw["requests"], raw["ok"], dict(errors), **values, rejected=rejected,
                   error_codes=_checked_error_codes(raw, errors, f"{where}.error_codes"),
                   degraded=degraded, degraded_signals=by_signal)


def _checked_error_codes(raw: dict, errors: dict, where: str) -> dict:
    """Return a summary's failures by code; raise when they do not fit its error counts."""
    codes = checked_object(raw, "error_codes", where.rsplit(".", 1)[0])
    for kind, by_code in codes.items():
        if not isinstance(by_code, dict) or not all(
                is_whole(n, 1) and ERROR_CODE_PATTERN.fullmatch(c) for c, n in by_code.items()):
            raise RouterLatencyError("expected an object of counts by code", f"{where}.{kind}")
        if sum(by_code.values()) > errors.get(kind, 0):
            raise RouterLatencyError(f"more than the {errors.get(kind, 0)} {kind} errors",
                                     f"{where}.{kind}")
    return codes


def pass_summary(requests: Sequence[Request], wall_s: float) -> PassSummary:
    """Return the summary of one pass: counts, error kinds and codes, percentiles and
    throughput of the routed requests."""
    latencies = [r.latency_ms for r in requests if r.routed and r.latency_ms is not None]
    counts = count_outcomes(requests)
    figures = rounded_percentiles(latencies, (50, 95, 99), "")
    figures["mean_ms"] = round(math.fsum(latencies) / len(latencies), 4) if latencies else None
    figures["min_ms"] = round(min(latencies), 4) if latencies else None
    figures["max_ms"] = round(max(latencies), 4) if latencies else None
    figures["req_per_s"] = round(len(latencies) / wall_s, 2) if wall_s > 0 else None
    figures["wall_s"] = round(wall_s, 6)
    if requests and requests[0].behind_ms is not None:  # open loop: from the schedule
        service = [r.service_ms for r in requests if r.routed and r.service_ms is not None]
        figures.update(rounded_percentiles(service, (50, 95, 99), "service_"))
        behind = [r.behind_ms for r in requests if r.behind_ms is not None]
        figures["behind_p99_ms"] = round(percentile(behind, 99), 4)
    return PassSummary(**counts, **figures)


class Thresholds(NamedTuple):
    """What makes a measured pass suspect; run records them in the file's settings."""
    window_requests: int = 50  # requests per window of a pass's time series
    slow_p95_factor: float = 2.0  # a window's p95 above this times the median window p95
    slow_rate_factor: float = 0.5  # a window's rate below this times the median window rate
    max_foreign_cpus: float = 1.0  # vCPUs other processes used on the router's CPUs


class PhaseWindow(NamedTuple):
    """Consecutive requests of a pass in send order: one point of its time series."""
    first: int  # the index of its first request in send order
    requests: int
    errors: int
    start_s: float  # its first send, from the pass's first send
    span_s: float  # to the next window's first send; the last window, to the last answer
    p50_ms: Optional[float]
    p95_ms: Optional[float]
    req_per_s: Optional[float]  # answered without error, per second of the span

    def to_json(self) -> dict:
        return self._asdict()

    @classmethod
    def from_json(cls, raw: Any, where: str) -> "PhaseWindow":
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object", where)
        for key in ("first", "requests", "errors"):
            if not is_whole(raw.get(key)):
                raise RouterLatencyError("expected a whole number >= 0 up to 2^53",
                                         f"{where}.{key}")
        numbers = [checked_number(raw.get(key), f"{where}.{key}", nullable=key in cls._fields[5:])
                   for key in cls._fields[3:]]
        return cls(raw["first"], raw["requests"], raw["errors"], *numbers)


def phase_windows(requests: Sequence[Request], size: int) -> tuple[PhaseWindow, ...]:
    """Return a pass's time series: windows of `size` requests in send order.

    A remainder under half a window joins the last window, so that no window's p95 rests on a
    handful of requests. Count windows rather than time windows: each holds the same number of
    latencies whatever the rate, and a stall stretches its window instead of emptying it.
    """
    starts = [r.start_ms for r in requests if r.start_ms is not None]
    if size < 1 or not requests or len(starts) < len(requests):
        return ()
    firsts = list(range(0, len(requests), size))
    if len(firsts) > 1 and len(requests) - firsts[-1] < size / 2:
        firsts.pop()
    # open loop: latency counts from the schedule, the answer came service_ms after the send
    ends = [start + taken for start, r in zip(starts, requests)
            if (taken := r.service_ms if r.service_ms is not None else r.latency_ms) is not None]
    windows = []
    for i, first in enumerate(firsts):
        stop = firsts[i + 1] if i + 1 < len(firsts) else len(requests)
        part = requests[first:stop]
        end = starts[stop] if stop < len(requests) else max(ends, default=0.0)
        span_s = max(end - starts[first], 0.0) / 1000
        latencies = [r.latency_ms for r in part
                     if r.error is None and not r.degraded and r.latency_ms is not None]
        figures = rounded_percentiles(latencies, (50, 95), "")
        windows.append(PhaseWindow(
            first, len(part), sum(r.error is not None for r in part),
            round(starts[first] / 1000, 6), round(span_s, 6), figures["p50_ms"],
            figures["p95_ms"], round(len(latencies) / span_s, 2) if span_s > 0 else None))
    return tuple(windows)


def slow_windows(windows: Sequence[PhaseWindow], thresholds: Thresholds) -> tuple[int, ...]:
    """Return the indexes of the windows of a slow phase: p95 above slow_p95_factor times the
    median window p95, or rate below slow_rate_factor times the median window rate.

    The pass's own windows are the baseline, so a pass slow throughout is not a slow phase;
    fewer than 3 windows make no baseline.
    """
    return tuple(i for i, by_p95, by_rate in slow_tests(windows, thresholds)
                 if by_p95 or by_rate)


def slow_tests(windows: Sequence[PhaseWindow],
               thresholds: Thresholds) -> list[tuple[int, bool, bool]]:
    """Return (index, its p95 is above the limit, its rate below it) of each window
    (slow_windows); none for fewer than 3 windows."""
    if len(windows) < 3:
        return []
    p95s = [w.p95_ms for w in windows if w.p95_ms is not None]
    rates = [w.req_per_s for w in windows if w.req_per_s is not None]
    p95_limit = thresholds.slow_p95_factor * statistics.median(p95s) if p95s else None
    rate_limit = thresholds.slow_rate_factor * statistics.median(rates) if rates else None
    return [(i, p95_limit is not None and w.p95_ms is not None and w.p95_ms > p95_limit,
             rate_limit is not None and w.req_per_s is not None and w.req_per_s < rate_limit)
            for i, w in enumerate(windows)]


class SlowPhase(NamedTuple):
    """A pass's slow phase (slow_phase) and the evidence that made it."""
    windows: tuple[int, ...]  # the indexes of its windows; () for none
    # every window as judged: against what its prompts take elsewhere, p95_ms is its p95 over
    # what its prompts' references give (1.0: as expected), req_per_s its pace (those
    # references' time per ms of its span); else the windows' own figures
    judged: tuple[PhaseWindow, ...] = ()
    relative: bool = False  # judged against the prompts' references
    by_p95: bool = False  # a window of it was slow by its p95
    by_rate: bool = False  # ... by its rate or pace

    def evidence(self, windows: Sequence[PhaseWindow]) -> str:
        """Return the figures that made the phase, each against the median window's: judged
        against the prompts' references, with the windows' own figures beside them."""
        def median(values: Iterator[Optional[float]]) -> Optional[float]:
            known = [v for v in values if v is not None]
            return statistics.median(known) if known else None

        chosen = [windows[i] for i in self.windows]
        judged = [self.judged[i] for i in self.windows]
        p95 = (max(w.p95_ms for w in chosen if w.p95_ms is not None),
               median(w.p95_ms for w in windows))
        rate = (min((w.req_per_s for w in chosen if w.req_per_s is not None), default=None),
                median(w.req_per_s for w in windows))
        parts = []
        if self.by_p95 and self.relative:
            parts.append(f"p95 {max(w.p95_ms for w in judged if w.p95_ms is not None):.2f}x "
                         f"what its prompts take elsewhere in the run, median window "
                         f"{median(w.p95_ms for w in self.judged):.2f}x (p95 "
                         f"{fmt_value(p95[0])} ms, median window {fmt_value(p95[1])} ms)")
        elif self.by_p95:
            parts.append(f"p95 up to {fmt_value(p95[0])} ms, median window "
                         f"{fmt_value(p95[1])} ms")
        if self.by_rate and self.relative:
            pace = min(w.req_per_s for w in judged if w.req_per_s is not None)
            parts.append(f"pace {pace / (median(w.req_per_s for w in self.judged) or pace):.0%} "
                         f"of the median window's, by what its prompts take elsewhere "
                         f"({fmt_value(rate[0])} req/s, median window {fmt_value(rate[1])} "
                         f"req/s)")
        elif self.by_rate:
            parts.append(f"rate down to {fmt_value(rate[0])} req/s, median window "
                         f"{fmt_value(rate[1])} req/s")
        return "; ".join(parts)


def prompt_references(item: Any, passes: Sequence[Any]) -> Optional[list]:
    """Return, for each request of a pass in send order, what its prompt takes elsewhere in
    the run (the median latency of its answers in the other passes, else in its other
    repetitions), or None when a tenth of them have no such answer."""
    elsewhere: dict = {}
    for other in passes:
        if other is not item and not other.discarded:
            for r in other.requests:
                if r.error is None and not r.degraded and r.latency_ms:
                    elsewhere.setdefault(r.id, []).append(r.latency_ms)
    own: dict = {}
    for r in item.requests:
        if r.error is None and not r.degraded and r.latency_ms:
            own.setdefault(r.id, []).append(r.latency_ms)
    found = []
    for r in item.requests:
        others = elsewhere.get(r.id) or [x for x in own.get(r.id, []) if x != r.latency_ms]
        found.append(statistics.median(others) if others else None)
    return None if sum(x is None for x in found) * 10 > len(found) else found


def content_slow_windows(item: Any, passes: Sequence[Any],
                         thresholds: Thresholds) -> tuple[int, ...]:
    """Return the indexes of a pass's slow windows (slow_phase)."""
    return slow_phase(item, passes, thresholds).windows


def slow_phase(item: Any, passes: Sequence[Any], thresholds: Thresholds) -> SlowPhase:
    """Return a pass's slow phase, each window judged against what its own prompts take
    elsewhere in the run (prompt_references): a window is slow when its p95 over the p95 its
    prompts' references give (times the pass's scale) is above slow_p95_factor times the median
    window's, or its pace (the references' sum per second of its span) below slow_rate_factor
    times the median window's, and in that figure of its own it is worse than the median window
    too (a window as fast as the median window is no slow phase, whatever the references say).
    So a window of long prompts, slow by its content, is not a slow phase; a node or router that
    slowed down is. The p95 of the references, not of each request over its own: a prompt whose
    reference is small by where it stood in the other passes (the first request on each
    connection) does not make a window slow. Without references (a single pass sent once),
    the pass's own windows are the baseline (slow_windows)."""
    windows, requests = item.attempt.windows, item.requests
    references = prompt_references(item, passes) if len(windows) >= 3 else None
    if references is None or windows[-1].first + windows[-1].requests > len(requests) \
            or any(r.start_ms is None for r in requests):  # windows not of these requests
        return _slow_phase(windows, windows, thresholds, False)
    ratios = [r.latency_ms / ref
              if r.error is None and not r.degraded and r.latency_ms and ref else None
              for r, ref in zip(requests, references)]
    scale = statistics.median([x for x in ratios if x is not None] or [1.0])
    judged = []
    for number, w in enumerate(windows):
        part = range(w.first, w.first + w.requests)
        expected_p95 = [references[i] for i in part if ratios[i] is not None]
        p95 = w.p95_ms / (scale * percentile(expected_p95, 95)) \
            if expected_p95 and w.p95_ms is not None else None
        # the pace between sends: the last window's span ends at its last send, since the
        # drain after it (fewer callers at the end of a pass) is no slow phase
        last = number == len(windows) - 1
        span_ms = (requests[part[-1]].start_ms - requests[w.first].start_ms) if last \
            else w.span_s * 1000
        expected = math.fsum(references[i] for i in (part[:-1] if last else part)
                             if references[i])
        judged.append(w._replace(p95_ms=p95, req_per_s=expected / span_ms if span_ms > 0
                                 else None))
    return _slow_phase(windows, judged, thresholds, True)


def _slow_phase(windows: Sequence[PhaseWindow], judged: Sequence[PhaseWindow],
                thresholds: Thresholds, relative: bool) -> SlowPhase:
    """Return the SlowPhase of windows judged as `judged` says, each slow window also worse
    than the median window in its own figure of the test that found it."""
    p95s = [w.p95_ms for w in windows if w.p95_ms is not None]
    rates = [w.req_per_s for w in windows if w.req_per_s is not None]
    median_p95 = statistics.median(p95s) if p95s else None
    median_rate = statistics.median(rates) if rates else None
    def worse(value: Optional[float], median: Optional[float], sign: int) -> bool:
        return value is not None and median is not None and (value - median) * sign > 0

    found = [(i, by_p95 and worse(windows[i].p95_ms, median_p95, 1),
              by_rate and worse(windows[i].req_per_s, median_rate, -1))
             for i, by_p95, by_rate in slow_tests(judged, thresholds)]
    found = [f for f in found if f[1] or f[2]]
    return SlowPhase(tuple(i for i, _, _ in found), tuple(judged), relative,
                     any(f[1] for f in found), any(f[2] for f in found))


class RouterCpu(NamedTuple):
    """The router's CPU time over a pass, and what other processes used of its CPUs."""
    router_s: Optional[float] = None  # user + system seconds of the router
    per_request_ms: Optional[float] = None  # router_s over the requests of the pass
    cpus: Optional[str] = None  # the CPU set read in /proc/stat ('0-11')
    busy_s: Optional[float] = None  # user + nice + system seconds of those CPUs
    interval_s: Optional[float] = None  # between the two readings around the pass
    foreign_vcpus: Optional[float] = None  # (busy_s - router_s) / interval_s
    notes: tuple[str, ...] = ()  # why a figure is missing

    def to_json(self) -> dict:
        return {**self._asdict(), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Optional["RouterCpu"]:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object or null", where)
        cpus, notes = raw.get("cpus"), raw.get("notes") or []
        if cpus is not None and not isinstance(cpus, str):
            raise RouterLatencyError("expected a CPU list or null", f"{where}.cpus")
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise RouterLatencyError("expected a list of strings", f"{where}.notes")
        numbers = {key: checked_number(raw.get(key), f"{where}.{key}", nullable=True)
                   for key in ("router_s", "per_request_ms", "busy_s", "interval_s",
                               "foreign_vcpus")}
        return cls(cpus=cpus, notes=tuple(notes), **numbers)


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


class PassEnvironment(NamedTuple):
    """What a pass recorded of its surroundings, as rounds reports it."""
    load_min: Optional[float] = None
    load_max: Optional[float] = None
    peak_load: Optional[float] = None  # over every attempt, discarded ones included
    discarded_attempts: int = 0
    driver_cpu_s: Optional[float] = None
    wall_s: Optional[float] = None
    router_cpus: Optional[str] = None
    gpu_mib: tuple[float, ...] = ()  # total used MiB over devices, before and after
    faults: Optional[float] = None  # sum of increases of restart/fault series; None: not read
    router_cpu_ms: Optional[float] = None  # the router's CPU time per request
    foreign_vcpus: Optional[float] = None  # other processes on the router's CPUs
    # GPU_FIELDS key -> every value read, over devices, before and after
    gpu_state: dict[str, tuple[float, ...]] = {}
    energy_j: Optional[float] = None  # the router's GPUs' joules per request (telemetry)


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
        gpu_mib = [total for reading in gpu_readings(environment)
                   if (total := reading.total_mib) is not None]
        deltas = (environment.get("metrics") or {}).get("deltas")
        # kept beside the faults, not counted as one: the router's unknown answers (each
        # degraded answer is counted as such, Request.degraded) and the result caches'
        # lookups (kept always, for the cache finding: CACHE_SERIES)
        faults = math.fsum(max(d, 0.0) for series, d in deltas.items()
                           if not series.startswith(UNKNOWN_ANSWERS_METRIC)
                           and not CACHE_SERIES.match(series.split("{", 1)[0])) \
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
                   _checked_error_codes(raw, errors or {}, f"{where}.error_codes"),
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
        return {"schema": RUN_SCHEMA_DEGRADED if self.degraded else RUN_SCHEMA,
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
            _checked_signal_names(document, passes, path), str(path))


def _check_run_schema(document: Any, path: str) -> None:
    """Raise unless the document is a run file this version reads: run/2 and later checked
    against run/2 (a later one: upgrade); anything else (run/1, another kind of file) against
    run/1, as before run/2."""
    schema = document.get("schema") if isinstance(document, dict) else None
    version = schema.rpartition("/")[2] if isinstance(schema, str) \
        and schema.startswith("router-latency/run/") else ""
    check_schema(document, RUN_SCHEMA_DEGRADED if version.isdigit() and int(version) >= 2
                 else RUN_SCHEMA, path)


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
