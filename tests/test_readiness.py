"""Tests of readiness.py: before measuring: the router's readiness, the floor, warm-up."""

import json
import threading

import pytest

from router_latency.client import encode_request, parse_endpoint
from router_latency.errors import RouterLatencyError
from router_latency.passloop import Target
from router_latency.readiness import wait_until_ready
from conftest import final_answer, write_corpus


def not_ready_then_ready(scripted, not_ready, answers):
    """A router whose first `not_ready` previews get the given not-ready answer."""
    seen = []

    def answer(prompt, number):
        if not prompt:  # GET /ready
            return [final_answer(b'{"status":"ready","ready":true}')]
        seen.append(prompt)
        return [answers if len(seen) <= not_ready else final_answer()]
    return scripted(answer)


@pytest.mark.parametrize("loading", [
    final_answer(b""),
    final_answer(b'{"original_text":"hello","metrics":{}}\n'),
])
def test_a_preview_without_a_decision_result_is_not_ready(scripted, tmp_path, cli, loading,
                                                          quick_ready_poll):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    args = ["run", "--url", None, "--corpus", corpus, "--out", tmp_path / "o.json", "--label",
            "x", "-c", "1", "--warmup", "0", "--quiet"]
    router = not_ready_then_ready(scripted, 1000, loading)
    args[2] = router.url
    result = cli(*args)
    assert result.code == 2 and "is not ready: it answered HTTP 200 OK to a preview with " \
        in result.err and "(classifiers not loaded yet?)" in result.err
    router = not_ready_then_ready(scripted, 3, loading)
    args[2] = router.url
    assert cli(*args, "--wait-ready", "20").code == 0
    document = json.loads((tmp_path / "o.json").read_text())
    assert document["passes"][0]["summary"]["errors"] == {}


def test_wait_ready_waits_through_a_phased_ready_and_classifier_unavailable(double,
                                                                            quick_ready_poll):
    router = double(newer=True, unready=2, unavailable=2)
    shown = []
    payload = b'{"messages":[{"role":"user","content":"hello"}]}'
    from router_latency.client import encode_request
    target = Target(parse_endpoint(router.url))
    waited = wait_until_ready(target, encode_request(target.endpoint, "POST", payload, ()),
                              20.0, threading.Event(), show=shown.append)
    assert waited is not None  # ready, and said what it waited through:
    assert any("to /ready (phase downloading_models; " in line and "pending: " in line
               and "pii-detector" in line for line in shown), shown
    assert any("(CLASSIFIER_UNAVAILABLE: classifiers loading)" in line for line in shown), shown
    assert len(shown) == len(set(shown))  # each state once


@pytest.mark.parametrize("ready", [
    [b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"],
    [b"HTTP/1.1 102 Processing\r\n\r\n"],  # interim answers only, then nothing in time
    [b"HTTP/2 200\r\n\r\n"],  # an answer this client cannot read
    [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{"],  # cut off, then nothing in time
])
def test_any_answer_of_ready_but_503_leaves_it_to_the_preview(scripted, ready):
    # a /ready answering 101 was "router not reachable at .../api/v1/routing/preview",
    # though the preview routed: the note says any answer but 503 leaves it to the preview
    def answer(prompt, number):
        return ready if not prompt else [final_answer()]
    router = scripted(answer)
    # "nothing in time" is waited out: a short timeout, still long beside a loopback answer
    # (the preview's, a ms, or a stall of the machine's 130 ms)
    target = Target(parse_endpoint(router.url), timeout=0.2)
    payload = encode_request(target.endpoint, "POST", b'{"messages":[{"role":"user",'
                                                      b'"content":"hello"}]}', ())
    assert wait_until_ready(target, payload, None, threading.Event()) is None
    assert router.requests == 2  # /ready, then the preview


def test_a_ready_that_closes_without_a_byte_is_no_answer(scripted):
    router = scripted(lambda prompt, number: None if not prompt else [final_answer()])
    target = Target(parse_endpoint(router.url), timeout=0.5)
    payload = encode_request(target.endpoint, "POST", b'{"messages":[{"role":"user",'
                                                      b'"content":"hello"}]}', ())
    with pytest.raises(RouterLatencyError, match="router not reachable at .*: connection reset"):
        wait_until_ready(target, payload, None, threading.Event())


def test_a_refusal_whose_body_nests_past_the_reader_is_one_line(scripted):
    deep = b'{"error":' * 5000 + b"1" + b"}" * 5000
    router = scripted(lambda prompt, number: [final_answer(b"{}")] if not prompt else
                      [final_answer(deep, b"400 Bad Request")])
    target = Target(parse_endpoint(router.url), timeout=5.0)
    payload = encode_request(target.endpoint, "POST", b'{"messages":[{"role":"user",'
                                                      b'"content":"hello"}]}', ())
    with pytest.raises(RouterLatencyError, match=r"refused the preview \(HTTP 400 Bad Request\)"):
        wait_until_ready(target, payload, None, threading.Event())


class ConfigRouter:
    """A loopback server whose GET /api/v1/config answers a given document."""

    def __init__(self, document, status=200):
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps(document).encode()
                self.send_response(status if self.path == "/api/v1/config" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # shutdown() waits for the loop to look at its flag: every 0.5 s by default
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01},
                         daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("document, said", [
    ({"global": {"model_catalog": {"signal_timeout_ms": 900}}}, "900 ms"),
    ({"global": {"model_catalog": {}}}, "the router's default (the request deadline less a "
                                        "tenth)"),
    ({"global": "x"}, None), (["not", "a", "config"], None),
])
def test_the_signal_deadline_is_what_the_configuration_endpoint_says(document, said, tmp_path):
    from router_latency.readiness import router_told
    router = ConfigRouter(document)
    try:
        told = router_told(Target(parse_endpoint(router.url)), None, str(tmp_path))
    finally:
        router.close()
    assert told["signal deadline"]["value"] == said
    assert told["VLLM_SRUN_CPU_THREADS"] == {"value": None, "source": "not recorded"}


def test_the_runtimes_threads_are_read_from_the_routers_environment(simulator, tmp_path):
    from router_latency.readiness import router_told
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "environ").write_bytes(b"PATH=/bin\0VLLM_SRUN_CPU_THREADS=8\0")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "environ").write_bytes(b"PATH=/bin\0")
    target = Target(parse_endpoint(simulator(delay_ms=0).url))  # no configuration endpoint
    told = router_told(target, 42, str(tmp_path))
    assert told["VLLM_SRUN_CPU_THREADS"] == {"value": "8",
                                             "source": "the environment of process 42"}
    assert told["signal deadline"] == {"value": None, "source": "not recorded"}
    assert router_told(target, 43, str(tmp_path))["VLLM_SRUN_CPU_THREADS"]["value"] == \
        "unset (half the router's CPU budget, 1 to 16)"
    assert router_told(target, 44, str(tmp_path))["VLLM_SRUN_CPU_THREADS"]["value"] is None
