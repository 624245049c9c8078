"""measuring: `run` against real loopback routers (the simulator, a fault server, a router
that restarts, a TLS router): every request recorded and classified, passes discarded under
load, interrupts, open-loop passes, the driver's floor, faults of the router and of the disk."""

import gzip
import io
import json
import os
import re
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from router_latency.constants import PREVIEW_PATH
from router_latency.cache import CACHE_MIN_PROMPTS
from router_latency.errors import RouterLatencyError
from router_latency.stats import percentile
from router_latency.files import write_atomic
from router_latency.corpus import corpus_bytes, CORPUS_SCHEMA, load_corpus
from router_latency.requests import pass_name, pass_summary, pass_title, Request
from router_latency.phases import content_slow_windows, phase_windows, slow_phase, slow_windows
from router_latency.runfile import Attempt, dump_run, Floor, load_run, PassRecord
from router_latency.client import MAX_BODY_BYTES, parse_endpoint
from router_latency.passloop import PassPlan, Target
from router_latency.readiness import FLOOR_REQUESTS
from router_latency.measuring import (clock_text, plan_passes, Progress, progress_text, RunContext,
                                      RunPlan, slow_phase_warnings)
from router_latency.simulator import simulated_decision
from router_latency.rounds import CHECKED_FIELDS, run_signature
from router_latency.command_run import rate_list
from router_latency.cli import main
from conftest import (FaultServer, final_answer, hold_a_slot, length_passes, LENGTHS, make_run,
                      PROMPTS, THRESHOLDS, write_corpus)


TEXTS = ["What is 2+2?", "Explain DNS", "Write a haiku", "¿Qué hora es?", "😀", "a\u0000b"]


DATA = Path(__file__).resolve().parent / "data"


OK_BODY = json.dumps({"decision_result": {"decision_name": "ok"}}).encode()


def test_run_records_every_request_of_every_pass(simulator, tmp_path, cli):
    router = simulator(delay_ms=0.2)
    corpus = write_corpus(tmp_path / "corpus.json", TEXTS)
    out = tmp_path / "r1-cpu.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "cpu",
                 "--warmup", "3")
    assert result.code == 0 and result.err == ""
    document = json.loads(out.read_text())
    assert document["schema"] == "router-latency/run/1"
    assert document["complete"] is True and document["label"] == "cpu"
    assert document["url"] == router.url + "/api/v1/routing/preview"
    assert document["corpus"]["count"] == len(TEXTS)
    assert document["warmup"] == {"requests": 3, "ok": 3, "errors": {},
                                  "config_hashes": [router.config_hash]}
    assert [p["concurrency"] for p in document["passes"]] == [1, 4, 16]
    decisions = {i: simulated_decision(t, ("math", "code", "general", "pii_block"))
                 for i, t in enumerate(TEXTS)}
    for item in document["passes"]:
        assert item["discarded"] is False
        assert sorted(r["id"] for r in item["requests"]) == list(range(len(TEXTS)))
        for request in item["requests"]:
            d = decisions[request["id"]]
            assert request["decision"] == f"{d}|model-{d}"
            assert request["status"] == 200 and request["error"] is None
            assert request["latency_ms"] > 0
        summary = item["summary"]
        assert summary["requests"] == summary["ok"] == len(TEXTS)
        assert summary["p50_ms"] == pytest.approx(
            percentile([r["latency_ms"] for r in item["requests"]], 50), abs=1e-3)
    lines = result.out.splitlines()
    assert lines[1].split() == ["pass", "requests", "ok", "errors", "p50_ms", "p95_ms",
                                "p99_ms", "mean_ms", "req/s", "wall_s"]
    assert [line.split()[0] for line in lines[2:5]] == ["Sequential", "Conc", "Conc"]
    assert lines[-1] == f"wrote {out}"
    assert load_run(str(out)).pass_named("c16").summary.ok == len(TEXTS)


def test_run_keeps_header_values_and_url_credentials_out_of_everything(simulator, tmp_path,
                                                                       cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", TEXTS[:2])
    out = tmp_path / "run.json"
    url = router.url.replace("http://", "http://alice:s3cretpw@")
    result = cli("run", "--url", url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--header", "X-Api-Key: topsecretvalue", "--concurrency", "1", "--warmup", "0")
    assert result.code == 0
    text = out.read_text() + result.out + result.err
    assert "topsecretvalue" not in text and "s3cretpw" not in text and "alice" not in text
    assert json.loads(out.read_text())["header_names"] == ["X-Api-Key"]


def test_run_sends_the_token_it_was_told_of_and_keeps_it_nowhere(fault_server, tmp_path, cli,
                                                                 monkeypatch):
    monkeypatch.setenv("VSR_MGMT_TOKEN", "tok-3xq9-secret")
    corpus = write_corpus(tmp_path / "corpus.json", TEXTS[:2])
    out = tmp_path / "run.json"
    result = cli("run", "--url", fault_server.url, "--corpus", corpus, "-o", out, "--label",
                 "x", "-c", "1", "--warmup", "0", "--token-env", "VSR_MGMT_TOKEN")
    assert result.code == 0 and result.err == ""
    assert fault_server.authorizations == {"Bearer tok-3xq9-secret"}
    assert "tok-3xq9" not in out.read_text() + result.out
    assert json.loads(out.read_text())["header_names"] == ["Authorization"]
    # the variable is set, but nobody named it: no token goes out
    fault_server.authorizations.clear()
    assert cli("run", "--url", fault_server.url, "--corpus", corpus, "-o", out, "--force",
               "--label", "x", "-c", "1", "--warmup", "0", "-q").code == 0
    assert fault_server.authorizations == {None}
    assert json.loads(out.read_text())["header_names"] == []


def test_run_refuses_to_overwrite_without_force(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", TEXTS[:1])
    out = tmp_path / "run.json"
    out.write_text("precious")
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x")
    assert result.code == 2
    assert result.err == f"router-latency: error: exists; pass --force to overwrite it ({out})\n"
    assert out.read_text() == "precious"
    assert cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
               "--force", "--quiet").code == 0
    assert json.loads(out.read_text())["complete"] is True


def test_run_classifies_every_failure_and_accounts_for_it(fault_server, tmp_path, cli):
    texts = ["fine", "status:500", "status:503", "status:404", "status:302", "notjson",
             "nodecision", "reset", "short", "chunked", "http10", "sleep:1.5", "huge", "fine 2"]
    corpus = write_corpus(tmp_path / "corpus.json", texts)
    out = tmp_path / "run.json"
    # sleep:1.5 is waited for the timeout in each pass; the others take 12 ms or less: 0.3 s
    # leaves them a stall of the machine's 130 ms twice over
    result = cli("run", "--url", fault_server.url, "--corpus", corpus, "--out", out, "--label",
                 "x", "--concurrency", "1,4", "--timeout", "0.3", "--warmup", "0")
    assert result.code == 1
    document = json.loads(out.read_text())
    expected = {"fine": None, "status:500": "http_5xx", "status:503": "http_5xx",
                "status:404": "http_4xx", "status:302": "http_3xx", "notjson": "bad_json",
                "nodecision": "no_decision", "reset": "reset", "short": "reset",
                "chunked": None, "http10": None, "sleep:1.5": "timeout", "huge": "too_large",
                "fine 2": None}
    for item in document["passes"]:
        errors = {texts[r["id"]]: r["error"] for r in item["requests"]}
        assert errors == expected
        summary = item["summary"]
        assert summary["requests"] == len(texts)
        assert summary["ok"] + sum(summary["errors"].values()) == summary["requests"]
        assert summary["ok"] == 4
    assert "errors in Sequential: bad_json 1, http_3xx 1, http_4xx 1, http_5xx 2, no_decision 1" \
           ", reset 2, timeout 1, too_large 1" in result.out
    assert result.err == "router-latency: 20 requests failed (--max-errors 0)\n"


def test_run_max_errors_allows_failures(fault_server, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["fine", "status:500"])
    args = ["run", "--url", fault_server.url, "--corpus", corpus, "--label", "x",
            "--concurrency", "1,2", "--warmup", "0", "--quiet"]
    assert cli(*args, "--out", tmp_path / "a.json", "--max-errors", "2").code == 0
    assert cli(*args, "--out", tmp_path / "b.json", "--max-errors", "1").code == 1


def test_run_decision_path_option(fault_server, simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["What is 2+2?"])
    out = tmp_path / "run.json"
    assert cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
               "--decision-path", "selected_model", "--concurrency", "1", "--quiet").code == 0
    decision = json.loads(out.read_text())["passes"][0]["requests"][0]["decision"]
    assert decision.startswith("model-")


def run_under_load(cli, router, tmp_path, load_line, *extra):
    """Run three prompts with the load average read from a file holding load_line."""
    corpus = write_corpus(tmp_path / "corpus.json", TEXTS[:3])
    load = tmp_path / "loadavg"
    load.write_text(load_line)
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--loadavg-file", load, "--warmup", "0", *extra)
    return result, json.loads(out.read_text()), out


def test_run_discards_passes_above_the_load_limit(simulator, tmp_path, cli):
    result, document, out = run_under_load(cli, simulator(delay_ms=0), tmp_path,
                                           "150.00 90.00 80.00 3/200 1234\n",
                                           "--concurrency", "1,4", "--load-retries", "1",
                                           "--load-pause", "0")
    assert result.code == 0
    for item in document["passes"]:
        assert item["discarded"] is True and item["summary"] is None
        assert len(item["discarded_attempts"]) == 2
        assert item["discarded_attempts"][0]["load"] == {"start": 150.0, "end": 150.0,
                                                         "min": 150.0, "max": 150.0,
                                                         "samples": 2}
        assert item["discarded_attempts"][0]["summary"]["ok"] == 3
    assert "Sequential: load 150.0 above 120, timings discarded (attempt 1 of 2)" in result.err
    assert "Sequential  discarded: load above the limit" in result.out
    run = load_run(str(out))
    assert all(p.discarded for p in run.passes)


def test_run_keeps_a_pass_that_ran_under_the_limit(simulator, tmp_path, cli):
    result, document, _ = run_under_load(cli, simulator(delay_ms=0), tmp_path,
                                         "12.5 1 1 1/1 1\n", "--concurrency", "1", "--quiet")
    assert result.code == 0
    item = document["passes"][0]
    assert item["discarded"] is False
    assert item["load"] == {"start": 12.5, "end": 12.5, "min": 12.5, "max": 12.5, "samples": 2}
    assert item["discarded_attempts"] == []


def test_run_waits_for_a_router_that_starts_late(tmp_path, cli, monkeypatch, quick_ready_poll):
    import router_latency.readiness as readiness
    server = FaultServer()
    port = server.server_address[1]
    server.server_close()  # the port is free again until the "router" starts on it
    corpus = write_corpus(tmp_path / "corpus.json", ["fine"])
    out = tmp_path / "run.json"
    started, looks, probe = [], [], readiness.probe_router

    def start_after_the_first_look(*args):
        # the router starts once the run's first look found none, by construction (it
        # started 0.5 s after the run, waited out)
        looks.append(probe(*args))
        if not started:
            started.append(FaultServer(port))
            threading.Thread(target=started[0].serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True).start()
        return looks[-1]

    monkeypatch.setattr(readiness, "probe_router", start_after_the_first_look)
    try:
        result = cli("run", "--url", f"http://127.0.0.1:{port}", "--corpus", corpus, "--out",
                     out, "--label", "x", "--concurrency", "1", "--wait-ready", "10", "--quiet")
    finally:
        for late in started:
            late.shutdown()
            late.server_close()
    assert result.code == 0
    assert not looks[0].ready and looks[0].what == "connection refused" and looks[-1].ready
    assert json.loads(out.read_text())["ready_after_s"] > 0


def closed_port():
    """Return a loopback port that nothing listens on (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_run_says_when_no_router_answers(tmp_path, cli):
    port = closed_port()
    corpus = write_corpus(tmp_path / "corpus.json", ["fine"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", f"http://127.0.0.1:{port}", "--corpus", corpus, "--out", out,
                 "--label", "x")
    assert result.code == 2
    assert result.err.startswith(f"router-latency: error: router not reachable at "
                                 f"http://127.0.0.1:{port}/api/v1/routing/preview: connection "
                                 f"refused")
    assert not out.exists()
    result = cli("run", "--url", f"http://127.0.0.1:{port}", "--corpus", corpus, "--out", out,
                 "--label", "x", "--wait-ready", "0.1")
    assert result.code == 2 and "router not ready after 0.1 s" in result.err


LOADING = final_answer(b'{"error":{"code":"CLASSIFIER_UNAVAILABLE","message":"models loading"}}',
                       b"503 Service Unavailable")


def loading_router(scripted, loading_previews):
    """A router whose /health answers 200 at once while its first previews answer 503."""
    previews = []

    def answer(prompt, number):
        if not prompt:
            return [final_answer(b'{"status":"healthy"}')]
        previews.append(prompt)
        return [LOADING if len(previews) <= loading_previews else final_answer()]

    return scripted(answer)


def test_wait_ready_waits_for_the_preview_not_for_health(scripted, tmp_path, cli,
                                                        quick_ready_poll):
    router = loading_router(scripted, 3)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "run.json"
    assert cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
               "--concurrency", "1", "--warmup", "1", "--wait-ready", "20", "--quiet").code == 0
    document = json.loads(out.read_text())
    assert document["warmup"] == {"requests": 1, "ok": 1, "errors": {}}
    assert document["passes"][0]["summary"]["ok"] == 2
    assert document["ready_after_s"] > 0


def test_a_loading_router_is_not_ready(scripted, tmp_path, cli):
    router = loading_router(scripted, 1000)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "run.json"
    args = ["run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x"]
    result = cli(*args)
    # LOADING is the router's 503 CLASSIFIER_UNAVAILABLE: said, as the code says it
    assert result.err == (f"router-latency: error: router at {router.url}{PREVIEW_PATH} is not "
                          f"ready: it answered HTTP 503 Service Unavailable to a preview "
                          f"(CLASSIFIER_UNAVAILABLE: classifiers loading); --wait-ready "
                          f"SECONDS waits for a starting router (--url)\n")
    assert result.code == 2 and not out.exists()
    result = cli(*args, "--wait-ready", "0.1")
    assert result.code == 2 and result.err == (
        "router-latency: error: router not ready after 0.1 s: it answered HTTP 503 Service "
        "Unavailable to a preview (CLASSIFIER_UNAVAILABLE: classifiers loading) (--url)\n")


def test_an_answer_that_is_not_a_preview_is_named(scripted, tmp_path, cli):
    router = scripted(lambda prompt, number: [final_answer(b"", b"501 Not Implemented")])
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "o.json",
                 "--label", "x")
    assert result.code == 2 and result.err == (
        f"router-latency: error: router at {router.url}{PREVIEW_PATH} answered HTTP 501 Not "
        f"Implemented to a preview (--url)\n")


@pytest.mark.parametrize("body", [b'{"error":{"code":"CLASSIFICATION_ERROR","message":"x"}}',
                                  b'{"error":{"code":"RESPONSE_DEADLINE_ERROR","message":"x"}}',
                                  b"internal error"])
def test_a_router_that_answers_500_is_up_and_failing_not_starting(scripted, tmp_path, cli, body):
    # it was waited on for the whole --wait-ready, then bad input (exit 2) with no run file
    router = scripted(lambda prompt, number: [final_answer(body, b"500 Internal Server Error")])
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "o.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "1", "--wait-ready", "300", "--quiet")
    assert result.code == 1, result.err
    assert json.loads(out.read_text())["passes"][0]["summary"]["errors"] == {"http_5xx": 2}


def test_a_preview_answered_2xx_with_a_body_over_the_limit_is_ready(scripted, tmp_path, cli):
    too_large = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1)
    router = scripted(lambda prompt, _: [too_large])
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0", "--quiet")
    assert result.code == 1
    assert json.loads(out.read_text())["passes"][0]["summary"]["errors"] == {"too_large": 1}


def test_https_to_a_plain_http_port_says_the_server_did_not_speak_tls(simulator, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    # a Go server answers the TLS hello with "400 Bad Request" in plain text; a line-reading
    # server waits for a line that never comes
    plain = socket.create_server(("127.0.0.1", 0))

    def answer_in_plain_text():
        connection, _ = plain.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")

    threading.Thread(target=answer_in_plain_text, daemon=True).start()
    try:
        # the plain-text answer comes at once; the simulator never answers the hello, so its
        # handshake (of /ready, then of the preview) waits the whole timeout, kept short
        for url, timeout in ((f"https://127.0.0.1:{plain.getsockname()[1]}", "5"),
                             (simulator(delay_ms=0).url.replace("http://", "https://"), "0.1")):
            result = cli("run", "--url", url, "--corpus", corpus, "--out", tmp_path / "o.json",
                         "--label", "x", "--timeout", timeout)
            assert result.code == 2, result
            assert "the server did not speak TLS (a plain-HTTP port? http:// reaches it)" \
                in result.err, result.err
    finally:
        plain.close()


def test_a_warm_up_in_which_every_request_failed_is_reported(fault_server, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["status:503", "status:500"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", fault_server.url, "--corpus", corpus, "--out", out, "--label",
                 "x", "--concurrency", "1", "--warmup", "3")
    assert result.code == 1
    assert ("router-latency: warning: every warm-up request failed (http_5xx 3); the passes may "
            "measure a router that is not ready\n") in result.err
    assert json.loads(out.read_text())["warmup"] == {"requests": 3, "ok": 0,
                                                     "errors": {"http_5xx": 3},
                                                     "all_failed": True}


class TerminalStream(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_only_on_a_terminal(simulator, tmp_path, monkeypatch):
    router = simulator(delay_ms=1)
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(40)])
    terminal = TerminalStream()  # stdout and stderr on one terminal, in the order written
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["run", "--url", router.url, "--corpus", corpus, "--out",
                    str(tmp_path / "a.json"), "--label", "x", "-c", "1,2", "-n", "2",
                    "--warmup", "0"]) == 0
    shown = terminal.getvalue()
    header = (f"run x: 40 prompts, corpus {load_corpus(corpus).sha256[:12]}, "
              f"{router.url}{PREVIEW_PATH}; each pass sends the corpus 2 times\n")
    assert shown.startswith(header) and shown.count(header) == 1  # before the passes, once
    first = re.search(r"\rSequential, pass 1 of 2: 80/80 requests, [\d,]+ req/s, took "
                      r"[\d.]+ s *\n", shown)
    second = re.search(r"\rConc 2, pass 2 of 2: 80/80 requests, [\d,]+ req/s, took [\d.]+ s "
                       r"*\n", shown)
    table = shown.index("pass        requests")
    assert first and second and first.end() <= second.start() < second.end() <= table
    quiet = TerminalStream()
    monkeypatch.setattr(sys, "stderr", quiet)
    monkeypatch.setattr(sys, "stdout", quiet)
    assert main(["run", "--url", router.url, "--corpus", corpus, "--out",
                    str(tmp_path / "b.json"), "--label", "x", "--concurrency", "1",
                    "--warmup", "0", "-q"]) == 0
    assert quiet.getvalue() == ""
    # not a terminal: only the final table. Each prompt is sent twice: from CACHE_MIN_PROMPTS
    # prompts on timing judges a result cache, and a warning of one would be no noise of the
    # progress line's; one prompt fewer, and no cache finding by construction
    fewer = write_corpus(tmp_path / "fewer.json",
                         [f"p{i}" for i in range(CACHE_MIN_PROMPTS - 1)])
    piped, table_only = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    monkeypatch.setattr(sys, "stdout", table_only)
    assert main(["run", "--url", router.url, "--corpus", fewer, "--out",
                    str(tmp_path / "c.json"), "--label", "x", "--concurrency", "1",
                    "--warmup", "0", "--repeat", "2"]) == 0
    assert piped.getvalue() == ""
    assert table_only.getvalue().splitlines()[0] == (
        f"run x: {CACHE_MIN_PROMPTS - 1} prompts, corpus {load_corpus(fewer).sha256[:12]}, "
        f"{router.url}{PREVIEW_PATH}; each pass sends the corpus 2 times")


def test_progress_text_shows_the_pass_requests_rate_and_time_left():
    text = progress_text
    assert text("Conc 4, pass 2 of 3", 100, 400, 2.0) == \
        "Conc 4, pass 2 of 3: 100/400 requests, 50 req/s, ETA 0:06"
    assert text("Sequential, pass 1 of 3", 0, 400, 0.0) == \
        "Sequential, pass 1 of 3: 0/400 requests, 0 req/s, ETA -:--"
    assert text("Conc 16, pass 3 of 3", 12_345, None, 20.5, duration=3600) == \
        "Conc 16, pass 3 of 3: 12,345 requests, 602 req/s, ETA 59:40"
    assert text("Rate 50/s, pass 1 of 1", 100, 100, 2.04, finished=True) == \
        "Rate 50/s, pass 1 of 1: 100/100 requests, 49 req/s, took 2.0 s"
    assert clock_text(3600 * 2 + 61) == "2:01:01" and clock_text(-3) == "0:00"


def test_progress_draws_over_its_last_line_and_ends_it(monkeypatch):
    terminal = TerminalStream()
    ticks = iter([10.0])  # started at 10 s; every later reading is 12 s
    # no redraw before end(): the only line drawn is the last
    progress = Progress(True, terminal, clock=lambda: next(ticks, 12.0), interval=3600)
    progress.draw("x" * 80, finished=False)
    progress.start("Sequential, pass 1 of 3", 40, lambda: 40)
    progress.end()
    last = "Sequential, pass 1 of 3: 40/40 requests, 20 req/s, took 2.0 s"
    assert terminal.getvalue() == "\r" + "x" * 80 + "\r" + last.ljust(80) + "\n"
    silent = TerminalStream()
    off = Progress(False, silent)
    off.start("Sequential, pass 1 of 3", 40, lambda: 40)
    off.end()
    assert silent.getvalue() == ""


def test_rate_pass_records_schedule_lag_and_service_time(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(20)])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--rate", "400,1000", "--arrival", "poisson", "--seed", "3", "--warmup", "0")
    assert result.code == 0
    document = json.loads(out.read_text())
    assert [(p["name"], p["rate"], p["arrival"]) for p in document["passes"]] == [
        ("r400", 400.0, "poisson"), ("r1000", 1000.0, "poisson")]
    assert document["settings"]["concurrency"] == [] and document["settings"]["seed"] == 3
    for item in document["passes"]:
        assert sorted(r["id"] for r in item["requests"]) == list(range(20))
        for r in item["requests"]:
            assert r["behind_ms"] >= 0 and r["service_ms"] > 0
            assert r["latency_ms"] == pytest.approx(r["behind_ms"] + r["service_ms"], abs=2e-4)
        assert set(item["summary"]) >= {"service_p50_ms", "service_p99_ms", "behind_p99_ms"}
    lines = result.out.splitlines()
    assert [line.split()[0:2] for line in lines[2:4]] == [["Rate", "400/s"], ["Rate", "1000/s"]]
    run = load_run(str(out))
    assert [p.name for p in run.passes] == ["r400", "r1000"] and run.passes[0].rate == 400.0


def test_open_loop_counts_the_wait_a_stalled_router_causes(simulator, tmp_path, cli):
    # One connection to a router that takes 20 ms, asked for a request every 5 ms: a closed
    # loop would report 20 ms for each; from the schedule, later requests wait ever longer.
    router = simulator(delay_ms=20, serial=True)
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(6)])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--rate", "200", "--connections", "1", "--warmup", "0")
    requests = sorted(json.loads(out.read_text())["passes"][0]["requests"], key=lambda r: r["id"])
    last = requests[-1]
    assert last["behind_ms"] > 40  # scheduled at 25 ms, sent after five 20 ms answers
    assert last["latency_ms"] > last["service_ms"] + 40
    assert re.search(r"Rate 200/s: the driver fell behind its schedule by [\d.]+ ms at p99",
                     result.err)


def test_rate_and_concurrency_passes_together_and_compared(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b", "c"])
    for name in ("a", "b"):
        assert cli("run", "--url", router.url, "--corpus", corpus, "--out",
                   tmp_path / f"{name}.json", "--label", name, "--concurrency", "1", "--rate",
                   "500", "--quiet").code == 0
    out = cli("compare", tmp_path / "a.json", tmp_path / "b.json").out
    assert "Sequential  p50 ms" in out and "Rate 500/s  p50 ms" in out


def test_repeat_sends_the_corpus_several_times_in_each_pass(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", TEXTS[:3])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "-o", out, "--label", "x",
                 "-c", "1,2", "-n", "3", "--rate", "2000", "--warmup", "0", "-q")
    assert result.code == 0 and result.out == result.err == ""
    document = json.loads(out.read_text())
    assert document["settings"]["repeat"] == 3 and document["settings"]["duration_s"] is None
    for item in document["passes"]:
        sent = [(r["id"], r.get("rep", 0)) for r in item["requests"]]
        assert sorted(sent) == [(i, rep) for i in range(3) for rep in range(3)]
        assert item["summary"]["requests"] == item["summary"]["ok"] == 9
    run = load_run(str(out))
    assert [p.name for p in run.passes] == ["sequential", "c2", "r2000"]
    assert run_signature(run)["passes"] == "sequential c2 r2000 x3"
    # what --allow-mismatch names is what the signature holds: one list, in rounds
    assert tuple(run_signature(run)) == CHECKED_FIELDS


def test_duration_cycles_the_corpus_and_starts_nothing_after_it(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", TEXTS[:3])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "-o", out, "--label", "x",
                 "-c", "2", "-d", "150ms", "--rate", "200/s", "--warmup", "0")
    assert result.code == 0, result.err
    assert result.out.splitlines()[0].endswith("; each pass cycles the corpus for 0.15 s")
    document = json.loads(out.read_text())
    assert document["settings"]["duration_s"] == 0.15 and document["settings"]["repeat"] == 1
    closed, open_loop = document["passes"]
    sent = [(r["id"], r.get("rep", 0)) for r in closed["requests"]]
    # request i is prompt i % 3, sending i // 3; none leaves once the 150 ms are up
    assert sorted(sent, key=lambda s: (s[1], s[0])) == [(i % 3, i // 3) for i in range(len(sent))]
    assert all(r["start_ms"] <= 150 for r in closed["requests"])
    assert closed["interrupted"] is False and document["complete"] is True
    # open loop: the schedule of 200/s for 0.15 s, 30 requests, cycling the 3 prompts
    assert sorted((r["id"], r.get("rep", 0)) for r in open_loop["requests"]) == sorted(
        (i % 3, i // 3) for i in range(30))
    assert run_signature(load_run(str(out)))["passes"] == "c2 r200 for 0.15 s"


def test_rate_as_vegeta_writes_it(simulator, tmp_path, cli):
    for text, rate in [("50", 50.0), ("50/s", 50.0), ("50/1s", 50.0), ("100/2s", 50.0),
                       ("3000/1m", 50.0), ("3000/m", 50.0), ("10/500ms", 20.0),
                       ("7200/h", 2.0), (" 2.5/s ", 2.5)]:
        assert rate_list(text) == (rate,), text
    assert rate_list("50/s,100") == (50.0, 100.0)
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "run.json"
    assert cli("run", "--url", router.url, "--corpus", corpus, "-o", out, "--label", "x",
               "--rate", "200/s,6000/1m", "--warmup", "0", "-q").code == 0
    assert [p["name"] for p in json.loads(out.read_text())["passes"]] == ["r200", "r100"]


def test_bad_rate_options(tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    for value in ("0", "-5", "abc", "nan", "100,100"):
        result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                     tmp_path / "o.json", "--label", "x", "--rate", value)
        assert result.code == 2 and "--rate" in result.err


def test_every_run_records_the_driver_floor(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "run.json"
    assert cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
               "--concurrency", "1", "--quiet").code == 0
    floor = json.loads(out.read_text())["floor"]
    assert floor["requests"] == floor["ok"] == FLOOR_REQUESTS
    assert 0 < floor["p10_ms"] <= floor["p50_ms"] <= floor["p90_ms"] <= floor["p99_ms"]
    assert floor["spread_ms"] == pytest.approx(floor["p90_ms"] - floor["p10_ms"], abs=2e-4)
    assert floor["timer_resolution_ns"] > 0


def with_floor(path, spread):
    """Give a run file the driver's floor spread (p90 - p10), through the tool's writer."""
    run = load_run(path)
    write_atomic(path, dump_run(run._replace(floor=Floor(spread_ms=spread))))
    return path


def test_compare_and_rounds_warn_below_the_floor(tmp_path, cli):
    a = with_floor(make_run(tmp_path / "r1-cpu.json", label="cpu",
                                passes={1: (1.000, 2, 3, 100)}), 0.02)
    b = with_floor(make_run(tmp_path / "r1-gpu.json", label="gpu",
                                passes={1: (1.010, 2, 3, 100)}), 0.01)
    assert ("warning: Sequential p50 differs by 0.010 ms, less than the driver's own spread on "
            "loopback (0.020 ms, p90 - p10): below what this driver resolves") in cli(
                "compare", a, b).out
    with_floor(make_run(tmp_path / "r2-cpu.json", label="cpu",
                                passes={1: (1.000, 2, 3, 100)}), 0.02)
    with_floor(make_run(tmp_path / "r2-gpu.json", label="gpu",
                                passes={1: (1.012, 2, 3, 100)}), 0.02)
    with_floor(make_run(tmp_path / "r3-cpu.json", label="cpu",
                                passes={1: (1.000, 2, 3, 100)}), 0.02)
    with_floor(make_run(tmp_path / "r3-gpu.json", label="gpu",
                                passes={1: (1.011, 2, 3, 100)}), 0.02)
    out = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu").out
    assert "warning: Sequential p50 differs by 0.011 ms, less than the driver's own spread" in out
    far = with_floor(make_run(tmp_path / "far.json", passes={1: (2.0, 2, 3, 100)}), 0.02)
    assert "warning" not in cli("compare", a, far).out


class RestartingRouter:
    """A loopback router that, on the prompt 'die', resets every connection as a crashed and
    restarted router process would, its port staying open (as a container's published port
    does); on 'die forever' it also closes the port."""

    def __init__(self):
        self.lock = threading.Lock()
        self.connections = set()
        self.stopped = threading.Event()
        self.listener = self.listen(0)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.accept_loop, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def listen(self, port):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        listener.settimeout(0.05)
        return listener

    def accept_loop(self):
        deadline = time.monotonic() + 60
        while not self.stopped.is_set() and time.monotonic() < deadline:
            listener = self.listener
            if listener is None:
                time.sleep(0.01)
                continue
            try:
                connection, _ = listener.accept()
            except OSError:
                continue
            with self.lock:
                self.connections.add(connection)
            threading.Thread(target=self.serve, args=(connection,), daemon=True).start()

    def serve(self, connection):
        try:
            connection.settimeout(5)  # may already be closed by a 'die' on another thread
            reader = connection.makefile("rb")
            while True:
                line = reader.readline()
                if not line:
                    return
                length = 0
                while True:
                    header = reader.readline()
                    if header in (b"\r\n", b""):
                        break
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":")[1])
                body = reader.read(length)
                prompt = json.loads(body)["messages"][0]["content"] if length else ""
                if prompt.startswith("die"):
                    self.die(forever=prompt == "die forever")
                    return
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                                   % (len(OK_BODY), OK_BODY))
        except (OSError, ValueError):
            return

    def die(self, forever):
        with self.lock:
            if forever:  # the port first, so that no reconnect slips in before it closes
                listener, self.listener = self.listener, None
                listener.shutdown(socket.SHUT_RDWR)  # closes the port even while accept() waits
                listener.close()
            for connection in self.connections:
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      b"\x01\x00\x00\x00\x00\x00\x00\x00")
                try:
                    connection.close()
                except OSError:
                    pass
            self.connections.clear()

    def stop(self):
        self.stopped.set()
        self.thread.join(2)
        if self.listener is not None:
            self.listener.close()


@pytest.fixture
def restarting_router():
    routers = []

    def start(**options):
        routers.append(RestartingRouter(**options))
        return routers[-1]

    yield start
    for router in routers:
        router.stop()


def test_router_restarting_mid_pass_later_requests_succeed_on_new_connections(
        restarting_router, tmp_path, cli):
    router = restarting_router()
    texts = [f"prompt {i}" for i in range(10)] + ["die"] + [f"later {i}" for i in range(30)]
    corpus = write_corpus(tmp_path / "corpus.json", texts)
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1,4", "--warmup", "0")
    assert result.code == 1 and "Traceback" not in result.err
    for item in json.loads(out.read_text())["passes"]:
        by_text = {texts[r["id"]]: r for r in item["requests"]}
        summary = item["summary"]
        assert summary["requests"] == len(texts)
        assert summary["ok"] + sum(summary["errors"].values()) == len(texts)
        assert by_text["die"]["error"] == "reset"
        # the dying request, and at most one on each other worker's dead connection
        assert summary["errors"]["reset"] <= item["concurrency"]
        assert set(summary["errors"]) == {"reset"}
        # after the restart every worker reconnected: the last prompts all succeeded
        assert all(by_text[f"later {i}"]["error"] is None for i in range(20, 30))
    assert "errors in Sequential: reset 1" in result.out


def test_router_dying_for_good_fails_the_rest_of_the_pass_but_keeps_the_file(
        restarting_router, tmp_path, cli):
    router = restarting_router()
    texts = ["one", "two", "die forever", "three", "four"]
    corpus = write_corpus(tmp_path / "corpus.json", texts)
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0")
    assert result.code == 1
    item = json.loads(out.read_text())["passes"][0]
    # the dying request's connection was reused and closed before any answer: it is sent once
    # more on a new connection, which the closed port refuses
    assert [r["error"] for r in item["requests"]] == [None, None, "connect", "connect", "connect"]
    assert [r.get("retried", False) for r in item["requests"]] == [False, False, True, False,
                                                                  False]
    assert item["summary"]["errors"] == {"connect": 3}
    assert "errors in Sequential: connect 3" in result.out


def test_wrong_path_says_which_url_was_used(fault_server, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["hello"])
    url = fault_server.url + "/api/v1/route/preview"
    result = cli("run", "--url", url, "--corpus", corpus, "--out", tmp_path / "run.json",
                 "--label", "x", "--concurrency", "1", "--warmup", "0")
    assert result.code == 2 and not (tmp_path / "run.json").exists()
    assert result.err == (f"router-latency: error: router at {url} answered HTTP 404 Not Found "
                          f"to a preview: is the path right? (a URL without a path gets "
                          f"/api/v1/routing/preview) (--url)\n")


class TLSRouter(ThreadingHTTPServer):
    daemon_threads = True


class PreviewHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as Go's net/http: no head-and-body stall

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(OK_BODY)))
        self.end_headers()
        self.wfile.write(OK_BODY)


@pytest.fixture
def tls_router():
    server = TLSRouter(("127.0.0.1", 0), PreviewHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(DATA / "localhost.crt", DATA / "localhost.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_https_certificates_are_verified_by_default(tls_router, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["hello"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", tls_router, "--corpus", corpus, "--out", out, "--label", "x")
    assert result.code == 2 and not out.exists()
    assert "TLS failed: self-signed certificate" in result.err or \
        "TLS failed: self signed certificate" in result.err
    assert "--insecure skips the certificate check" in result.err


def test_insecure_is_recorded_and_rounds_says_so(tls_router, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(DATA / "localhost.crt"))
    corpus = write_corpus(tmp_path / "corpus.json", ["hello", "world"])
    for number in (1, 2, 3):
        for side in ("cpu", "gpu"):
            out = tmp_path / f"r{number}-{side}.json"
            extra = ["--insecure"] if side == "gpu" else []
            assert cli("run", "--url", tls_router, "--corpus", corpus, "--out", out, "--label",
                       side, "--concurrency", "1", "--warmup", "0", "--quiet", *extra).code == 0
    assert json.loads((tmp_path / "r1-gpu.json").read_text())["insecure"] is True
    assert json.loads((tmp_path / "r1-cpu.json").read_text())["insecure"] is False
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert ("warning: TLS certificates were not verified (--insecure) in r1-gpu.json, "
            "r2-gpu.json, r3-gpu.json") in result.out


def test_https_run_with_a_trusted_certificate(tls_router, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(DATA / "localhost.crt"))
    corpus = write_corpus(tmp_path / "corpus.json", ["hello"])
    out = tmp_path / "run.json"
    assert cli("run", "--url", tls_router, "--corpus", corpus, "--out", out, "--label", "x",
               "--concurrency", "1", "--quiet").code == 0
    assert json.loads(out.read_text())["passes"][0]["summary"]["ok"] == 1


def test_a_full_disk_leaves_the_previous_file_and_rescues_the_measurements(
        simulator, tmp_path, cli, monkeypatch):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["hello"])
    out = tmp_path / "run.json"
    out.write_text("previous run")
    rescue_dir = tmp_path / "rescue"
    rescue_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(rescue_dir))
    real_fsync = os.fsync

    def full_disk(fd):
        if os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == str(tmp_path):
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--force")
    assert result.code == 2
    assert out.read_text() == "previous run"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.json")] == []
    rescued = list(rescue_dir.glob("router-latency-run-*.json"))
    assert len(rescued) == 1
    assert json.loads(rescued[0].read_text())["passes"][0]["summary"]["ok"] == 1
    assert result.err.splitlines()[-1] == (
        f"router-latency: error: cannot write: No space left on device; any previous file is "
        f"untouched ({out}); the measurements were saved to {rescued[0]}")


def test_a_rescue_copy_that_cannot_be_written_whole_is_removed(simulator, tmp_path, cli,
                                                              monkeypatch):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["hello"])
    out = tmp_path / "out" / "run.json"
    out.parent.mkdir()
    rescue_dir = tmp_path / "rescue"
    rescue_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(rescue_dir))

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0")
    assert result.code == 2
    assert list(rescue_dir.iterdir()) == [] and list(out.parent.iterdir()) == []
    assert result.err.splitlines()[-1].endswith(
        "the measurements could not be saved anywhere (No space left on device)")


def test_write_atomic_on_a_read_only_folder(tmp_path, monkeypatch):
    target = tmp_path / "file.json"
    target.write_text("old")

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(RouterLatencyError, match="cannot write: Read-only file system"):
        write_atomic(str(target), b"new")
    assert target.read_text() == "old"


@pytest.mark.parametrize("data", [b'{"passes": []}\n', [b'{"passes": ', b"[]}", b"\n"]])
def test_a_written_file_reaches_the_disk_before_it_replaces_the_old_one(tmp_path, monkeypatch,
                                                                       data):
    # durability, not a full disk: the new file's whole bytes are synced before the rename
    # that makes them the file, and the folder (the rename itself) after it; a crash between
    # leaves the old file or the whole new one, never an empty or a cut one under the name
    target = tmp_path / "run.json"
    target.write_text("previous run")
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        name = os.readlink(f"/proc/self/fd/{fd}")
        events.append(("fsync", name, None if os.path.isdir(name) else Path(name).read_bytes()))
        return real_fsync(fd)

    def replace(source, destination, *args, **kwargs):
        events.append(("replace", str(source), str(destination)))
        return real_replace(source, destination, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_atomic(str(target), data)
    whole = data if isinstance(data, bytes) else b"".join(data)
    assert target.read_bytes() == whole
    renames = [i for i, e in enumerate(events) if e[0] == "replace"]
    assert len(renames) == 1
    _, temporary, destination = events[renames[0]]
    assert destination == str(target) and Path(temporary).parent == tmp_path
    assert ("fsync", temporary, whole) in events[:renames[0]]
    assert ("fsync", str(tmp_path), None) in events[renames[0] + 1:]


def test_an_output_named_by_an_open_file_of_the_process_is_appended_to(tmp_path):
    # `--json /dev/stdout` into a `> out.txt` of the shell: what was printed before is kept
    path = tmp_path / "out.txt"
    with open(path, "wb") as handle:
        handle.write(b"printed before\n")
        handle.flush()
        write_atomic(f"/proc/self/fd/{handle.fileno()}", b"the report\n")
    assert path.read_bytes() == b"printed before\nthe report\n"


def write_expecting_corpus(path, prompts):
    """Write a corpus of (text, expect) prompts; expect None declares nothing."""
    document = {"schema": CORPUS_SCHEMA, "source": {"repo": "test"}, "files": {},
                "prompts": [{"id": i, "text": text, "source": "test",
                             **({"expect": expect} if expect is not None else {})}
                            for i, (text, expect) in enumerate(prompts)]}
    Path(path).write_bytes(corpus_bytes(document))
    return str(path)


def test_default_corpus_runs_clean_against_a_router_enforcing_the_input_rules(
        simulator, tmp_path, cli):
    # simulate routes whitespace-only text, as the current router does (services/errors.go);
    # the shipped whitespace_only case accepts that as well as an older router's 400
    repo = tmp_path / "repo"
    (repo / "e2e" / "testdata").mkdir(parents=True)
    (repo / "e2e" / "testdata" / "cases.json").write_text('[{"query": "What is 2+2?"}]')
    corpus = tmp_path / "corpus.json"
    assert cli("corpus", "--repo", repo, "--out", corpus).code == 0
    texts = [p.text for p in load_corpus(str(corpus)).prompts]
    blank = next(i for i, text in enumerate(texts) if not text.strip())
    out = tmp_path / "run.json"
    # 10 ms an answer: each prompt is sent once a pass, and in no time whether it came back
    # faster later would be noise, which can read as a result cache (cache.timing_cache_test)
    result = cli("run", "--url", simulator(delay_ms=10).url, "--corpus", corpus, "--out", out,
                 "--label", "x")
    assert result.code == 0 and result.err == ""
    document = json.loads(out.read_text())
    assert document["warmup"]["errors"] == {}
    for item in document["passes"]:
        assert item["summary"]["errors"] == {} and "rejected" not in item["summary"]
        assert item["summary"]["ok"] == len(texts)
        routed = next(r for r in item["requests"] if r["id"] == blank)
        assert (routed["status"], routed["error"], routed.get("outcome")) == (200, None, None)
    run = load_run(str(out))
    assert blank in run.passes[0].decisions and len(run.passes[0].decisions) == len(texts)


def test_expectations_surprises_and_failures(fault_server, tmp_path, cli):
    corpus = write_expecting_corpus(tmp_path / "corpus.json", [
        ("fine", "http_4xx"), ("status:400", "http_4xx"), ("status:503", "http_4xx"),
        ("status:404", None), (" \t", ["routed", "http_4xx"]), ("status:429", "http_4xx")])
    out = tmp_path / "run.json"
    result = cli("run", "--url", fault_server.url, "--corpus", corpus, "--out", out, "--label",
                 "x", "--concurrency", "1", "--warmup", "0")
    assert result.code == 1  # the 503, the 404 and the 429 are failures; the rest are not
    item = json.loads(out.read_text())["passes"][0]
    by_id = {r["id"]: r for r in item["requests"]}
    assert by_id[0]["outcome"] == "unexpected_routing" and by_id[0]["decision"] == "ok"
    assert by_id[1]["outcome"] == "expected_rejection" and by_id[1]["error"] is None
    assert by_id[2]["error"] == "http_5xx" and "outcome" not in by_id[2]
    assert by_id[3]["error"] == "http_4xx"
    assert "outcome" not in by_id[4] and by_id[4]["decision"] == "ok"  # routed: accepted
    assert by_id[5]["error"] == "http_4xx"  # shedding is never an expected rejection
    summary = item["summary"]
    assert (summary["ok"], summary["rejected"], summary["errors"]) == (
        2, 1, {"http_4xx": 2, "http_5xx": 1})
    assert "expected rejections in Sequential: 1 (HTTP 400 1)" in result.out
    assert "surprise in Sequential: 1 prompt expected a rejection and got routed: #0 ok" \
        in result.out
    assert result.err == "router-latency: 3 requests failed (--max-errors 0)\n"


def test_overloaded_answers_name_their_code_and_the_setting(simulator, tmp_path, cli):
    router = simulator(delay_ms=30_000, max_concurrency=1)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b", "c"])
    out = tmp_path / "run.json"
    with hold_a_slot(router):
        result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label",
                     "x", "--concurrency", "1,2", "--warmup", "0", "--timeout", "10",
                     "--router-max-concurrency", "1")
    assert result.code == 1
    document = json.loads(out.read_text())
    assert document["settings"]["router_max_concurrency"] == 1
    for item in document["passes"]:
        assert {(r["status"], r["error"], r["code"]) for r in item["requests"]} == {
            (429, "http_4xx", "OVERLOADED")}
        assert item["summary"]["error_codes"] == {"http_4xx": {"OVERLOADED": 3}}
    assert "errors in Sequential: http_4xx: OVERLOADED 3" in result.out
    assert "errors in Conc 2: http_4xx: OVERLOADED 3" in result.out
    err = result.err.splitlines()
    assert err[0] == ("router-latency: Conc 2: 2 callers but the router admits 1 previews at "
                      "once (global.services.api.routing_preview.max_concurrency, declared with "
                      "--router-max-concurrency); it sheds the rest at once with 429 OVERLOADED")
    assert err[1].startswith("router-latency: 6 requests answered 429 OVERLOADED: the router "
                             "admits at most global.services.api.routing_preview."
                             "max_concurrency previews at once (default 16, declared 1")
    assert "the client's --timeout (10 s here)" in err[2]
    assert err[3] == "router-latency: 6 requests failed (--max-errors 0)"


def test_run_records_the_config_hash_of_every_pass(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", TEXTS[:2])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1,2", "--warmup", "0")
    assert result.code == 0 and result.err == ""
    assert [p["config_hashes"] for p in json.loads(out.read_text())["passes"]] == \
        [[router.config_hash]] * 2
    assert f"config: x-vsr-config-hash {router.config_hash}\n" in result.out


class ReloadingHandler(PreviewHandler):
    """Answers every preview, its x-vsr-config-hash switching after the third: a router whose
    configuration is reloaded in the middle of a run."""

    HASHES = ("1" * 64, "2" * 64)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.answered += 1
            value = self.HASHES[self.server.answered > 3]
        self.send_response(200)
        self.send_header("x-vsr-config-hash", value)
        self.send_header("Content-Length", str(len(OK_BODY)))
        self.end_headers()
        self.wfile.write(OK_BODY)


def test_a_configuration_reload_mid_run_is_recorded_and_warned_about(tmp_path, cli):
    server = ThreadingHTTPServer(("127.0.0.1", 0), ReloadingHandler)
    server.daemon_threads, server.lock, server.answered = True, threading.Lock(), 0
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b", "c", "d", "e"])
    out = tmp_path / "run.json"
    try:  # one caller: the third answer is the last of the first configuration
        result = cli("run", "--url", f"http://127.0.0.1:{server.server_address[1]}", "--corpus",
                     corpus, "--out", out, "--label", "x", "--concurrency", "1", "--warmup",
                     "0")
    finally:
        server.shutdown()
        server.server_close()
    assert result.code == 0
    passes = json.loads(out.read_text())["passes"]
    assert [p["config_hashes"] for p in passes] == [["1" * 64, "2" * 64]]
    assert result.err == ("router-latency: warning: the router's configuration changed during "
                          "the run (x-vsr-config-hash 111111111111 then 222222222222): a reload "
                          "in the middle of the measurement; its passes mix configurations\n")
    assert f"config: x-vsr-config-hash {'1' * 64} then {'2' * 64}" in result.out


def test_a_signal_while_the_file_is_written_changes_neither_file_nor_exit_code(
        fault_server, tmp_path, cli, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.json", ["fine", "status:500"])
    out = tmp_path / "run.json"
    real_write = write_atomic

    def signalled_write(path, data):
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the next line runs
        return real_write(path, data)

    monkeypatch.setattr("router_latency.command_run.write_atomic", signalled_write)
    outside = []  # a signal the tool no longer handles would end the process: caught here
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: outside.append(signum))
    try:
        result = cli("run", "--url", fault_server.url, "--corpus", corpus, "--out", out,
                     "--label", "x", "--concurrency", "1", "--warmup", "0", "--quiet")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert outside == []
    # the run was measured whole before the signal: the file says so, and --max-errors 0
    # still fails the failed request
    assert result.code == 1
    assert json.loads(out.read_text())["complete"] is True


@pytest.mark.parametrize("body, said", [
    (b'{"result": {"route": "math", "score": 0.9}}',
     '--decision-path result.route would read it ("math"); or classifiers not loaded yet?'),
    (b'{"routing": {"decision": {"name": "code"}, "model": "m1"}}',
     '--decision-path routing.decision.name would read it ("code"); or classifiers not loaded '
     'yet?'),
    (b'{"selected_category": "biology"}',
     '--decision-path selected_category would read it ("biology"); or classifiers not loaded '
     'yet?'),
    (b'{"ok": true, "score": 1}',
     "classifiers not loaded yet?"),  # nothing that reads as a decision: the router loading
])
def test_a_2xx_answer_without_a_decision_names_the_decision_path_that_reads_it(
        scripted, tmp_path, cli, body, said):
    # the readiness check refuses it, naming where the decision would be
    router = scripted(lambda prompt, number: [final_answer(body)])
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "o.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "3")
    assert result.code == 2 and not out.exists()
    assert result.err == (f"router-latency: error: router at {router.url}{PREVIEW_PATH} is "
                          f"not ready: it answered HTTP 200 OK to a preview with no decision "
                          f"result ({said}); --wait-ready SECONDS waits for a starting router "
                          f"(--url)\n")


GOOD_ANSWER = b'{"decision_result": {"decision_name": "math"}}'


@pytest.mark.parametrize("body, said", [
    # what the issue found: both read "no decision result (classifiers not loaded yet?)"
    (gzip.compress(GOOD_ANSWER, mtime=0),  # no time in it: the same test id on every worker
     "a gzip-compressed body (Content-Encoding: gzip?), which the tool does not decompress"),
    (b'{"decision_result": {"decision_name": "caf\xe9"}}',
     "a body that is not UTF-8 (byte 42 of 46)"),
    # of the same kind: other compressions, not JSON at all, two documents, a cut body
    (zlib.compress(GOOD_ANSWER), "a deflate-compressed body"),
    (b"\x28\xb5\x2f\xfd" + GOOD_ANSWER, "a zstd-compressed body"),
    (b"<html>starting</html>", "a body that is not JSON (Expecting value: character 0 of 21)"),
    (GOOD_ANSWER + b"\n" + GOOD_ANSWER, "a body that is more than one JSON document (more "
                                         "after character 47 of 93)"),
    (GOOD_ANSWER[:-3], "a body that is not JSON (Unterminated string starting at: character "
                       "38 of 43)"),
])
def test_a_2xx_answer_the_tool_cannot_read_says_what_is_wrong_with_it(
        scripted, tmp_path, cli, body, said):
    router = scripted(lambda prompt, number: [final_answer(body)])
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "o.json"
    # no wait makes such an answer read: refused at the first look, even with --wait-ready
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--wait-ready", "60")
    assert result.code == 2 and not out.exists()
    assert result.err.startswith(f"router-latency: error: router at {router.url}{PREVIEW_PATH} "
                                 f"answered HTTP 200 OK to a preview with {said}"), result.err
    assert result.err.count("\n") == 1 and "classifiers" not in result.err
    assert router.requests <= 2  # /ready and one preview: no waiting


def test_warm_up_answers_without_a_decision_name_the_decision_path(scripted, tmp_path, cli):
    # the readiness preview routed; the corpus's prompts are answered elsewhere in the body
    def answer(prompt, number):
        if prompt == "hello":
            return [final_answer()]
        return [final_answer(b'{"result": {"route": "math"}}')]
    router = scripted(answer)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "o.json",
                 "--label", "x", "--concurrency", "1", "--warmup", "3")
    assert result.code == 1
    assert ("warning: 3 warm-up answers without a decision at decision_result.decision_name|"
            "routing_decision|decision: --decision-path result.route would read it "
            "(\"math\")\n") in result.err


def test_plan_passes_gives_every_pass_the_model_s_length_and_the_open_loop_its_arrival():
    model = PassPlan("", 8, arrival="poisson", seed=3, repeat=2)
    assert plan_passes((1, 4), (10.0, 20.5), model=model) == (
        PassPlan("sequential", 1, repeat=2), PassPlan("c4", 4, repeat=2),
        PassPlan("r10", 8, 10.0, "poisson", 3, 2),
        PassPlan("r20.5", 8, 20.5, "poisson", 3, 2))
    timed = plan_passes((16,), (5.0,), model=PassPlan("", 64, duration=3.0))
    assert [(p.connections, p.rate, p.arrival, p.repeat, p.duration) for p in timed] == [
        (16, None, "constant", 1, 3.0), (64, 5.0, "constant", 1, 3.0)]
    assert plan_passes() == tuple(PassPlan(pass_name(c), c) for c in (1, 4, 16))


def test_each_run_context_has_its_own_stop_flag_and_progress_line():
    target = Target(parse_endpoint("http://127.0.0.1:9/"))
    first, second = (RunContext(target, RunPlan(plan_passes((1,)))) for _ in "ab")
    first.stop.set()  # a run interrupted must not stop the next one
    assert not second.stop.is_set() and first.progress is not second.progress
    assert not first.progress.enabled and first.notify("nothing heard") is None


def test_long_prompts_at_the_end_are_no_slow_phase():
    passes = length_passes(LENGTHS)
    for item in passes:
        last = len(item.attempt.windows) - 1
        assert last in slow_windows(item.attempt.windows, THRESHOLDS)  # the pass alone
        assert content_slow_windows(item, passes, THRESHOLDS) == ()
    assert slow_phase_warnings(passes, THRESHOLDS) == []


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


def test_the_progress_line_shows_what_the_router_waits_for(double, tmp_path, quick_ready_poll):
    from router_latency.measuring import measure_run, plan_passes, RunContext, RunPlan
    from router_latency.corpus import load_corpus
    router = double(newer=True, unready=2, unavailable=2)
    stream = io.StringIO()
    corpus = load_corpus(write_corpus(tmp_path / "corpus.json", PROMPTS[:2]))
    run = measure_run(RunContext(Target(parse_endpoint(router.url)),
                                 RunPlan(plan_passes((1,)), warmup=0, wait_ready=20.0),
                                 progress=Progress(enabled=True, stream=stream)),
                      corpus, label="x")
    assert run is not None and run.ready_after_s is not None
    drawn = stream.getvalue()
    assert "\rwaiting for the router (0 of 20 s): it answered HTTP 503 Service Unavailable " \
           "to /ready (phase downloading_models; " in drawn
    assert " of 3 models ready; pending: " in drawn and "pii-detector)" in drawn
    assert "CLASSIFIER_UNAVAILABLE" in drawn and "\rrouter ready after " in drawn
