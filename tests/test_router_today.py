"""What newer routers answer, read right: the runtime's two names, 503 CLASSIFIER_UNAVAILABLE
and /ready's phases while starting, selections the router sampled, the partial 503, the model
sent by default; the simulator and the test double answering all of it."""

import http.client
import io
import json
import threading
import urllib.request

import pytest

from router_latency.constants import CACHE_SERIES, DEFAULT_HISTOGRAMS
from router_latency.attribution import HISTOGRAM_PARTS
from router_latency.cache import CACHE_MIN_PROMPTS
from router_latency.measuring import Progress
from router_latency.readiness import wait_until_ready
from router_latency.passloop import Target
from router_latency.simulator import SimulatedAnswers
from router_latency.versions import (ready_words, runtime_name_warning, sampled_models,
                                     without_sampled)
from router_latency.client import parse_endpoint
from router_latency.meaning import classify, marked_sampled
from router_latency.constants import DEFAULT_DECISION_PATHS
from conftest import POLL_ENV, write_corpus
from router_double import RouterDouble

PROMPTS = [f"prompt number {i}" for i in range(12)]
# the sampled-selection runs send each prompt twice (--repeat 2) at no simulated delay: from
# CACHE_MIN_PROMPTS prompts sent twice on, timing judges a result cache, and the second
# sendings of a loaded machine's quieter moment answered in under half the first's time on
# one side: "not measured alike: cache". One prompt fewer, and no cache finding by construction
SAMPLED = PROMPTS[:CACHE_MIN_PROMPTS - 1]
N = len(SAMPLED)


@pytest.fixture
def double():
    servers = []

    def start(**options):
        servers.append(RouterDouble(**options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def clean_environment(monkeypatch):
    for name in ("VLLM_SRUN_COMMAND", "VLLM_SRUN_RESULT_CACHE", "VLLM_SR_RUNTIME_COMMAND",
                 "VLLM_SR_RUNTIME_RESULT_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# --- the runtime's two names ---

def test_both_runtime_names_are_read():
    for name in ("vllm_srun_result_cache_total", "vllm_sr_runtime_result_cache_total",
                 "vsr_model_runtime_result_cache_total"):
        assert CACHE_SERIES.match(name)
    assert {"vllm_srun_queue_duration_seconds",
            "vllm_sr_runtime_queue_duration_seconds"} <= set(DEFAULT_HISTOGRAMS)
    assert HISTOGRAM_PARTS["vllm_sr_runtime_queue_duration_seconds"] == "runtime_queue"


def test_a_router_with_only_the_renamed_runtimes_cache_counters_is_flagged_as_cached(
        simulator, tmp_path, cli, clean_environment):
    router = simulator(delay_ms=0, answers=SimulatedAnswers(cache_entries=100,
                                                            runtime="vllm-sr-runtime"))
    text = urllib.request.urlopen(router.metrics_url, timeout=10).read().decode()
    assert "vllm_sr_runtime_result_cache_total" in text
    assert "vsr_model_runtime_result_cache_total" not in text and "vllm_srun_" not in text
    corpus = write_corpus(tmp_path / "corpus.json", PROMPTS)
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "-c", "1", "4", "--warmup", "0", "--metrics-url", router.metrics_url,
                 "--metric", "^nothing$")
    assert result.code == 0, result.err
    assert "result cache: a result cache answered: seen by the router's metrics (12 hits of " \
           "24 lookups during the passes)" in result.out
    assert json.loads(out.read_text())["result_cache"]["metrics"] == {"hits": 12.0,
                                                                      "lookups": 24.0}
    assert "runtime as" not in result.err  # the environment set neither name


def test_a_runtime_name_the_environment_did_not_set_is_warned_of(simulator, tmp_path, cli,
                                                                   clean_environment):
    clean_environment.setenv("VLLM_SRUN_RESULT_CACHE", "0")
    router = simulator(delay_ms=0, answers=SimulatedAnswers(runtime="vllm-sr-runtime"))
    corpus = write_corpus(tmp_path / "corpus.json", PROMPTS[:3])
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "o.json",
                 "--label", "x", "-c", "1", "--warmup", "0", "--metrics-url",
                 router.metrics_url)
    assert result.code == 0, result.err
    assert "warning: the router's metrics show the runtime as vllm-sr-runtime " \
           "(vllm_sr_runtime_*), but this environment sets VLLM_SRUN_RESULT_CACHE, which " \
           "only vllm-srun reads: set VLLM_SR_RUNTIME_COMMAND and " \
           "VLLM_SR_RUNTIME_RESULT_CACHE where the router starts" in result.err


@pytest.mark.parametrize("series, environ, warned", [
    (["vllm_srun_queue_duration_seconds_count"], {"VLLM_SR_RUNTIME_COMMAND": "x"}, True),
    (["vllm_srun_queue_duration_seconds_count"], {"VLLM_SRUN_COMMAND": "x"}, False),
    (["vllm_srun_queue_duration_seconds_count"], {}, False),
    (["llm_signal_extraction_latency_seconds_count"], {"VLLM_SRUN_COMMAND": "x"}, False),
    # both names set: whichever the router reads is set
    (["vllm_sr_runtime_queue_duration_seconds_count"],
     {"VLLM_SRUN_COMMAND": "x", "VLLM_SR_RUNTIME_COMMAND": "y"}, False),
])
def test_the_runtime_name_warning(series, environ, warned):
    assert (runtime_name_warning(series, environ) is not None) is warned


# --- starting: 503 CLASSIFIER_UNAVAILABLE and a phased /ready ---

def test_ready_words_say_the_phase_and_the_pending_models():
    body = json.dumps({"status": "starting", "ready": False, "phase": "loading_models",
                       "pending_models": ["a", "b", "c", "d", "e", "f"], "ready_models": 2,
                       "total_models": 8}).encode()
    assert ready_words(body) == ("phase loading_models; 2 of 8 models ready; pending: a, b, c, "
                                 "d and 2 more")
    assert ready_words(b'{"status":"starting","ready":false}') == ""
    assert ready_words(b"not json") == "" and ready_words(None) == ""


def test_wait_ready_waits_through_a_phased_ready_and_classifier_unavailable(double):
    router = double(newer=True, startup_s=0.6, classifier_s=1.2)
    shown = []
    payload = b'{"messages":[{"role":"user","content":"hello"}]}'
    from router_latency.client import encode_request
    target = Target(parse_endpoint(router.url))
    waited = wait_until_ready(target, encode_request(target.endpoint, "POST", payload, ()),
                              20.0, threading.Event(), show=shown.append)
    assert waited is not None  # ready, and said what it waited through:
    assert any("to /ready (phase loading_models; " in line and "pending: " in line
               and "pii-detector" in line for line in shown), shown
    assert any("(CLASSIFIER_UNAVAILABLE: classifiers loading)" in line for line in shown), shown
    assert len(shown) == len(set(shown))  # each state once


def test_a_run_measures_nothing_before_a_newer_router_is_ready(double, tmp_path, cli,
                                                               monkeypatch):
    monkeypatch.setenv("ROUTER_TOKEN", "s3cret")
    router = double(newer=True, startup_s=0.5, classifier_s=1.0)
    corpus = write_corpus(tmp_path / "corpus.json", PROMPTS[:4])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "-c", "1", "--warmup", "0", "--wait-ready", "20", "--token-env",
                 "ROUTER_TOKEN", "--quiet")
    assert result.code == 0, result.err
    document = json.loads(out.read_text())
    assert document["ready_after_s"] is not None
    requests = document["passes"][0]["requests"]
    assert [r["status"] for r in requests] == [200] * 4  # no 503 measured
    readies = [headers for method, path, headers, _ in router.seen if path == "/ready"]
    assert readies and all(h.get("Authorization") == "Bearer s3cret" for h in readies)


def test_the_progress_line_shows_what_the_router_waits_for(double, tmp_path):
    from router_latency.measuring import measure_run, plan_passes, RunContext, RunPlan
    from router_latency.corpus import load_corpus
    router = double(newer=True, startup_s=0.5, classifier_s=0.8)
    stream = io.StringIO()
    corpus = load_corpus(write_corpus(tmp_path / "corpus.json", PROMPTS[:2]))
    run = measure_run(RunContext(Target(parse_endpoint(router.url)),
                                 RunPlan(plan_passes((1,)), warmup=0, wait_ready=20.0),
                                 progress=Progress(enabled=True, stream=stream)),
                      corpus, label="x")
    assert run is not None and run.ready_after_s is not None
    drawn = stream.getvalue()
    assert "\rwaiting for the router (0 of 20 s): it answered HTTP 503 Service Unavailable " \
           "to /ready (phase loading_models; " in drawn
    assert " of 3 models ready; pending: " in drawn and "pii-detector)" in drawn
    assert "CLASSIFIER_UNAVAILABLE" in drawn and "\rrouter ready after " in drawn


# --- sampled selections ---

def test_a_sampled_selection_is_marked_and_left_out_of_agreement():
    sampled = (b'{"original_text":"x","decision_result":{"decision_name":"math"},'
               b'"selected_model":"model-b","selection_provenance":{"mode":"sampled",'
               b'"state_dependent":false,"sampled":true,"sampling_seed":7},'
               b'"routing_decision":"math"}')
    assert classify(200, sampled, DEFAULT_DECISION_PATHS)[0] == "math|~model-b"
    stateful = sampled.replace(b'"state_dependent":false,"sampled":true',
                               b'"state_dependent":true,"sampled":false')
    assert classify(200, stateful, DEFAULT_DECISION_PATHS)[0] == "math|~model-b"
    plain = sampled.replace(b'"state_dependent":false,"sampled":true',
                            b'"state_dependent":false,"sampled":false')
    assert classify(200, plain, DEFAULT_DECISION_PATHS)[0] == "math|model-b"
    assert without_sampled("math|~model-b") == "math" and without_sampled("math|m") == "math|m"
    assert sampled_models("math|~model-b") == ["model-b"] and sampled_models(None) == []
    # only the selected model is marked, never the decision itself
    assert marked_sampled("model-b", {"selected_model": "model-b"}, sampled) == "model-b"


def run_sampled(cli, router, tmp_path, name, prompts=SAMPLED):
    corpus = write_corpus(tmp_path / "corpus.json", prompts)
    out = tmp_path / f"{name}.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label",
                 name, "-c", "1", "--repeat", "2", "--warmup", "0", "--quiet")
    assert result.code == 0, result.err
    return out


def test_two_sides_identical_but_for_sampled_selections_agree_in_full(simulator, tmp_path,
                                                                      cli):
    answers = SimulatedAnswers(no_decision_share=0.0, sampled_share=1.0)
    a = run_sampled(cli, simulator(delay_ms=0, answers=answers), tmp_path, "a")
    b = run_sampled(cli, simulator(delay_ms=0, answers=answers), tmp_path, "b")
    decisions = [r["decision"] for r in json.loads(a.read_text())["passes"][0]["requests"]]
    assert all("|~model-" in d for d in decisions)
    assert len(set(decisions)) > len({d.split("|")[0] for d in decisions})  # models vary
    result = cli("compare", "--base", a, "--new", b, "--fail-on-decision-change")
    assert result.code == 0, result.out
    assert f"decisions: {N}/{N} inputs agree (sequential pass)" in result.out
    assert f"A sampled selections: {N} inputs got a model the router sampled or chose by its " \
           "state (model-a, model-b, model-c); not counted as changed decisions" in result.out
    assert "consistency: 0 inputs changed decision" in result.out
    report = json.loads(cli("compare", "--base", a, "--new", b, "--format", "json").out)
    assert report["decisions"]["sampled"]["b"] == {"inputs": N,
                                                   "models": ["model-a", "model-b", "model-c"]}


def test_rounds_of_sides_identical_but_for_sampled_selections_pass_in_full_agreement(
        simulator, tmp_path, cli):
    answers = SimulatedAnswers(no_decision_share=0.0, sampled_share=1.0)
    router = simulator(delay_ms=0, answers=answers)
    corpus = write_corpus(tmp_path / "corpus.json", SAMPLED)
    folder = tmp_path / "rounds"
    folder.mkdir()
    for number in (1, 2, 3):
        for side in ("a", "b"):
            out = folder / f"r{number}-{side}.json"
            result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out,
                         "--label", f"{side}-r{number}", "-c", "1", "--repeat", "2",
                         "--warmup", "0", "--quiet")
            assert result.code == 0, result.err
    # the decisions gate on; timing judged only against a slowdown no noise reaches
    result = cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--decisions", "gate",
                 "--tolerance", "1000", "--pass-unless-worse")
    lines = result.out.splitlines()
    assert f"decisions r1: {N}/{N} agree in every pass" in lines, result.out + result.err
    assert f"sampled selections r1 b: {N} inputs got a model the router sampled or chose by its " \
           "state (model-a, model-b, model-c): apart from decision agreement" in lines
    assert result.code == 0 and lines[0].startswith("verdict: PASS"), result.out
    report = json.loads(cli("rounds", "--dir", folder, "--base", "a", "--new", "b",
                            "--format", "json", "--tolerance", "1000").out)
    assert report["outcomes"][0]["sampled"] == N
    assert report["outcomes"][0]["sampled_models"] == ["model-a", "model-b", "model-c"]


def test_the_double_marks_its_sampled_selections(double, tmp_path, cli):
    router = double(sampled=set(PROMPTS[:3]))
    out = run_sampled(cli, router, tmp_path, "x", PROMPTS)  # one run: no sides to match
    decisions = [r["decision"] for r in json.loads(out.read_text())["passes"][0]["requests"]]
    assert {d.split("|")[1][0] for d in decisions[:3]} == {"~"}
    assert set(decisions[3:12]) == {"general|qwen3-8b"}


# --- the partial 503 ---

def test_a_partial_503_is_a_routing_router_with_a_failed_decision(simulator, double, tmp_path,
                                                                  cli):
    router = double(partial={"hello"})
    target = Target(parse_endpoint(router.url))
    from router_latency.client import encode_request
    payload = encode_request(target.endpoint, "POST",
                             b'{"messages":[{"role":"user","content":"hello"}]}', ())
    # ready (not waited on until the limit, then refused): it ran the signals
    assert wait_until_ready(target, payload, 5.0, threading.Event()) is not None
    # every answer a partial 503: measured as failed with the router's decision_error
    sim = simulator(delay_ms=0, answers=SimulatedAnswers(partial_share=1.0))
    corpus = write_corpus(tmp_path / "corpus.json", PROMPTS)
    out = tmp_path / "run.json"
    result = cli("run", "--url", sim.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "-c", "1", "--warmup", "0", "--max-errors", "1000", "--quiet")
    assert result.code == 0, result.err
    document = json.loads(out.read_text())
    summary = document["passes"][0]["summary"]
    assert summary["errors"] == {"http_5xx": 12}
    assert list(summary["error_codes"]) == ["http_5xx"]
    assert list(summary["error_codes"]["http_5xx"]) == ["decision_error"]
    # the configuration that answered: read from the partial 503s, which carry it
    assert document["passes"][0]["config_hashes"] == [sim.config_hash]


# --- the double speaks the client's envelope; the model sent by default ---

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


# --- rounds/run_rounds.sh: a newer router is measured once ready ---

@pytest.mark.process
def test_the_driver_waits_for_newer_routers_that_start_with_503s(tmp_path):
    import shlex
    import subprocess
    import sys
    from conftest import ROOT, TOOL_PYC
    corpus = write_corpus(tmp_path / "corpus.json", PROMPTS[:4])

    def start(side, delay):  # detached, a newer router loading its models for 1 s
        return (f"{shlex.quote(sys.executable)} {shlex.quote(str(TOOL_PYC))} simulate "
                f"--port 0 --delay-ms {delay} --startup-s 1 --phased-startup --url-file "
                f"{shlex.quote(str(tmp_path / (side + '.url')))} >/dev/null 2>&1 & "
                f"echo $! > {shlex.quote(str(tmp_path / (side + '.pid')))}")
    stop = f'kill "$(cat {shlex.quote(str(tmp_path))}/$SIDE.pid)"'
    command = ["bash", str(ROOT / "rounds" / "run_rounds.sh"), "--rounds", "3", "--dir",
               str(tmp_path / "results"), "--corpus", corpus, "--wait-ready", "20", "--tool",
               str(TOOL_PYC), "--base", "cpu", "--base-start", start("cpu", 10), "--base-stop",
               stop, "--base-url-file", str(tmp_path / "cpu.url"), "--new", "gpu",
               "--new-start", start("gpu", 0.5), "--new-stop", stop, "--new-url-file",
               str(tmp_path / "gpu.url"), "--tolerance", "1000", "--gate", "sequential:p50",
               "--", "--concurrency", "1", "--warmup", "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, **POLL_ENV})
    assert result.returncode == 0, result.stderr
    for path in sorted((tmp_path / "results").glob("r*.json")):
        document = json.loads(path.read_text())
        assert document["ready_after_s"] is not None
        assert {r["status"] for r in document["passes"][0]["requests"]} == {200}, path.name


def test_ready_words_read_what_a_router_may_send_wrong_without_failing():
    # a pending_models that is no list ended --wait-ready with a TypeError; a string was
    # listed letter by letter; a bidi control reached the terminal
    assert ready_words(b'{"phase": "loading", "pending_models": 3}') == "phase loading"
    assert ready_words(b'{"phase": "loading", "pending_models": "abc"}') == "phase loading"
    assert ready_words('{"phase": "lo\u202ead"}'.encode()) == "phase lo\\u202ead"


def test_a_selection_provenance_with_a_nested_object_is_read():
    body = (b'{"decision_result": {"decision_name": "math"}, "selected_model": "m", '
            b'"selection_provenance": {"sampled": true, "weights": {"m": 0.5}}}')
    assert marked_sampled("math|m", {"selected_model": "m"}, body) == "math|~m"
