"""run: the real CLI against loopback servers."""

import io
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import router_latency as rl
from conftest import TOOL, FaultServer, write_corpus

TEXTS = ["What is 2+2?", "Explain DNS", "Write a haiku", "¿Qué hora es?", "😀", "a\u0000b"]


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
    assert document["warmup"] == {"requests": 3, "ok": 3, "errors": {}}
    assert [p["concurrency"] for p in document["passes"]] == [1, 4, 16]
    decisions = {i: rl.simulated_decision(t, ("math", "code", "general", "pii_block"))
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
            rl.percentile([r["latency_ms"] for r in item["requests"]], 50), abs=1e-3)
    lines = result.out.splitlines()
    assert lines[1].split() == ["pass", "requests", "ok", "errors", "p50_ms", "p95_ms",
                                "p99_ms", "mean_ms", "req/s", "wall_s"]
    assert [line.split()[0] for line in lines[2:5]] == ["Sequential", "Conc", "Conc"]
    assert lines[-1] == f"wrote {out}"
    assert rl.load_run(str(out)).pass_named("c16").summary.ok == len(TEXTS)


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
    result = cli("run", "--url", fault_server.url, "--corpus", corpus, "--out", out, "--label",
                 "x", "--concurrency", "1,4", "--timeout", "0.5", "--warmup", "0")
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
    run = rl.load_run(str(out))
    assert all(p.discarded for p in run.passes)


def test_run_keeps_a_pass_that_ran_under_the_limit(simulator, tmp_path, cli):
    result, document, _ = run_under_load(cli, simulator(delay_ms=0), tmp_path,
                                         "12.5 1 1 1/1 1\n", "--concurrency", "1", "--quiet")
    assert result.code == 0
    item = document["passes"][0]
    assert item["discarded"] is False
    assert item["load"] == {"start": 12.5, "end": 12.5, "min": 12.5, "max": 12.5, "samples": 2}
    assert item["discarded_attempts"] == []


def test_run_waits_for_a_router_that_starts_late(tmp_path, cli):
    server = FaultServer()
    port = server.server_address[1]
    server.server_close()  # the port is free again until the "router" starts on it
    corpus = write_corpus(tmp_path / "corpus.json", ["fine"])
    out = tmp_path / "run.json"
    started = []

    def start_later():
        time.sleep(0.5)
        late = FaultServer(port)
        started.append(late)
        late.serve_forever(poll_interval=0.05)

    threading.Thread(target=start_later, daemon=True).start()
    try:
        result = cli("run", "--url", f"http://127.0.0.1:{port}", "--corpus", corpus, "--out",
                     out, "--label", "x", "--concurrency", "1", "--wait-ready", "10", "--quiet")
    finally:
        for late in started:
            late.shutdown()
            late.server_close()
    assert result.code == 0
    assert json.loads(out.read_text())["ready_after_s"] >= 0.3


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
                 "--label", "x", "--wait-ready", "0.3")
    assert result.code == 2 and "router not ready after 0.3 s" in result.err


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_run_interrupted_saves_what_was_measured(simulator, tmp_path, signum, code):
    router = simulator(delay_ms=20)
    corpus = write_corpus(tmp_path / "corpus.json", [f"prompt {i}" for i in range(200)])
    out = tmp_path / "run.json"
    process = subprocess.Popen([sys.executable, str(TOOL), "run", "--url", router.url,
                                "--corpus", corpus, "--out", str(out), "--label", "x",
                                "--warmup", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 20
    while router.served < 5 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr
    document = json.loads(out.read_text())
    assert document["complete"] is False
    first = document["passes"][0]
    assert first["interrupted"] is True
    assert 0 < first["summary"]["requests"] < 200
    assert "(incomplete: interrupted)" in stdout


class TerminalStream(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_only_on_a_terminal(simulator, tmp_path, monkeypatch):
    router = simulator(delay_ms=1)
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(40)])
    terminal = TerminalStream()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert rl.main(["run", "--url", router.url, "--corpus", corpus, "--out",
                    str(tmp_path / "a.json"), "--label", "x", "--concurrency", "1",
                    "--warmup", "0"]) == 0
    assert re.search(r"\rSequential: 40/40 +[\d,]+ req/s \n", terminal.getvalue())
    quiet = TerminalStream()
    monkeypatch.setattr(sys, "stderr", quiet)
    assert rl.main(["run", "--url", router.url, "--corpus", corpus, "--out",
                    str(tmp_path / "b.json"), "--label", "x", "--concurrency", "1",
                    "--warmup", "0", "--quiet"]) == 0
    assert quiet.getvalue() == ""
    piped = io.StringIO()  # not a terminal: no progress line
    monkeypatch.setattr(sys, "stderr", piped)
    assert rl.main(["run", "--url", router.url, "--corpus", corpus, "--out",
                    str(tmp_path / "c.json"), "--label", "x", "--concurrency", "1",
                    "--warmup", "0"]) == 0
    assert piped.getvalue() == ""


def test_interrupted_while_waiting_for_the_router_writes_nothing(tmp_path):
    port = closed_port()
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "run.json"
    process = subprocess.Popen([sys.executable, str(TOOL), "run", "--url",
                                f"http://127.0.0.1:{port}", "--corpus", corpus, "--out",
                                str(out), "--label", "x", "--wait-ready", "30"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.8)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130 and "Traceback" not in stderr
    assert not out.exists()


def test_interrupt_does_not_wait_for_a_slow_router(simulator, tmp_path):
    router = simulator(delay_ms=20_000)  # every answer would take 20 s
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "run.json"
    process = subprocess.Popen([sys.executable, str(TOOL), "run", "--url", router.url,
                                "--corpus", corpus, "--out", str(out), "--label", "x",
                                "--warmup", "0", "--concurrency", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while router.served < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=15)  # far less than the 20 s answers
    assert process.returncode == 130, stderr
    item = json.loads(out.read_text())["passes"][0]
    assert item["interrupted"] is True and item["summary"]["requests"] == 0
