"""A loopback server that answers the routing preview as vLLM Semantic Router's source does,
written from that source (pkg/apiserver: route_routing_preview.go, route_classify.go,
json_request.go, server.go; pkg/services: classification_signal_contract.go,
classification_signal_response.go, classification_signal_types.go; pkg/headers/
config_hash.go), independently of router_latency's own simulator, so that the tool and its
simulator are both checked against it.

What it does as the router does:
- POST /api/v1/routing/preview only (Go's method pattern: another method 405 with an Allow
  header, another path Go's text/plain 404); GET /health 200 at once; GET /ready 503
  {"status":"starting","ready":false} until `startup_s` is over, then 200 (or, by count, to
  its first `unready` GETs: a test that must see the start-up gets it by construction, however
  loaded the machine);
- strict JSON (an unknown field: 400 INVALID_INPUT), a 10 MiB body limit (413
  REQUEST_BODY_TOO_LARGE), empty input 400 INVALID_INPUT "text cannot be empty" while
  whitespace-only text is routed, model "" or an auto name (vllm-sr/auto, auto, MoM; else
  400 INVALID_ROUTING_MODEL), requested_model the model sent, trimmed ("" when none),
  x-sr-bench-expected-config-hash (malformed 400, mismatch 412);
- the 200 body of EvalResponse with every signal's metrics, a trailing newline, sent with a
  Content-Length when it fits Go's 2,048-byte response buffer and chunked when it does not;
  x-vsr-config-hash only on answers with a body; X-Request-Id echoed or generated;
- no decision matched (`unmatched`): decision_result.decision_name "" and no routing_decision
  or selected_model; before `loaded_after` previews, the classifier is not loaded: a 200 with
  original_text, requested_model and all-zero metrics but no decision_result.
Newer routers (`newer=True`): while starting, /ready 503 with phase, pending_models,
ready_models and total_models, and previews 503 CLASSIFIER_UNAVAILABLE (for `classifier_s`,
or to the first `unavailable` previews); prompts in
`sampled` get a selected model drawn anew with selection_provenance {mode, state_dependent,
sampled, sampling_seed}; prompts in `partial` a 503 with the answer (x-vsr-config-hash too),
its decision_error and no selection.
"""

import hashlib
import json
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREVIEW = "/api/v1/routing/preview"
LIMIT = 10 * 1024 * 1024
GO_BUFFER = 2048  # net/http's bufferBeforeChunkingSize
# services.IntentRequest's fields (the client's envelope: max_tokens, tool_choice, ...)
REQUEST_FIELDS = {"text", "messages", "tools", "functions", "tool_choice", "function_call",
                  "response_format", "max_tokens", "max_completion_tokens", "model",
                  "metadata", "options", "preview_context"}
# a default configuration's auto names (config: DefaultVSRAutoModelName, LegacyAutoModelAlias,
# DefaultAutoModelName); an empty model resolves to the first
AUTO_NAMES = ("vllm-sr/auto", "auto", "MoM")
MODELS = ("domain-classifier", "jailbreak-guard", "pii-detector")  # loaded while starting
MESSAGE_FIELDS = {"role", "name", "content", "tool_calls", "tool_call_id", "function_call",
                  "refusal", "reasoning_content"}
# classification.SignalMetricsCollection: every signal, always present
SIGNALS = ("keyword", "embedding", "domain", "fact_check", "user_feedback", "reask",
           "preference", "language", "context", "structure", "complexity", "modality",
           "authz", "jailbreak", "pii", "kb", "conversation", "event", "metadata", "classifier")


# the E2E configuration's domain and keyword rules: the signals a prompt did not match
DOMAINS = ("biology", "business", "chemistry", "computer_science", "economics", "engineering",
           "health", "history", "law", "math", "other", "philosophy", "physics", "psychology")
KEYWORDS = ("urgent_request", "sensitive_data", "code_request", "math_keywords",
            "creative_writing", "thinking", "no_think", "summarize", "translate", "jailbreak_kw")
UNMATCHED = {"keywords": list(KEYWORDS), "domains": list(DOMAINS),
             "embeddings": [f"embedding_rule_{i}" for i in range(8)],
             "fact_check": ["needs_fact_check"], "user_feedback": ["wrong_answer", "satisfied"],
             "preferences": ["prefers_short"], "language": ["en", "zh", "es", "fr"],
             "complexity": ["hard", "easy"], "jailbreak": ["jailbreak_detected"],
             "pii": ["pii_email", "pii_ssn", "pii_phone"]}


def error_body(code, message):
    stamp = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    return json.dumps({"error": {"code": code, "message": message, "timestamp": stamp}}).encode()


def user_text(request):
    """The evaluated text: the last user message's content, else text."""
    for message in reversed(request.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(part.get("text", "") for part in content
                                   if isinstance(part, dict))
            if isinstance(content, str) and content:
                return content
    return request.get("text") or ""


class RouterDouble:
    def __init__(self, *, startup_s=0.0, unmatched=(), loaded_after=0, config_hash=None,
                 delay_s=0.0, newer=False, sampled=(), partial=(), classifier_s=None,
                 unready=0, unavailable=0):
        self.startup_s, self.unmatched, self.loaded_after = startup_s, set(unmatched), \
            loaded_after
        self.newer, self.sampled, self.partial = newer, set(sampled), set(partial)
        # newer: previews answer 503 CLASSIFIER_UNAVAILABLE this long (/ready: startup_s)
        self.classifier_s = startup_s if classifier_s is None else classifier_s
        # by count: the first `unready` GETs of /ready answer 503, the first `unavailable`
        # previews (newer) 503 CLASSIFIER_UNAVAILABLE
        self.unready, self.unavailable, self.readies = unready, unavailable, 0
        self.delay_s = delay_s
        self.config_hash = config_hash or hashlib.sha256(b"double").hexdigest()
        self.started = time.monotonic()
        self.previews = 0
        self.seen = []  # (method, path, headers dict, body bytes) of every request
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY, as Go's net/http sets it: http.server writes the head and the body
            # apart, and with Nagle on each body would wait for the client's delayed ACK
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def handle_one_request(self):
                try:
                    super().handle_one_request()
                except (ConnectionError, OSError):
                    self.close_connection = True

            def do_GET(self):
                double.route(self, "GET")

            def do_POST(self):
                double.route(self, "POST")

            def do_PUT(self):
                double.route(self, "PUT")

            def do_DELETE(self):
                double.route(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    # the answers

    def route(self, handler, method):
        path, _, query = handler.path.partition("?")
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self.lock:
            self.seen.append((method, path, dict(handler.headers), body))
        request_id = handler.headers.get("X-Request-Id") or uuid.uuid4().hex
        if path == "/health" and method == "GET":
            return self.send(handler, 200, b'{"status":"healthy"}\n', request_id)
        if path == "/ready" and method == "GET":
            with self.lock:
                self.readies += 1
            if self.starting():
                return self.send(handler, 503, self.starting_body(), request_id)
            return self.send(handler, 200, b'{"status":"ready","ready":true}\n', request_id)
        if path != PREVIEW:
            return self.send(handler, 404, b"404 page not found\n", request_id,
                             "text/plain; charset=utf-8")
        if method != "POST":
            return self.send(handler, 405, b"Method Not Allowed\n", request_id,
                             "text/plain; charset=utf-8", (("Allow", "POST"),))
        status, answer, with_hash = self.preview(handler.headers, body, query)
        extra = (("x-vsr-config-hash", self.config_hash),) if with_hash else ()
        self.send(handler, status, answer, request_id, headers=extra)

    def starting(self):
        return (time.monotonic() - self.started < self.startup_s
                or self.readies <= self.unready)

    def share_started(self):
        """The share of the start-up done, 0 to 1: by time, or by the /ready GETs counted."""
        if self.unready:
            return min(1.0, (self.readies - 1) / self.unready)
        return (time.monotonic() - self.started) / self.startup_s

    def starting_body(self):
        """/ready's 503 while starting: the older form, or the newer readinessDetails."""
        if not self.newer:
            return b'{"status":"starting","ready":false}\n'
        loaded = min(len(MODELS) - 1, int(self.share_started() * len(MODELS)))
        return json.dumps({"status": "starting", "service": "classification-api",
                           "ready": False, "phase": "downloading_models", "message": "",
                           "downloading_model": "", "pending_models": list(MODELS[loaded:]),
                           "ready_models": loaded, "total_models": len(MODELS)}).encode() + b"\n"

    def preview(self, headers, body, query):
        if len(body) > LIMIT:
            return 413, error_body("REQUEST_BODY_TOO_LARGE", f"request body too large: "
                                   f"exceeds {LIMIT} bytes"), False
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("not an object")
            unknown = set(request) - REQUEST_FIELDS
            for message in request.get("messages") or []:
                unknown |= set(message) - MESSAGE_FIELDS if isinstance(message, dict) else {"?"}
            if unknown:
                raise ValueError(f'json: unknown field "{sorted(unknown)[0]}"')
        except ValueError as exc:
            return 400, error_body("INVALID_INPUT", f"failed to parse JSON: {exc}"), False
        expected = headers.get("x-sr-bench-expected-config-hash")
        if expected is not None:
            if len(expected) != 64 or any(c not in "0123456789abcdef" for c in expected):
                return 400, error_body("INVALID_INPUT", "expected config hash must be a "
                                       "lowercase SHA-256 digest"), False
            if expected != self.config_hash:
                return 412, error_body("CONFIG_HASH_MISMATCH", "active runtime config does "
                                       "not match the expected config hash"), False
        text = user_text(request)
        if not text and not request.get("metadata"):
            return 400, error_body("INVALID_INPUT", "text cannot be empty"), False
        model = (request.get("model") or "").strip()
        if model and model not in AUTO_NAMES:
            return 400, error_body("INVALID_ROUTING_MODEL",
                                   f'unknown routing model "{model}"'), False
        if self.newer and self.classifier_unavailable():
            return 503, error_body("CLASSIFIER_UNAVAILABLE",
                                   "signal classifier is unavailable"), False
        with self.lock:
            self.previews += 1
            loaded = self.previews > self.loaded_after
        if self.delay_s:
            time.sleep(self.delay_s)
        answer = self.eval_response(text, model, loaded, "trace=true" in query)
        return (503 if text in self.partial else 200), answer, True

    def classifier_unavailable(self):
        if time.monotonic() - self.started < self.classifier_s:
            return True
        with self.lock:
            self.unavailable -= 1
            return self.unavailable >= 0

    def eval_response(self, text, model, loaded, trace):
        """EvalResponse's fields in its struct order (encoding/json keeps it)."""
        metrics = {name: {"execution_time_ms": 0, "confidence": 0} for name in SIGNALS}
        answer = {"original_text": text, "requested_model": model}
        if loaded:
            for name in SIGNALS[:5]:
                metrics[name] = {"execution_time_ms": 1.25, "confidence": 0.5}
            matched = {"keywords": ["kw"], "domains": ["general"]}
            if text in self.unmatched:
                answer["decision_result"] = {"decision_name": "", "algorithm": "",
                                             "used_signals": {}, "matched_signals": matched,
                                             "unmatched_signals": UNMATCHED}
            else:
                answer["decision_result"] = {
                    "decision_name": "general", "algorithm": "static",
                    "used_signals": {"domains": ["general"]}, "matched_signals": matched,
                    "unmatched_signals": UNMATCHED}
                if trace:
                    answer["eval_trace"] = [{"decision": "general", "matched": True}]
                if text not in self.partial:
                    answer.update({"recommended_models": ["qwen3-8b"],
                                   "selected_model": "qwen3-8b", "selection_status":
                                   "selected", "selection_method": "static",
                                   "routing_decision": "general"})
                if text in self.sampled:
                    seed = uuid.uuid4().int % 1000
                    answer.update({"selected_model": ("qwen3-8b", "llama-8b")[seed % 2],
                                   "selection_method": "weighted_random",
                                   "selection_provenance": {
                                       "mode": "sampled", "state_dependent": False,
                                       "sampled": True, "sampling_seed": seed}})
        answer["metrics"] = metrics
        if loaded:
            answer["signal_confidences"] = {"domain:general": 0.5}
        if loaded and text in self.partial:
            answer["decision_error"] = "decision evaluation failed"
        answer["config_hash"] = self.config_hash
        return json.dumps(answer).encode() + b"\n"

    def send(self, handler, status, body, request_id, content_type="application/json",
             headers=()):
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("X-Request-Id", request_id)
        for name, value in headers:
            handler.send_header(name, value)
        if len(body) <= GO_BUFFER:
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for start in range(0, len(body), GO_BUFFER):  # Go flushes its buffer as one chunk
            piece = body[start:start + GO_BUFFER]
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        handler.wfile.write(b"0\r\n\r\n")
