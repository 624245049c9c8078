"""The pass loop: what and how each request is sent (Target), a pass's plan and arrival
schedule, the prompts as request bytes, and PassLoop, which sends one pass from a single
thread on non-blocking sockets and one selector and hands each answer to the AnswerBook;
then the pass's results as records (records_of), the configuration hashes and expectations."""

from __future__ import annotations

import gc
import json
import math
import operator
import select
import threading
import time
from typing import Any, cast, List, Optional, Sequence, Tuple, TYPE_CHECKING

from .constants import (CONFIG_HASH_HEADER, CONFIG_HASH_PATTERN, DEFAULT_DECISION_PATHS,
                        DEFAULT_MODEL, NamedTuple)
from .requests import Request
from .client import (blocked_errors, encode_request, Endpoint, open_socket, RequestFailed,
                     ResponseReader, secret_values, tls_context)
from .meaning import SignalTable
from .answers import AnswerBook, failure_of, RawResult

if TYPE_CHECKING:
    import socket
    import ssl

__all__ = [
    "config_hashes_of", "encode_prompts", "MAX_PASS_REQUESTS", "met_expectations", "PassLoop",
    "PassPlan", "pass_schedule", "records_of", "Target",
]


STOP_GRACE_NS = 2_000_000_000  # after Ctrl-C or SIGTERM, requests in flight get 2 s
MAX_PASS_REQUESTS = 1_000_000  # a pass keeps every record in memory, about 1.4 KB each


class Target(NamedTuple):
    """Where and how each preview request is sent, and how its decision is read."""
    endpoint: Endpoint
    # (name, value) pairs; values are never stored or printed
    headers: Tuple[Tuple[str, str], ...] = ()
    model: str = DEFAULT_MODEL
    timeout: float = 30.0  # seconds per request
    insecure: bool = False  # skip TLS certificate checks
    decision_paths: Tuple[str, ...] = DEFAULT_DECISION_PATHS
    # preview_context.sampling_seed of every request: a model selection that samples draws
    # the same model each time (None: not sent)
    sampling_seed: Optional[int] = None
    signals: Optional[SignalTable] = None  # where per-signal times are recorded; None: not

    @property
    def signal_names(self) -> Tuple[str, ...]:
        return tuple(self.signals.names) if self.signals is not None else ()


class PassPlan(NamedTuple):
    """One pass to measure. Closed loop: `connections` callers, each sending its next request
    when its previous one is answered. Open loop (`rate`): requests leave on a schedule and
    take a free connection, at most `connections` of them."""
    name: str
    connections: int
    rate: Optional[float] = None
    arrival: str = "constant"  # open loop: constant or poisson spacing
    seed: int = 0  # of the poisson schedule
    repeat: int = 1  # times the corpus is sent
    duration: Optional[float] = None  # seconds: the corpus is cycled until they are up


def arrival_schedule(count: Optional[int], rate: float, arrival: str, seed: int, *,
                     duration: Optional[float] = None) -> list:
    """Return the send times (ns from the pass's start) of an open-loop pass: `count` of
    them, or as many as fall within `duration` seconds.

    constant: evenly spaced at 1/rate; poisson: exponential gaps of mean 1/rate from a
    generator seeded with `seed`, so the same seed gives the same schedule on every run.
    """
    import random
    if count is None and duration is None:
        raise ValueError("arrival_schedule needs a count or a duration")
    limit = math.inf if duration is None else duration * 1e9
    rng = random.Random(seed)
    times: list = []
    clock = 0.0
    while count is None or len(times) < count:
        at = round(len(times) * 1e9 / rate) if arrival == "constant" else round(clock * 1e9)
        if at >= limit:
            break
        times.append(at)
        if arrival != "constant":
            clock += rng.expovariate(rate)
    return times


PASS_HEADERS = (CONFIG_HASH_HEADER,)  # the response headers a pass keeps
_scheduled_of = operator.attrgetter("scheduled")  # sort keys without a Python call per item
_started_of = operator.attrgetter("started")
_ended_of = operator.attrgetter("ended")
# a Request made by tuple.__new__ with its fields in order (records_of): through Request's
# call, by position, its __new__ is a Python call a request more (tests/test_passloop.py
# holds the order to the fields')
_tuple_new = tuple.__new__


class _Slot:
    """One connection of a pass and the request it carries."""

    __slots__ = ("sock", "fd", "reader", "index", "scheduled", "started", "deadline",
                 "pending", "fresh", "retried", "head_at")

    def __init__(self) -> None:
        self.sock: Optional[socket.socket] = None
        self.fd = -1  # the socket's descriptor, as registered with the loop's poller
        self.reader: Optional[ResponseReader] = None
        self.index = self.scheduled = self.started = self.deadline = 0
        self.pending: Optional[memoryview] = None
        self.fresh = False  # the connection was opened for the request it carries
        self.retried = False
        self.head_at = 0  # when the first bytes of an answer that came in parts were read


# The pass's measured speed-ups, each counted in instructions per request
# (bench/driver_instructions.py, docs/benchmark.md) and kept for that, not for how it reads:
# - epoll used directly, not selectors; a connection registered once and modified only while
#   bytes wait (PassLoop._poll, _open, _transmit); the cyclic collector off during a pass (run)
# - once a round, not a request: stop.is_set(); the nearest deadline by
#   min(map(DEADLINE_OF, busy)), no generator frame (_send_all)
# - written out where they run once an answer: _release (_complete), _more (_start_due),
#   AnswerBook._classify (AnswerBook.record), which scrubs only where there are secrets
# - a small answer classified once per distinct body (AnswerBook.CACHED_BODY_BYTES)
# - RawResult made by tuple.__new__ with its fields in order, not by keyword (AnswerBook.record);
#   a held answer's times put in the same way (AnswerBook._settle_some)
# - answers held, their decision read, the rest of each (its times, the one-JSON check, its
#   degraded members, a sampled selection) read after the pass (AnswerBook.HOLD_BYTES), the
#   times of a step of them in one call of the C scanner (SignalTable.scan_many); the hold
#   taken in answer_document, not in a call; a HeldAnswer a list, not a NamedTuple (meaning)
# - records_of: RawResult's fields in one unpacking, the times a local typed Any rather
#   than a cast (a call a request), a Request made by tuple.__new__, sort keys by
#   operator.attrgetter
class PassLoop:
    """Sends one pass from a single thread: non-blocking sockets on one selector.

    No request waits for another thread to take the interpreter lock before its time is
    stamped, and the end time of every response completed in one wake-up is the moment the
    selector returned: when the bytes were already there. Closed loop: `concurrency`
    connections, each sending its next request when the previous one is answered. Open loop:
    `schedule` gives each request's send time (ns from the start); requests wait for a free
    connection (up to `concurrency` of them), and their latency counts from the schedule.
    The plan gives `concurrency` (its connections) and how many requests the pass sends.

    Request i carries payload i modulo their number: `total` requests (the corpus `repeat`
    times; open loop: one per scheduled time), and with the plan's `duration` (closed loop),
    at most MAX_PASS_REQUESTS and none started after that many seconds; those in flight then
    are waited for, since leaving out the slowest would flatter the tail.

    The connections wait on epoll (poll where there is none) used directly: selectors' wrapper
    cost a Python call and a key lookup per event. Each connection is registered once, when it
    opens, and modified only while a request's bytes wait to be written.

    A response is only matched to the request whose bytes preceded it: one request at a time
    per connection, and a connection whose framing is in doubt (bytes beyond an answer, or
    bytes while idle) is closed. An idle connection the server closes is closed here at once;
    a request written to an idle connection that closes before any byte of its answer is sent
    once more on a new connection. What each request came to, its answer or its failure, goes
    to the pass's AnswerBook (`answers`) in one call: there it is classified and scrubbed, its
    decision read at once and the rest of it held until the pass is over.
    """

    DEADLINE_OF = operator.attrgetter("deadline")
    READ = select.POLLIN | select.POLLERR | select.POLLHUP  # epoll's bits are poll's
    WRITE = select.POLLOUT | select.POLLERR | select.POLLHUP

    def __init__(self, target: Target, payloads: Sequence[bytes], stop: threading.Event,
                 plan: PassPlan, schedule: Optional[Sequence[int]] = None):
        self.target = target
        self.payloads = payloads
        self.stop = stop
        self.concurrency = plan.connections
        self.schedule = schedule
        duration = plan.duration if schedule is None else None
        self.total = len(schedule) if schedule is not None else \
            len(payloads) * plan.repeat if duration is None else MAX_PASS_REQUESTS
        self.duration_ns = None if duration is None else round(duration * 1e9)
        self.end_ns: Optional[int] = None  # no request starts from here on
        self.context = tls_context(target.endpoint, insecure=target.insecure)
        # what a socket raises with nothing to read yet, or no room to write (TLS has its own)
        self.no_data = blocked_errors(self.context)
        self.no_room = blocked_errors(self.context, writing=True)
        self.epoll = hasattr(select, "epoll")  # else poll, which waits in milliseconds
        self.poller = select.epoll() if self.epoll else select.poll()
        self.by_fd: dict = {}  # file descriptor -> _Slot
        self.next_index = 0
        self.timeout_ns = int(target.timeout * 1e9)
        self.busy: set = set()
        self.idle: list = []
        # every secret of the request is kept from what the answers quote
        self.answers = AnswerBook(target.decision_paths, target.signals,
                                  secret_values(target.endpoint, target.headers))

    # connections

    def _open(self, slot: _Slot) -> socket.socket:
        sock = slot.sock = open_socket(self.target.endpoint, self.target.timeout,
                                       self.context, self.stop)
        slot.fd = sock.fileno()
        self.poller.register(slot.fd, select.POLLIN)
        self.by_fd[slot.fd] = slot
        return sock

    def _close(self, slot: _Slot) -> None:
        if slot.sock is not None:
            try:
                self.poller.unregister(slot.fd)
            except (KeyError, ValueError, OSError):
                pass
            self.by_fd.pop(slot.fd, None)
            try:
                slot.sock.close()
            except OSError:
                pass
            slot.sock = None

    def _idle_event(self, slot: _Slot) -> None:
        """An idle connection became readable: the server closed it (an idle timeout) or sent
        bytes no request asked for. Either way it is closed, not left to wake the loop."""
        sock = slot.sock
        assert sock is not None  # only a slot's open socket is registered for events
        try:
            sock.recv(65536)
        except self.no_data:
            return  # a TLS session ticket: nothing for the application
        except OSError:
            pass
        self._close(slot)

    # requests

    def _fail(self, slot: _Slot, kind: str, now: int, status: Optional[int] = None,
              reason: Optional[str] = None) -> None:
        if kind != "interrupted":  # a connect the stop flag cut short was never sent
            self.answers.failed(slot, kind, now, status, reason)
        slot.reader = None
        self._close(slot)
        self._release(slot)

    def _release(self, slot: _Slot) -> None:
        self.busy.discard(slot)
        self.idle.append(slot)

    def _send(self, slot: _Slot, index: int, scheduled: int, started: int) -> None:
        """Send request `index` on an idle slot at `started`; a failure is recorded and frees
        it again."""
        slot.index, slot.scheduled, slot.retried = index, scheduled, False
        slot.started = started
        self.busy.add(slot)
        self._transmit(slot)

    def _transmit(self, slot: _Slot) -> None:
        """Write the slot's request, first opening a connection when it has none."""
        perf = time.perf_counter_ns
        sock = slot.sock
        slot.fresh = sock is None
        if sock is None:
            try:
                sock = self._open(slot)  # a reconnect is part of this request's latency
            except RequestFailed as failure:
                self._fail(slot, failure.kind, perf())
                return
        slot.deadline = slot.started + self.timeout_ns
        slot.reader = ResponseReader(PASS_HEADERS)
        slot.head_at = 0
        payload = self.payloads[slot.index % len(self.payloads)]
        try:
            sent = sock.send(payload)
        except self.no_room:
            sent = 0
        except OSError:
            self._broken(slot, perf())
            return
        if sent < len(payload):
            slot.pending = memoryview(payload)[sent:]
            self.poller.modify(slot.fd, select.POLLIN | select.POLLOUT)
        else:
            slot.pending = None

    def _broken(self, slot: _Slot, now: int) -> None:
        """The connection closed or was reset under a request. On a connection that sat idle
        (the server may close it as the request leaves: Go's IdleTimeout, Envoy's idle timeout)
        and with no byte of the answer come, the request is sent once more on a new connection,
        its latency counting from that send; otherwise it is recorded as reset."""
        if slot.fresh or slot.retried or slot.reader is None or slot.reader.received:
            self._fail(slot, "reset", now)
            return
        self._close(slot)
        slot.retried = True
        slot.started = time.perf_counter_ns()
        self._transmit(slot)

    def _write_more(self, slot: _Slot, now: int) -> None:
        sock, pending = slot.sock, slot.pending
        # a write event: registered only while an open socket has bytes pending (_transmit)
        assert sock is not None and pending is not None
        try:
            sent = sock.send(pending)
        except self.no_room:
            return
        except OSError:
            self._broken(slot, now)
            return
        slot.pending = pending[sent:] if sent < len(pending) else None
        if slot.pending is None:
            self.poller.modify(slot.fd, select.POLLIN)

    def _read(self, slot: _Slot, now: int) -> None:
        sock, reader = slot.sock, slot.reader
        assert sock is not None and reader is not None  # a busy slot: _transmit set both
        try:
            while True:
                try:
                    data = sock.recv(262144)
                except self.no_data:
                    return
                if not data and not reader.received:
                    break  # closed before any answer: maybe sent again, below
                if reader.feed(data) if data else reader.eof():
                    self._complete(slot, now)
                    return
                if not slot.head_at:  # an answer in parts: when its first part came
                    slot.head_at = now
                # with a TLS context open_socket gave an SSLSocket: it may hold decrypted bytes
                if self.context is None or not cast("ssl.SSLSocket", sock).pending():
                    return  # plain TCP: one recv took what there was
        except OSError:
            pass
        except Exception as exc:  # noqa: BLE001 - RequestFailed, or an answer nothing foresaw
            # one request's failure, never the pass's: its measurements so far are kept
            kind, status, reason = failure_of(exc, getattr(reader, "status", None))
            self._fail(slot, kind, now, status, reason)
            return
        self._broken(slot, now)

    def _complete(self, slot: _Slot, now: int) -> None:
        reader = slot.reader
        assert reader is not None  # _read's reader, complete: feed or eof said so
        self.answers.record(slot, reader, now)
        slot.reader = None  # the body goes with it
        if not reader.keep_open or slot.pending is not None:
            # pending: the answer came before the whole request was sent (a server answering
            # a body too large after its head): the rest, sent on, would be read as the next
            # request, so the connection ends here, as Go's client ends it
            slot.pending = None
            self._close(slot)
        self.busy.discard(slot)  # _release, written out: this runs once an answer
        self.idle.append(slot)

    # the loop

    def run(self) -> list:
        """Send the pass's requests; return the raw results.

        The cyclic garbage collector waits while they are in flight: a collection of the
        whole heap, which a pass's records make large, would stop the loop for milliseconds
        with answers waiting to be stamped, and its traversals cost every request some
        (nothing the loop makes per request forms a cycle: tests/test_wire.py)."""
        collecting = gc.isenabled()
        gc.disable()
        answers = self.answers
        answers.start_hold()
        try:
            self._send_all()
        finally:
            if collecting:
                gc.enable()
            answers.end_hold()  # whatever ended the loop, no answer is held after it
        answers.settle()
        return answers.results

    def _send_all(self) -> None:
        perf = time.perf_counter_ns
        slots = [_Slot() for _ in range(self.concurrency)]
        opened = slots if self.schedule is None else slots[:min(4, len(slots))]
        for slot in opened:
            try:
                self._open(slot)  # before the pass: latency excludes the first handshake
            except RequestFailed:
                pass  # the first request on it reconnects and records why it failed
        self.idle = list(reversed(slots))
        origin = perf()
        if self.duration_ns is not None:
            self.end_ns = origin + self.duration_ns
        grace_end = None  # after an interrupt, requests in flight get this long to finish
        now = origin
        while True:
            stopped = self.stop.is_set()  # once a round: Event.is_set is a Python call
            now = self._start_due(now, origin, stopped)
            if self.schedule is not None:
                now = perf()  # the next send's wait is reckoned from here, to 0.2 ms
            if stopped and grace_end is None:
                grace_end = now + STOP_GRACE_NS
                for slot in self.busy:
                    slot.deadline = min(slot.deadline, grace_end)
            nearest = math.inf  # the soonest deadline of a request in flight
            if not self.busy:
                if not self._more(now) or stopped:
                    break
                wait = self._wait_for_schedule(now, origin)
            else:
                nearest = min(map(self.DEADLINE_OF, self.busy))  # no generator frame
                wait = max(nearest - now, 0) / 1e9
                if self.schedule is not None and self._more(now) and self.idle:
                    wait = min(wait, self._wait_for_schedule(now, origin))
            # a signal does not cut a wait short (PEP 475 retries it): wake now and then to
            # see whether the user asked to stop
            self._handle(self._poll(min(wait, 0.1)), perf())
            now = perf()  # also where the next round's sends start from
            if nearest <= now:  # answers and retries only move deadlines later
                self._expire(now, grace_end)
        for slot in slots:
            self._close(slot)
        if self.epoll and isinstance(self.poller, select.epoll):  # epoll: only where it is
            self.poller.close()

    def _handle(self, events: list, now: int) -> None:
        for slot, mask in events:
            if slot not in self.busy:
                if slot.sock is not None:
                    self._idle_event(slot)
                continue
            if mask & self.WRITE and slot.pending is not None:
                self._write_more(slot, now)
            if mask & self.READ and slot in self.busy:
                self._read(slot, now)

    def _expire(self, now: int, grace_end: Optional[int]) -> None:
        for slot in [s for s in self.busy if s.deadline <= now]:
            if grace_end is not None and now >= grace_end:
                slot.reader = None
                self._close(slot)  # cut off by the interrupt: not measured, not recorded
                self._release(slot)
            else:
                self._fail(slot, "timeout", now)

    def _poll(self, wait: float) -> list:
        """Return (slot, mask) of the ready connections, waiting at most `wait` seconds.

        epoll waits in whole milliseconds, rounded up, and was seen here to overshoot a 9 ms
        wait by 1.4 ms: a scheduled send would leave late. So epoll waits until 2.5 ms before a
        send is due, select() (microseconds, ~0.1 ms late) until 0.2 ms before, and the rest is
        polled without sleeping.
        """
        if self.schedule is not None and wait > 0.003:
            wait -= 0.0025
        elif self.schedule is not None and wait > 0:
            wait = wait - 0.0002 if wait > 0.0004 else 0.0
            readable = [s.sock for s in self.busy if s.sock is not None]
            writable = [s.sock for s in self.busy if s.sock is not None and s.pending is not None]
            try:
                ready_r, ready_w, _ = select.select(readable, writable, [], wait)
            except ValueError:  # a descriptor beyond select()'s reach: fall back to epoll
                pass
            else:
                by_sock = {s.sock: s for s in self.busy if s.sock is not None}
                masks: dict = {}
                for sock in ready_r:
                    masks[by_sock[sock]] = select.POLLIN
                for sock in ready_w:
                    masks[by_sock[sock]] = masks.get(by_sock[sock], 0) | select.POLLOUT
                return list(masks.items())
        by_fd = self.by_fd
        events = self.poller.poll(wait if self.epoll else math.ceil(wait * 1000))
        return [(by_fd[fd], mask) for fd, mask in events if fd in by_fd]

    def _wait_for_schedule(self, now: int, origin: int) -> float:
        if self.schedule is None or self.next_index >= len(self.schedule):
            return 0.0
        return max(origin + self.schedule[self.next_index] - now, 0) / 1e9

    def _more(self, now: int) -> bool:
        """Return whether the pass has requests left to start at `now`."""
        return self.next_index < self.total and (self.end_ns is None or now < self.end_ns)

    def _start_due(self, now: int, origin: int, stopped: bool) -> int:
        """Send what is due, unless the user asked to stop: closed loop, a request per free
        connection; open loop, every request whose time has come while a connection is free.
        Return the time of the last send (`now` when none left)."""
        while not stopped and self.idle and self.next_index < self.total:
            # (_more, written out: this runs once an answer) on the send's own stamp, so that
            # none starts after the end, and closed loop, one clock read a request
            started = time.perf_counter_ns()
            if self.end_ns is not None and started >= self.end_ns:
                break
            if self.schedule is None:
                scheduled = started
            else:
                scheduled = origin + self.schedule[self.next_index]
                if scheduled > started:
                    break
            index = self.next_index
            self.next_index += 1
            self._send(self.idle.pop(), index, scheduled, started)
            now = started
        return now


def records_of(results: Sequence[RawResult], *, open_loop: bool = False,
               count: Optional[int] = None) -> Tuple[List[Request], float]:
    """Return (Requests in send order, wall seconds) of a pass's raw results; request i is
    prompt i % count, repetition i // count (without count, prompt i)."""
    if not results:
        return [], 0.0
    ordered = sorted(results, key=_scheduled_of)
    first = min(map(_started_of, ordered))
    last = max(map(_ended_of, ordered))
    requests = []
    for raw in ordered:
        # RawResult's fields in one step: a NamedTuple's fields, read one by one, are a lookup
        # each, the cost of a few answers' parsing over a pass
        # settled (AnswerBook.settle): times, no answer held; Any, as a cast is a call a request
        times: Any
        (index, scheduled, started, ended, status, decision, error, retried, code, _, reason,
         degraded, late_body, times) = raw
        origin = scheduled if open_loop else started
        rep, prompt_id = divmod(index, count) if count else (0, index)
        requests.append(_tuple_new(Request, (  # Request's fields in order: see _tuple_new
            prompt_id, round((started - first) / 1e6, 4), round((ended - origin) / 1e6, 4),
            status, decision, error, round((ended - started) / 1e6, 4) if open_loop else None,
            round((started - scheduled) / 1e6, 4) if open_loop else None, code, None, rep,
            retried, reason, times, degraded, late_body)))
    return requests, (last - first) / 1e9


def config_hashes_of(results: Sequence[RawResult]) -> Tuple[str, ...]:
    """Return the valid x-vsr-config-hash values of a pass's answers, distinct, in send order
    (the router sends 64 lowercase hex digits or no header at all)."""
    seen: List[str] = []
    for raw in sorted(results, key=_scheduled_of):
        if raw.config_hash and raw.config_hash not in seen \
                and CONFIG_HASH_PATTERN.fullmatch(raw.config_hash):
            seen.append(raw.config_hash)
    return tuple(seen)


def met_expectations(requests: Sequence[Request], expects: Sequence[Sequence[str]]) -> list:
    """Return the requests with their prompts' expectations applied (expects[id]): a 4xx the
    prompt accepts is an expected rejection, not an error; a routed answer to a prompt that
    accepts only a rejection is an unexpected routing, still counted as routed.

    408 and 429 judge the load, not the request: they stay failures, so that shedding
    (429 OVERLOADED) never hides among the expected rejections.
    """
    if not any(expects):
        return list(requests)
    applied = []
    for request in requests:
        expect = expects[request.id]
        if request.error == "http_4xx" and "http_4xx" in expect \
                and request.status not in (408, 429):
            request = request._replace(error=None, outcome="expected_rejection")
        elif expect and request.error is None and "routed" not in expect:
            request = request._replace(outcome="unexpected_routing")
        applied.append(request)
    return applied


def pass_schedule(plan: PassPlan, prompts: int) -> Optional[list]:
    """Return the send times of an open-loop pass: the corpus `repeat` times, or as many as
    the rate gives in `duration`; None for a closed-loop pass."""
    if plan.rate is None:
        return None
    return arrival_schedule(None if plan.duration else prompts * plan.repeat, plan.rate,
                            plan.arrival, plan.seed, duration=plan.duration)


def encode_prompts(target: Target, texts: Sequence[str]) -> list:
    """Return the request bytes for each prompt, encoded once before any timing."""
    context = {} if target.sampling_seed is None else {
        "preview_context": {"sampling_seed": target.sampling_seed}}
    model = {"model": target.model} if target.model else {}  # none: the router's default
    return [encode_request(target.endpoint, "POST", json.dumps(
        {**model, "messages": [{"role": "user", "content": text}], **context}
    ).encode("ascii"), target.headers) for text in texts]
