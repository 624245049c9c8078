"""Tests of constants.py: what several modules use: paths, limits, exit codes."""

import json

import pytest

from router_latency.constants import EXPECTED_HASH_HEADER, PREVIEW_PATH
from conftest import ASK, exchange, final_answer, write_corpus


def test_wait_ready_asks_the_routers_ready_first(scripted, tmp_path, cli, quick_ready_poll):
    asked = []

    def answer(prompt, number):
        if not prompt:
            asked.append("ready")
            if len(asked) <= 3:
                return [final_answer(b'{"status":"starting","ready":false}',
                                     b"503 Service Unavailable")]
            return [final_answer(b'{"status":"ready","ready":true}')]
        asked.append("preview")
        return [final_answer()]

    router = scripted(answer)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    args = ["run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "o.json",
            "--label", "x", "-c", "1", "--warmup", "0", "--quiet"]
    result = cli(*args)
    assert result.code == 2 and result.err == (
        f"router-latency: error: router at {router.url}{PREVIEW_PATH} is not ready: it "
        f"answered HTTP 503 Service Unavailable to /ready; --wait-ready SECONDS waits for a "
        f"starting router (--url)\n")
    assert asked == ["ready"]
    assert cli(*args, "--wait-ready", "20").code == 0
    # not one preview before /ready said ready
    assert asked[:5] == ["ready", "ready", "ready", "ready", "preview"]


@pytest.mark.parametrize("method, path, body, status, code", [
    ("GET", PREVIEW_PATH, b"", 405, None),
    ("PUT", PREVIEW_PATH, ASK, 405, None),
    ("POST", "/api/v1/eval", ASK, 404, None),
    ("POST", PREVIEW_PATH, b'{"model": "MoM", "text": "hi", "stream": true}', 400,
     "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'{"messages": [{"role": "user", "content": "hi", "x": 1}]}', 400,
     "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'{"model": "MoM", "text": ""}', 400, "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'{"messages": []}', 400, "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'[1]', 400, "INVALID_INPUT"),
    ("POST", PREVIEW_PATH, b'{"model": "MoM-renamed", "text": "hi"}', 400,
     "INVALID_ROUTING_MODEL"),
])
def test_the_simulator_refuses_as_the_router_does(simulator, double, method, path, body,
                                                  status, code):
    for server in (simulator(delay_ms=0), double()):
        got, headers, answer = exchange(server.url, method, path, body)
        assert got == status, (server, answer)
        assert "x-vsr-config-hash" not in headers  # never on an error envelope
        if code:
            assert json.loads(answer)["error"]["code"] == code


@pytest.mark.parametrize("text", [" ", " \t\n ", "\u3000"])
def test_whitespace_is_routed(simulator, double, text):
    for server in (simulator(delay_ms=0), double()):
        status, _, answer = exchange(server.url, "POST", PREVIEW_PATH, json.dumps(
            {"messages": [{"role": "user", "content": text}]}).encode())
        assert status == 200 and json.loads(answer)["original_text"] == text


def test_a_body_over_10_mib_is_refused_with_413(simulator, double):
    big = json.dumps({"text": "x" * (10 * 1024 * 1024)}).encode()
    for server in (simulator(delay_ms=0), double()):
        status, headers, answer = exchange(server.url, "POST", PREVIEW_PATH, big)
        assert status == 413 and json.loads(answer)["error"]["code"] == "REQUEST_BODY_TOO_LARGE"
        assert "x-vsr-config-hash" not in headers


def test_trace_request_id_and_the_expected_config_hash(simulator):
    router = simulator(delay_ms=0)
    _, headers, body = exchange(router.url, "POST", PREVIEW_PATH + "?trace=true", ASK,
                                {"X-Request-Id": "req-42"})
    assert headers["x-request-id"] == "req-42" and "eval_trace" in json.loads(body)
    _, headers, body = exchange(router.url, "POST", PREVIEW_PATH, ASK)
    assert "eval_trace" not in json.loads(body) and len(headers["x-request-id"]) == 32
    for expected, status in ((router.config_hash, 200), ("a" * 64, 412), ("A" * 64, 400),
                             ("short", 400)):
        got, headers, _ = exchange(router.url, "POST", PREVIEW_PATH, ASK,
                                   {EXPECTED_HASH_HEADER: expected})
        assert got == status and ("x-vsr-config-hash" in headers) == (status == 200)
