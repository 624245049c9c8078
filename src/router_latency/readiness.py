"""Before a run measures: whether the router is ready (its /ready, the preview's answers while
it starts, a refusal in words), the driver's own floor against a loopback answer, and the
warm-up passes with what they warn of."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from typing import Any, Callable, Optional, Sequence, TYPE_CHECKING

from .constants import EXPECTED_HASH_HEADER, NamedTuple, PREVIEW_PATH, READY_PATH
from .errors import RouterLatencyError
from .words import plural, scrubbed_cut
from .stats import rounded_percentiles
from .versions import ready_words
from .runfile import Floor, RouterSetting, Warmup
from .requests import count_outcomes
from .client import (accept_connections, Connection, encode_request, Endpoint, http_response,
                     parse_endpoint, RequestFailed, secret_values, stop_accepting, tls_context)
from .meaning import body_fault, classify, error_code
from .passloop import (config_hashes_of, encode_prompts, met_expectations, PassLoop, PassPlan,
                       records_of, Target)

if TYPE_CHECKING:
    import socket

__all__ = ["measure_floor", "router_told", "wait_until_ready", "warm_up", "warn_of_warm_up"]


REFUSED_AT_ONCE = (400, 401, 403, 412)  # a preview refused so is no start-up: no wait helps
FLOOR_REQUESTS = 300  # requests of the driver's own floor, measured before every run
DECISION_WORDS = ("decision", "route", "routing", "category", "intent", "model", "name")


def decision_path_hint(body: bytes) -> str:
    """Return which --decision-path would read a decision from a 2xx answer that had none at
    the paths given: the dotted paths to its string leaves whose key looks like a decision
    (keys with "decision" first), or what keys the answer has; '' for a body not JSON."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return ""
    leaves: list = []

    def walk(value: Any, path: str, depth: int) -> None:
        if isinstance(value, dict) and depth < 6:
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key), depth + 1)
        elif isinstance(value, str) and value and path:
            leaves.append((path, value))
    walk(document, "", 0)
    ranked = sorted((next(i for i, w in enumerate(DECISION_WORDS) if w in p.lower()), p, v)
                    for p, v in leaves
                    if any(w in p.rsplit(".", 1)[-1].lower() for w in DECISION_WORDS))
    if ranked:
        _, path, value = ranked[0]
        return f"--decision-path {path} would read it ({json.dumps(value[:40])})"
    keys = ", ".join(list(document)[:8]) if isinstance(document, dict) else type(document).__name__
    return f"the answer holds nothing that reads as a decision (its keys: {keys or 'none'})"


class LoopbackResponder:
    """A fixed preview answer on 127.0.0.1, port 0, from a thread of this process: what is
    left of a request's latency against it is the driver's own work and the loopback's."""

    BODY = b'{"decision_result": {"decision_name": "floor"}}'

    def __init__(self) -> None:
        import socket
        self.answer = http_response(200, self.BODY)  # made here, not as the module loads
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
                    connection.sendall(self.answer)

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
    answered: bool = True  # False: not one byte came back (refused, TLS, silence, a close)


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
            return ReadyAnswer(None, b"", f"TLS failed: {failure.detail}", False)
        if failure.kind == "malformed":  # the passes will say what was wrong with it
            return ReadyAnswer(failure.status, None, (f"sent an answer this client cannot read "
                                                      f"({failure.detail})"))
        if failure.status is None or failure.status == 101:
            # bytes came (a 101, interim answers only, a head cut off): an answer all the same
            answered = failure.status == 101 or (
                failure.kind in ("reset", "timeout") and not failure.unanswered)
            return ReadyAnswer(None, b"", failure.detail or {
                "connect": "connection refused", "timeout": "no answer in time"}.get(
                failure.kind, f"connection {failure.kind}"), answered)
        # answered, with a body the passes will refuse
        return ReadyAnswer(failure.status, None, "")
    finally:
        connection.close()
    return ReadyAnswer(status, body, "")


def status_words(status: int) -> str:
    import http
    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def refusal_text(target: Target, status: int, body: bytes) -> str:
    """Return what a preview refused before any pass (400, 401, 403, 412) means."""
    code = error_code(body or b"") or ""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, TypeError, KeyError, RecursionError):
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


def ready_endpoint(endpoint: Endpoint, path: str = READY_PATH) -> Endpoint:
    """Return the router's /ready (or another path) beside the preview: same scheme, host and
    port."""
    return endpoint._replace(path=path, shown=urllib.parse.urlunsplit(
        (endpoint.scheme, endpoint.shown.split("/")[2], path, "", "")))


# what shapes the router's timing and only the router can tell: the deadline of its signals
# (global.model_catalog.signal_timeout_ms: a slower signal ends as a signal_errors entry, so
# slowness moves from the tail into the degraded share) from its configuration endpoint, and
# its runtime's threads per CPU worker from its start command's environment (the runtime
# reference's "Router configuration" and pkg/modelservice CPUThreadsEnv)
CONFIG_PATH = "/api/v1/config"
SIGNAL_DEADLINE = "signal_timeout_ms"
THREADS_VARIABLE = "VLLM_SRUN_CPU_THREADS"
NOT_RECORDED: RouterSetting = {"value": None, "source": "not recorded"}


def signal_deadline(target: Target, stop: Optional[threading.Event] = None) -> RouterSetting:
    """Return the signal deadline as the router's configuration endpoint says it."""
    endpoint = ready_endpoint(target.endpoint, CONFIG_PATH)
    status, body, _, _ = ask_router(target, endpoint,
                                    encode_request(endpoint, "GET", b"", target.headers), stop)
    try:
        document = json.loads(body or b"") if status == 200 else None
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the reader
        document = None
    catalog = ((document.get("global") or {}).get("model_catalog") or {}) \
        if isinstance(document, dict) and isinstance(document.get("global"), dict) else None
    if not isinstance(catalog, dict):
        return NOT_RECORDED
    value = catalog.get(SIGNAL_DEADLINE)
    if type(value) in (int, float):
        return {"value": f"{value:g} ms", "source": f"{CONFIG_PATH}: global.model_catalog"}
    return {"value": "the router's default (the request deadline less a tenth)",
            "source": f"{CONFIG_PATH}: global.model_catalog sets none"}


def runtime_threads(router_pid: Optional[int], proc_root: str = "/proc") -> RouterSetting:
    """Return VLLM_SRUN_CPU_THREADS as the router's start command's environment set it."""
    if router_pid is None:
        return NOT_RECORDED
    try:
        with open(f"{proc_root}/{router_pid}/environ", "rb") as stream:
            environment = stream.read(1 << 20).split(b"\0")
    except OSError:
        return NOT_RECORDED
    prefix = f"{THREADS_VARIABLE}=".encode()
    value = next((v[len(prefix):].decode("utf-8", "replace")[:32] for v in environment
                  if v.startswith(prefix)), None)
    if value is None:
        return {"value": "unset (half the router's CPU budget, 1 to 16)",
                "source": f"the environment of process {router_pid}"}
    return {"value": value, "source": f"the environment of process {router_pid}"}


def router_told(target: Target, router_pid: Optional[int], proc_root: str = "/proc",
                stop: Optional[threading.Event] = None) -> dict[str, RouterSetting]:
    """Return the settings the router tells that shape its timing: the signal deadline and
    the runtime's threads, each 'not recorded' where it does not tell it."""
    return {"signal deadline": signal_deadline(target, stop),
            THREADS_VARIABLE: runtime_threads(router_pid, proc_root)}


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
    status, body, what, answered = ask_router(
        target, endpoint, encode_request(endpoint, "GET", b"", target.headers), stop)
    if status is None and not answered:  # nothing came back: the preview would not either
        return Readiness(None, what, False)
    if status == 503:  # newer routers say their phase and the models still pending
        said = ready_words(body)
        return Readiness(status, f"answered {status_words(status)} to {READY_PATH}"
                         + (f" ({said})" if said else ""), False)
    # any other answer of /ready (a 404, a 101, interim answers only, one this client cannot
    # read) leaves it to the preview
    status, body, what, _ = ask_router(target, target.endpoint, payload, stop)
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


READY_POLL_S = 0.25  # seconds between two looks at a router that is not ready yet


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
    import socket
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
        stop.wait(min(READY_POLL_S, max(limit - waited, 0.01)))
