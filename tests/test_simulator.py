"""Tests of simulator.py: a routing-preview server answering as the router does."""

import http.client
import json
import socket
import time

import pytest

from router_latency.constants import PREVIEW_PATH
from router_latency.prometheus import parse_prometheus
from router_latency.simulator import CACHE_HIT_MS, SIGNAL_NAMES, SimulatedAnswers
from conftest import ASK, exchange, PROMPTS, write_corpus


def raw_answer(url, body):
    """Return the raw bytes of a preview's answer (the head and the framing as sent)."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                     % (PREVIEW_PATH.encode(), len(body), body))
        data = b""
        while not data.endswith(b"\r\n0\r\n\r\n") and (chunk := sock.recv(65536)):
            data += chunk  # a chunked answer ends so (a test of one that is not would hang)
    return data


def test_the_simulators_answer_has_the_routers_shape_and_framing(simulator, double):
    router, reference = simulator(delay_ms=0), double()
    status, headers, body = exchange(router.url, "POST", PREVIEW_PATH, ASK)
    _, reference_headers, reference_body = exchange(reference.url, "POST", PREVIEW_PATH,
                                                    ASK)
    answer, expected = json.loads(body), json.loads(reference_body)
    assert status == 200 and body.endswith(b"\n") and len(body) > 2048
    # the same fields as the router's EvalResponse, in its order
    assert list(answer) == list(expected)
    assert set(answer["metrics"]) == set(expected["metrics"]) == set(SIGNAL_NAMES)
    assert all(set(m) == {"execution_time_ms", "confidence"} for m in answer["metrics"].values())
    assert set(answer["decision_result"]) == set(expected["decision_result"])
    assert answer["config_hash"] == headers["x-vsr-config-hash"] == router.config_hash
    assert {"x-request-id", "x-vsr-config-hash"} <= set(reference_headers) & set(headers)
    raw = raw_answer(router.url, ASK)
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and b"Content-Length" not in head
    assert rest.endswith(b"\r\n0\r\n\r\n")


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 1.0])
def test_a_share_of_prompts_matches_no_decision(simulator, share):
    router = simulator(delay_ms=0, answers=SimulatedAnswers(no_decision_share=share))
    names = []
    for i in range(200):
        _, _, body = exchange(router.url, "POST", PREVIEW_PATH,
                              json.dumps({"text": f"prompt {i}"}).encode())
        answer = json.loads(body)
        names.append(answer["decision_result"]["decision_name"])
        if not names[-1]:
            assert "routing_decision" not in answer and "selected_model" not in answer
    assert abs(names.count("") / 200 - share) <= 0.08


def test_the_simulator_starts_up_and_keeps_its_metrics_on_their_own_port(simulator):
    router = simulator(delay_ms=0, answers=SimulatedAnswers(startup_s=0.5, cache_entries=8))
    assert exchange(router.url, "GET", "/ready")[0] == 503
    _, _, body = exchange(router.url, "POST", PREVIEW_PATH, ASK)
    assert "decision_result" not in json.loads(body)  # classifiers not loaded
    deadline = time.monotonic() + 10
    while exchange(router.url, "GET", "/ready")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exchange(router.url, "GET", "/ready")[0] == 200
    assert exchange(router.url, "GET", "/metrics")[0] == 404  # not on the API's port
    for _ in range(3):
        exchange(router.url, "POST", PREVIEW_PATH, ASK)
    metrics = urlopen_text(router.metrics_url)
    samples = parse_prometheus(metrics)
    assert samples['vsr_model_runtime_result_cache_total{deployment="simulated",result="hit"}'] \
        == 3.0  # the loading answer was counted as a miss
    assert "vsr_model_runtime_restarts_total" in metrics
    assert "llm_signal_extraction_latency_seconds_count" in metrics


def urlopen_text(url):
    host_port, _, path = url.split("//", 1)[1].partition("/")
    status, _, body = exchange("http://" + host_port, "GET", "/" + path)
    assert status == 200
    return body.decode()


def test_a_cache_answers_a_repeated_prompt_without_its_delay(simulator):
    plain = simulator(delay_ms=5, answers=SimulatedAnswers(per_kb_ms=4))
    cached = simulator(delay_ms=5, answers=SimulatedAnswers(cache_entries=2, per_kb_ms=4))
    with plain.lock, cached.lock:
        # the time each would take, without sleeping it: longer prompts take longer
        assert [round(plain._pause("x" * n), 4) for n in (0, 1024, 4096)] == [0.005, 0.009,
                                                                             0.021]
        assert round(cached._pause("a"), 4) == 0.005  # a miss
        assert cached._pause("a") == CACHE_HIT_MS / 1000  # a hit
        cached._pause("b"), cached._pause("c")  # "a" leaves the two-entry cache
        assert round(cached._pause("a"), 4) == 0.005


def ask(router, body):
    host, port = router.url.split("//")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("POST", "/api/v1/routing/preview", json.dumps(body),
                       {"Content-Type": "application/json"})
    answer = connection.getresponse()
    return answer.status, json.loads(answer.read())


@pytest.mark.parametrize("start", ["double", "simulator"])
def test_the_clients_fields_are_accepted_and_the_model_echoed_trimmed(double, simulator,
                                                                      start):
    router = double() if start == "double" else simulator(delay_ms=0)
    envelope = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16,
                "tool_choice": "auto", "functions": [{"name": "f"}],
                "response_format": {"type": "json_object"}}
    status, answer = ask(router, envelope)
    assert status == 200 and answer["requested_model"] == ""
    for model in (" MoM ", "auto", "vllm-sr/auto"):
        status, answer = ask(router, dict(envelope, model=model))
        assert status == 200 and answer["requested_model"] == model.strip()
    status, answer = ask(router, dict(envelope, model="gpt-4o"))
    assert status == 400 and answer["error"]["code"] == "INVALID_ROUTING_MODEL"


def test_no_model_is_sent_by_default_so_any_auto_name_configuration_routes(simulator,
                                                                           tmp_path, cli):
    router = simulator(delay_ms=0, answers=SimulatedAnswers(routing_models=("my/auto",)))
    corpus = write_corpus(tmp_path / "corpus.json", PROMPTS[:2])
    args = ["run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "o.json",
            "--label", "x", "-c", "1", "--warmup", "0", "--quiet"]
    assert cli(*args).code == 0
    result = cli(*args, "--force", "--model", "MoM")
    assert result.code == 2 and "does not route model 'MoM'" in result.err
