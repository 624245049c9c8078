"""The simulated router: a routing-preview server that answers as the router does
(start_simulator), which `simulate` serves, `demo` measures and the tests start."""

from __future__ import annotations

import collections
import functools
import json
import math
import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, TYPE_CHECKING

from .constants import (AUTO_MODEL_NAMES, CONFIG_HASH_NAME, CONFIG_HASH_PATTERN,
                        EXPECTED_HASH_HEADER, NamedTuple, PREVIEW_PATH, READY_PATH,
                        ROUTER_MAX_CONCURRENCY)
from .client import accept_connections, bracketed, http_response, stop_accepting
from .captures import utc_now

if TYPE_CHECKING:
    import random
    import socket

__all__ = [
    "signal_error_spec", "SignalModel", "SignalTime", "SimulatedAnswers", "SkippedSignals",
    "Stall", "start_simulator",
]


def simulated_decision(text: str, decisions: Sequence[str]) -> str:
    """Return the simulated decision for a prompt: a stable hash of its text picks one."""
    import hashlib
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return decisions[int.from_bytes(digest[:4], "big") % len(decisions)]


# the router's signal families (classification.SignalMetricsCollection): every answer's
# metrics carry each one, a signal not evaluated with zeros
SIGNAL_NAMES = ("keyword", "embedding", "domain", "fact_check", "user_feedback", "reask",
                "preference", "language", "context", "structure", "complexity", "modality",
                "authz", "jailbreak", "pii", "kb", "conversation", "event", "metadata",
                "classifier")
# the model-backed ones a simulated answer times; the rest answer at once
TIMED_SIGNALS = ("domain", "jailbreak", "pii", "fact_check", "user_feedback")
# the rules of the router's E2E configuration that a prompt did not match, by the plural
# names of decision_result's MatchedSignals: what makes an answer a few KB, as the router's
SIMULATED_RULES = {
    "keywords": ("urgent_request", "sensitive_data", "code_request", "math_keywords",
                 "creative_writing", "thinking", "no_think", "summarize", "translate"),
    "domains": ("biology", "business", "chemistry", "computer_science", "economics",
                "engineering", "health", "history", "law", "math", "other", "philosophy",
                "physics", "psychology"),
    "embeddings": tuple(f"embedding_rule_{i}" for i in range(8)),
    "fact_check": ("needs_fact_check",), "user_feedback": ("wrong_answer", "satisfied"),
    "preferences": ("prefers_short",), "language": ("en", "zh", "es", "fr"),
    "complexity": ("hard", "easy"), "jailbreak": ("jailbreak_detected",),
    "pii": ("pii_email", "pii_ssn", "pii_phone"),
}
# what the preview's strict decoder accepts (the vllm-sr 0.4.0 client's envelope)
PREVIEW_FIELDS = frozenset(("text", "messages", "tools", "functions", "tool_choice",
                            "function_call", "response_format", "model", "metadata", "options",
                            "preview_context", "max_tokens", "max_completion_tokens"))
MESSAGE_FIELDS = frozenset(("role", "name", "content", "tool_calls", "tool_call_id",
                            "function_call", "refusal", "reasoning_content"))
# the objects inside it, as strictly (the router's IntentOptions and PreviewContext; the
# client's cli/routing_preview.py OPTION_FIELDS and CONTEXT_FIELDS)
NESTED_FIELDS = {"options": frozenset(("return_probabilities", "confidence_threshold",
                                       "include_explanation", "trace")),
                 "preview_context": frozenset(("session_id", "conversation_id",
                                               "sampling_seed"))}
SEED_RANGE = range(-(2 ** 63), 2 ** 63)  # sampling_seed is a Go int64
PREVIEW_BODY_LIMIT = 10 * 1024 * 1024  # json_request.go's defaultJSONRequestBodyLimit
GO_CHUNKING_BYTES = 2048  # net/http sends a longer answer chunked (bufferBeforeChunkingSize)
CACHE_HIT_MS = 0.05  # a result cache hit: no model runs


def simulated_request(body: bytes) -> dict:
    """Return a preview request as the router's strict decoder reads it; raise ValueError as
    it refuses: not JSON, not an object, an unknown field, a message that is not an object."""
    try:
        request = json.loads(body)
    except RecursionError:  # as Go's decoder refuses a body nested past its limit
        raise ValueError("exceeded max depth") from None
    if not isinstance(request, dict):
        raise ValueError("cannot unmarshal into Go value of type services.IntentRequest")
    unknown = sorted(set(request) - PREVIEW_FIELDS)
    for field, known in NESTED_FIELDS.items():
        nested = request.get(field)
        if nested is not None and not isinstance(nested, dict):
            raise ValueError(f"cannot unmarshal into Go struct field of type {field}")
        unknown += sorted(set(nested or ()) - known)
    seed = (request.get("preview_context") or {}).get("sampling_seed")
    if seed is not None and (type(seed) is not int or seed not in SEED_RANGE):
        raise ValueError("cannot unmarshal into Go struct field sampling_seed of type int64")
    messages = request.get("messages")
    if not unknown and isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict):
                raise ValueError("cannot unmarshal into Go value of type services.Message")
            unknown += sorted(set(message) - MESSAGE_FIELDS)
    if unknown:
        raise ValueError(f'json: unknown field "{unknown[0]}"')
    return request


def simulated_text(request: dict) -> str:
    """Return the text a preview request asks to route, as the router picks it: the last user
    message with content, else the top-level text; whitespace is text ('' when none)."""
    messages: list = request["messages"] if isinstance(request.get("messages"), list) else []
    for message in reversed(messages):
        if str(message.get("role")).strip().lower() != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):  # content parts: the text ones, joined
            content = " ".join(part["text"] for part in content if isinstance(part, dict)
                               and part.get("type", "text") in ("", "text", "input_text")
                               and isinstance(part.get("text"), str))
        if isinstance(content, str) and content:
            return content
    return request["text"] if isinstance(request.get("text"), str) else ""


def simulated_error(status: int, code: str, message: str, request_id: str = "") -> bytes:
    """Return a whole error response in the router's envelope (no config hash: no body)."""
    return http_response(status, json.dumps(
        {"error": {"code": code, "message": message, "timestamp": utc_now()}}).encode()
        + b"\n", headers=(("X-Request-Id", request_id),) if request_id else ())


def simulated_signals(text: str, decision: str, elapsed_ms: float,
                      names: Sequence[str] = SIGNAL_NAMES) -> Tuple[
        Dict[str, Dict[str, float]], Dict[str, List[str]], Dict[str, List[str]]]:
    """Return (metrics, used_signals, matched_signals) of an answer: every signal's
    execution_time_ms and confidence (the timed ones share the preview's time), the signals
    the decision used and those the prompt matched. The one place the per-signal part of an
    answer is made."""
    timed = [name for name in names if name in TIMED_SIGNALS] or list(names[:1])
    confidence = round(0.5 + (text_number(text) % 500) / 1000, 3)
    metrics = {name: {"execution_time_ms": round(elapsed_ms / len(timed), 3) if name in timed
                      else 0, "confidence": confidence if name in timed else 0}
               for name in names}
    matched = {"domains": [decision]} if decision else {"keywords": ["thinking"]}
    return metrics, ({"domains": [decision]} if decision else {}), matched


def text_number(text: str) -> int:
    """Return a stable 32-bit number of a text (the same in every process)."""
    import hashlib
    return int.from_bytes(hashlib.blake2s(text.encode("utf-8", "surrogatepass"),
                                          digest_size=4).digest(), "big")


def simulated_answer(text: str, request: dict, decision: str, elapsed_ms: float,
                     config_hash: str, trace: bool) -> dict:
    """Return a 200 answer's body as the router's EvalResponse writes it, fields in its order;
    decision '' is no decision matched: no routing_decision, no model selected."""
    metrics, used, matched = simulated_signals(text, decision, elapsed_ms)
    unmatched = {family: [rule for rule in rules if rule != decision]
                 for family, rules in SIMULATED_RULES.items()}
    answer: dict = {"original_text": text,
                    "requested_model": str(request.get("model") or "").strip(),
                    "decision_result": {
                        "decision_name": decision, "algorithm": "static" if decision else "",
                        "used_signals": used, "matched_signals": matched,
                        "unmatched_signals": unmatched}}
    if trace:
        answer["eval_trace"] = [{"decision": decision or "default", "matched": bool(decision),
                                 "rules": [{"signal": "domain", "matched": bool(decision)}]}]
    if decision:
        answer.update({"recommended_models": [f"model-{decision}"],
                       "selected_model": f"model-{decision}", "selection_status": "selected",
                       "selection_method": "static", "routing_decision": decision})
    answer["metrics"] = metrics
    answer["signal_confidences"] = {f"domain:{decision or 'other'}":
                                    metrics[TIMED_SIGNALS[0]]["confidence"]
                                    if TIMED_SIGNALS[0] in metrics else 0}
    answer["config_hash"] = config_hash
    return answer


# the router-managed models a phased start-up loads, one after another
STARTUP_MODELS = ("domain-classifier", "jailbreak-guard", "pii-detector")
# the router's start-up phases (pkg/startupstatus, apiserver handleReady): starting (before
# the state exists), these two while loading, then ready (or error)
READY_PHASES = ("downloading_models", "initializing_models")
READY_BODY = json.dumps({
    "status": "ready", "service": "classification-api", "ready": True, "phase": "ready",
    "message": "Router is ready", "downloading_model": "", "pending_models": [],
    "ready_models": len(STARTUP_MODELS), "total_models": len(STARTUP_MODELS)}).encode() + b"\n"
SAMPLED_MODELS = ("model-a", "model-b", "model-c")  # what a sampled selection draws from


def simulated_today(answer: dict, text: str, answers: "SimulatedAnswers",
                    seed: Optional[int] = None) -> Tuple[dict, int]:
    """Return (answer, status) as a newer router sends it: for a stable share of prompts a
    selected model it sampled (selection_provenance in the client's read_only_snapshot mode,
    the seed the request's preview_context.sampling_seed or one drawn anew, the model a
    function of the seed and the prompt), for another a partial 503: the signals ran, the
    decision failed (decision_error)."""
    import random
    if answers.partial_share and share_of("partial:" + text, answers.partial_share):
        partial = {key: value for key, value in answer.items() if key not in (
            "recommended_models", "selected_model", "selection_status", "selection_method",
            "routing_decision")}
        partial["decision_error"] = "decision evaluation failed: rule engine timeout"
        return partial, 503
    if answers.sampled_share and "selected_model" in answer \
            and share_of("sampled:" + text, answers.sampled_share):
        seed = random.getrandbits(31) if seed is None else seed
        drawn = text_number(f"{seed}:{text}") % len(SAMPLED_MODELS)  # one seed, one choice
        answer = dict(answer, selected_model=SAMPLED_MODELS[drawn],
                      selection_method="weighted_random")
        answer["selection_provenance"] = {"mode": "read_only_snapshot",
                                          "state_dependent": False, "sampled": True,
                                          "sampling_seed": seed}
    return answer, 200


def share_of(key: str, share: float) -> bool:
    """Return True for a stable share of keys (the same in every process)."""
    return text_number(key) % 10_000 < share * 10_000


def go_response(status: int, body: bytes, headers: Sequence = ()) -> bytes:
    """Return a whole response as Go's net/http writes a JSON answer: with a Content-Length
    when the body fits its 2,048-byte buffer, chunked (one chunk) when it does not."""
    import http
    if len(body) <= GO_CHUNKING_BYTES:
        return http_response(status, body, headers=headers)
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
    return (f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
            f"Content-Type: application/json\r\n{extra}Transfer-Encoding: chunked\r\n\r\n"
            f"{len(body):x}\r\n").encode("latin-1") + body + b"\r\n0\r\n\r\n"


class SkippedSignals(NamedTuple):
    """A share of previews whose signal fails (--signal-errors SHARE[:FASTER]): the router
    still answers 200, with signal_errors {signal: error} and the decision's on_unknown
    policy in applied_unknown_policies (pkg/services EvalResponse), and takes less time, the
    failed signal's model not having run to the end."""
    share: float = 0.0  # of the prompts, a stable set of them (by a hash of the text)
    faster: float = 0.0  # those previews take (1 - faster) of their time
    signal: str = "classifier:intent"  # the signal that fails, as the router names it
    reason: str = "classifier_evaluation_failed"  # its error (a generic classifier's code)
    policy: str = "no_match"  # the on_unknown policy applied (the router's default)


def signal_error_spec(text: str) -> SkippedSignals:
    """Return the SkippedSignals of --signal-errors SHARE[:FASTER] (fractions from 0 to 1;
    FASTER below 1)."""
    share, _, faster = text.partition(":")
    try:
        values = (float(share), float(faster or 0))
    except ValueError:
        values = (-1.0, -1.0)
    if not (0 <= values[0] <= 1 and 0 <= values[1] < 1):
        raise ValueError(f"expected SHARE[:FASTER], a share from 0 to 1 and a fraction "
                         f"from 0 to below 1, got {text!r}")
    return SkippedSignals(*values)


def with_signal_errors(answer: dict, skipped: SkippedSignals) -> dict:
    """Return a 200 answer as the router writes one whose signal failed: signal_errors and
    applied_unknown_policies in their place, after signal_values and before config_hash."""
    tail = {key: answer.pop(key) for key in ("config_hash",) if key in answer}
    answer["signal_errors"] = {skipped.signal: skipped.reason}
    answer["applied_unknown_policies"] = {skipped.signal: skipped.policy}
    answer.update(tail)
    return answer


def unknown_answer_lines(router: "SimulatedRouter") -> List[str]:
    """Return vsr_model_runtime_unknown_answers_total of a simulator whose signals fail."""
    if not router.answers.signal_errors.share:
        return []
    with router.lock:
        count = router.counts.get("signal_errors", 0)
    return ["# TYPE vsr_model_runtime_unknown_answers_total counter",
            f'vsr_model_runtime_unknown_answers_total{{deployment="simulated",'
            f'reason="timeout"}} {count}']


class SimulatedAnswers(NamedTuple):
    """How the simulated router's answers differ from a plain, instantly ready one."""
    startup_s: float = 0.0  # /ready answers 503, previews carry no decision result, this long
    no_decision_share: float = 0.0  # prompts no decision matches (the default route)
    cache_entries: int = 0  # a result cache of this many prompts (0: none), as the router's
    per_kb_ms: float = 0.0  # more time per KB of prompt, as a transformer's forward takes
    metrics_port: Optional[int] = 0  # the Prometheus listener's port (0: a free one)
    routing_models: Tuple[str, ...] = AUTO_MODEL_NAMES  # model values it routes (and "")
    # newer routers (simulated_today): the runtime's own metrics under this name (vllm-srun,
    # vllm-sr-runtime; "": none); while starting, 503 CLASSIFIER_UNAVAILABLE and a /ready
    # with phase and pending models; shares of answers whose model was sampled, and of
    # partial 503s (the decision failed after the signals ran)
    runtime: str = ""
    phased_startup: bool = False
    sampled_share: float = 0.0
    partial_share: float = 0.0
    signal_errors: SkippedSignals = SkippedSignals()  # previews whose signal fails
    # previews whose stage an admission limit split: a `later` decisions call, one more delay
    split_share: float = 0.0


# The router's prometheus.DefBuckets, those of llm_signal_extraction_latency_seconds (seconds).
ROUTER_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
SIGNAL_JITTER = 0.1  # each simulated signal takes its time times uniform(0.9, 1.1)


class SignalTime(NamedTuple):
    """A simulated signal and its time: as --signals NAME:MS lists it, or as one request drew."""
    name: str
    ms: float


class SignalModel(NamedTuple):
    """The simulator's signals: a time per signal, run one after another or in parallel."""
    times_ms: Tuple[SignalTime, ...] = ()  # as --signals lists them
    parallel: bool = False

    def streams(self, seed: int) -> Dict[str, random.Random]:
        """Return each signal's own random stream, seeded by the seed, its name and time:
        two simulators started with one seed give a signal set alike the same times (common
        random numbers), so that comparing them shows what was changed and nothing else."""
        import random
        return {name: random.Random(f"{seed}:{name}:{ms!r}") for name, ms in self.times_ms}

    def draw(self, streams: Dict[str, random.Random]) -> Tuple[SignalTime, ...]:
        """Return one request's (name, ms) per signal: its time with a uniform jitter."""
        return tuple(SignalTime(name, round(ms * streams[name].uniform(1 - SIGNAL_JITTER,
                                                                       1 + SIGNAL_JITTER), 4))
                     for name, ms in self.times_ms)

    def wait_s(self, drawn: Sequence[SignalTime]) -> float:
        """Return how long the signals of one request take: the sum, or the longest."""
        times = [ms for _, ms in drawn]
        return (max(times, default=0.0) if self.parallel else math.fsum(times)) / 1000


# decision_result's MatchedSignals keys of the signal types whose key is not the type itself
# (pkg/services: keywords, embeddings, domains, preferences; the others by their own name)
MATCHED_SIGNALS_KEYS = {"keyword": "keywords", "embedding": "embeddings", "domain": "domains",
                        "preference": "preferences"}


def signal_answer(drawn: Sequence[SignalTime]) -> dict:
    """Return the answer's fields for the signals a request ran, shaped as the router's
    (metrics.<signal>.execution_time_ms and confidence; used_signals and matched_signals
    of decision_result, under MatchedSignals' keys)."""
    keys = {name: MATCHED_SIGNALS_KEYS.get(name, name) for name, _ in drawn}
    return {"metrics": {name: {"execution_time_ms": ms, "confidence": 0.9}
                        for name, ms in drawn},
            "used_signals": {keys[name]: [name] for name, _ in drawn},
            "matched_signals": {keys[name]: [name] for name, _ in drawn}}


def with_signals(answer: dict, drawn: Sequence[SignalTime]) -> dict:
    """Return a simulated answer with the signals a request ran: their times in metrics,
    every other signal of the router's at 0 (not evaluated), and each under decision_result's
    used_signals and matched_signals."""
    reported = signal_answer(drawn)
    metrics = {name: {"execution_time_ms": 0, "confidence": 0} for name in SIGNAL_NAMES}
    metrics.update(reported["metrics"])
    answer = dict(answer, metrics=metrics)  # the metrics keep their place in the answer
    result = answer.get("decision_result")
    if isinstance(result, dict):
        answer["decision_result"] = dict(
            result, used_signals={**result.get("used_signals", {}), **reported["used_signals"]},
            matched_signals={**result.get("matched_signals", {}),
                             **reported["matched_signals"]})
    return answer


class SignalHistograms:
    """llm_signal_extraction_latency_seconds of the simulated signals, with the router's
    buckets, and its exposition in Prometheus's text format."""

    def __init__(self, names: Sequence[str]):
        self.lock = threading.Lock()
        self.counts = {name: [0] * (len(ROUTER_DEFAULT_BUCKETS) + 1) for name in names}
        self.sums = dict.fromkeys(names, 0.0)

    def observe(self, drawn: Sequence[SignalTime]) -> None:
        with self.lock:
            for name, ms in drawn:
                seconds = ms / 1000
                i = next((i for i, b in enumerate(ROUTER_DEFAULT_BUCKETS) if seconds <= b),
                         len(ROUTER_DEFAULT_BUCKETS))
                self.counts[name][i] += 1
                self.sums[name] += seconds

    def exposition(self) -> str:
        name = "llm_signal_extraction_latency_seconds"
        lines = [f"# HELP {name} Latency of signal extraction by type in seconds",
                 f"# TYPE {name} histogram"]
        with self.lock:
            for signal_type, counts in self.counts.items():
                label = f'signal_type="{signal_type}"'
                total = 0
                for bound, count in zip((*ROUTER_DEFAULT_BUCKETS, "+Inf"), counts):
                    total += count
                    lines.append(f'{name}_bucket{{{label},le="{bound}"}} {total}')
                lines += [f"{name}_sum{{{label}}} {self.sums[signal_type]!r}",
                          f"{name}_count{{{label}}} {total}"]
        return "\n".join(lines) + "\n"


class Stall(NamedTuple):
    """A slow phase now and then (--stall EVERY:LENGTH:MS): of every `every` previews, the
    last `length` wait `extra_ms` more."""
    every: int
    length: int
    extra_ms: float


class SimulatorSettings(NamedTuple):
    """How a simulated router answers: its time per preview, how many it serves at once,
    its decisions, answers and signals; the simulator's config hash is made of these."""
    delay_ms: float = 2.0
    jitter_ms: float = 0.0
    serial: bool = False
    decisions: Sequence[str] = ("math", "code", "general", "pii_block")
    seed: int = 0
    max_concurrency: int = ROUTER_MAX_CONCURRENCY
    stall: Optional[Stall] = None
    workers: Optional[int] = None
    answers: SimulatedAnswers = SimulatedAnswers()
    signals: SignalModel = SignalModel()
    # this instance's own speed (simulate --instance-sd): its delay and jitter times it; not
    # in the config hash, as instances of one configuration differ in speed alone
    speed: float = 1.0


class SimulatedRouter:
    """A routing-preview server on its own threads: one per connection, as lean as a Python
    server can be, so that on a 2-core machine it leaves the driver and the kernel their share.

    It answers as the router's source does (pkg/apiserver): POST /api/v1/routing/preview only
    (another method 405, another path a text/plain 404), a strict JSON decoder (an unknown
    field, or no text at all: 400 INVALID_INPUT; whitespace is routed), 413 above 10 MiB,
    400 INVALID_ROUTING_MODEL for a model it does not route, x-sr-bench-expected-config-hash
    (400 malformed, 412 another), ?trace=true, X-Request-Id echoed or made, a 200 body of a
    few KB shaped as EvalResponse (sent chunked above 2 KB, as Go does) with x-vsr-config-hash
    (a sha256 of the settings that shape its answers, not the seed) on answers with a body
    only. Each admitted preview waits the delay plus a uniform jitter plus per_kb_ms per KB
    of prompt (time.sleep), with `serial` one at a time like a single GPU process; a preview
    beyond `max_concurrency` in flight gets 429 OVERLOADED at once. `stall` (every, length,
    ms) makes a slow phase now and then: of every `every` previews, the last `length` wait
    `ms` more. `answers` (SimulatedAnswers): a start-up time (GET /ready 503, previews
    without a decision result), a share of prompts no decision matches, a result cache,
    its metrics port. GET /health and /ready answer at once; Prometheus text with the
    router's metric names is on a port of its own.
    """

    def __init__(self, host: str, port: int, settings: SimulatorSettings):
        import hashlib
        import random
        import socket
        delay_ms, jitter_ms, serial, decisions, seed, max_concurrency, stall, workers, \
            answers, signals, speed = settings
        self.delay_s, self.jitter_s = delay_ms * speed / 1000, jitter_ms * speed / 1000
        self.workers = 1 if serial else workers
        self.signals = signals
        self.signal_histograms = SignalHistograms([name for name, _ in signals.times_ms])
        self.stall = Stall(*stall) if stall else None
        self.serial = serial
        self.decisions = tuple(decisions)
        self.max_concurrency = max_concurrency
        self.answers = answers
        self.speed = speed
        self.config_hash = hashlib.sha256(json.dumps(
            {"decisions": self.decisions, "delay_ms": delay_ms, "jitter_ms": jitter_ms,
             "serial": serial, "max_concurrency": max_concurrency,
             **({"workers": workers} if workers and not serial else {}),
             **({"answers": answers._replace(metrics_port=None)._asdict()}
                if answers != SimulatedAnswers() else {}),
             **({"signals": signals._asdict()} if signals.times_ms else {})},
            sort_keys=True).encode()).hexdigest()
        self.rng = random.Random(seed)
        self.signal_streams = signals.streams(seed)
        self.lock = threading.Lock()  # the jitter generator, the counters and the cache
        # --workers N (--serial: 1): when each of N GPU processes is next free, monotonic s
        self.free_at = [0.0] * self.workers if self.workers else None
        self.served = 0  # preview requests admitted: answered or being answered
        self.in_flight = 0  # admitted previews not yet answered
        self.cache: collections.OrderedDict = collections.OrderedDict()
        self.counts: collections.Counter = collections.Counter()  # the metrics' counters
        self.signal_seconds = 0.0  # the previews' simulated signal time, for the metrics
        self.connections: set = set()
        self.stopping = threading.Event()
        self.started = time.monotonic()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.create_server((host, port), family=family, backlog=256)
        bound_host, bound_port = self.listener.getsockname()[:2]
        self.url = f"http://{bracketed(bound_host)}:{bound_port}"
        self.threads = [threading.Thread(target=accept_connections, args=(
            self.listener, self._start_serving, self.stopping), daemon=True)]
        self.metrics_listener: Optional[socket.socket] = None
        self.metrics_url: Optional[str] = None
        if answers.metrics_port is not None:
            self.metrics_listener = socket.create_server((host, answers.metrics_port),
                                                         family=family, backlog=16)
            metrics_port = self.metrics_listener.getsockname()[1]
            self.metrics_url = f"http://{bracketed(bound_host)}:{metrics_port}/metrics"
            self.threads.append(threading.Thread(target=accept_connections, args=(
                self.metrics_listener, functools.partial(self._start_serving, metrics=True),
                self.stopping), daemon=True))
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        import socket
        self.stopping.set()
        stop_accepting([x for x in (self.listener, self.metrics_listener) if x is not None],
                       self.threads)
        with self.lock:
            for connection in list(self.connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _start_serving(self, connection: socket.socket, metrics: bool = False) -> None:
        with self.lock:
            self.connections.add(connection)
        threading.Thread(target=self._serve, args=(connection, metrics), daemon=True).start()

    def _serve(self, connection: socket.socket, metrics_side: bool = False) -> None:
        reader = connection.makefile("rb", buffering=65536)
        try:
            while not self.stopping.is_set():
                line = reader.readline(65537)
                if not line:
                    return
                method, target = (line.split(b" ") + [b"", b""])[:2]
                length, headers = 0, {}
                while True:
                    header = reader.readline(65537)
                    if header in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = header.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name in (b"x-request-id", EXPECTED_HASH_HEADER.encode()):
                        headers[name.decode()] = value.strip().decode("latin-1")
                if length > PREVIEW_BODY_LIMIT:  # read and dropped, as LimitReader leaves it
                    while length > 0 and reader.read(min(length, 1 << 20)):
                        length -= 1 << 20
                    connection.sendall(simulated_error(
                        413, "REQUEST_BODY_TOO_LARGE", f"request body too large: exceeds "
                        f"{PREVIEW_BODY_LIMIT} bytes", headers.get("x-request-id", "")))
                    continue
                body = reader.read(length) if length else b""
                connection.sendall(self._metrics_answer(method, target) if metrics_side
                                   else self._answer(method, target, headers, body))
        except (OSError, ValueError):
            return
        finally:
            with self.lock:
                self.connections.discard(connection)
            reader.close()
            connection.close()

    def _work(self, pause: float) -> None:
        """Do one admitted preview's device work: on the worker free first, after the work
        queued on it, in the order the previews came, or at once without --workers.

        Each worker keeps a timeline, as a GPU does: its work runs back to back whatever the
        threads' wake-ups cost, so a busy machine delays answers but not the device, and N
        workers serve N x 1000 / delay_ms previews a second once saturated."""
        if self.free_at is None:
            if pause:
                time.sleep(pause)
            return
        with self.lock:
            now = time.monotonic()
            worker = min(range(len(self.free_at)), key=self.free_at.__getitem__)
            done = max(now, self.free_at[worker]) + pause
            self.free_at[worker] = done
        wait = done - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _metrics_answer(self, method: bytes, target: bytes) -> bytes:
        if method != b"GET" or target.split(b"?")[0] != b"/metrics":
            return http_response(404, b"404 page not found\n", "text/plain; charset=utf-8")
        return http_response(200, simulated_metrics(self).encode(), "text/plain; version=0.0.4")

    def _answer(self, method: bytes, target: bytes, headers: dict, body: bytes) -> bytes:
        """Return the whole response in one buffer: head and body in two writes would meet
        Nagle's algorithm and the client's delayed ACK, 40 ms that no real router has."""
        path, _, query = target.partition(b"?")
        request_id = headers.get("x-request-id") or os.urandom(16).hex()
        tagged = (("X-Request-Id", request_id),)
        if method == b"GET" and path in (b"/health", READY_PATH.encode()):
            if path == b"/health":
                return http_response(200, b'{"status":"healthy"}\n', headers=tagged)
            ready = time.monotonic() - self.started >= self.answers.startup_s
            return http_response(200, READY_BODY, headers=tagged) \
                if ready else http_response(503, self._starting_body(), headers=tagged)
        if path != PREVIEW_PATH.encode():
            return http_response(404, b"404 page not found\n", "text/plain; charset=utf-8")
        if method != b"POST":
            return http_response(405, b"Method Not Allowed\n", "text/plain; charset=utf-8",
                                 headers=(("Allow", "POST"),) + tagged)
        try:
            request = simulated_request(body)
        except ValueError as exc:
            return simulated_error(400, "INVALID_INPUT", f"failed to parse JSON: {exc}",
                                   request_id)
        refusal = self._refusal(request, headers)
        if refusal:
            status, code, message = refusal
            return simulated_error(status, code, message, request_id)
        return self._preview(request, b"trace=true" in query.split(b"&"), tagged)

    def _refusal(self, request: dict, headers: dict) -> Optional[Tuple[int, str, str]]:
        """Return (status, code, message) of a preview refused before it runs, or None."""
        expected = headers.get(EXPECTED_HASH_HEADER)
        if expected is not None and not CONFIG_HASH_PATTERN.fullmatch(expected):
            return 400, "INVALID_INPUT", "expected config hash must be a lowercase SHA-256 digest"
        if expected is not None and expected != self.config_hash:
            return 412, "CONFIG_HASH_MISMATCH", ("active runtime config does not match the "
                                                 "expected config hash")
        if not simulated_text(request) and not request.get("metadata"):
            return 400, "INVALID_INPUT", "text cannot be empty"
        model = str(request.get("model") or "").strip()
        if model and model not in self.answers.routing_models:
            return 400, "INVALID_ROUTING_MODEL", f'unknown routing model "{model}"'
        return None

    def _preview(self, request: dict, trace: bool, tagged: tuple) -> bytes:
        text = simulated_text(request)
        loading = time.monotonic() - self.started < self.answers.startup_s
        with self.lock:
            if self.in_flight >= self.max_concurrency:  # shed at once: the router has no queue
                return simulated_error(429, "OVERLOADED", "admission queue is full",
                                       tagged[0][1])
            self.in_flight += 1
            hit = bool(self.answers.cache_entries) and text in self.cache
            pause = self._pause(text)
            # a cache hit runs no signal; the others run theirs after the delay
            drawn = () if hit else self.signals.draw(self.signal_streams)
            pause += self.signals.wait_s(drawn)
            self.served += 1
            skipped = not loading and not hit and self._skipped(text)
            if skipped:  # its failed signal did not run to the end
                pause *= 1 - self.answers.signal_errors.faster
                self.counts["signal_errors"] += 1
            if not hit and share_of("split:" + text, self.answers.split_share):
                pause += self.delay_s  # the stage's later call waits for the first
                self.counts["split"] += 1
            self.counts["computed"] += not hit
        started = time.perf_counter()
        try:
            self._work(pause)
        finally:
            with self.lock:
                self.in_flight -= 1
        if loading and self.answers.phased_startup:  # a newer router: 503 at once
            return simulated_error(503, "CLASSIFIER_UNAVAILABLE",
                                   "signal classifier is unavailable", tagged[0][1])
        if loading:  # the classifier not loaded yet: a body, no decision result
            return http_response(200, json.dumps(
                {"original_text": text, "requested_model": str(request.get("model") or "").strip(),
                 "metrics": {name: {"execution_time_ms": 0, "confidence": 0}
                             for name in SIGNAL_NAMES}}, separators=(",", ":")).encode() + b"\n",
                headers=tagged)
        decision = "" if self._unmatched(text) else simulated_decision(text, self.decisions)
        answer = simulated_answer(text, request, decision,
                                  (time.perf_counter() - started) * 1000, self.config_hash,
                                  trace)
        if drawn:
            self.signal_histograms.observe(drawn)
            answer = with_signals(answer, drawn)
        if skipped:
            answer = with_signal_errors(answer, self.answers.signal_errors)
        answer, status = simulated_today(
            answer, text, self.answers, (request.get("preview_context") or {}).get(
                "sampling_seed"))
        return go_response(status, json.dumps(answer, separators=(",", ":")).encode() + b"\n",
                           headers=((CONFIG_HASH_NAME, self.config_hash),) + tagged)

    def _starting_body(self) -> bytes:
        """Return /ready's 503 body while starting, as the router's handleReady writes it:
        before its start-up state exists (without phased_startup: all along) status and
        service only; then its phase (downloading_models, then initializing_models) and the
        models still pending."""
        if not self.answers.phased_startup:
            return b'{"status":"starting","service":"classification-api","ready":false}\n'
        share = (time.monotonic() - self.started) / max(self.answers.startup_s, 1e-9)
        loaded = min(len(STARTUP_MODELS) - 1, int(share * len(STARTUP_MODELS)))
        downloading = share < 0.5
        return json.dumps({
            "status": "starting", "service": "classification-api", "ready": False,
            "phase": READY_PHASES[0 if downloading else 1],
            "message": "Downloading models..." if downloading else "Initializing models...",
            "downloading_model": STARTUP_MODELS[loaded] if downloading else "",
            "pending_models": list(STARTUP_MODELS[loaded:]),
            "ready_models": loaded, "total_models": len(STARTUP_MODELS)}).encode() + b"\n"

    def _unmatched(self, text: str) -> bool:
        """Return True for the prompts no decision matches: a stable share of them."""
        share = self.answers.no_decision_share
        return share > 0 and (text_number("default:" + text) % 10_000) < share * 10_000

    def _skipped(self, text: str) -> bool:
        """Return True for the prompts whose signal fails: a stable share of them."""
        share = self.answers.signal_errors.share
        return share > 0 and (text_number("signal_errors:" + text) % 10_000) < share * 10_000

    def _pause(self, text: str) -> float:
        """Return how long an admitted preview takes (under self.lock): a cache hit at once;
        else the delay, jitter, per-KB time and any stall."""
        entries = self.answers.cache_entries
        if entries:
            hit = text in self.cache
            self.counts["cache_hit" if hit else "cache_miss"] += 1
            self.cache[text] = True
            self.cache.move_to_end(text)
            if len(self.cache) > entries:
                self.cache.popitem(last=False)
            if hit:
                return CACHE_HIT_MS / 1000
        pause = self.delay_s + (self.rng.uniform(0, self.jitter_s) if self.jitter_s else 0)
        pause += self.answers.per_kb_ms / 1000 * len(text.encode("utf-8", "surrogatepass")) \
            / 1024
        stall = self.stall
        if stall and self.served % stall.every >= stall.every - stall.length:
            pause += stall.extra_ms / 1000
        self.signal_seconds += pause
        return pause


def simulated_metrics(router: SimulatedRouter) -> str:
    """Return a simulated router's Prometheus text, with the router's metric names."""
    with router.lock:
        served, counts, seconds = router.served, dict(router.counts), router.signal_seconds
    # with --signals, llm_signal_extraction_latency_seconds is their histogram, as the router's
    signals = router.signal_histograms.exposition() if router.signals.times_ms else ""
    lines = [] if signals else [
        "# TYPE llm_signal_extraction_latency_seconds summary",
        f"llm_signal_extraction_latency_seconds_sum {seconds!r}",
        f"llm_signal_extraction_latency_seconds_count {served}"]
    lines += ["# TYPE vsr_model_runtime_requests_total counter",
             f'vsr_model_runtime_requests_total{{deployment="simulated",outcome="ok"}} {served}',
             "# TYPE vsr_model_runtime_restarts_total counter",
             'vsr_model_runtime_restarts_total{deployment="simulated"} 0']
    if router.answers.cache_entries and not router.answers.runtime:
        lines += ["# TYPE vsr_model_runtime_result_cache_total counter"] + [
            f'vsr_model_runtime_result_cache_total{{deployment="simulated",result="{kind}"}} '
            f'{counts.get("cache_" + kind, 0)}' for kind in ("hit", "miss")]
    lines += unknown_answer_lines(router) + frontend_runtime_lines(router, counts, seconds)
    return "\n".join(lines + runtime_metrics(router, served, counts)) + "\n" + signals


TRANSPORT_S = 0.0002  # a simulated call's exchange outside the runtime (Server-Timing's rest)
BUNDLE_WAIT_S = 0.00005  # a stage's first call waiting for its others
ADMITTED_BYTES = 1500  # a simulated exchange's bytes in flight


def histogram_lines(name: str, labels: str, count: int, total: float) -> List[str]:
    """Return a histogram's exposition with its +Inf bucket only (what the deltas read)."""
    inner = f"{labels}," if labels else ""
    return [f"# TYPE {name} histogram", f'{name}_bucket{{{inner}le="+Inf"}} {count}',
            f"{name}_sum{{{labels}}} {total!r}" if labels else f"{name}_sum {total!r}",
            f"{name}_count{{{labels}}} {count}" if labels else f"{name}_count {count}"]


def frontend_runtime_lines(router: "SimulatedRouter", counts: dict,
                           seconds: float) -> List[str]:
    """Return the router's own series of its model runtime (port 9190, pkg/modelservice):
    call time and transport (the part outside the runtime's Server-Timing), request
    bundling (the stage's waits, its first and later decisions calls) and each replica's
    readiness, exchanges in flight, admitted bytes and completed dispatches."""
    computed, split = counts.get("computed", 0), counts.get("split", 0)
    labels = 'deployment="simulated",surface="decisions"'
    lines = histogram_lines("vsr_model_runtime_request_duration_seconds", labels,
                            computed + split, seconds)
    lines += histogram_lines("vsr_model_runtime_transport_seconds", labels, computed + split,
                             (computed + split) * TRANSPORT_S)
    lines += histogram_lines("vsr_model_runtime_bundle_wait_seconds", "", computed,
                             computed * BUNDLE_WAIT_S)
    lines += histogram_lines("vsr_model_runtime_bundle_question_wait_seconds", "", computed,
                             computed * BUNDLE_WAIT_S)
    lines += ["# TYPE vsr_model_runtime_stage_decision_calls_total counter"] + [
        f'vsr_model_runtime_stage_decision_calls_total{{deployment="simulated",'
        f'round="{round_}"}} {n}' for round_, n in (("first", computed), ("later", split))]
    replicas = router.workers or 1
    with router.lock:
        in_flight = router.in_flight
    done = computed + split
    for name, kind in (("ready", "gauge"), ("inflight", "gauge"), ("admitted_bytes", "gauge"),
                       ("requests_total", "counter")):
        lines.append(f"# TYPE vsr_model_runtime_replica_{name} {kind}")
        for replica in range(replicas):
            share = in_flight // replicas + (replica < in_flight % replicas)
            figure = {"ready": 1, "inflight": share, "admitted_bytes": share * ADMITTED_BYTES,
                      "requests_total": done // replicas + (replica < done % replicas)}[name]
            outcome = ',outcome="ok"' if name == "requests_total" else ""
            lines.append(f'vsr_model_runtime_replica_{name}{{deployment="simulated",'
                         f'replica="{replica}"{outcome}}} {figure}')
    return lines


def runtime_metrics(router: "SimulatedRouter", served: int, counts: dict) -> List[str]:
    """Return the runtime's own metrics under its name (answers.runtime: vllm-srun, or
    vllm-sr-runtime as builds between the router's #4481 and #4618 name it): its queue
    histogram (no wait), its load (the queue's depth: previews in flight beyond the workers;
    rows per forward; questions dropped at their deadline, the failed signals') and, with a
    cache, its result cache counter in place of the router's."""
    answers = router.answers
    if not answers.runtime:
        return []
    prefix = answers.runtime.replace("-", "_")
    with router.lock:
        waiting = max(0, router.in_flight - (router.workers or router.max_concurrency))
    computed = counts.get("computed", 0)
    lines = histogram_lines(f"{prefix}_queue_duration_seconds", "", served, 0.0)
    lines += histogram_lines(f"{prefix}_batch_rows", "", computed, float(computed))
    lines += [f"# TYPE {prefix}_queue_depth gauge", f"{prefix}_queue_depth {waiting}",
              f"# TYPE {prefix}_deadline_dropped_questions_total counter",
              f"{prefix}_deadline_dropped_questions_total {counts.get('signal_errors', 0)}"]
    if answers.cache_entries:
        lines += [f"# TYPE {prefix}_result_cache_total counter"] + [
            f'{prefix}_result_cache_total{{model="simulated",outcome="{kind}"}} '
            f'{counts.get("cache_" + kind, 0)}' for kind in ("hit", "miss")]
    return lines


def start_simulator(host: str = "127.0.0.1", port: int = 0, **settings: Any) -> SimulatedRouter:
    """Start a simulated routing-preview server on its own threads; return it. settings: the
    fields of SimulatorSettings by name (delay_ms=2.0, serial=False, workers=None, ...)."""
    return SimulatedRouter(host, port, SimulatorSettings(**settings))
