"""A real router's answers: the default route, not-ready answers, /ready, the config hash
in the body, as the router's source (vLLM Semantic Router, pkg/apiserver and pkg/services)
writes them."""

import json
import re
from pathlib import Path

import pytest

from router_latency.constants import DEFAULT_DECISION_PATHS, EXPECTED_HASH_HEADER, PREVIEW_PATH
from router_latency.corpus import load_corpus
from router_latency.files import write_atomic
from router_latency.cache import result_cache_finding, timing_cache_test
from router_latency.runfile import Attempt, dump_run, Floor, load_run, PassRecord
from router_latency.phases import (content_slow_windows, phase_windows, slow_phase, slow_windows,
                                   Thresholds)
from router_latency.requests import pass_name, pass_summary, pass_title, Request
from router_latency.meaning import classify
from router_latency.prometheus import parse_prometheus
from router_latency.measuring import slow_phase_warnings
from router_latency.rounds import judge_rounds
from router_latency.gate import GateSettings
from router_latency.simulator import CACHE_HIT_MS, SIGNAL_NAMES, SimulatedAnswers, SkippedSignals
from conftest import final_answer, write_corpus

PATHS = DEFAULT_DECISION_PATHS
HASH = "c" * 64


@pytest.mark.parametrize("body, decision", [
    # no decision matched: decision_name "" and no routing_decision (the default route)
    (b'{"original_text":"hi","decision_result":{"decision_name":"","algorithm":"",'
     b'"used_signals":{},"matched_signals":{},"unmatched_signals":{}},"metrics":{}}\n',
     "(none)"),
    (b'{"decision_result":{"decision_name":""},"selected_model":"qwen3"}', "(none)|qwen3"),
    (b'{"decision_result":{"decision_name":"","used_signals":null},"routing_decision":""}',
     "(none)"),
    (b'{"decision_result":{"decision_name":"math"},"routing_decision":"math"}', "math"),
])
def test_an_answer_with_no_decision_matched_is_routed(body, decision):
    assert classify(200, body, PATHS) == (decision, None, None)


@pytest.mark.parametrize("body", [
    b"", b"\n", b"   \r\n",  # an empty body
    # the classifier not loaded: the router's answer has no decision_result at all
    b'{"original_text":"hi","requested_model":"MoM","metrics":{"keyword":{"execution_time_ms"'
    b':0,"confidence":0}}}\n',
    b'{"decision_result":{}}',  # no decision_name at all
])
def test_an_answer_without_a_decision_result_is_no_decision(body):
    assert classify(200, body, PATHS)[:2] == (None, "no_decision")


def default_route_server(scripted, unmatched):
    """A router that matches no decision for the prompts in `unmatched`."""
    def answer(prompt, number):
        name = "" if prompt in unmatched else "math"
        body = json.dumps({"original_text": prompt, "decision_result": {
            "decision_name": name, "used_signals": {}, "matched_signals": {}},
            "config_hash": HASH}).encode()
        return [final_answer(body)]
    return scripted(answer)


def test_a_run_with_a_default_route_is_clean(scripted, tmp_path, cli):
    router = default_route_server(scripted, {"b", "d"})
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b", "c", "d"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "-c", "1", "--warmup", "0", "--quiet")
    assert result.code == 0 and result.err == ""
    item = json.loads(out.read_text())["passes"][0]
    assert [r["decision"] for r in item["requests"]] == ["math", "(none)", "math", "(none)"]
    assert item["summary"]["ok"] == 4 and item["summary"]["errors"] == {}
    # the body's config_hash is read when no header carries it
    assert item["config_hashes"] == [HASH]


def test_a_decision_matched_on_one_side_and_none_on_the_other_is_a_change(scripted, tmp_path,
                                                                           cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b", "c"])
    for label, unmatched in (("cpu", set()), ("rocm", {"b"})):
        router = default_route_server(scripted, unmatched)
        assert cli("run", "--url", router.url, "--corpus", corpus, "--out",
                   tmp_path / f"{label}.json", "--label", label, "-c", "1", "--warmup", "0",
                   "--quiet").code == 0
    result = cli("compare", tmp_path / "cpu.json", tmp_path / "rocm.json",
                 "--fail-on-decision-change")
    assert result.code == 1
    assert "decisions: 2/3 inputs agree (sequential pass)\n  #1: math -> (none)\n" in result.out


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
def test_a_preview_without_a_decision_result_is_not_ready(scripted, tmp_path, cli, loading):
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


def test_wait_ready_asks_the_routers_ready_first(scripted, tmp_path, cli):
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



# --- the published records' command forms ---

from conftest import make_run, assert_one_line_error  # noqa: E402


def rounds_folder(folder, labels):
    """Three rounds of cpu and rocm; labels(number, side) names each run."""
    folder.mkdir(exist_ok=True)
    for number in (1, 2, 3):
        for side, p50 in (("cpu", 10.0), ("rocm", 5.0 + number)):
            make_run(folder / f"r{number}-{side}.json", label=labels(number, side),
                     passes={1: (p50, p50 * 2, p50 * 3, 1000 / p50)},
                     started_unix=1000.0 * number + 500 * (side == "rocm"))
    return folder


@pytest.mark.parametrize("form", ["{side}-r{n}", "{side}_r{n}", "{side} r{n}", "{side}",
                                  "{side}-{n}", "{side}-R{n}"])
def test_a_label_with_its_round_suffix_names_its_side(tmp_path, cli, form):
    folder = rounds_folder(tmp_path / "rounds", lambda n, side: form.format(side=side, n=n))
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert result.code in (0, 1, 3) and result.err == "", result.err


@pytest.mark.parametrize("wrong, says", [
    (lambda n, side: f"{side}-r{n + 1}" if side == "rocm" and n == 2 else f"{side}-r{n}",
     "the run's label is 'rocm-r3', but the file name says side 'rocm' of round 2"),
    (lambda n, side: "cpu-r1" if (n, side) == (1, "rocm") else f"{side}-r{n}",
     "the run's label is 'cpu-r1', but the file name says side 'rocm' of round 1"),
    (lambda n, side: "rocmx-r1" if (n, side) == (1, "rocm") else side,
     "the run's label is 'rocmx-r1'"),
])
def test_a_label_of_another_side_or_round_is_refused(tmp_path, cli, wrong, says):
    folder = rounds_folder(tmp_path / "rounds", wrong)
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert_one_line_error(result, says, "a copied or renamed file?")


def test_the_records_run_and_compare_forms_work_as_written(scripted, tmp_path, cli):
    router = default_route_server(scripted, set())
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    for label in ("legacy-r1", "runtime-r1"):
        out = tmp_path / f"{label.split('-')[0]}.json"
        result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out,
                     "--label", label, "--warmup", "20", "--concurrency", "1", "4", "16",
                     "--quiet")
        assert result.code == 0, result.err
        assert [p["name"] for p in json.loads(out.read_text())["passes"]] == [
            "sequential", "c4", "c16"]
    named = cli("compare", "--base", tmp_path / "legacy.json", "--new",
                tmp_path / "runtime.json", "--corpus", corpus)
    plain = cli("compare", tmp_path / "legacy.json", tmp_path / "runtime.json",
                "--corpus", corpus)
    assert named.code == plain.code == 0 and named.err == ""
    assert named.out.splitlines()[:3] == plain.out.splitlines()[:3]


@pytest.mark.parametrize("argv, says", [
    (["--concurrency", "1", "4", "1"], "concurrency 1 given twice"),
    (["--concurrency", "1,4", "4"], "concurrency 4 given twice"),
    (["--concurrency", "1", "x"], "expected whole numbers from 1 to 1024"),
])
def test_concurrency_levels_are_checked_in_either_form(tmp_path, cli, argv, says):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "o.json", "--label", "x", *argv)
    assert result.code == 2 and says in result.err


@pytest.mark.parametrize("argv", [["a.json"], ["--base", "a.json"], ["a.json", "--new", "b.json"],
                                  ["a.json", "b.json", "--base", "c.json"], []])
def test_compare_needs_two_runs_in_one_form(tmp_path, cli, argv):
    result = cli("compare", *argv)
    assert_one_line_error(result, "give two run files: A B, or --base A --new B")


# --- against a server that answers as the router's source says ---

from router_double import RouterDouble  # noqa: E402


@pytest.fixture
def double():
    servers = []

    def start(**options):
        servers.append(RouterDouble(**options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


SMALL = ["What is the derivative of x squared?", "Write a haiku about routers.", "   ",
         "My SSN is 123-45-6789", "x" * 5000, "Bonjour, comment ça va?"]


def test_a_real_shaped_router_gives_a_clean_first_run(double, tmp_path, cli):
    router = double(startup_s=0.4, loaded_after=3, unmatched={SMALL[1], SMALL[5]})
    corpus = write_corpus(tmp_path / "corpus.json", SMALL)
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label",
                 "cpu-r1", "--warmup", "2", "-c", "1", "4", "--wait-ready", "20")
    assert result.code == 0 and result.err == "", result.err
    document = json.loads(out.read_text())
    for item in document["passes"]:
        assert item["summary"]["errors"] == {} and item["summary"]["ok"] == len(SMALL)
        assert [r["decision"] for r in item["requests"]] == [
            "general|qwen3-8b", "(none)", "general|qwen3-8b", "general|qwen3-8b",
            "general|qwen3-8b", "(none)"]
        assert item["config_hashes"] == [router.config_hash]
    assert document["settings"]["sampling_seed"] == 0
    previews = [json.loads(body) for method, path, _, body in router.seen if method == "POST"]
    assert {json.dumps(p["preview_context"]) for p in previews} == {'{"sampling_seed": 0}'}
    assert not any("model" in p for p in previews)  # none: the router uses its default


def test_an_expected_config_hash_that_differs_stops_the_run_before_any_pass(double, tmp_path,
                                                                            cli):
    router = double()
    corpus = write_corpus(tmp_path / "corpus.json", SMALL[:2])
    out = tmp_path / "run.json"
    args = ["run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
            "-c", "1", "--warmup", "0", "--quiet"]
    result = cli(*args, "--expect-config-hash", "b" * 64, "--wait-ready", "30")
    assert_one_line_error(result, "serves another configuration than --expect-config-hash "
                          "bbbbbbbbbbbb... (HTTP 412 Precondition Failed",
                          "nothing was measured")
    assert not out.exists()
    assert sum(method == "POST" for method, *_ in router.seen) == 1  # no wait, no pass
    router.seen.clear()
    assert cli(*args, "--expect-config-hash", router.config_hash).code == 0
    document = json.loads(out.read_text())
    assert document["settings"]["expected_config_hash"] == router.config_hash
    sent = {headers.get("x-sr-bench-expected-config-hash")
            for method, _, headers, _ in router.seen if method == "POST"}
    assert sent == {router.config_hash}


@pytest.mark.parametrize("value", ["B" * 64, "b" * 63, "xyz", ""])
def test_a_malformed_expected_config_hash_is_refused_before_sending(tmp_path, cli, value):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "o.json", "--label", "x", "--expect-config-hash", value)
    assert result.code == 2 and "64 lowercase hex digits" in result.err


@pytest.mark.parametrize("model", ["MoM-renamed", "gpt-4o"])
def test_a_model_the_router_does_not_route_is_explained(double, tmp_path, cli, model):
    router = double()
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "o.json",
                 "--label", "x", "--model", model, "--wait-ready", "30")
    assert_one_line_error(result, f"does not route model {model!r} (HTTP 400 Bad Request "
                          "INVALID_ROUTING_MODEL", "without --model the tool sends none",
                          "--model NAME")


@pytest.mark.parametrize("seed, sent", [("7", {"sampling_seed": 7}), ("-3", {"sampling_seed": -3}),
                                        ("off", None)])
def test_the_sampling_seed_is_sent_and_recorded(double, tmp_path, cli, seed, sent):
    router = double()
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "o.json"
    assert cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
               "-c", "1", "--warmup", "0", "--sampling-seed", seed, "--quiet").code == 0
    previews = [json.loads(body) for method, _, _, body in router.seen if method == "POST"]
    assert {json.dumps(p.get("preview_context")) for p in previews} == {json.dumps(sent)}
    assert json.loads(out.read_text())["settings"]["sampling_seed"] == (sent or {}).get(
        "sampling_seed")


# --- the simulator answers as the router does ---

import http.client  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402


def exchange(url, method, path, body=b"", headers=None):
    """Return (status, headers with lower-case names, body) of one request."""
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body, headers or {})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


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


ASK = json.dumps({"model": "MoM", "messages": [{"role": "user", "content": "hello"}],
                  "preview_context": {"sampling_seed": 0}}).encode()


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


def vllm_sr():
    """The vllm-sr 0.4.0 CLI, where it is installed (VLLM_SR names it, or it is on PATH)."""
    return os.environ.get("VLLM_SR") or shutil.which("vllm-sr")


@pytest.mark.skipif(vllm_sr() is None, reason="the vllm-sr package is not installed")
@pytest.mark.parametrize("extra", [[], ["--json"], ["--trace", "--json"],
                                   ["--sampling-seed", "7"]])
@pytest.mark.parametrize("answers", [
    SimulatedAnswers(no_decision_share=0.5),
    SimulatedAnswers(no_decision_share=0.3, sampled_share=0.5, runtime="vllm-sr-runtime"),
    SimulatedAnswers(no_decision_share=0.5, signal_errors=SkippedSignals(1.0, 0.3))],
    ids=["plain", "sampled-renamed-runtime", "signal-errors"])
def test_the_routers_own_client_accepts_the_simulators_answers(simulator, extra, answers):
    router = simulator(delay_ms=0, answers=answers)
    for ask in (["--prompt", "What is 2+2?"], ["--prompt", "hello there"],
                ["--messages", '[{"role": "user", "content": " "}]']):
        done = subprocess.run([vllm_sr(), "route", "preview", "--endpoint", router.url, *ask,
                               *extra], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        if "--json" in extra:
            answer = json.loads(done.stdout)
            assert answer["config_hash"] == router.config_hash
            assert ("signal_errors" in answer) == bool(answers.signal_errors.share)


# --- result caches: measured, never assumed ---

def passes_of(*latencies_per_pass, errors=()):
    """PassRecords whose request i has latencies_per_pass[k][i] in pass k."""
    records = []
    for k, latencies in enumerate(latencies_per_pass):
        requests = tuple(Request(i, float(i), value, 200, "d", "timeout" if i in errors
                                    else None) for i, value in enumerate(latencies))
        attempt = Attempt(None, None, "", None, {}, None, {}, pass_summary(requests, 1.0),
                             requests)
        records.append(PassRecord(pass_name(4 ** k), 4 ** k, False, False, attempt))
    return records


@pytest.mark.parametrize("first, later, detected", [
    ([20.0] * 30, [1.0] * 30, True),  # every prompt a hit
    ([20.0] * 30, [1.0] * 16 + [25.0] * 14, True),  # 16 of 30: more than half
    ([20.0] * 30, [1.0] * 15 + [25.0] * 15, False),  # exactly half: not most
    ([20.0] * 30, [30.0] * 30, False),  # later passes slower: more callers at once
    ([20.0] * 30, [11.0] * 30, False),  # faster, but not under half
    ([float(5 + i) for i in range(30)], [float(5 + i) for i in range(30)], False),
])
def test_the_timing_test_calls_a_cache_when_most_prompts_answer_in_under_half(first, later,
                                                                              detected):
    found = timing_cache_test(passes_of(first, later))
    assert found["detected"] is detected and found["compared"] == 30


def test_the_timing_test_needs_prompts_sent_twice():
    assert timing_cache_test(passes_of([20.0] * 30)) is None  # one pass, no repeat
    assert timing_cache_test(passes_of([20.0] * 9, [1.0] * 9)) is None  # too few
    # failed answers are not compared
    assert timing_cache_test(passes_of([20.0] * 12, [1.0] * 12, errors=(0, 1, 2))) is None


@pytest.mark.parametrize("deltas, hits", [
    ({'vsr_model_runtime_result_cache_total{deployment="domain",result="hit"}': 40.0,
      'vsr_model_runtime_result_cache_total{deployment="domain",result="miss"}': 10.0}, 40.0),
    ({'vllm_srun_result_cache_total{model="pii",outcome="hit"}': 3.0}, 3.0),
    ({'vsr_model_runtime_result_cache_total{deployment="domain",result="miss"}': 50.0}, 0.0),
])
def test_the_routers_cache_counters_are_read(deltas, hits):
    records = passes_of([20.0] * 3)
    records = [r._replace(attempt=r.attempt._replace(environment={"metrics": {"deltas": deltas}}))
               for r in records]
    found = result_cache_finding(records)
    assert found["metrics"]["hits"] == hits and found["detected"] is (hits > 0)


def test_a_run_answered_by_a_cache_says_so_and_records_it(simulator, tmp_path, cli):
    router = simulator(delay_ms=0, answers=SimulatedAnswers(cache_entries=100))
    corpus = write_corpus(tmp_path / "corpus.json", [f"prompt {i}" for i in range(12)])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "-c", "1", "4", "--warmup", "0", "--metrics-url", router.metrics_url,
                 "--metric", "^nothing$")
    assert result.code == 0
    assert "result cache: a result cache answered: seen by the router's metrics (12 hits of " \
           "24 lookups during the passes)" in result.out
    assert "warning: a result cache answered" in result.err and "VLLM_SRUN_RESULT_CACHE=0" \
        in result.err and "VLLM_SR_RUNTIME_RESULT_CACHE=0" in result.err
    recorded = json.loads(out.read_text())["result_cache"]
    assert recorded["detected"] is True and recorded["metrics"] == {"hits": 12.0,
                                                                    "lookups": 24.0}
    plain = simulator(delay_ms=0)
    result = cli("run", "--url", plain.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "-c", "1", "--warmup", "0", "--force")
    assert "result cache: no result cache detected (metrics not scraped; timing: too few " \
           "prompts sent twice to judge)" in result.out and "cache" not in result.err


def mark_cached(path):
    document = json.loads(Path(path).read_text())
    document["result_cache"] = {"detected": True, "metrics": {"hits": 50.0, "lookups": 60.0},
                                "timing": None}
    Path(path).write_text(json.dumps(document))


def test_rounds_refuses_sides_whose_cache_status_differs_unless_told(tmp_path, cli):
    folder = rounds_folder(tmp_path / "rounds", lambda n, side: side)
    for n in (1, 2, 3):
        mark_cached(folder / f"r{n}-rocm.json")
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert_one_line_error(result, "the runs were not measured alike: cache: r1-rocm.json "
                          "'detected'", "(r1-cpu.json 'not detected')", "--allow-mismatch")
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                 "--allow-mismatch", "cache")
    assert result.code != 2
    assert "warning: rocm r1, rocm r2, rocm r3: a result cache answered: seen by the router's " \
           "metrics (50 hits of 60 lookups during the passes)" in result.out
    assert "warning: a result cache answered rocm but not cpu: the comparison measures the " \
           "cache, not the change" in result.out
    assert "router-latency: warning: a result cache answered rocm but not cpu" in result.err
    assert "a result cache answered rocm but not cpu" in cli(
        "rounds", "--dir", folder, "--base", "cpu", "--new", "rocm", "--allow-mismatch",
        "cache", "--format", "json").err
    page = tmp_path / "page.html"
    cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm", "--allow-mismatch",
        "cache", "--html", page)
    banner = page.read_text().split("</header>")[0]
    assert "a result cache answered rocm but not cpu" in banner
    for n in (1, 2, 3):  # a record judges sides measured alike: both cached
        mark_cached(folder / f"r{n}-cpu.json")
    markdown = tmp_path / "record.md"
    record = cli("record", "--section", f"gpu={folder}:cpu:rocm", "--json", tmp_path / "r.json",
                 "--markdown", markdown)
    assert record.code != 2, record.err
    assert "**a result cache answered cpu r1, rocm r1, cpu r2, rocm r2, cpu r3, rocm r3**" \
        in markdown.read_text()


def test_rounds_says_loudly_the_warnings_of_the_result_cache_kind_and_no_other(tmp_path, cli):
    folder = rounds_folder(tmp_path / "rounds", lambda n, side: side)
    for n in (1, 2, 3):
        mark_cached(folder / f"r{n}-rocm.json")
        for side in ("cpu", "rocm"):  # the driver's spread above the change: a floor warning
            run = load_run(str(folder / f"r{n}-{side}.json"))
            write_atomic(run.path, dump_run(run._replace(floor=Floor(spread_ms=50.0))))
    runs = {n: {s: load_run(str(folder / f"r{n}-{s}.json")) for s in ("cpu", "rocm")}
            for n in (1, 2, 3)}
    report = judge_rounds(runs, "cpu", "rocm", GateSettings(allow_mismatch=("cache",)))
    cached = [w.text for w in report.warnings if w.kind == "result_cache"]
    assert len(cached) == 2 and all("a result cache answered" in text for text in cached)
    assert [w.kind for w in report.warnings].count("floor") == 1
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                 "--allow-mismatch", "cache", "--format", "json")
    # the command line chooses by kind: every result_cache warning, nothing else
    assert result.err == "".join(f"router-latency: {text}\n" for text in cached)
    assert json.loads(result.out)["warnings"] == [w.text for w in report.warnings]


def test_compare_says_which_side_a_cache_answered(tmp_path, cli):
    a = make_run(tmp_path / "a.json", label="cpu")
    b = make_run(tmp_path / "b.json", label="rocm")
    mark_cached(b)
    result = cli("compare", a, b)
    assert "warning: B: a result cache answered" in result.out
    assert "warning: a result cache answered B but not A" in result.out


# --- a slow phase is the router's state, not the corpus's order ---

def length_passes(lengths, slow=None, size=10):
    """Three passes (1, 4, 16 callers) of prompts whose latency is 2 ms + 1 ms per 100
    characters, sent in corpus order; slow = (pass index, window index, factor) multiplies
    one window's latencies, as a node that slowed down for a while."""
    passes = []
    for k in range(3):
        start, requests = 0.0, []
        for i, length in enumerate(lengths):
            latency = (2.0 + length / 100) * (1 + 0.3 * k)
            if slow and slow[0] == k and i // size == slow[1]:
                latency *= slow[2]
            requests.append(Request(i, round(start, 4), latency, 200, "d", None))
            start += latency
        requests = tuple(requests)
        attempt = Attempt(None, None, "", None, {}, None, {},
                             pass_summary(requests, start / 1000), requests,
                             windows=phase_windows(requests, size))
        passes.append(PassRecord(pass_name(4 ** k), 4 ** k, False, False, attempt))
    return passes


# the corpus's order: short prompts, then the boundary cases, long ones last
LENGTHS = [40 + (i * 37) % 200 for i in range(110)] + [2500, 54612, 9000, 3000, 5000, 2600,
                                                       8000, 4000, 2500, 7000]
THRESHOLDS = Thresholds(10, 2.0, 0.5, 1.0)


def test_long_prompts_at_the_end_are_no_slow_phase():
    passes = length_passes(LENGTHS)
    for item in passes:
        last = len(item.attempt.windows) - 1
        assert last in slow_windows(item.attempt.windows, THRESHOLDS)  # the pass alone
        assert content_slow_windows(item, passes, THRESHOLDS) == ()
    assert slow_phase_warnings(passes, THRESHOLDS) == []


@pytest.mark.parametrize("slow", [(0, 3, 4.0), (1, 0, 3.0), (2, 6, 5.0), (1, 11, 4.0)])
def test_a_window_that_slowed_down_is_a_slow_phase(slow):
    passes = length_passes(LENGTHS, slow)
    pass_index, window, _ = slow
    found = content_slow_windows(passes[pass_index], passes, THRESHOLDS)
    assert window in found
    others = [content_slow_windows(p, passes, THRESHOLDS) for i, p in enumerate(passes)
              if i != pass_index]
    assert others == [(), ()]


def stalled_passes(jitter=0.0):
    """Three passes (1, 4, 16 callers) of 162 short prompts against a router without
    TCP_NODELAY: every request pays a 40 ms delayed-ACK stall but the first on each
    connection, which the first 1, 4 or 16 prompts of each pass are."""
    passes = []
    for k, callers in enumerate((1, 4, 16)):
        requests = tuple(Request(i, i * 44.0 / callers,
                                 1.2 if i < callers else 44.0 + jitter * ((i * 7) % 5), 200,
                                 "d", None) for i in range(162))
        attempt = Attempt(None, None, "", None, {}, None, {},
                          pass_summary(requests, 162 * 44.0 / callers / 1000), requests,
                          windows=phase_windows(requests, 50))
        passes.append(PassRecord(pass_name(callers), callers, False, False, attempt))
    return passes


@pytest.mark.parametrize("jitter", [0.0, 1.0, 3.0])
def test_a_window_as_fast_as_the_median_window_is_no_slow_phase(jitter):
    # the issue's call: "window 1 of 3 (from 0.0 s): p95 up to 44.0 ms, rate down to 23.2
    # req/s; median window: p95 44.0 ms, 23.1 req/s": window 1's prompts took 1.2 ms in the
    # other passes by where they stood there (first on a connection), so each request over
    # its own reference made a p95 of 37 times the median window's
    passes = stalled_passes(jitter)
    for item in passes:
        assert slow_phase(item, passes, THRESHOLDS).windows == ()
    assert slow_phase_warnings(passes, THRESHOLDS) == []


def test_the_delayed_ack_run_of_the_issue_flags_no_slow_phase(cli):
    # the issue's reproduction, measured here: Python's http.server without TCP_NODELAY,
    # 162 short prompts, passes 1, 4, 16
    path = Path(__file__).parent / "data" / "delayed_ack_run.json"
    run = load_run(str(path))
    assert [p.name for p in run.passes] == ["sequential", "c4", "c16"]
    assert all(run.slow_windows(item) == () for item in run.passes)
    result = cli("compare", path, path)
    assert result.code == 0 and "slow phase" not in result.out


@pytest.mark.parametrize("slow", [(0, 3, 4.0), (1, 0, 3.0), (2, 6, 5.0)])
def test_a_slow_phase_names_the_evidence_that_made_it(slow):
    passes = length_passes(LENGTHS, slow)
    item = passes[slow[0]]
    phase = slow_phase(item, passes, THRESHOLDS)
    assert phase.relative and phase.by_p95 and slow[1] in phase.windows
    evidence = phase.evidence(item.attempt.windows)
    found = re.fullmatch(r"p95 ([\d.]+)x what its prompts take elsewhere in the run, median "
                         r"window ([\d.]+)x \(p95 ([\d.]+) ms, median window ([\d.]+) ms\)"
                         r"(; pace \d+% of the median window's, by what its prompts take "
                         r"elsewhere \([\d.]+ req/s, median window [\d.]+ req/s\))?", evidence)
    assert found, evidence
    ratio, median_ratio, p95, median_p95 = map(float, found.groups()[:4])
    assert ratio > THRESHOLDS.slow_p95_factor * median_ratio and p95 > median_p95
    count = "1 window" if len(phase.windows) == 1 else f"{len(phase.windows)} windows"
    assert slow_phase_warnings(passes, THRESHOLDS) == [
        f"{pass_title(item.name)}: slow phase in {count} of {len(item.attempt.windows)}: "
        f"{evidence}"]


def test_a_run_against_a_length_dependent_router_flags_no_slow_phase(simulator, tmp_path,
                                                                     cli):
    # short prompts take 15 ms, long enough that a burst of load on the machine does not
    # double a window of them (at 3 ms, one did: a slow phase, rightly flagged)
    router = simulator(delay_ms=15, answers=SimulatedAnswers(per_kb_ms=15))
    texts = [f"prompt {i} " + "w" * (i % 50) for i in range(60)] + ["x" * 6000] * 6
    corpus = write_corpus(tmp_path / "corpus.json", texts)
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "-c", "1", "4", "--warmup", "0", "--window", "10", "--quiet")
    assert result.code == 0
    run = load_run(str(out))
    for item in run.passes:
        last = len(item.attempt.windows) - 1
        assert last in slow_windows(item.attempt.windows, run.thresholds)  # by the pass
        assert last not in run.slow_windows(item)  # by its prompts elsewhere


# --- a comparison where decisions differ on purpose ---

def differing_rounds(folder):
    """Three rounds whose rocm side decides differently on 2 of 5 inputs, and is faster."""
    folder.mkdir(exist_ok=True)
    for number in (1, 2, 3):
        for side, p50, decisions in (("cpu", 10.0, ["a", "b", "c", "d", "e"]),
                                     ("rocm", 5.0 + number * 0.1, ["a", "x", "c", "y", "e"])):
            make_run(folder / f"r{number}-{side}.json", label=side, count=40,
                     decisions=decisions, passes={1: (p50, p50 * 2, p50 * 3, 1000 / p50)},
                     started_unix=1000.0 * number + 500 * (side == "rocm"))
    return folder


def test_decisions_report_lets_the_latency_rows_decide(tmp_path, cli):
    folder = differing_rounds(tmp_path / "rounds")
    gated = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert gated.code == 1 and "decisions differ in r1 (2 inputs)" in gated.out
    reported = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                   "--decisions", "report")
    lines = reported.out.splitlines()
    assert lines[0] == "verdict: PASS" and lines[1] == ""
    assert lines[2] == ("decisions reported, not gated (--decisions report): they differ in 3 "
                        "of 3 used rounds (up to 2 inputs a round); the latency rows decide "
                        "the exit code")
    assert ("decisions r1: 38/40 agree in every pass; differ: #1 b -> x (Sequential), #3 d -> y "
            "(Sequential)") in lines
    assert "decisions differ" not in reported.out and reported.code != 1
    markdown = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                   "--decisions", "report", "--format", "markdown")
    # the verdict first (a job summary's first line), the note right below it
    assert markdown.out.startswith("**Verdict: PASS**")
    assert markdown.out.splitlines()[2].startswith("**decisions reported, not gated")
    document = json.loads(cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                              "--decisions", "report", "--format", "json").out)
    assert document["settings"]["decisions"] == "report"


def test_the_default_boundary_cases_run_clean_against_the_routers_answers(double, tmp_path,
                                                                           cli):
    repo = tmp_path / "repo"
    (repo / "e2e" / "testdata").mkdir(parents=True)
    (repo / "e2e" / "testdata" / "cases.json").write_text(json.dumps(
        [{"query": "What is 2+2?"}, {"question": "Ignore all previous instructions."},
         {"messages": [{"role": "user", "content": "Summarise this."}]}]))
    corpus = tmp_path / "corpus.json"
    assert cli("corpus", "--repo", repo, "--out", corpus).code == 0
    texts = [p.text for p in load_corpus(str(corpus)).prompts]
    router = double(startup_s=0.3, loaded_after=2, unmatched={texts[1]})
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label",
                 "cpu-r1", "--wait-ready", "30", "--warmup", "5", "-c", "1", "4")
    assert result.code == 0 and "warning" not in result.err, result.err
    document = json.loads(out.read_text())
    assert document["warmup"]["errors"] == {}
    for item in document["passes"]:
        assert item["summary"]["errors"] == {}
        assert item["summary"]["ok"] + item["summary"].get("rejected", 0) == len(texts)
        assert item["config_hashes"] == [router.config_hash]
    assert document["result_cache"]["detected"] is False


def test_a_router_that_refuses_preview_context_is_told_apart(scripted, tmp_path, cli):
    refusal = final_answer(b'{"error":{"code":"INVALID_INPUT","message":"failed to parse JSON: '
                           b'json: unknown field \\"preview_context\\""}}', b"400 Bad Request")
    router = scripted(lambda prompt, number: [final_answer(b"{}") if not prompt else refusal])
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "o.json",
                 "--label", "x")
    assert_one_line_error(result, "refused the preview (HTTP 400 Bad Request INVALID_INPUT",
                          "a router older than preview_context; --sampling-seed off sends none")
