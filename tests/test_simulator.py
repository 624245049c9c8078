"""Tests of simulator.py: a routing-preview server answering as the router does."""

import http.client
import json
import socket

import pytest

from router_latency.constants import PREVIEW_PATH
from router_latency.prometheus import parse_prometheus
from router_latency.simulator import (CACHE_HIT_MS, SIGNAL_NAMES, SimulatedAnswers,
                                    SkippedSignals)
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
    # a start-up of 600 s: the first answers come while it starts however loaded the machine;
    # then its clock is moved past the start-up, which ends it by construction (a start-up of
    # 0.5 s was waited out)
    router = simulator(delay_ms=0, answers=SimulatedAnswers(startup_s=600, cache_entries=8))
    assert exchange(router.url, "GET", "/ready")[0] == 503
    _, _, body = exchange(router.url, "POST", PREVIEW_PATH, ASK)
    assert "decision_result" not in json.loads(body)  # classifiers not loaded
    router.started -= 600
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


# ---- the points where the simulator answered unlike the router (issue 42) ----

def test_a_sampled_selection_is_a_read_only_snapshot_echoing_the_requests_seed(simulator):
    # mode was "sampled" (the vllm-sr client reads read_only_snapshot) and the request's
    # seed was ignored: seed 7 sent, other seeds answered
    router = simulator(delay_ms=0, answers=SimulatedAnswers(sampled_share=1.0))
    chosen = {}
    for seed in (7, 8, 9, 7, -5, 2 ** 63 - 1):
        ask = json.dumps({"text": "a prompt", "preview_context": {"sampling_seed": seed}})
        status, _, body = exchange(router.url, "POST", PREVIEW_PATH, ask.encode())
        answer = json.loads(body)
        provenance = answer["selection_provenance"]
        assert status == 200 and provenance["mode"] == "read_only_snapshot"
        assert provenance["sampled"] is True and provenance["sampling_seed"] == seed
        assert chosen.setdefault(seed, answer["selected_model"]) == answer["selected_model"]
    assert len(set(chosen.values())) > 1  # the choice is the seed's, not one for all
    _, _, body = exchange(router.url, "POST", PREVIEW_PATH, ASK)  # no seed: one is drawn
    assert type(json.loads(body)["selection_provenance"]["sampling_seed"]) is int


@pytest.mark.parametrize("field, value", [
    ("options", {"bogus": 1}), ("preview_context", {"bogus": 1}),
    ("options", ["trace"]), ("preview_context", {"sampling_seed": "7"}),
    ("preview_context", {"sampling_seed": 2 ** 63}), ("preview_context", {"sampling_seed": 1.5}),
])
def test_unknown_or_mistyped_nested_fields_are_refused_as_the_strict_decoder_does(
        simulator, field, value):
    router = simulator(delay_ms=0)
    ask = json.dumps({"text": "a prompt", field: value}).encode()
    status, _, body = exchange(router.url, "POST", PREVIEW_PATH, ask)
    assert status == 400 and json.loads(body)["error"]["code"] == "INVALID_INPUT"
    known = json.dumps({"text": "a prompt", "options": {"trace": True},
                        "preview_context": {"session_id": "s", "conversation_id": "c",
                                            "sampling_seed": 7}}).encode()
    assert exchange(router.url, "POST", PREVIEW_PATH, known)[0] == 200


def test_ready_says_the_routers_phases_and_its_service(simulator):
    starting = simulator(delay_ms=0, answers=SimulatedAnswers(startup_s=600,
                                                              phased_startup=True))
    status, _, body = exchange(starting.url, "GET", "/ready", b"")
    document = json.loads(body)
    assert status == 503 and document["phase"] == "downloading_models"  # not loading_models
    assert document["service"] == "classification-api" and document["downloading_model"]
    older = simulator(delay_ms=0, answers=SimulatedAnswers(startup_s=600))
    assert json.loads(exchange(older.url, "GET", "/ready", b"")[2]) == {
        "status": "starting", "service": "classification-api", "ready": False}
    status, _, body = exchange(simulator(delay_ms=0).url, "GET", "/ready", b"")
    document = json.loads(body)
    assert status == 200 and document["status"] == "ready" and document["ready"] is True
    assert document["service"] == "classification-api" and document["phase"] == "ready"


def test_signals_are_under_the_routers_matched_signals_keys(simulator):
    from router_latency.simulator import SignalModel, SignalTime
    router = simulator(delay_ms=0, signals=SignalModel((SignalTime("domain", 1.0),
                                                        SignalTime("pii", 1.0))))
    _, _, body = exchange(router.url, "POST", PREVIEW_PATH, ASK)
    result = json.loads(body)["decision_result"]
    assert result["used_signals"]["domains"] and "domain" not in result["used_signals"]
    assert result["matched_signals"]["pii"] == ["pii"]


def test_the_runtimes_timing_and_load_series_with_split_stages(simulator):
    router = simulator(delay_ms=0, workers=2, answers=SimulatedAnswers(
        runtime="vllm-srun", split_share=1.0, signal_errors=SkippedSignals(1.0)))
    for i in range(6):
        exchange(router.url, "POST", PREVIEW_PATH, json.dumps({"text": f"p{i}"}).encode())
    status, _, body = exchange(router.metrics_url.rsplit("/", 1)[0], "GET", "/metrics", b"")
    samples = parse_prometheus(body.decode())
    calls = 'vsr_model_runtime_stage_decision_calls_total{deployment="simulated",round="%s"}'
    assert samples[calls % "first"] == 6 and samples[calls % "later"] == 6
    transport = ('vsr_model_runtime_transport_seconds_count{deployment="simulated",'
                 'surface="decisions"}')
    assert samples[transport] == 12 and samples["vsr_model_runtime_bundle_wait_seconds_count"]
    assert sum(v for k, v in samples.items()
               if k.startswith("vsr_model_runtime_replica_ready{")) == 2
    assert samples["vllm_srun_queue_depth"] == 0
    assert samples["vllm_srun_deadline_dropped_questions_total"] == 6
