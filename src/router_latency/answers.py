"""Answers held by a pass: what a pass notes of each request (RawResult), its answer
classified (meaning.py), scrubbed of secrets, its decision read at once and the rest of it
(its per-signal times, the one-JSON check, degraded members, a sampled selection) held while
the pass runs and read after it: the AnswerBook that the pass loop calls once per answer."""

from __future__ import annotations

import time
from typing import cast, Dict, List, Literal, Optional, Protocol, Sequence, Tuple, Union

from .constants import (CONFIG_HASH_NAME, ERROR_CODE_PATTERN, LATE_BODY_MS, MAX_REASON_CHARS,
                        NamedTuple)
from .words import scrubbed, scrubbed_cut
from .degraded import Degraded
from .client import RequestFailed, ResponseReader
from .meaning import (body_config_hash, classify, degraded_of, HeldAnswer, Hold, past_decision,
                      rest_of_object, SignalTable, SignalTimes)

__all__ = ["AnswerBook", "failure_of", "RawResult"]



_new_tuple = tuple.__new__
LATE_BODY_NS = LATE_BODY_MS * 1_000_000


class RawResult(NamedTuple):
    """What the pass loop notes of one request; records_of turns it into a Request."""
    # the payload's index, which is the prompt id (a field named index would hide tuple.index)
    number: int
    scheduled: int  # perf_counter_ns: when it was due (closed loop: when it was first sent)
    started: int  # when it was sent (a request sent again: the second send)
    ended: int  # when the event loop woke with its answer complete, or gave up
    status: Optional[int]
    decision: Optional[str]
    error: Optional[str]
    retried: bool = False  # sent again on a new connection after its idle one closed
    code: Optional[str] = None  # the router's error code of a failed answer
    config_hash: Optional[str] = None  # the answer's x-vsr-config-hash header, as sent
    reason: Optional[str] = None  # what was wrong with a malformed answer
    degraded: Degraded = ()  # a 200 that skipped a signal: its members (degraded.py)
    late_body: bool = False  # its body came LATE_BODY_MS or more after its first bytes
    # the answer's per-signal times, in its SignalTable's order; while its pass runs, maybe
    # the answer held to read them and the rest of it from (AnswerBook.settle): the last
    # field (settle)
    signal_ms: Union[SignalTimes, HeldAnswer] = ()


# a result is built by tuple.__new__ given the fields in order (record): by keyword through
# RawResult's own __new__, called directly, costs 1,600 instructions more an answer, and
# RawResult(...) by keyword, through type()'s call and its dict of keywords, 5,400 more
# (CPython 3.11); tests/test_answers.py holds the order to the fields'


class Answer(NamedTuple):
    """One answer as the book classifies it (AnswerBook._classify)."""
    decision: Optional[str]  # secrets hidden, as in code
    error: Optional[str]  # the error kind; None: answered with a decision
    code: Optional[str]  # the router's error code
    # the per-signal times in the SignalTable's order, or the answer held to read its rest
    signal_ms: Union[SignalTimes, HeldAnswer]
    # the body's x-vsr-config-hash (None: it has none); False: not looked for
    config_hash: Union[str, Literal[False], None] = False
    degraded: Degraded = ()  # its signal_errors, applied_unknown_policies, decision_error


class Sent(Protocol):
    """A request the pass loop sent, as the book notes it (the loop's connection slot)."""
    index: int  # the payload's index: RawResult.number
    scheduled: int
    started: int
    retried: bool
    head_at: int  # when an answer that came in parts began to come; 0: in one read


class Failure(NamedTuple):
    """Why a request failed, as the pass records it (failure_of)."""
    kind: str  # RequestFailed's kinds: reset, timeout, malformed, ...
    status: Optional[int]  # the answer's status, where its head was read
    reason: Optional[str]  # what was wrong with a malformed answer


def failure_of(exc: Exception, status: Optional[int]) -> Failure:
    """Return the Failure (error kind, status, reason) of a request whose answer raised exc as
    it was read or classified, `status` that of a head already read: a RequestFailed says its
    own (a malformed one keeps the head's status where it has none); anything else is
    malformed."""
    if isinstance(exc, RequestFailed):
        if exc.kind == "malformed":
            return Failure("malformed", exc.status or status, exc.detail)
        return Failure(exc.kind, exc.status, None)
    return Failure("malformed", status, f"{type(exc).__name__}: {exc}")  # cut once scrubbed


class AnswerBook:
    """The raw results of one pass, in the order the requests ended: each answer classified
    as it completes, so that no body outlives its request, every secret of the request
    (the endpoint's token, a header's value) hidden in what the answer quotes.

    But for what an answer says past its decision: its per-signal times, with a
    SignalTable (None: not recorded), whether its rest is one JSON document, its degraded
    members and a sampled selection are read once the pass is over (settle), so that the
    pass does not spend its time on them while requests are in flight (its decision is read
    at once). Up to HOLD_BYTES of answers are held for that (then each answer is read whole
    as it completes); `settle_cpu_s` is the CPU time the reading took.
    """

    CACHED_BODY_BYTES = 1024  # answers this small are classified once per distinct body...
    CACHED_ANSWERS = 256  # ...and this many of them remembered
    # of the answers held for their times, per pass: 5,800 of the router's 1.4 KB answers,
    # 3,000 of its 2.7 KB ones, more than a corpus's pass sends; a longer pass's peak memory
    # stays near that of the times read at once (bench/load_100k.py: 207 MiB, 263 with 64 MiB)
    HOLD_BYTES = 8 * 2 ** 20
    SETTLE_ANSWERS = 512  # held answers read after the pass in steps of this many answers,
    SETTLE_CHARS = 2 * 2 ** 20  # or of this many characters: what a step needs stays small

    def __init__(self, paths: Sequence[str], signals: Optional[SignalTable],
                 secrets: Sequence[str]) -> None:
        self.paths = paths  # where an answer's decision is read
        self.signals = signals
        self.secrets = secrets
        self.results: List[RawResult] = []
        self.classified: Dict[Tuple[int, bytes], Answer] = {}  # (status, small body) -> Answer
        self.hold = Hold()  # what the pass may still hold, the answer held last
        self.settle_cpu_s = 0.0  # the CPU seconds of reading the held answers' rest

    def start_hold(self) -> None:
        """Hold answers, their rest read after the pass, from here on: the pass begins."""
        self.hold.room = self.HOLD_BYTES

    def end_hold(self) -> None:
        """Hold no answer from here on: the pass is over, however it ended."""
        self.hold.room = 0

    def record(self, sent: Sent, reader: ResponseReader, ended: int) -> None:
        """Note a request whose answer the reader holds, complete, classified: a small answer
        seen before is looked up rather than parsed again, with its config_hash when one is
        wanted (no header carried it) as it was cached."""
        status, body = reader.status, reader.body
        assert status is not None  # a complete answer: its status line was read
        header_hash = reader.headers.get(CONFIG_HASH_NAME)
        if len(body) > self.CACHED_BODY_BYTES:
            # _classify written out, without its record: this runs once an answer
            table, hold = self.signals, self.hold
            decision, error, code = classify(status, body, self.paths, table, self.secrets,
                                             hold)
            if self.secrets:
                decision, code = self._scrubbed(decision, code)
            hashed: Union[str, Literal[False], None] = False
            degraded: Degraded = ()
            signal_ms: Union[SignalTimes, HeldAnswer, None] = hold.last  # held: read in settle
            if signal_ms is None:
                signal_ms = (table.last or ()) if table is not None else ()
                if error is None:  # a 2xx with a decision: did it skip a signal?
                    found = degraded_of(body, self.secrets)
                    if found is None:  # names the members, but is no JSON past its decision
                        decision, error, signal_ms = None, "bad_json", ()
                    degraded = found or ()
        else:
            key = (status, bytes(body))
            known = self.classified.get(key)
            if known is None:
                if len(self.classified) >= self.CACHED_ANSWERS:
                    self.classified.clear()
                known = self.classified[key] = self._classify(status, body, not header_hash)
            decision, error, code, signal_ms, hashed, degraded = known
        head_at = sent.head_at
        self.results.append(_new_tuple(RawResult, (
            sent.index, sent.scheduled, sent.started, ended, status, decision, error,
            sent.retried, code,
            header_hash or (body_config_hash(body) if hashed is False else hashed),  # config_hash
            None, degraded,  # reason, degraded
            head_at != 0 and ended - head_at >= LATE_BODY_NS,  # late_body
            signal_ms)))

    def failed(self, sent: Sent, kind: str, ended: int, status: Optional[int] = None,
               reason: Optional[str] = None) -> None:
        """Note a request that failed as `kind` (RequestFailed's kinds), its reason scrubbed."""
        self.results.append(RawResult(
            number=sent.index, scheduled=sent.scheduled, started=sent.started, ended=ended,
            status=status, decision=None, error=kind, retried=sent.retried,
            reason=self._reason(reason)))

    def _classify(self, status: int, body: bytes | bytearray,
                  hash_wanted: bool = False) -> Answer:
        """Return what an answer says, its per-signal times read when the book has a
        SignalTable, its config_hash when wanted, and the degraded members of a 200 (one that
        names them but is no JSON is bad_json); or the answer held (its decision read, the
        rest of it read by settle)."""
        table, hold = self.signals, self.hold
        decision, error, code = classify(status, body, self.paths, table, self.secrets, hold)
        if self.secrets:
            decision, code = self._scrubbed(decision, code)
        hashed: Union[str, Literal[False], None] = body_config_hash(body) if hash_wanted else False
        if hold.last is not None:
            return Answer(decision, error, code, hold.last, hashed)
        degraded = degraded_of(body, self.secrets) if error is None else ()
        if degraded is None:
            return Answer(None, "bad_json", None, (), False)
        return Answer(decision, error, code, (table.last or ()) if table is not None else (),
                      hashed, degraded)

    def _reason(self, reason: Optional[str]) -> Optional[str]:
        """Return a failure's reason as recorded: scrubbed, then cut to MAX_REASON_CHARS."""
        return scrubbed_cut(reason, MAX_REASON_CHARS, self.secrets) if reason else None

    def _scrubbed(self, decision: Optional[str],
                  code: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
        """Return (decision, code) with every secret hidden: a router that quotes the
        request's token or a header value in its error code or decision records neither.
        Once per distinct answer, since answers seen before are cached."""
        if isinstance(code, str):  # still a code the reader takes: 'BAD_hidden', or none
            code = scrubbed(code, self.secrets).replace("[hidden]", "hidden")
            code = code if ERROR_CODE_PATTERN.fullmatch(code) else None
        return (scrubbed(decision, self.secrets) if isinstance(decision, str) else decision,
                code)

    # after the pass

    def settle(self) -> None:
        """Read the rest of the answers held during the pass, in the order they completed,
        as the pass would have read them (past_decision, SignalTable.scan_many), and note its
        CPU time (0: none held). An answer whose rest is not the rest of one JSON document,
        or whose times the scan cannot read, is classified again, in its turn, as it would
        have been when it came, which may make it bad_json or malformed: what is wrong past
        its decision (its connection was kept all the same: its framing was sound). The held
        answers are a prefix of the pass's, so the table's names are in the order first
        reported, but that those read as they came once the hold was spent come before the
        held answers' new names."""
        # (end_hold left the hold no room: from here on, answers are read whole)
        # this thread's CPU, which driver_cpu_seconds counts in the process's (other
        # threads' while it runs are the driver's as ever)
        started = time.thread_time()
        some: list = []  # places in the results: SETTLE_ANSWERS, or SETTLE_CHARS of text
        size = 0
        settled = False
        for i, raw in enumerate(self.results):
            if type(raw.signal_ms) is HeldAnswer:
                some.append(i)
                size += len(raw.signal_ms[0])
                if len(some) == self.SETTLE_ANSWERS or size >= self.SETTLE_CHARS:
                    self._settle_some(some)
                    some, size, settled = [], 0, True
        if some:
            self._settle_some(some)
            settled = True
        if settled:
            self.settle_cpu_s = time.thread_time() - started

    def _settle_some(self, held: Sequence[int]) -> None:
        """Read the rest of the held answers at these places of the results, in order."""
        results, table = self.results, self.signals

        def again(k: int) -> None:
            results[held[k]] = self._read_again(results[held[k]])

        # an answer whose rest past its decision is not the rest of one JSON document is
        # read again (bad_json, or malformed), reporting no names: before the others. Its
        # metrics are matched by the form of the table's last (rest_of_object): the first
        # held answer is scanned first when the table has read none yet (scanned again below)
        if table is not None and table.form is None:
            table.scan(*cast(HeldAnswer, results[held[0]].signal_ms))
        for i in held:
            raw = results[i]
            text, at = cast(HeldAnswer, raw.signal_ms)
            if not rest_of_object(text, at, table):
                results[i] = self._read_again(raw)
            elif raw.error is None:  # a decision: what the pass would have read past it
                try:
                    past = past_decision(text, self.paths, self.secrets)
                except Exception:  # noqa: BLE001 - what it did not foresee: read again
                    results[i] = self._read_again(raw)
                    continue
                if past is None:  # names a degraded member, but is no JSON: no times read
                    results[i] = raw._replace(decision=None, error="bad_json", signal_ms=())
                elif past[0] or past[1] is not None:
                    degraded, decision = past
                    if decision is None:
                        decision = raw.decision
                    elif self.secrets:
                        decision = self._scrubbed(decision, None)[0]
                    results[i] = raw._replace(degraded=degraded, decision=decision)
        held = [i for i in held if type(results[i].signal_ms) is HeldAnswer]
        if not held:
            return
        if table is None:  # no times recorded: none to read
            for i in held:
                results[i] = _new_tuple(RawResult, (*results[i][:-1], ()))
            return

        try:
            # the places settle found held: one cast a step, not a call an answer
            found = table.scan_many(cast(List[HeldAnswer], [results[i].signal_ms for i in held]),
                                    again)
        except Exception:  # noqa: BLE001 - what the scan did not foresee: read one by one
            found = [None] * len(held)
        for k, times in enumerate(found):
            raw = results[held[k]]
            if type(raw.signal_ms) is not HeldAnswer:
                continue  # read again in its turn
            # all of the result but its times, which are its last field: tuple.__new__, as
            # _replace's keywords would cost thousands of instructions a held answer
            results[held[k]] = _new_tuple(RawResult, (*raw[:-1], times)) \
                if times is not None else self._read_again(raw)

    def _read_again(self, raw: RawResult) -> RawResult:
        """Return a held answer's result classified again, times and all, as record and the
        pass loop's read would have classified it at once."""
        body = cast(HeldAnswer, raw.signal_ms)[0].encode()
        try:
            answer = self._classify(cast(int, raw.status), body)
        except Exception as exc:  # noqa: BLE001 - as the loop's read takes it
            kind, status, reason = failure_of(exc, raw.status)
            return raw._replace(status=status, decision=None, error=kind, code=None,
                                config_hash=None, signal_ms=(),
                                reason=self._reason(reason))
        return raw._replace(decision=answer.decision, error=answer.error, code=answer.code,
                            signal_ms=answer.signal_ms, degraded=answer.degraded)
