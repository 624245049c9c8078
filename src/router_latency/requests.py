"""A pass's requests as the run file holds them: each request's record (its outcome, latency,
decision, signal times), the outcomes counted, and a pass's summary; pass names and titles."""

from __future__ import annotations

import collections
import math
from typing import Any, Optional, Sequence

from .constants import (ERROR_CODE_PATTERN, LADDER_PASS, MAX_FILE_NUMBER, MAX_LATENCY_MS,
                        MAX_REASON_CHARS, MAX_SIGNALS, NamedTuple)
from .errors import checked_number, checked_object, is_whole, RouterLatencyError
from .stats import percentile, rounded_percentiles
from .degraded import (Degraded, degraded_counts, degraded_from_json, degraded_summary_from_json,
                       degraded_to_json)

__all__ = [
    "checked_error_codes", "count_outcomes", "ERROR_KINDS", "pass_name", "pass_summary",
    "pass_title", "PassSummary", "Request",
]


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
    # its body came LATE_BODY_MS or more after its head (a head-and-body stall: stall.py)
    late_body: bool = False

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
        if self.late_body:  # written only when true: files without it read as before
            record["late_body"] = True
        return record

    @classmethod
    def from_json(cls, raw: Any, where: str, count: int) -> "Request":
        """Return a request of a run file's record; raise, naming the field, where it is not
        one. A run file holds up to hundreds of thousands: a plain record (the JSON reader's
        own int, float, str and list values, no degraded answer) takes the fast path, which
        accepts exactly what the checks below accept and builds the same request; anything
        else, and every error, goes through the checks."""
        if type(raw) is dict:
            request = _plain_request(cls, raw, count)
            if request is not None:
                return request
        return cls._checked_from_json(raw, where, count)

    @classmethod
    def _checked_from_json(cls, raw: Any, where: str, count: int) -> "Request":
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
        retried, late_body = raw.get("retried", False), raw.get("late_body", False)
        if not isinstance(retried, bool):
            raise RouterLatencyError("expected true or false", f"{where}.retried")
        if not isinstance(late_body, bool):
            raise RouterLatencyError("expected true or false", f"{where}.late_body")
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
                   if degraded is not None else (), late_body)


def _plain_request(cls: Any, raw: dict, count: int) -> Optional[Request]:
    """Return the Request of a plain record, as Request._checked_from_json builds it; None
    where it is not plain or not valid (that path then raises the error naming the field)."""
    get = raw.get
    prompt_id, status, decision, error = get("id"), get("status"), get("decision"), get("error")
    if type(prompt_id) is not int or not 0 <= prompt_id < count \
            or prompt_id > MAX_FILE_NUMBER:
        return None
    if status is not None and (type(status) is not int or not 0 <= status <= MAX_FILE_NUMBER):
        return None
    if decision is not None and type(decision) is not str:
        return None
    if error is not None and error not in ERROR_KINDS:
        return None
    start_ms, latency_ms = get("start_ms"), get("latency_ms")
    service_ms, behind_ms = get("service_ms"), get("behind_ms")
    if (error is None and latency_ms is None) or get("degraded") is not None \
            or (service_ms is not None and behind_ms is None):
        return None
    # each number None, or the JSON reader's int or float from 0 to its maximum (NaN fails
    # both comparisons, infinity the second): what checked_number(nullable=True) returns as is
    if start_ms is not None and not ((type(start_ms) is float or type(start_ms) is int)
                                     and 0 <= start_ms <= MAX_FILE_NUMBER):
        return None
    code, outcome, rep = get("code"), get("outcome"), get("rep", 0)
    if code is not None and (type(code) is not str or not ERROR_CODE_PATTERN.fullmatch(code)):
        return None
    if outcome is not None and outcome not in REQUEST_OUTCOMES:
        return None
    if type(rep) is not int or not 0 <= rep <= MAX_FILE_NUMBER:
        return None
    retried, late_body, reason = get("retried", False), get("late_body", False), get("reason")
    if (retried is not True and retried is not False) \
            or (late_body is not True and late_body is not False):
        return None
    if reason is not None and (type(reason) is not str or len(reason) > MAX_REASON_CHARS):
        return None
    signal_ms = get("signal_ms", [])
    if type(signal_ms) is not list or len(signal_ms) > MAX_SIGNALS:
        return None
    for value in (latency_ms, service_ms, behind_ms, *signal_ms):  # the times, at most a day
        if value is not None and not ((type(value) is float or type(value) is int)
                                      and 0 <= value <= MAX_LATENCY_MS):
            return None
    return cls(prompt_id, start_ms, latency_ms, status, decision, error, service_ms, behind_ms,
               code, outcome, rep, retried, reason, tuple(signal_ms), (), late_body)


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
                   error_codes=checked_error_codes(raw, errors, f"{where}.error_codes"),
                   degraded=degraded, degraded_signals=by_signal)


def checked_error_codes(raw: dict, errors: dict, where: str) -> dict:
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
