"""Tests of command_run.py: run: its parser, its argument types, its arguments mapped, its
handler."""

import json
import re
import socket
import threading
import urllib.parse
import urllib.request

import pytest

from router_latency.constants import PREVIEW_PATH
from router_latency.corpus import load_corpus
from router_latency.phases import slow_windows
from router_latency.runfile import load_run
from router_latency.client import parse_endpoint
from router_latency.meaning import classify
from router_latency.passloop import Target
from router_latency.readiness import wait_until_ready
from router_latency.simulator import SimulatedAnswers
from router_latency.rounds import not_found_only
from router_latency.command_run import run_warnings
from conftest import (answer_with_head, assert_one_line_error, default_route_server, fake_docker,
                      final_answer, HASH, OK, PROMPTS, run_sampled, run_with, ScriptedServer,
                      write_corpus)

# its runs write files only to read them back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


def test_bad_capture_options(tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    base = ["run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
            tmp_path / "o.json", "--label", "x"]
    for extra, message in ((["--probe", "no equals sign"], "--probe"),
                           (["--metric", "("], "not a regular expression"),
                           (["--metrics-url", "ftp://x"], "(--metrics-url)"),
                           (["--router-cgroup", str(tmp_path / "none")], "not a cgroup folder"),
                           (["--router-pid", "0"], "--router-pid"),
                           (["--gpu", "intel"], "--gpu"),
                           (["--gpu-index", "first"], "expected GPU indexes"),
                           (["--router-cpus", "7-3"], "expected a CPU list such as 0-11,24"),
                           (["--router-pid", "1", "--router-container", "r"],
                            "not allowed with argument --router-pid"),
                           (["--window", "0"], "--window"),
                           (["--slow-p95", "0"], "--slow-p95"),
                           (["--max-foreign-cpus", "-1"], "--max-foreign-cpus")):
        result = cli(*base, *extra)
        assert result.code == 2 and message in result.err and result.err.count("\n") == 1


def test_router_container_errors_are_one_line(tmp_path, cli, monkeypatch):
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    monkeypatch.setenv("PATH", f"{bin_folder}:/usr/bin:/bin")
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    base = ["run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
            tmp_path / "o.json", "--label", "x", "--router-container", "semantic-router"]
    result = cli(*base)
    assert result.code == 2 and result.err == (
        "router-latency: error: docker is not on PATH; --router-cgroup PATH or --router-pid PID "
        "read the router without it (--router-container)\n")
    fake_docker(bin_folder, "", code=1)
    result = cli(*base)
    assert result.code == 2 and result.err == (
        "router-latency: error: docker inspect semantic-router failed: Error: No such object: "
        "x (--router-container)\n")
    assert not (tmp_path / "o.json").exists()


HASH_A, HASH_B = "a" * 64, "b" * 64


BAD_ANSWERS = {
    "long length": [b"HTTP/1.1 200 OK\r\nContent-Length: " + b"7" * 5000 + b"\r\n\r\n{}"],
    "long status": [b"HTTP/1.1 " + b"2" * 4500 + b" OK\r\nContent-Length: 2\r\n\r\n{}"],
    "deep json": [final_answer(b"[" * 100_000 + b"]" * 100_000)],
    "hex prefix": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n"],
    "bytewise": [bytes([b]) for b in b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"],
    "huge head": [b"HTTP/1.1 200 OK\r\nX: " + b"y" * 4096] * 20,
}


def test_malformed_answers_are_failed_requests_and_the_pass_goes_on(scripted, tmp_path, cli):
    prompts = ["good a", *BAD_ANSWERS, "good b"]

    def answer(prompt, _):
        if prompt in BAD_ANSWERS:
            return BAD_ANSWERS[prompt]
        return [final_answer()]

    server = scripted(answer)
    corpus = write_corpus(tmp_path / "corpus.json", prompts)
    out = tmp_path / "run.json"
    result = cli("run", "--url", server.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1,2", "--warmup", "0")
    assert result.code == 1 and "Traceback" not in result.err  # failed requests, not a crash
    assert f"{2 * len(BAD_ANSWERS)} requests failed" in result.err
    document = json.loads(out.read_text())
    assert document["complete"] is True
    for item in document["passes"]:
        by_prompt = {prompts[r["id"]]: r for r in item["requests"]}
        assert by_prompt["good a"]["error"] is None and by_prompt["good b"]["error"] is None
        for name in BAD_ANSWERS:
            assert by_prompt[name]["error"] == "malformed", name
            assert by_prompt[name]["reason"], name
        assert "nested deeper" in by_prompt["deep json"]["reason"]
        assert by_prompt["deep json"]["status"] == 200
        assert item["summary"]["errors"] == {"malformed": len(BAD_ANSWERS)}
    assert f"errors in Sequential: malformed {len(BAD_ANSWERS)}" in result.out
    assert re.search(r"^malformed answers in Sequential: .+ \(1\) and 5 other reasons$",
                     result.out, re.M)
    assert load_run(str(out)).passes[0].requests[1].reason  # the reader takes it back


def test_any_exception_while_classifying_is_that_requests_failure(scripted, tmp_path, cli,
                                                                  monkeypatch):
    def failing_classify(status, body, *given, **options):
        if b"boom" in body:
            raise ZeroDivisionError("a reader nobody foresaw")
        return classify(status, body, *given, **options)

    monkeypatch.setattr("router_latency.answers.classify", failing_classify)
    server = scripted(lambda prompt, _: [final_answer(
        b'{"decision_result": {"decision_name": "%s"}}' % prompt.encode())])
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "boom", "c"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", server.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0", "--max-errors", "1")
    assert result.code == 0, result.err
    requests = json.loads(out.read_text())["passes"][0]["requests"]
    assert [r["error"] for r in requests] == [None, "malformed", None]
    assert requests[1]["reason"] == "ZeroDivisionError: a reader nobody foresaw"


def test_a_reload_during_the_warm_up_is_recorded_and_warned(scripted, tmp_path, cli):
    seen = []

    def answer(prompt, _):
        seen.append(prompt)
        # readiness (/ready, then a preview) and the first warm-up: A
        value = HASH_A if len(seen) <= 3 else HASH_B
        return [answer_with_head([b"X-Vsr-Config-Hash: " + value.encode(),
                                  b"Content-Length: %d" % len(OK)])]

    server = scripted(answer)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", server.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "3")
    assert result.code == 0
    document = json.loads(out.read_text())
    assert document["warmup"]["config_hashes"] == [HASH_A, HASH_B]
    assert "configuration changed during the run" in result.err
    assert load_run(str(out)).config_hashes == (HASH_A, HASH_B)


def test_a_corpus_with_a_key_twice_is_refused(tmp_path, cli):
    path = tmp_path / "corpus.json"
    path.write_text('{"schema": "router-latency/corpus/1", "prompts": '
                    '[{"id": 0, "text": "a", "text": "b"}]}')
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", path, "--out",
                 tmp_path / "r.json", "--label", "x", "--check")
    assert_one_line_error(result, "the key 'text' appears twice", str(path))


TOKEN = "tok-5ecret-Zq7x-0123456789"


HEADER_VALUE = "hdr-5ecret-98765"


def test_probes_run_without_the_token_and_texts_are_scrubbed(simulator, tmp_path, cli,
                                                             monkeypatch):
    monkeypatch.setenv("RL_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("RL_TEST_COPY", f"copy {TOKEN} and {HEADER_VALUE}")
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0", "--token-env", "RL_TEST_TOKEN",
                 "--header", f"X-Api-Key: {HEADER_VALUE}",
                 "--probe", "env=env", "--probe", f"echo=echo {HEADER_VALUE}; echo $RL_TEST_COPY")
    assert result.code == 0, result.err
    text = out.read_text()
    assert TOKEN not in text and HEADER_VALUE not in text
    probes = json.loads(text)["passes"][0]["environment"]["probes"]["before"]
    assert "RL_TEST_TOKEN=" not in probes["env"]["stdout"]
    assert "RL_TEST_COPY=copy [hidden] and [hidden]" in probes["env"]["stdout"]
    assert probes["echo"]["stdout"] == "[hidden]\ncopy [hidden] and [hidden]\n"
    assert TOKEN not in result.out + result.err and HEADER_VALUE not in result.out + result.err


def test_an_error_message_never_shows_a_header_value(scripted, tmp_path, cli):
    secret = "s3cr3t-hdr"
    server = scripted(lambda prompt, _: [b"HTTP/1.1 %s OK\r\n\r\n" % secret.encode()])
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", server.url, "--corpus", corpus, "--out", tmp_path / "r.json",
                 "--label", "x", "--header", f"X-Key: {secret}")
    assert_one_line_error(result, "cannot read", "status code")
    assert secret not in result.err and "[hidden]" in result.err


@pytest.mark.parametrize("url,hidden", [
    ("http://user:Zq7x#9@127.0.0.1:9/", "Zq7x"),
    ("http://user:Qw/Zq7x@127.0.0.1:9/", "Qw"),
    ("http://user:Zq7x?q@127.0.0.1:9/", "Zq7x"),
    ("http://user:1234#Zq7x@127.0.0.1:9/", "1234"),
    ("http://Zq7xUser:p@w#@127.0.0.1:9/", "Zq7xUser"),
])
def test_url_messages_quote_nothing_from_the_userinfo(tmp_path, cli, url, hidden):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", url, "--corpus", corpus, "--out", tmp_path / "r.json",
                 "--label", "x", "--check")
    assert result.code == 2 and hidden not in result.err + result.out, result.err


def test_metric_labels_are_scrubbed_and_gpu_tools_run_without_the_token(
        scripted, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("RL_TEST_TOKEN", TOKEN)
    scrapes = []
    seen_env = tmp_path / "gpu-env"
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(f"#!/bin/sh\nenv > '{seen_env}'\necho 'not csv'\n")
    (tools / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")

    def answer(prompt, _):
        if prompt:  # a preview
            return [final_answer()]
        scrapes.append(1)
        text = f'rl_errors_total{{key="{TOKEN}",h="{HEADER_VALUE}"}} {len(scrapes)}\n'.encode()
        return [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text)]

    server = scripted(answer)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", server.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0", "--token-env", "RL_TEST_TOKEN",
                 "--header", f"X-Api-Key: {HEADER_VALUE}", "--metrics-url",
                 f"{server.url}/metrics", "--gpu", "nvidia")
    assert result.code == 0, result.err
    text = out.read_text()
    assert TOKEN not in text and HEADER_VALUE not in text
    deltas = json.loads(text)["passes"][0]["environment"]["metrics"]["deltas"]
    assert deltas == {'rl_errors_total{h="[hidden]",key="[hidden]"}': 1.0} or deltas == {
        'rl_errors_total{key="[hidden]",h="[hidden]"}': 1.0}
    assert seen_env.exists() and "RL_TEST_TOKEN" not in seen_env.read_text()


def test_error_codes_and_decisions_quoting_a_secret_are_scrubbed(scripted, tmp_path, cli,
                                                                 monkeypatch):
    monkeypatch.setenv("RL_TEST_TOKEN", TOKEN)
    answers = {
        "code": final_answer(b'{"error": {"code": "BAD_%s", "message": "m"}}' % TOKEN.encode(),
                             b"401 Unauthorized"),
        "code5": final_answer(b'{"error": {"code": "%s"}}' % HEADER_VALUE.encode(),
                              b"500 Internal Server Error"),
        "decision": final_answer(
            b'{"decision_result": {"decision_name": "d-%s"}}' % TOKEN.encode()),
    }
    server = scripted(lambda prompt, _: [answers.get(prompt, final_answer())])
    corpus = write_corpus(tmp_path / "corpus.json", ["a", *answers])
    out, csv = tmp_path / "run.json", tmp_path / "run.csv"
    result = cli("run", "--url", server.url, "--corpus", corpus, "--out", out, "--csv", csv,
                 "--label", "x", "--concurrency", "1", "--warmup", "0", "--token-env",
                 "RL_TEST_TOKEN", "--header", f"X-Api-Key: {HEADER_VALUE}", "--max-errors", "9")
    assert result.code == 0, result.err
    for text in (out.read_text(), csv.read_text(), result.out + result.err):
        assert TOKEN not in text and HEADER_VALUE not in text
    requests = json.loads(out.read_text())["passes"][0]["requests"]
    assert [r.get("code") for r in requests[1:3]] == ["BAD_hidden", "hidden"]
    assert requests[3]["decision"] == "d-[hidden]"
    assert load_run(str(out)).passes[0].requests[1].code == "BAD_hidden"  # read back


QUOTED_TOKEN = 'tok_7c1e9a4b2d8f"q\\z<&>'  # a " and a \ in it, and Go's HTML escapes


PASSWORD = "p\\\u00c4-secret"  # p\Ä-secret: \ and a non-ASCII letter


def forms_of(secret):
    """The texts a secret may be stored as: itself, JSON-escaped once and twice (Python's ASCII
    escapes, UTF-8, Go's \\u003c), percent-encoded (upper and lower hex), and its first 8
    characters (a cut)."""
    once = [json.dumps(secret, ensure_ascii=a)[1:-1] for a in (True, False)]
    twice = [json.dumps(o, ensure_ascii=a)[1:-1] for o in once for a in (True, False)]
    go = [o.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
          for o in once]
    percent = urllib.parse.quote(secret, safe="")
    return {secret, secret[:8], *once, *twice, *go, percent, percent.lower()} - {""}


def test_secrets_are_scrubbed_in_every_form_and_before_a_cut(scripted, tmp_path, cli,
                                                             monkeypatch):
    decisions = {
        # a long decision whose end is the token: cut at 256 characters, inside the token
        "cut": "x" * 240 + QUOTED_TOKEN,
        # an object holding the token: stored as compact JSON, the token JSON-escaped
        "object": {"key": QUOTED_TOKEN, "pad": "y" * 300},
        "object-short": {"key": QUOTED_TOKEN},
        # a JSON document inside a string: the token escaped twice
        "nested": json.dumps({"inner": QUOTED_TOKEN}),
        # the URL's password as the router echoes it: JSON-escaped, percent-encoded
        "password": {"who": PASSWORD},
        "percent": "pw=" + urllib.parse.quote(PASSWORD, safe=""),
        "percent-lower": "pw=" + urllib.parse.quote(PASSWORD, safe="").lower(),
        "go-escaped": json.dumps(QUOTED_TOKEN)[1:-1].replace("<", "\\u003c")
        .replace(">", "\\u003e").replace("&", "\\u0026"),
    }
    answers = {prompt: final_answer(json.dumps(
        {"decision_result": {"decision_name": decision}}).encode())
        for prompt, decision in decisions.items()}
    server = scripted(lambda prompt, _: [answers.get(prompt, final_answer())])
    corpus = write_corpus(tmp_path / "corpus.json", ["a", *answers])
    out, csv = tmp_path / "run.json", tmp_path / "run.csv"
    url = server.url.replace("://", "://someuser:%s@" % urllib.parse.quote(PASSWORD, safe=""))
    result = cli("run", "--url", url, "--corpus", corpus, "--out", out, "--csv", csv,
                 "--label", "x", "--concurrency", "1", "--warmup", "0", "--header",
                 f"X-Api-Key: {QUOTED_TOKEN}")
    assert result.code == 0, result.err
    stored = [r["decision"] for r in json.loads(out.read_text())["passes"][0]["requests"]]
    for text in (out.read_text(), csv.read_text(), result.out + result.err, *stored):
        for secret in (QUOTED_TOKEN, PASSWORD, "someuser"):
            assert not [form for form in forms_of(secret) if form in text], (secret, text)
    assert stored[1] == "x" * 240 + "[hidden]"  # hidden whole before the cut, not cut
    assert stored[2].startswith('{"key":"[hidden]","pad":"yyy') and stored[2].endswith("[cut]")
    assert stored[5] == '{"who":"[hidden]"}' and stored[6] == stored[7] == "pw=[hidden]"


def test_probe_output_is_scrubbed_before_it_is_cut_to_4_kb(simulator, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", simulator(delay_ms=0).url, "--corpus", corpus, "--out", out,
                 "--label", "x", "--concurrency", "1", "--warmup", "0", "--header",
                 f"X-Api-Key: {HEADER_VALUE}", "--probe",
                 f"big=printf '%4085s%s' '' '{HEADER_VALUE}'")  # the 4 KB cut splits it
    assert result.code == 0, result.err
    stdout = json.loads(out.read_text())["passes"][0]["environment"]["probes"]["before"][
        "big"]["stdout"]
    assert stdout == " " * 4085 + "[hidden]" and HEADER_VALUE[:4] not in out.read_text()


def test_a_refusal_message_quoting_the_token_is_scrubbed_before_it_is_cut(scripted, tmp_path,
                                                                         cli, monkeypatch):
    monkeypatch.setenv("RL_TEST_TOKEN", TOKEN)
    body = json.dumps({"error": {"code": "UNAUTHORIZED",
                                 "message": "z" * 140 + " bad token " + TOKEN}}).encode()
    server = scripted(lambda prompt, _: [final_answer(body, b"401 Unauthorized")])
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", server.url, "--corpus", corpus, "--out", tmp_path / "r.json",
                 "--label", "x", "--token-env", "RL_TEST_TOKEN")
    assert result.code == 2 and "HTTP 401" in result.err, result.err
    assert TOKEN[:4] not in result.err and "bad token [hidden]" in result.err, result.err


@pytest.mark.parametrize("load", ["inf", "nan", "-5", "1e308", "9" * 400])
def test_a_load_the_reader_would_refuse_is_no_load_and_the_run_is_kept(simulator, tmp_path,
                                                                        cli, load):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    (tmp_path / "loadavg").write_text(f"{load} 1.0 1.0 1/100 1\n")
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0", "--loadavg-file", tmp_path / "loadavg")
    assert result.code == 0 and "Traceback" not in result.err, result.err  # inf: a traceback
    assert load_run(str(out)).passes[0].attempt.load["start"] is None  # -5: unreadable


@pytest.mark.parametrize("value", ["a\x00b", "a\x01b", "esc\x1b[2J", "del\x7f", "bell\x07"])
def test_a_header_value_with_a_control_character_is_refused(tmp_path, cli, value):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "r.json", "--label", "x", "--header", f"X-A: {value}", "--check")
    assert result.code == 2 and "control character" in result.err, result
    assert value not in result.err


def test_a_secret_in_the_query_of_a_url_is_not_recorded(simulator, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("RL_TEST_TOKEN", TOKEN)
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", f"{router.url}/api/v1/routing/preview?key={HEADER_VALUE}",
                 "--corpus", corpus, "--out", out, "--label", "x", "--concurrency", "1",
                 "--warmup", "0", "--token-env", "RL_TEST_TOKEN", "--header",
                 f"X-Api-Key: {HEADER_VALUE}", "--metrics-url",
                 f"{router.url}/metrics?t={TOKEN}&k={HEADER_VALUE}")
    assert result.code == 0, result.err
    document = json.loads(out.read_text())  # today both URLs kept the values
    assert document["url"].endswith("?key=[hidden]")
    assert document["captures"]["metrics_url"].endswith("?t=[hidden]&k=[hidden]")
    for text in (out.read_text(), result.out + result.err):
        assert TOKEN not in text and HEADER_VALUE not in text


@pytest.mark.parametrize("header", ["Content-Length: 5", "transfer-encoding: chunked",
                                    "TRANSFER-ENCODING: hdr-5ecret-98765"])
def test_a_header_that_frames_the_body_is_refused(tmp_path, cli, header):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "r.json", "--label", "x", "--header", header, "--check")
    # today sent beside the tool's own Content-Length: the router reads another body's end
    assert result.code == 2 and "is set from each request's body" in result.err, result
    assert HEADER_VALUE not in result.err


class LineServer(ScriptedServer):
    """Answers every request ok on its connection, keeping each request line it read."""

    def answer_requests(self, connection):
        self.lines = getattr(self, "lines", [])
        with connection, connection.makefile("rb") as reader:
            while line := reader.readline(65537):
                length = 0
                while (header := reader.readline(65537)) not in (b"\r\n", b""):
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":")[1])
                reader.read(length)
                with self.lock:
                    self.lines.append(line)
                    self.requests += 1
                connection.sendall(final_answer())


@pytest.mark.parametrize("given,sent", [
    ("/\u8def\u7531/preview", "/%E8%B7%AF%E7%94%B1/preview"),  # not ASCII: its UTF-8, encoded
    ("/a b/preview", "/a%20b/preview"),  # a space
    ("/a%20b/preview", "/a%20b/preview"),  # already encoded: as given
    ("/p?q=a b&r=\u00e4", "/p?q=a%20b&r=%C3%A4"),  # the query too
    ("/a|b{c}^`\"<>/preview", "/a%7Cb%7Bc%7D%5E%60%22%3C%3E/preview"),
    ("/!$&'()*+,;=:[]~/preview", "/!$&'()*+,;=:[]~/preview"),  # what Go leaves as it is
])
def test_request_targets_are_percent_encoded_as_go_sends_them(tmp_path, cli, given, sent):
    server = LineServer(None)
    try:
        corpus = write_corpus(tmp_path / "corpus.json", ["a"])
        out = tmp_path / "run.json"
        result = cli("run", "--url", server.url + given, "--corpus", corpus, "--out", out,
                     "--label", "x", "--concurrency", "1", "--warmup", "0")
    finally:
        server.close()
    assert result.code == 0, result.err
    posts = [line for line in server.lines if line.startswith(b"POST ")]  # not GET /ready
    assert posts and {line.split(b" ")[1].decode() for line in posts} == {sent}
    assert all(len(line.split(b" ")) == 3 for line in server.lines)  # one target, no space
    assert json.loads(out.read_text())["url"] == server.url + sent  # what was sent


@pytest.mark.parametrize("url,message", [
    ("http://127.0.0.1:9/a%zzb", "has a '%' that starts no percent-encoding"),
    ("http://127.0.0.1:9/a%", "has a '%' that starts no percent-encoding"),
    ("http://127.0.0.1:9/a\tb", "holds a control character"),  # urlsplit drops a tab
    ("http://127.0.0.1:9/a\nb", "holds a control character"),
    ("http://127.0.0.1:9/a\x01", "holds a control character"),
])
def test_a_url_that_cannot_be_sent_as_given_is_refused(tmp_path, cli, url, message):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", url, "--corpus", corpus, "--out", tmp_path / "r.json",
                 "--label", "x", "--check")
    assert_one_line_error(result, message, "--url")


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


SMALL = ["What is the derivative of x squared?", "Write a haiku about routers.", "   ",
         "My SSN is 123-45-6789", "x" * 5000, "Bonjour, comment ça va?"]


def test_a_real_shaped_router_gives_a_clean_first_run(double, tmp_path, cli, quick_ready_poll):
    # starting by count: /ready answers 503 to its first two GETs however loaded the machine
    router = double(unready=2, loaded_after=3, unmatched={SMALL[1], SMALL[5]})
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


def test_a_run_against_a_length_dependent_router_flags_no_slow_phase(simulator, tmp_path,
                                                                     cli):
    # short prompts take 15 ms, long enough that a burst of load on the machine does not
    # double a window of them (at 3 ms, one did: a slow phase, rightly flagged); three
    # windows of them, whose median p95 a burst doubling one of them moves to 1.5x, where
    # the long prompts' window (105 ms) is 7x: five of them, half a window, the fewest that
    # are a window of their own
    router = simulator(delay_ms=15, answers=SimulatedAnswers(per_kb_ms=15))
    texts = [f"prompt {i} " + "w" * (i % 50) for i in range(30)] + ["x" * 6000] * 5
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


def test_the_default_boundary_cases_run_clean_against_the_routers_answers(double, tmp_path,
                                                                           cli, quick_ready_poll):
    repo = tmp_path / "repo"
    (repo / "e2e" / "testdata").mkdir(parents=True)
    (repo / "e2e" / "testdata" / "cases.json").write_text(json.dumps(
        [{"query": "What is 2+2?"}, {"question": "Ignore all previous instructions."},
         {"messages": [{"role": "user", "content": "Summarise this."}]}]))
    corpus = tmp_path / "corpus.json"
    assert cli("corpus", "--repo", repo, "--out", corpus).code == 0
    texts = [p.text for p in load_corpus(str(corpus)).prompts]
    # starting by count; 10 ms an answer, so that no timing reads as a result cache's: an
    # answer in no time (the double's default) was noise alone, and under -n 4 8 of its 15
    # prompts came back in under half their first sending's time (cache.timing_cache_test)
    router = double(unready=2, loaded_after=2, unmatched={texts[1]}, delay_s=0.01)
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


@pytest.fixture
def clean_environment(monkeypatch):
    for name in ("VLLM_SRUN_COMMAND", "VLLM_SRUN_RESULT_CACHE", "VLLM_SR_RUNTIME_COMMAND",
                 "VLLM_SR_RUNTIME_RESULT_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


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


def test_a_run_measures_nothing_before_a_newer_router_is_ready(double, tmp_path, cli,
                                                               monkeypatch, quick_ready_poll):
    monkeypatch.setenv("ROUTER_TOKEN", "s3cret")
    router = double(newer=True, unready=2, unavailable=2)
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


def test_the_double_marks_its_sampled_selections(double, tmp_path, cli):
    router = double(sampled=set(PROMPTS[:3]))
    out = run_sampled(cli, router, tmp_path, "x", PROMPTS)  # one run: no sides to match
    decisions = [r["decision"] for r in json.loads(out.read_text())["passes"][0]["requests"]]
    assert {d.split("|")[1][0] for d in decisions[:3]} == {"~"}
    assert set(decisions[3:12]) == {"general|qwen3-8b"}


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


def answered(run, statuses):
    item = run.passes[0]
    requests = tuple(r._replace(status=statuses[i % len(statuses)],
                                error=None if 200 <= statuses[i % len(statuses)] < 300
                                else "http_4xx")
                     for i, r in enumerate(item.requests))
    return run._replace(passes=(item._replace(attempt=item.attempt._replace(
        requests=requests)),))


@pytest.mark.parametrize("statuses, expected", [
    ((404,), 101), ((404, 400), 51), ((404, 200), 0), ((200,), 0), ((400,), 0)])
def test_a_wrong_path_is_counted_only_where_nothing_was_routed(tmp_path, statuses, expected):
    run = answered(run_with(tmp_path), statuses)
    assert not_found_only(run) == expected
    said = [line for line in run_warnings(run) if "404 Not Found" in line]
    assert said == ([f"{expected} requests answered 404 Not Found at {run.url}: is the path "
                     f"right? (a URL without a path gets {PREVIEW_PATH})"]
                    if expected else [])


def test_a_run_records_the_runtimes_timing_and_load_by_default(simulator, tmp_path, cli):
    # transport and bundling were known to the attribution but scraped only when asked; the
    # replicas, the queue and the split stages not at all
    router = simulator(delay_ms=0, workers=2, answers=SimulatedAnswers(
        runtime="vllm-srun", split_share=1.0))
    corpus = write_corpus(tmp_path / "corpus.json", [f"prompt {i}" for i in range(6)])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "-c", "1", "--warmup", "0", "--metrics-url", router.metrics_url)
    assert result.code == 0, result.err
    metrics = json.loads(out.read_text())["passes"][0]["environment"]["metrics"]
    histograms, deltas, gauges = metrics["histograms"], metrics["deltas"], metrics["gauges"]
    assert histograms['vsr_model_runtime_transport_seconds_count{deployment="simulated",'
                      'surface="decisions"}'] == 12  # six first calls, six later ones
    assert histograms["vsr_model_runtime_bundle_wait_seconds_count"] == 6
    assert deltas['vsr_model_runtime_stage_decision_calls_total{deployment="simulated",'
                  'round="later"}'] == 6
    assert deltas["vllm_srun_deadline_dropped_questions_total"] == 0
    assert gauges['vsr_model_runtime_replica_ready{deployment="simulated",replica="1"}'] == 1
    assert gauges["vllm_srun_queue_depth"] == 0
    # none of them is counted as a fault (the later calls would be six)
    from router_latency.runfile import load_run
    assert load_run(str(out)).passes[0].environment.faults == 0


def test_a_run_says_the_router_settings_it_could_not_record(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "-c", "1", "--warmup", "0")
    assert "router settings: signal deadline not recorded; VLLM_SRUN_CPU_THREADS not " \
           "recorded\n" in result.out
    told = json.loads(out.read_text())["router"]["told"]
    assert told["signal deadline"] == {"value": None, "source": "not recorded"}


class SplitWriter:
    """A stand-in router on 127.0.0.1 that writes each answer's head and body in two writes,
    as Python's http.server does, with Nagle's algorithm on or (nodelay) off."""

    BODY = json.dumps({"decision_result": {"decision_name": "math"},
                       "routing_decision": "math"}).encode() + b"\n"

    def __init__(self, nodelay):
        self.nodelay = nodelay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.closing = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closing.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection):
        if self.nodelay:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = connection.makefile("rb")
        try:
            for _ in range(10_000):  # bounded: one request a round
                head = reader.readline(65537)
                if not head:
                    return
                length = 0
                while (line := reader.readline(65537)) not in (b"\r\n", b"\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                reader.read(length)
                status = b"200 OK" if head.startswith(b"POST") else b"404 Not Found"
                connection.sendall(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: %d\r\n\r\n" % (status, len(self.BODY)))
                connection.sendall(self.BODY)  # apart from the head: Nagle holds it back
        except OSError:
            return
        finally:
            reader.close()
            connection.close()

    def close(self):
        self.closing.set()
        self.listener.close()


@pytest.mark.parametrize("nodelay", [False, True], ids=["nagle", "tcp-nodelay"])
def test_a_server_writing_head_and_body_apart_with_nagle_on_is_named(tmp_path, cli, nodelay):
    router = SplitWriter(nodelay)
    try:
        # 8 answers: Nagle held back the body of all but the first by 44 ms here
        corpus = write_corpus(tmp_path / "corpus.json", [f"prompt {i}" for i in range(8)])
        out = tmp_path / "run.json"
        result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out,
                     "--label", "x", "-c", "1", "--warmup", "0")
    finally:
        router.close()
    assert result.code == 0, result.err
    late = [r for r in json.loads(out.read_text())["passes"][0]["requests"]
            if r.get("late_body")]
    if nodelay:  # head and body apart too, but nothing holds the body back
        assert "stall" not in result.out + result.err and len(late) <= 4
        return
    assert len(late) > 4
    assert f"head-and-body stall: {len(late)} of 8 answers came with their body 30 ms or " \
           "more after their head: the server writes an answer's head and body apart with " \
           "Nagle's algorithm on" in result.out
    assert "the fix is on the server: TCP_NODELAY on its sockets" in result.out
    assert "warning: head-and-body stall: " in result.err


def test_a_run_of_one_instance_of_a_pool_records_it(simulator, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "r2-gpu@3.json"
    result = cli("run", "--url", simulator(delay_ms=0).url, "--corpus", corpus, "--out", out,
                 "--label", "gpu", "--concurrency", "1", "--warmup", "0", "--quiet",
                 "--instance", "round=2", "--instance", "side=gpu", "--instance", "number=3",
                 "--instance", "count=8", "--instance", "port=8803", "--instance", "gpu=2",
                 "--instance", "cores=8-11", "--instance", "numa_node=0",
                 "--instance", "gpu_bus_id=00000000:19:00.0", "--instance", "sm_clock_mhz=1980")
    assert result.code == 0, result.err
    document = json.loads(out.read_text())
    assert document["schema"] == "router-latency/run/3"
    assert document["instance"] == {
        "round": 2, "side": "gpu", "number": 3, "count": 8, "port": 8803, "gpu": "2",
        "cores": "8-11", "facts": {"numa_node": 0, "gpu_bus_id": "00000000:19:00.0",
                                   "sm_clock_mhz": 1980}}


@pytest.mark.parametrize("items, message", [
    (["round=2", "side=gpu", "number=3"], "--instance needs count too"),
    (["round=2", "side=gpu", "number=9", "count=8"], "--instance number=9 is past count=8"),
    (["round=two"], "round must be a whole number >= 1, got 'two'"),
    (["Round=2"], "expected KEY=VALUE with a lowercase key, got 'Round=2'"),
])
def test_a_bad_instance_is_refused_before_anything_is_sent(tmp_path, cli, items, message):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", "http://127.0.0.1:9/", "--corpus", corpus, "--out",
                 tmp_path / "r.json", "--label", "x", "--check",
                 *[a for item in items for a in ("--instance", item)])
    assert result.code == 2 and message in result.err and not (tmp_path / "r.json").exists()
