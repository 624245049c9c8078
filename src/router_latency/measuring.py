"""Measuring: the pass loop (one selector, one thread), the floor, readiness, warm-up,
passes, measure_run()."""

from __future__ import annotations

import dataclasses
import gc
import http
import json
import math
import operator
import os
import platform
import random
import select
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from typing import Any, Callable, cast, List, NamedTuple, Optional, Sequence, Tuple

from .constants import (CONFIG_HASH_HEADER, CONFIG_HASH_PATTERN, DEFAULT_DECISION_PATHS,
                        DEFAULT_MODEL, EXPECTED_HASH_HEADER, PREVIEW_PATH, READY_PATH,
                        ROUTER_MAX_CONCURRENCY)
from .errors import RouterLatencyError
from .words import plural, scrubbed, scrubbed_cut
from .stats import rounded_percentiles
from .corpus import Corpus
from .cache import result_cache_finding
from .versions import ready_words
from .runfile import (Attempt, Captures, count_outcomes, Floor, Ladder, pass_name, pass_summary,
                      pass_title, PassRecord, phase_windows, Request, RunFile, RunSettings,
                      slow_phase, Thresholds, Warmup)
from .ladder import ladder_stop
from .client import (accept_connections, Connection, encode_request, Endpoint, http_response,
                     open_socket, parse_endpoint, RequestFailed, ResponseReader, secret_values,
                     stop_accepting, tls_context)
from .meaning import classify, decision_path_hint, error_code, SignalTable
from .captures import (capture_snapshot, CaptureSettings, environment_record, read_cpu_use,
                       router_cpu_use, router_cpus, utc_now)
from .gpu import gpu_tool
from .host import cpu_affinity, driver_cpu_seconds, host_settings, host_warnings, LoadSampler
from .telemetry import coincided_text, PassSampler, sampling
from .answers import AnswerBook, body_fault, failure_of, RawResult

__all__ = [
    "check_plan", "LoadGuard", "measure_run", "PassPlan", "plan_passes", "Progress",
    "RunContext", "RunPlan", "say_nothing", "settings_record", "Target",
]


REFUSED_AT_ONCE = (400, 401, 403, 412)  # a preview refused so is no start-up: no wait helps
PERCENTILE_METHOD = ("linear interpolation between closest ranks "
                     "(Hyndman-Fan R7, numpy's default)")
LATENCY_DEFINITION = ("client side, perf_counter_ns from just before the request is sent "
                      "(open loop: from its scheduled time) to the wake-up of the event loop "
                      "that completed the response, on a connection opened before the pass")
DRIVER_BUSY = 0.8  # warn when the driver's CPU time exceeds this share of one core
FLOOR_REQUESTS = 300  # requests of the driver's own floor, measured before every run
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


class LoadGuard(NamedTuple):
    """The published method's load guard: a pass above max_load is discarded and retried."""
    max_load: float = 120.0
    retries: int = 2
    pause: float = 30.0  # seconds before a retry
    loadavg_file: Optional[str] = None  # read the load here instead of the system's


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


class RunPlan(NamedTuple):
    """What one run measures: the warm-up, then each pass over the whole corpus (several
    times with repeat, cycled for a time with duration)."""
    passes: Tuple[PassPlan, ...]
    warmup: int = 20
    wait_ready: Optional[float] = None  # seconds to wait for a starting router
    max_errors: int = 0  # failed requests the run allows before it fails
    # the previews the router admits at once (its routing_preview.max_concurrency): a pass
    # with more callers is warned about, since the router sheds the rest with 429 OVERLOADED
    router_max_concurrency: int = ROUTER_MAX_CONCURRENCY
    ladder: Optional[Ladder] = None  # climb the passes in order while the load pays


def plan_passes(concurrency: Sequence[int] = (1, 4, 16), rates: Sequence[float] = (), *,
                model: PassPlan = PassPlan("", 64)) -> Tuple[PassPlan, ...]:
    """Return the passes of a run: the closed-loop levels, then the open-loop rates.

    `model` holds what the passes share (its name and rate are not read): the length of
    every pass (repeat, duration) and the open loop's connections, arrival and seed.
    """
    return tuple([PassPlan(pass_name(c), c, repeat=model.repeat, duration=model.duration)
                  for c in concurrency]
                 + [model._replace(name=pass_name(model.connections, r), rate=r) for r in rates])


def check_plan(plan: RunPlan, prompts: int) -> None:
    """Raise unless every pass of the plan is one the driver can hold in memory."""
    for item in plan.passes:
        if item.repeat < 1 or (item.duration is not None and not item.duration > 0):
            raise RouterLatencyError("expected repeat >= 1 and a duration > 0",
                                     pass_title(item.name))
        if item.repeat > 1 and item.duration is not None:
            raise RouterLatencyError("give a repeat count or a duration, not both",
                                     pass_title(item.name))
        wanted: float
        if item.duration is None:
            wanted = prompts * item.repeat
        else:
            wanted = item.rate * item.duration if item.rate is not None else 0
        if wanted > MAX_PASS_REQUESTS:
            raise RouterLatencyError(
                f"a pass of {wanted:,.0f} requests; at most {MAX_PASS_REQUESTS:,} are kept "
                f"in memory", "--duration" if item.duration else "--repeat")


def arrival_schedule(count: Optional[int], rate: float, arrival: str, seed: int, *,
                     duration: Optional[float] = None) -> list:
    """Return the send times (ns from the pass's start) of an open-loop pass: `count` of
    them, or as many as fall within `duration` seconds.

    constant: evenly spaced at 1/rate; poisson: exponential gaps of mean 1/rate from a
    generator seeded with `seed`, so the same seed gives the same schedule on every run.
    """
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


def clock_text(seconds: float) -> str:
    """Return a time span as m:ss, or h:mm:ss from an hour on."""
    hours, rest = divmod(max(0, math.ceil(seconds)), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def progress_text(title: str, done: int, total: Optional[int], elapsed: float, *,
                  duration: Optional[float] = None, finished: bool = False) -> str:
    """Return the progress line of a pass: requests done (of how many), their rate, and the
    time left; once finished, the time it took."""
    rate = done / elapsed if elapsed > 0 else 0.0
    count = f"{done:,}" if total is None else f"{done:,}/{total:,}"
    if finished:
        left = f"took {elapsed:.1f} s"
    elif duration is not None:
        left = f"ETA {clock_text(duration - elapsed)}"
    elif done and total is not None:
        left = f"ETA {clock_text((total - done) / rate)}"
    else:
        left = "ETA -:--"
    return f"{title}: {count} requests, {rate:,.0f} req/s, {left}"


class Progress:
    """A progress line on stderr, redrawn twice a second while a pass runs: which pass of how
    many, requests done, their rate and the time left."""

    def __init__(self, enabled: bool, stream=None, clock: Callable[[], float] = time.monotonic,
                 interval: float = 0.5):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.clock = clock
        self.interval = interval  # seconds between redraws
        self.stop = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.width = 0  # of the line drawn last, which a shorter one must cover

    def start(self, title: str, total: Optional[int], done: Callable[[], int],
              duration: Optional[float] = None) -> None:
        """Draw the pass's line until end(); total None: as many as `duration` allows."""
        if not self.enabled:
            return
        self.stop.clear()
        started = self.clock()

        def redraw() -> None:
            while True:
                finished = self.stop.wait(self.interval)
                try:
                    self.draw(progress_text(title, done(), total, self.clock() - started,
                                            duration=duration, finished=finished), finished)
                except OSError:  # a terminal gone: the pass goes on without a progress line
                    return
                if finished:
                    return

        self.thread = threading.Thread(target=redraw, daemon=True)
        self.thread.start()

    def draw(self, text: str, finished: bool) -> None:
        """Write the line over the previous one; a finished line ends with a newline."""
        self.stream.write("\r" + text.ljust(self.width) + ("\n" if finished else ""))
        self.stream.flush()
        self.width = 0 if finished else len(text)

    def note(self, text: str) -> None:
        """Draw a line between passes (waiting for a starting router), kept until the
        next line covers it: on a terminal only, as the passes' lines."""
        if self.enabled:
            self.draw(text, False)

    def end(self) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()
            self.thread = None


PASS_HEADERS = (CONFIG_HASH_HEADER,)  # the response headers a pass keeps
_scheduled_of = operator.attrgetter("scheduled")  # sort keys without a Python call per item
_started_of = operator.attrgetter("started")
_ended_of = operator.attrgetter("ended")


class _Slot:
    """One connection of a pass and the request it carries."""

    __slots__ = ("sock", "fd", "reader", "index", "scheduled", "started", "deadline",
                 "pending", "fresh", "retried")

    def __init__(self) -> None:
        self.sock: Optional[socket.socket] = None
        self.fd = -1  # the socket's descriptor, as registered with the loop's poller
        self.reader: Optional[ResponseReader] = None
        self.index = self.scheduled = self.started = self.deadline = 0
        self.pending: Optional[memoryview] = None
        self.fresh = False  # the connection was opened for the request it carries
        self.retried = False


# The pass's measured speed-ups, each counted in instructions per request
# (bench/driver_instructions.py, docs/benchmark.md) and kept for that, not for how it reads:
# - epoll used directly, not selectors; a connection registered once and modified only while
#   bytes wait (PassLoop._poll, _open, _transmit); the cyclic collector off during a pass (run)
# - once a round, not a request: stop.is_set(); the nearest deadline by
#   min(map(DEADLINE_OF, busy)), no generator frame (_send_all)
# - written out where they run once an answer: _release (_complete), _more (_start_due),
#   AnswerBook._classify (AnswerBook.record), which scrubs only where there are secrets
# - a small answer classified once per distinct body (AnswerBook.CACHED_BODY_BYTES)
# - RawResult made by its own __new__, by keyword, not through type()'s call (_raw_result); a
#   held answer's times put in with tuple.__new__ (AnswerBook._settle_some)
# - the per-signal times of answers held and read after the pass (AnswerBook.HOLD_BYTES), a
#   step of them in one call of the C scanner (SignalTable.scan_many); the hold taken in
#   answer_document, not in a call; a HeldAnswer a list, not a NamedTuple (meaning)
# - records_of: RawResult's leading fields in one slice, the times a local typed Any rather
#   than a cast (a call a request), sort keys by operator.attrgetter
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
    to the pass's AnswerBook (`answers`) in one call: there it is classified, scrubbed and its
    per-signal times read, held until the pass is over.
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
        except (BlockingIOError, ssl.SSLWantReadError):
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
        payload = self.payloads[slot.index % len(self.payloads)]
        try:
            sent = sock.send(payload)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
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
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
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
                except (BlockingIOError, ssl.SSLWantReadError):
                    return
                if not data and not reader.received:
                    break  # closed before any answer: maybe sent again, below
                if reader.feed(data) if data else reader.eof():
                    self._complete(slot, now)
                    return
                # with a TLS context open_socket gave an SSLSocket: it may hold decrypted bytes
                if self.context is None or not cast(ssl.SSLSocket, sock).pending():
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
        # RawResult's leading fields in one step: a NamedTuple's fields, read one by one, are
        # a lookup each, the cost of a few answers' parsing over a pass
        index, scheduled, started, ended, status, decision, error, retried, code = raw[:9]
        # settled (AnswerBook.settle): times, no answer held; Any, as a cast is a call a request
        times: Any = raw.signal_ms
        origin = scheduled if open_loop else started
        rep, prompt_id = divmod(index, count) if count else (0, index)
        requests.append(Request(
            prompt_id, round((started - first) / 1e6, 4), round((ended - origin) / 1e6, 4),
            status, decision, error, round((ended - started) / 1e6, 4) if open_loop else None,
            round((started - scheduled) / 1e6, 4) if open_loop else None, code, None, rep,
            retried, raw.reason, times, raw.degraded))
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


def say_nothing(message: str) -> None:
    """Say nothing: a run's default notify."""


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What every step of measuring a run shares, from measure_run down to measure_pass:
    where and how requests go, what the run measures, its load guard, its captures and
    probes, the thresholds that judge an attempt, the flag that interrupts it, its progress
    line and where its warnings go. A frozen dataclass rather than a NamedTuple: each context
    gets its own stop flag and progress line unless given one.

    Setting `stop` (a signal handler does) ends the pass under way within about 2 s, and a
    probe, scrape, connect, readiness wait or load pause within STOP_POLL_S.
    """
    target: Target
    plan: RunPlan
    guard: LoadGuard = LoadGuard()
    capture: CaptureSettings = CaptureSettings()
    thresholds: Thresholds = Thresholds()
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    progress: Progress = dataclasses.field(default_factory=lambda: Progress(enabled=False))
    notify: Callable[[str], None] = say_nothing  # a warning for the user, one line
    # the corpus's requests, encoded once before any timing, and what each prompt accepts
    # (see met_expectations), by prompt id; measure_run sets both from its corpus
    payloads: Sequence[bytes] = ()
    expects: Sequence[Sequence[str]] = ()


class MeasuredPass(NamedTuple):
    """What one pass measured (measure_pass)."""
    requests: List[Request]  # in send order
    wall_s: float  # from the first request sent to the last answer
    config_hashes: Tuple[str, ...]  # x-vsr-config-hash values its answers carried, first seen
    settle_cpu_s: float  # CPU seconds of reading the per-signal times after it (settle)


def measure_pass(context: RunContext, plan: PassPlan, title: str,
                 schedule: Optional[Sequence[int]] = None) -> MeasuredPass:
    """Send one pass of the context's payloads: the corpus `repeat` times, or cycled for
    `duration` seconds (open loop: on `schedule`); return what it measured: its Requests,
    wall seconds, the x-vsr-config-hash values its answers carried, in the order first seen,
    the CPU seconds of reading the per-signal times after it (AnswerBook.settle)."""
    target, payloads, stop, progress = \
        context.target, context.payloads, context.stop, context.progress
    loop = PassLoop(target, payloads, stop, plan, schedule)
    progress.start(title, None if plan.rate is None and plan.duration else loop.total,
                   lambda: len(loop.answers.results), plan.duration)
    try:
        results = loop.run()
    finally:
        progress.end()
    requests, wall_s = records_of(results, open_loop=schedule is not None, count=len(payloads))
    return MeasuredPass(requests=requests, wall_s=wall_s, config_hashes=config_hashes_of(results),
                        settle_cpu_s=loop.answers.settle_cpu_s)


class LoopbackResponder:
    """A fixed preview answer on 127.0.0.1, port 0, from a thread of this process: what is
    left of a request's latency against it is the driver's own work and the loopback's."""

    BODY = b'{"decision_result": {"decision_name": "floor"}}'
    ANSWER = http_response(200, BODY)

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=accept_connections, args=(self.listener, self._serve, self.stopping),
            daemon=True)
        self.thread.start()

    def _serve(self, connection: socket.socket) -> None:
        """Answer every request of one connection, on the accepting thread: the floor's
        pass has a single connection."""
        buffer = b""
        with connection:
            while True:
                try:
                    data = connection.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buffer += data
                while True:
                    end = buffer.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    length = 0
                    for line in buffer[:end].split(b"\r\n"):
                        if line[:15].lower() == b"content-length:":
                            length = int(line[15:])
                    if len(buffer) < end + 4 + length:
                        break
                    buffer = buffer[end + 4 + length:]
                    connection.sendall(self.ANSWER)

    def close(self) -> None:
        self.stopping.set()
        stop_accepting([self.listener], [self.thread])


def timer_resolution_ns() -> int:
    """Return the smallest step seen between two readings of perf_counter_ns."""
    smallest = None
    previous = time.perf_counter_ns()
    for _ in range(2000):
        now = time.perf_counter_ns()
        if now > previous and (smallest is None or now - previous < smallest):
            smallest = now - previous
        previous = now
    return smallest or 0


def measure_floor(target: Target, requests: int = FLOOR_REQUESTS) -> Floor:
    """Return the driver's floor: latency percentiles of requests to an in-process loopback
    responder through the same event loop as every pass, and the timer's resolution."""
    responder = LoopbackResponder()
    try:
        # the user's headers stay with the router; the responder's body has the default path
        floor_target = Target(parse_endpoint(f"http://127.0.0.1:{responder.port}"),
                              model=target.model, timeout=5.0)
        payloads = encode_prompts(floor_target, ["floor"]) * requests
        records, _ = records_of(PassLoop(floor_target, payloads, threading.Event(),
                                        PassPlan("floor", 1)).run())
    finally:
        responder.close()
    # (a request without an error has its latency)
    latencies = [r.latency_ms for r in records if r.error is None and r.latency_ms is not None]
    floor = Floor(requests, len(latencies), timer_resolution_ns(),
                  round(time.get_clock_info("perf_counter").resolution * 1e9))
    if not latencies:
        return floor
    figures = rounded_percentiles(latencies, (10, 50, 90, 99), "")
    # the spread a p50 difference must clear before this driver can resolve it
    return floor._replace(**figures, spread_ms=round(figures["p90_ms"] - figures["p10_ms"], 4))


def warm_up(target: Target, payloads: Sequence[bytes], count: int,
            stop: threading.Event, expects: Sequence[Sequence[str]] = ()) -> Warmup:
    """Send `count` warm-up requests, cycling the corpus, through the loop of the passes;
    return their counts, and all_failed: true when not one succeeded."""
    cycled = [payloads[i % len(payloads)] for i in range(count)]
    results = PassLoop(target, cycled, stop, PassPlan("warm-up", 1)).run()
    requests, _ = records_of(results)
    counts = count_outcomes(met_expectations(
        requests, [expects[i % len(expects)] for i in range(count)] if expects else ()))
    # more than one config hash: the router reloaded during the warm-up
    return Warmup(**counts, config_hashes=tuple(config_hashes_of(results)),
                  all_failed=bool(counts["requests"] and not counts["ok"]
                                  and not counts.get("rejected") and not counts.get("degraded")))


def warn_of_warm_up(target: Target, payload: bytes, warmup: Warmup, stop: threading.Event,
                    notify: Callable[[str], None]) -> None:
    """Warn of a warm-up whose every request failed, and of warm-up answers of 2xx without a
    decision: where the decision was looked for, and which --decision-path would read the
    answer one more request gets."""
    if warmup.all_failed:
        kinds = ", ".join(f"{kind} {n}" for kind, n in (warmup.errors or {}).items())
        notify(f"warning: every warm-up request failed ({kinds}); the passes may measure a "
               f"router that is not ready")
    count = (warmup.errors or {}).get("no_decision")
    if not count:
        return
    connection = Connection(target.endpoint, target.timeout,
                            tls_context(target.endpoint, insecure=target.insecure), stop)
    try:
        status, body = connection.exchange(payload)
    except RequestFailed:
        status, body = None, b""
    finally:
        connection.close()
    hint = decision_path_hint(body) if status is not None and 200 <= status < 300 else ""
    notify(f"warning: {plural(count, 'warm-up answer')} without a decision at "
           f"{' and '.join(p for p in target.decision_paths if not p.endswith('?'))}"
           + (f": {hint}" if hint else ""))


class ReadyAnswer(NamedTuple):
    """The answer to one readiness request (ask_router)."""
    status: Optional[int]  # None: no status came
    body: Optional[bytes]  # None: an answer too large to keep, or one this client cannot read
    problem: str  # what went wrong when no status came (or the answer was unreadable); ''


def ask_router(target: Target, endpoint: Endpoint, payload: bytes,
               stop: Optional[threading.Event] = None) -> ReadyAnswer:
    """Return the ReadyAnswer (HTTP status or None, body, what went wrong when no status came)
    of one readiness request to `endpoint`; the body is None for an answer too large to keep."""
    connection = Connection(endpoint, target.timeout,
                            tls_context(endpoint, insecure=target.insecure), stop)
    try:
        status, body = connection.exchange(payload)
    except RequestFailed as failure:
        if failure.kind == "tls":
            return ReadyAnswer(None, b"", f"TLS failed: {failure.detail}")
        if failure.kind == "malformed":  # the passes will say what was wrong with it
            return ReadyAnswer(failure.status, None, (f"sent an answer this client cannot read "
                                                      f"({failure.detail})"))
        if failure.status is None or failure.status == 101:
            return ReadyAnswer(None, b"", failure.detail or {
                "connect": "connection refused", "timeout": "no answer in time"}.get(
                failure.kind, f"connection {failure.kind}"))
        # answered, with a body the passes will refuse
        return ReadyAnswer(failure.status, None, "")
    finally:
        connection.close()
    return ReadyAnswer(status, body, "")


def status_words(status: int) -> str:
    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def refusal_text(target: Target, status: int, body: bytes) -> str:
    """Return what a preview refused before any pass (400, 401, 403, 412) means."""
    code = error_code(body or b"") or ""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        message = ""
    # scrubbed before it is cut: a message quoting the token is never stored in part
    message = scrubbed_cut(str(message), 160, secret_values(target.endpoint, target.headers))
    answer = f"{status_words(status)}{f' {code}' if code else ''}" \
             f"{f': {message}' if message else ''}"
    expected = dict(target.headers).get(EXPECTED_HASH_HEADER)
    if status == 412 and expected:
        return (f"serves another configuration than --expect-config-hash {expected[:12]}... "
                f"({answer}); nothing was measured")
    if code == "INVALID_ROUTING_MODEL" and not target.model:
        return (f"does not route a preview without a model ({answer}): its configuration "
                f"serves entrypoints only; --model NAME sends one of its routing models")
    if code == "INVALID_ROUTING_MODEL":
        return (f"does not route model {target.model!r} ({answer}): without --model the "
                f"tool sends none and the router uses its default auto model; else --model "
                f"NAME with one of its auto names or entrypoints")
    if status in (401, 403):
        return f"refused the preview ({answer}): --token-env VAR sends a bearer token"
    if "preview_context" in str(message) and target.sampling_seed is not None:
        return (f"refused the preview ({answer}): a router older than preview_context; "
                f"--sampling-seed off sends none")
    return f"refused the preview ({answer})"


def ready_endpoint(endpoint: Endpoint) -> Endpoint:
    """Return the router's /ready beside the preview: same scheme, host and port."""
    return endpoint._replace(path=READY_PATH, shown=urllib.parse.urlunsplit(
        (endpoint.scheme, endpoint.shown.split("/")[2], READY_PATH, "", "")))


class Readiness(NamedTuple):
    """What one readiness check found (probe_router)."""
    status: Optional[int]  # the HTTP status, None where none came
    what: str  # what happened, in words
    ready: bool
    final: bool = False  # an answer no wait changes (compressed, not UTF-8, not JSON)


def probe_router(target: Target, payload: bytes,
                 stop: Optional[threading.Event] = None) -> Readiness:
    """Return the Readiness (HTTP status or None, what happened, ready) of one check.

    The router's /ready first (503 until its start-up completes; any other answer there, a
    404 from a router or proxy without one, leaves it to the preview), then one preview,
    which must answer 2xx with a decision result or 429: a router's /health answers 200 while
    its models load, and a preview before its classifiers load answers 200 with no decision
    result. A 429 is a router that routes but has no free slot this moment; a 500 is a router
    that is up and fails (CLASSIFICATION_ERROR): ready too, for the passes to record."""
    endpoint = ready_endpoint(target.endpoint)
    status, body, what = ask_router(target, endpoint,
                                    encode_request(endpoint, "GET", b"", target.headers), stop)
    if status is None:
        return Readiness(None, what, False)
    if status == 503:  # newer routers say their phase and the models still pending
        said = ready_words(body)
        return Readiness(status, f"answered {status_words(status)} to {READY_PATH}"
                         + (f" ({said})" if said else ""), False)
    status, body, what = ask_router(target, target.endpoint, payload, stop)
    if status is None:
        return Readiness(None, what, False)
    # a partial 503 (decision_error: the signals ran, the decision failed) is a router
    # that routes; CLASSIFIER_UNAVAILABLE one whose classifiers still load
    code = error_code(body or b"") if status == 503 else None
    what = what or f"answered {status_words(status)} to a preview" + (
        " (CLASSIFIER_UNAVAILABLE: classifiers loading)" if code == "CLASSIFIER_UNAVAILABLE"
        else "")
    if status in REFUSED_AT_ONCE:
        return Readiness(status, refusal_text(target, status, body or b""), False)
    if 200 <= status < 300 and body is not None:
        try:
            _, error, _ = classify(status, body, target.decision_paths)
        except RequestFailed:  # malformed: the passes will say what was wrong with it
            error = None
        fault = body_fault(bytes(body)) if error == "bad_json" else ""
        if fault:  # compressed, not UTF-8, not JSON: no wait makes it read
            return Readiness(status, f"answered {status_words(status)} to a preview with "
                             f"{fault}", False, final=True)
        if error is not None:
            # a body whose decision lies elsewhere names the --decision-path that reads it
            hint = decision_path_hint(body) if body.strip() else ""
            why = f"{hint}; or classifiers not loaded yet?" if hint.startswith("--") else \
                "classifiers not loaded yet?"
            return Readiness(status, f"answered {status_words(status)} to a preview with "
                             f"{'an empty body' if not body.strip() else 'no decision result'}"
                             f" ({why})", False)
    # a 500 (CLASSIFICATION_ERROR, RESPONSE_DEADLINE_ERROR) is a router that is up and fails:
    # the passes record its failures, and the gate fails it; 502, 503 and 504 are a router
    # loading or a proxy before it, 501 and 505 no preview at all; a 503 carrying a
    # decision_error (the partial 503) is a router that answered
    return Readiness(status, what, 200 <= status < 300 or status in (429, 500)
                     or code == "decision_error")


def not_ready_message(target: Target, status: Optional[int], what: str,
                      wait_ready: Optional[float]) -> str:
    """Return the error of a router that did not answer a preview with 2xx."""
    if status in REFUSED_AT_ONCE:
        return f"router at {target.endpoint.shown} {what}"
    if wait_ready is not None:
        return f"router not ready after {wait_ready:g} s: {'it ' if status else ''}{what}"
    wait_hint = "; --wait-ready SECONDS waits for a starting router"
    if status is None:
        hint = "" if "TLS" in what else wait_hint
        return f"router not reachable at {target.endpoint.shown}: {what}{hint}"
    if status in (502, 503, 504) or 200 <= status < 300:
        # starting: models loading, or a proxy before its upstream; a 2xx without a decision
        # result: classifiers not loaded yet
        return f"router at {target.endpoint.shown} is not ready: it {what}{wait_hint}"
    if status == 404:
        return (f"router at {target.endpoint.shown} {what}: is the path right? (a URL "
                f"without a path gets {PREVIEW_PATH})")
    return f"router at {target.endpoint.shown} {what}"


def wait_until_ready(target: Target, payload: bytes, wait_ready: Optional[float],
                     stop: threading.Event,
                     clock: Callable[[], float] = time.monotonic,
                     show: Callable[[str], None] = lambda text: None) -> Optional[float]:
    """Return the seconds until the router was ready as probe_router says (None without
    wait_ready), or raise when it was not: /ready answering 503 (with what it says of its
    phase and pending models, shown), a preview answering 503 (CLASSIFIER_UNAVAILABLE
    while the classifiers load) or 200 without a decision result are not ready yet. A 429
    is a router that routes but has no free slot this moment: ready, and the passes will
    record what it sheds. While waiting, `show` gets each new state in words."""
    try:
        socket.getaddrinfo(target.endpoint.host, target.endpoint.port)
    except socket.gaierror:
        raise RouterLatencyError(f"cannot resolve host {target.endpoint.host!r}",
                                 "--url") from None
    started = clock()
    limit, shown = wait_ready or 0.0, ""
    while True:
        status, what, ready, final = probe_router(target, payload, stop)
        if ready:
            return round(clock() - started, 3) if wait_ready is not None else None
        waited = clock() - started
        if stop.is_set():
            return None
        if final:  # a body the tool cannot read: said as it is, with no hint to wait
            raise RouterLatencyError(f"router at {target.endpoint.shown} {what}", "--url")
        if waited >= limit or status in REFUSED_AT_ONCE:  # no wait turns those into a route
            raise RouterLatencyError(not_ready_message(target, status, what, wait_ready),
                                     "--url")
        if what != shown:
            show(f"waiting for the router ({waited:.0f} of {limit:g} s): it {what}")
            shown = what
        stop.wait(min(0.25, max(limit - waited, 0.01)))


def encode_prompts(target: Target, texts: Sequence[str]) -> list:
    """Return the request bytes for each prompt, encoded once before any timing."""
    context = {} if target.sampling_seed is None else {
        "preview_context": {"sampling_seed": target.sampling_seed}}
    model = {"model": target.model} if target.model else {}  # none: the router's default
    return [encode_request(target.endpoint, "POST", json.dumps(
        {**model, "messages": [{"role": "user", "content": text}], **context}
    ).encode("ascii"), target.headers) for text in texts]


def measure_attempt(context: RunContext, plan: PassPlan, title: str = "") -> Attempt:
    """Measure one attempt at a pass with what surrounds it: the captures before and after,
    the load, the driver's and the router's CPU use; its requests judged by what their
    prompts expect (see met_expectations)."""
    capture, stop = context.capture, context.stop
    schedule = pass_schedule(plan, len(context.payloads))
    before = capture_snapshot(capture, stop)
    started_utc, started_unix = utc_now(), time.time()
    sampler = LoadSampler(context.guard.loadavg_file).start()
    cpus = capture.router_cpu_list or before["router_cpus"]
    # the pass's sampler, started (and its GPU tool's first sample come) before the CPU
    # readings around the pass, so that they do not count its start
    telemetry = PassSampler(capture, cpus, capture.sample_ms, context.guard.loadavg_file) \
        if sampling(capture, cpus) else None
    measured = None
    try:
        if telemetry is not None:
            telemetry.start()
        cpu_before = driver_cpu_seconds()
        router_before = read_cpu_use(capture, cpus)  # right around the pass, not the captures
        if telemetry is not None:
            telemetry.origin()
        measured = measure_pass(context, plan, title or pass_title(plan.name), schedule)
        router_after = read_cpu_use(capture, cpus)
        cpu_after = driver_cpu_seconds()
    finally:
        # energy per routed request: fully computed answers, not failures, 429s or degraded
        sampled = None if telemetry is None else telemetry.stop(
            sum(r.routed for r in measured.requests) if measured else 0,
            measured.wall_s if measured else 0.0)
    requests, wall_s, hashes, settle_cpu_s = measured
    # what the driver spent while its requests were in flight and on their records; not the
    # reading of the per-signal times after the pass, when nothing is measured
    driver_cpu_s = cpu_after - cpu_before - settle_cpu_s
    load = sampler.stop()
    after = capture_snapshot(capture, stop)
    requests = met_expectations(requests, context.expects)
    environment = environment_record(capture, before, after)
    if sampled is not None:
        environment["telemetry"] = sampled
    return Attempt(plan.rate, plan.arrival if plan.rate else None, started_utc,
                   round(started_unix, 3), load, round(driver_cpu_s, 3),
                   environment, pass_summary(requests, wall_s),
                   tuple(requests), hashes,
                   router_cpu_use(router_before, router_after, cpus, len(requests)))


def overload_warning(plan: PassPlan, limit: int) -> Optional[str]:
    """Return the warning for a pass that can have more requests in flight than the router
    admits at once, or None."""
    if plan.connections <= limit:
        return None
    callers = (f"up to {plural(plan.connections, 'connection')}" if plan.rate is not None
               else plural(plan.connections, "caller"))
    return (f"{pass_title(plan.name)}: {callers} but the router admits {limit} previews at once "
            f"(global.services.api.routing_preview.max_concurrency, declared with "
            f"--router-max-concurrency); it sheds the rest at once with 429 OVERLOADED")


def attempt_warnings(attempt: Attempt, plan: PassPlan) -> list:
    """Return what the user must hear about one attempt: a driver behind or too busy."""
    warnings = []
    title, summary = pass_title(plan.name), attempt.measured
    behind = summary.behind_p99_ms
    if behind is not None and behind > 1.0:
        warnings.append(f"{title}: the driver fell behind its schedule by {behind:.1f} ms at "
                        f"p99 (its {plural(plan.connections, 'connection')} busy, or the driver "
                        f"too slow); latencies count from the schedule, as a user waiting would "
                        f"see them")
    wall_s, cpu_s = summary.wall_s, attempt.driver_cpu_s
    # below a second, thread start-up dominates the share: no warning
    if wall_s >= 1.0 and cpu_s is not None and cpu_s / wall_s > DRIVER_BUSY:
        warnings.append(f"{title}: the driver kept a core {100 * cpu_s / wall_s:.0f}% busy; the "
                        f"driver, not the router, may be the limit")
    if plan.duration is not None and plan.rate is None and summary.requests >= MAX_PASS_REQUESTS:
        warnings.append(f"{title}: stopped at {MAX_PASS_REQUESTS:,} requests, before the "
                        f"{plan.duration:g} s were up: the most a pass keeps in memory")
    return warnings


def suspect_warnings(attempt: Attempt, title: str, thresholds: Thresholds) -> list:
    """Return what makes an attempt suspect: other processes on the router's CPUs (its slow
    phases are judged once the run is measured: slow_phase_warnings)."""
    warnings = []
    router_cpu = attempt.router_cpu
    foreign = router_cpu.foreign_vcpus if router_cpu else None
    if router_cpu and foreign is not None and foreign > thresholds.max_foreign_cpus:
        warnings.append(f"{title}: other processes used {foreign:.2f} vCPUs of the router's "
                        f"CPUs {router_cpu.cpus} (--max-foreign-cpus "
                        f"{thresholds.max_foreign_cpus:g})")
    return warnings


def slow_phase_warnings(passes: Sequence[PassRecord], thresholds: Thresholds) -> list:
    """Return the slow phases of a run's passes, once every pass is measured: each window is
    judged against what its prompts take in the other passes (content_slow_windows)."""
    warnings = []
    for item in passes:
        phase = None if item.discarded else slow_phase(item, passes, thresholds)
        if phase and phase.windows:
            warnings.append(f"{pass_title(item.name)}: slow phase in "
                            f"{plural(len(phase.windows), 'window')} of "
                            f"{len(item.attempt.windows)}: "
                            f"{phase.evidence(item.attempt.windows)}"
                            + neighbour_words(item.attempt, phase.windows))
    return warnings


def neighbour_words(attempt: Attempt, slow: Sequence[int]) -> str:
    """Return what coincided with a pass's slow phase, after a semicolon: the other GPUs,
    the foreign CPU on the router's cores, the load (coincided_text); '' when unsampled."""
    words = coincided_text(attempt, slow)
    return f"; {words}" if words else ""


def run_passes(context: RunContext) -> list:
    """Measure every pass of the context's plan with its load guard (a ladder's until it
    stops climbing); return their PassRecords."""
    plan, stop, notify = context.plan, context.stop, context.notify
    passes = []
    for position, item in enumerate(plan.passes, 1):
        if stop.is_set():
            break
        warning = overload_warning(item, plan.router_max_concurrency)
        if warning:
            notify(warning)
        title = f"{pass_title(item.name)}, {'step' if plan.ladder else 'pass'} {position} " \
                f"of {'at most ' if plan.ladder else ''}{len(plan.passes)}"
        passes.append(guarded_pass(context, item, title))
        why = ladder_stop(passes, plan.ladder) if plan.ladder and not stop.is_set() else None
        if why:
            notify(f"ladder: stopped climbing after {pass_title(item.name)}: {why}")
            break
    return passes


def guarded_pass(context: RunContext, item: PassPlan, title: str) -> PassRecord:
    """Measure one pass, again after a pause while the load is above the limit; return its
    PassRecord. It is interrupted when the stop flag left some of its requests unmeasured, or
    cut the pause before another attempt: a pass whose requests all came back before a
    signal is not."""
    guard, stop, notify, thresholds = \
        context.guard, context.stop, context.notify, context.thresholds
    payloads = context.payloads
    attempts: list = []
    cut = False
    for number in range(guard.retries + 1):
        attempt = measure_attempt(context, item,
                                  title + (f", attempt {number + 1}" if number else ""))
        attempt = attempt._replace(
            windows=phase_windows(attempt.requests, thresholds.window_requests))
        for warning in attempt_warnings(attempt, item) + suspect_warnings(
                attempt, pass_title(item.name), thresholds):
            notify(warning)
        # a timed pass ends on its clock, so only the stop flag says it was cut short
        interrupted = stop.is_set() if item.duration else \
            len(attempt.requests) < len(payloads) * item.repeat
        loads = [x for x in (attempt.load["start"], attempt.load["end"]) if x is not None]
        if interrupted or not loads or max(loads) <= guard.max_load:
            return PassRecord(item.name, item.connections, False, interrupted, attempt,
                              tuple(attempts))
        attempts.append(attempt)
        notify(f"{pass_title(item.name)}: load {max(loads):.1f} above {guard.max_load:g}, "
               f"timings discarded (attempt {number + 1} of {guard.retries + 1})")
        if number < guard.retries and stop.wait(guard.pause):
            cut = True
            break
    # never under the limit: the last attempt's surroundings, no statistics
    return PassRecord(item.name, item.connections, True, cut,
                      attempts[-1]._replace(summary=None, requests=(), windows=()),
                      tuple(attempts))


def settings_record(target: Target, plan: RunPlan, guard: LoadGuard,
                    thresholds: Thresholds = Thresholds()) -> RunSettings:
    """Return the run file's record of how the run was asked to measure."""
    closed = [p.connections for p in plan.passes if p.rate is None]
    open_loop = [p for p in plan.passes if p.rate is not None]
    model = open_loop[0] if open_loop else PassPlan("", 64)
    length = plan.passes[0] if plan.passes else PassPlan("", 1)
    return RunSettings(
        plan.warmup, tuple(closed), tuple(p.rate for p in open_loop if p.rate is not None),
        length.repeat,
        length.duration, model.arrival, model.seed, model.connections, target.timeout,
        tuple(target.decision_paths), guard.max_load, guard.retries, guard.pause,
        plan.max_errors, plan.wait_ready, plan.router_max_concurrency, target.sampling_seed,
        next((value for name, value in target.headers if name == EXPECTED_HASH_HEADER), None),
        PERCENTILE_METHOD, LATENCY_DEFINITION, thresholds, plan.ladder)


def measure_run(context: RunContext, corpus: Corpus, *, label: str) -> Optional[RunFile]:
    """Measure a run of the corpus in the context: the driver's floor, readiness, warm-up,
    then every pass; return the run file, or None when the context's `stop` was set before a
    pass began (during the warm-up, say).

    A run whose `stop` is set during its passes (see RunContext) is returned with
    complete=False and the passes measured so far.
    """
    target, plan, guard, capture = context.target, context.plan, context.guard, context.capture
    stop, notify, thresholds = context.stop, context.notify, context.thresholds
    check_plan(plan, len(corpus.prompts))
    started, started_unix = utc_now(), round(time.time(), 3)
    host = host_settings(cpu_affinity(), capture.router_cpu_list or router_cpus(capture),
                         proc_root=capture.proc_root, sys_root=capture.sys_root)
    for warning in host_warnings(host):
        notify(f"warning: {warning}")
    floor = measure_floor(target)
    ready_after = wait_until_ready(target, encode_prompts(target, ["hello"])[0],
                                   plan.wait_ready, stop, show=context.progress.note)
    if context.progress.enabled and context.progress.width:  # the waiting line, ended
        context.progress.draw(f"router ready after {ready_after or 0:.1f} s", True)
    if stop.is_set():
        return None
    payloads = encode_prompts(target, [p.text for p in corpus.prompts])
    expects = [p.expect for p in corpus.prompts]
    warmup = warm_up(target, payloads, plan.warmup, stop, expects)
    if stop.is_set():
        return None
    warn_of_warm_up(target, payloads[0], warmup, stop, notify)
    passes = run_passes(dataclasses.replace(context, payloads=tuple(payloads),
                                            expects=tuple(expects)))
    run = RunFile(
        label=label, complete=not stop.is_set() and (len(passes) == len(plan.passes)
                                                     or plan.ladder is not None),
        corpus={"path": corpus.path, "sha256": corpus.sha256, "count": len(corpus.prompts)},
        passes=tuple(passes), started_utc=started, started_unix=started_unix,
        ended_utc=utc_now(), url=scrubbed(target.endpoint.shown, capture.secrets),
        model=target.model,
        header_names=tuple(name for name, _ in target.headers), insecure=target.insecure,
        python=platform.python_version(), host=socket.gethostname(),
        driver={"pid": os.getpid(), "cpu_affinity": cpu_affinity()},
        router={"pid": capture.router_pid, **({"session": capture.router_session}
                                               if capture.router_session else {}),
                "cgroup": capture.router_cgroup,
                "container": capture.router_container, "cpus": capture.router_cpu_list},
        captures=Captures(
            tuple(name for name, _ in capture.probes),
            gpu_tool(capture.gpu).name if capture.gpu else None, tuple(capture.gpu_indexes),
            tuple(capture.histograms),
            scrubbed(capture.metrics.shown, capture.secrets)  # ?key=TOKEN
            if capture.metrics else None, tuple(p.pattern for p in capture.metric_patterns)),
        settings=settings_record(target, plan, guard, thresholds), ready_after_s=ready_after,
        floor=floor, warmup=warmup, host_settings=host, signal_names=target.signal_names)
    return finished_run(run, thresholds, notify)


def finished_run(run: RunFile, thresholds: Thresholds,
                 notify: Callable[[str], None]) -> RunFile:
    """Return a measured run with its result cache finding; say what the whole run shows:
    slow phases, judged against the other passes, and a configuration that changed."""
    for warning in slow_phase_warnings(run.passes, thresholds):
        notify(warning)
    if len(run.config_hashes) > 1:
        notify(f"warning: the router's configuration changed during the run "
               f"(x-vsr-config-hash {' then '.join(h[:12] for h in run.config_hashes)}): a "
               f"reload in the middle of the measurement; its passes mix configurations")
    return run._replace(result_cache=result_cache_finding(run.passes))
