"""Nothing measured is lost and nothing secret leaks: answers the parser cannot read are one
failed request each, hostile input files are one line naming the file or field, outputs never
overwrite inputs, signals leave no temporary file, secrets stay out of files and messages,
and every Markdown cell is one line that notifies nobody."""

import errno
import hashlib
import json
import os
import pty
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
import unicodedata
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from router_latency.constants import DEFAULT_DECISION_PATHS
from router_latency.files import MAX_INPUT_BYTES
from router_latency.corpus import load_corpus, MAX_CORPUS_BYTES
from router_latency.runfile import load_run
from router_latency.client import RequestFailed, ResponseReader
from router_latency.meaning import classify, error_code
from router_latency.gpu import parse_nvidia_smi
from conftest import (TOOL, TOOL_PYC, ScriptedServer, assert_one_line_error, final_answer,
                      make_run,
                      three_rounds, write_corpus)

OK = b'{"decision_result": {"decision_name": "ok"}}'
HASH_A, HASH_B = "a" * 64, "b" * 64
GO_SERVER = Path(__file__).resolve().parent / "data" / "go-chunked"


def feed_pieces(data, pieces=None):
    """Feed a reader data whole, or in pieces of that many bytes; return it once complete."""
    reader = ResponseReader()
    size = pieces or len(data)
    for start in range(0, len(data), size):
        if reader.feed(data[start:start + size]):
            assert start + size >= len(data), "complete before the last piece"
            return reader
    raise AssertionError("not complete")


def answer_with_head(head_lines, body=OK, status=b"200 OK"):
    return b"HTTP/1.1 %s\r\n%s\r\n\r\n%s" % (status, b"\r\n".join(head_lines), body)


def refused(data, pieces=None):
    """Feed data whole (or in pieces of that size); return the RequestFailed it raised."""
    with pytest.raises(RequestFailed) as failure:
        feed_pieces(data, pieces)
    return failure.value


# --- the parser: bounds, obs-fold, one head limit, strict chunk sizes ---

@pytest.mark.parametrize("data,reason", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n{}", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1" + b"0" * 19 + b"\r\n\r\n{}", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}", "Content-Length"),
    (b"HTTP/1.1 " + b"2" * 5000 + b" OK\r\nContent-Length: 2\r\n\r\n{}", "status code"),
    (b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}", "status code"),
    (b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\n{}", "status code"),
    (b"HTTP/1.1 200 OK\r\nno colon\r\nContent-Length: 2\r\n\r\n{}", "without a colon"),
    (b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\n{}", "not an HTTP/1.x status line"),
])
@pytest.mark.parametrize("pieces", [None, 1, 4096])
def test_lengths_and_status_codes_are_bounded(data, reason, pieces):
    failure = refused(data, pieces)
    assert failure.kind == "malformed" and reason in failure.detail


def test_leading_zeros_are_no_digits_of_a_length():
    reader = feed_pieces(b"HTTP/1.1 200 OK\r\nContent-Length: " + b"0" * 40 + b"2\r\n\r\n{}")
    assert reader.body == b"{}"


@pytest.mark.parametrize("head", [
    [b"Content-Length:", b" %d" % len(OK)],
    [b"Content-Length: %d" % len(OK), b"X-Note: one", b"\tand two"],
    [b"Transfer-Encoding:", b"  chunked"],
])
@pytest.mark.parametrize("pieces", [None, 1])
def test_a_folded_header_line_is_unfolded(head, pieces):
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(OK), OK) if b"Transfer-Encoding:" in head else OK
    reader = feed_pieces(answer_with_head([b"\r\n".join(head)], body), pieces)
    assert reader.status == 200 and reader.body == OK


@pytest.mark.parametrize("pieces", [None, 4096, 65536])
def test_one_head_limit_however_the_head_arrives(pieces):
    too_long = answer_with_head([b"X-Big: " + b"x" * 70_000, b"Content-Length: 2"], b"{}")
    failure = refused(too_long, pieces)
    assert failure.kind == "malformed" and "head is over 65,536 bytes" in failure.detail
    fits = answer_with_head([b"X-Big: " + b"x" * 60_000, b"Content-Length: 2"], b"{}")
    assert feed_pieces(fits, pieces).body == b"{}"


@pytest.mark.parametrize("size", [b"0x2", b"4_1", b"+2", b" 2", b"2 x", b"-2", b"", b"\xff",
                                  b"1" * 17])
@pytest.mark.parametrize("pieces", [None, 1])
def test_a_chunk_size_is_hex_digits_only(size, pieces):
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\n{}\r\n0\r\n\r\n" % size
    failure = refused(data, pieces)
    assert failure.kind == "malformed" and "chunk size" in failure.detail


@pytest.mark.parametrize("line", [b"2", b"2;name=value", b"2 ;x", b"2\t", b"0002"])
def test_chunk_extensions_and_whitespace_before_them_are_read(line):
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\n{}\r\n0\r\n\r\n" % line
    assert feed_pieces(data, 1).body == b"{}"


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"decision_result": ' + b'{"a": ' * 70 + b"1" + b"}" * 71,
    b'{"decision_result": {"decision_name": "x", "d": ' + b"[" * 65 + b"]" * 65 + b"}}",
])
def test_an_answer_nested_too_deep_is_malformed(body):
    with pytest.raises(RequestFailed) as failure:
        classify(200, body, DEFAULT_DECISION_PATHS)
    assert failure.value.kind == "malformed" and "nested deeper than 64" in failure.value.detail
    assert error_code(body) is None  # a failed answer's code: none, not an exception


def test_an_answer_as_deep_as_the_limit_is_read():
    body = b'{"decision_result": {"decision_name": "x", "d": ' + b"[" * 62 + b"]" * 62 + b"}}"
    assert classify(200, body, DEFAULT_DECISION_PATHS) == ("x", None, None)


# --- the pass goes on: each malformed answer is that request's failure ---

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
    def failing_classify(status, body, paths, **options):
        if b"boom" in body:
            raise ZeroDivisionError("a reader nobody foresaw")
        return classify(status, body, paths, **options)

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


# --- input files ---

def nested(levels):
    return "[" * levels + "]" * levels


def deep_run_file(path):
    make_run(path)
    text = path.read_text()
    path.write_text(text.replace('"settings": {', f'"deep": {nested(990)}, "settings": {{', 1))
    return path


@pytest.mark.parametrize("command", ["compare", "rounds-corpus", "run-corpus", "repo", "boundary"])
def test_deeply_nested_files_are_one_line_naming_the_file(tmp_path, cli, command):
    if command == "compare":
        bad = deep_run_file(tmp_path / "deep.json")
        result = cli("compare", bad, bad)
    elif command in ("run-corpus", "rounds-corpus"):
        bad = tmp_path / "deep.json"
        bad.write_text('{"schema": "router-latency/corpus/1", "prompts": ' + nested(990) + "}")
        result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", bad, "--out",
                     tmp_path / "r.json", "--label", "x", "--check")
    elif command == "repo":
        bad = tmp_path / "repo" / "e2e" / "testdata" / "deep.json"
        bad.parent.mkdir(parents=True)
        bad.write_text('{"query": "q", "more": ' + nested(990) + "}")
        result = cli("corpus", "--repo", tmp_path / "repo", "--out", tmp_path / "c.json")
    else:
        bad = tmp_path / "cases.json"
        bad.write_text('{"cases": ' + nested(990) + "}")
        (tmp_path / "repo" / "e2e" / "testdata").mkdir(parents=True)
        (tmp_path / "repo" / "e2e" / "testdata" / "a.json").write_text('{"query": "q"}')
        result = cli("corpus", "--repo", tmp_path / "repo", "--out", tmp_path / "c.json",
                     "--boundary", bad)
    assert_one_line_error(result, "nested deeper", str(bad))


@pytest.mark.parametrize("edit,field,words", [
    (lambda d: d["passes"][0]["requests"][0].update(latency_ms=1e308),
     "passes[0].requests[0].latency_ms", "at most 86,400,000 ms (a day)"),
    (lambda d: d["passes"][0]["requests"][0].update(latency_ms=86_400_001),
     "passes[0].requests[0].latency_ms", "a day"),
    (lambda d: d["passes"][0]["summary"].update(p99_ms=1e300),
     "passes[0].summary.p99_ms", "a day"),
    (lambda d: d["passes"][0]["summary"].update(requests=2 ** 60),
     "passes[0].summary.requests", "up to 2^53"),
    (lambda d: d["passes"][0]["environment"].update(metrics={"deltas": {"x_total": 1e300}}),
     "passes[0].environment.metrics.deltas.x_total", "2^53"),
    (lambda d: d["passes"][0]["environment"].update(metrics={"deltas": {"x_total": -1e300}}),
     "passes[0].environment.metrics.deltas.x_total", "2^53"),
    (lambda d: d["passes"][0]["environment"].update(
        gpu={"before": {"used_mib": {"card0": 1e300}}}),
     "passes[0].environment.gpu.before.used_mib.card0", "2^53"),
    (lambda d: d["passes"][0].update(driver_cpu_s=1e300), "passes[0].driver_cpu_s", "2^53"),
])
def test_numbers_too_large_to_sum_are_refused_by_range(tmp_path, cli, edit, field, words):
    path = Path(make_run(tmp_path / "big.json"))
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    assert_one_line_error(cli("compare", path, path), words, f"big.json: {field}")


@pytest.mark.parametrize("old,new,key", [
    ('"complete": true', '"complete": false, "complete": true', "complete"),
    ('"label": "x"', '"label": "x", "label": "y"', "label"),
    ('"latency_ms": 10.0', '"latency_ms": 10.0, "latency_ms": 99.0', "latency_ms"),
])
def test_a_key_twice_in_one_object_is_refused_naming_it(tmp_path, cli, old, new, key):
    path = Path(make_run(tmp_path / "twice.json"))
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    assert_one_line_error(cli("compare", path, path), f"the key '{key}' appears twice",
                          str(path))


def test_a_corpus_with_a_key_twice_is_refused(tmp_path, cli):
    path = tmp_path / "corpus.json"
    path.write_text('{"schema": "router-latency/corpus/1", "prompts": '
                    '[{"id": 0, "text": "a", "text": "b"}]}')
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", path, "--out",
                 tmp_path / "r.json", "--label", "x", "--check")
    assert_one_line_error(result, "the key 'text' appears twice", str(path))


def test_an_input_above_its_size_is_refused_before_reading(tmp_path, cli):
    corpus = tmp_path / "huge.json"
    with open(corpus, "wb") as handle:  # sparse: no disk and no memory used
        handle.truncate(MAX_CORPUS_BYTES + 1)
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "r.json", "--label", "x", "--check")
    assert_one_line_error(result, "larger than the 256 MiB this tool reads", str(corpus))
    run = tmp_path / "huge-run.json"
    with open(run, "wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)
    assert_one_line_error(cli("compare", run, run), "larger than the 512 MiB", str(run))


# --- outputs never overwrite inputs or each other ---

def test_rounds_outputs_never_overwrite_a_round_or_each_other(tmp_path, cli, monkeypatch):
    three_rounds(tmp_path)
    round_file = tmp_path / "r2-gpu.json"
    before = round_file.read_bytes()
    os.link(round_file, tmp_path / "hard.html")
    os.symlink(round_file, tmp_path / "soft.xml")
    base = ("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    for extra, named in [
            (("--html", round_file), "--html"),
            (("--junit", tmp_path / "sub" / ".." / "r2-gpu.json"), "--junit"),
            (("--html", tmp_path / "hard.html"), "--html"),
            (("--junit", tmp_path / "soft.xml"), "--junit"),
            (("--html", tmp_path / "same.out", "--junit", tmp_path / "same.out"), "--html")]:
        (tmp_path / "sub").mkdir(exist_ok=True)
        result = cli(*base, *extra)
        assert_one_line_error(result, "is the same file as", f"({named})")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(round_file))
    assert_one_line_error(cli(*base), "GITHUB_STEP_SUMMARY", "round file")
    assert round_file.read_bytes() == before and not (tmp_path / "same.out").exists()


def test_record_outputs_never_overwrite_a_round_or_each_other(tmp_path, cli):
    three_rounds(tmp_path)
    round_file = tmp_path / "r1-cpu.json"
    before = round_file.read_bytes()
    base = ("record", "--section", f"a={tmp_path}:cpu:gpu", "--force")
    for extra in [("--json", tmp_path / "rec", "--markdown", tmp_path / "rec"),
                  ("--json", round_file, "--markdown", tmp_path / "rec.md"),
                  ("--json", tmp_path / "rec.json", "--markdown", round_file)]:
        assert_one_line_error(cli(*base, *extra), "is the same file as")
    assert round_file.read_bytes() == before and not (tmp_path / "rec").exists()


def test_run_and_corpus_outputs_never_overwrite_their_inputs(tmp_path, cli):
    corpus = Path(write_corpus(tmp_path / "corpus.json", ["a"]))
    before = corpus.read_bytes()
    run = ("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--label", "x", "--force")
    assert_one_line_error(cli(*run, "--out", tmp_path / "r.json", "--csv", corpus),
                          f"--csv {corpus} is the same file as --corpus", "(--csv)")
    assert_one_line_error(cli(*run, "--out", corpus), "is the same file as --corpus", "(--out)")
    repo = tmp_path / "repo"
    data = repo / "e2e" / "testdata" / "a.json"
    data.parent.mkdir(parents=True)
    data.write_text('{"query": "q"}')
    boundary = tmp_path / "cases.json"
    boundary.write_text('{"cases": [{"name": "n", "text": "t"}]}')
    assert_one_line_error(cli("corpus", "--repo", repo, "--out", data, "--force"),
                          "is the same file as data file", "(--out)")
    assert_one_line_error(cli("corpus", "--repo", repo, "--out", boundary, "--force",
                              "--boundary", boundary), "same file as --boundary", "(--out)")
    assert corpus.read_bytes() == before and data.read_text() == '{"query": "q"}'


# --- signals: nothing half-written, nothing left behind, an exit code that says so ---

SIGNAL_WHILE_WRITING = """
import os, signal, sys
sys.path.insert(0, {root!r})
import router_latency as rl

def chunks(document):
    yield document[:100]
    os.kill(os.getpid(), signal.{signal})  # while the temporary file is being written
    yield document[100:]

real = rl.{renderer}
if {renderer!r} == "write_output":  # corpus: its bytes are hashed too, the write gets pieces
    rl.write_output = lambda path, data: real(path, chunks(data))
else:
    rl.{renderer} = lambda report: chunks(real(report))
sys.exit(rl.main({argv!r}))
"""


@pytest.mark.parametrize("command,renderer,signame,code", [
    ("rounds", "junit_xml", "SIGTERM", 143),
    ("rounds", "junit_xml", "SIGHUP", 129),
    ("rounds", "junit_xml", "SIGINT", 130),
    ("record", "record_json", "SIGTERM", 143),
    ("corpus", "write_output", "SIGHUP", 129),
])
def test_a_signal_while_a_report_is_written_leaves_no_temporary_file(
        tmp_path, command, renderer, signame, code):
    folder = tmp_path / "rounds"
    folder.mkdir()
    three_rounds(folder)
    if command == "rounds":
        argv = ["rounds", "--dir", str(folder), "--base", "cpu", "--new", "gpu",
                "--junit", str(tmp_path / "out.xml"), "--html", str(tmp_path / "out.html")]
    elif command == "record":
        argv = ["record", "--section", f"a={folder}:cpu:gpu", "--json",
                str(tmp_path / "out.json"), "--markdown", str(tmp_path / "out.md")]
        renderer = "dump_json"
    else:
        data = folder / "e2e" / "testdata" / "a.json"
        data.parent.mkdir(parents=True)
        data.write_text('{"query": "' + "q" * 300 + '"}')
        argv = ["corpus", "--repo", str(folder), "--out", str(tmp_path / "out.json")]
    script = SIGNAL_WHILE_WRITING.format(root=str(TOOL_PYC.parent), signal=signame,
                                         renderer=renderer, argv=argv)
    # what the child inherits: a signal ignored or blocked here is ignored or blocked there
    inherited = (signal.getsignal(getattr(signal, signame)),
                 signal.pthread_sigmask(signal.SIG_BLOCK, []))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == code, (result.stderr, inherited)
    assert f"interrupted by {signame}" in result.stderr and "Traceback" not in result.stderr
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    written = tmp_path / ("out.xml" if command == "rounds" else "out.json")
    if command == "corpus":  # one file, written whole before the signal took effect
        assert load_corpus(str(written)).prompts
        return
    assert written.exists()  # the signal waited for the rename: the file is whole
    if command == "rounds":
        ElementTree.parse(written)
    else:
        json.loads(written.read_text())
    later = tmp_path / ("out.html" if command == "rounds" else "out.md")
    assert not later.exists()  # nothing was written after the signal


def test_run_under_nohup_goes_on_after_sighup(scripted, tmp_path):
    # the answer to p2 waits until the SIGHUP is sent: the run is measuring when it comes,
    # by construction, and a count of requests (not a duration) sets its length
    reached, sent = threading.Event(), threading.Event()

    def answer(prompt, _):
        if prompt == "p2":
            reached.set()
            sent.wait(30)
        return [final_answer()]
    router = scripted(answer)
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(5)])
    out = tmp_path / "run.json"
    process = subprocess.Popen(
        [sys.executable, str(TOOL_PYC), "run", "--url", router.url, "--corpus", corpus, "--out",
         str(out), "--label", "x", "--warmup", "0", "--concurrency", "1", "--repeat", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # what nohup does
    try:
        assert reached.wait(30) and process.poll() is None
        process.send_signal(signal.SIGHUP)
    finally:
        sent.set()
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    document = json.loads(out.read_text())
    assert document["complete"] is True and document["passes"][0]["summary"]["ok"] == 10


# --- secrets ---

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


# --- Markdown and the job summary ---

HOSTILE = ["line\nbreak", "carriage\rreturn", "nul\x00byte", "esc\x1b[31mred", "c1\x85next",
           "sep\u2028line", "tab\there", "@octocat", "fixes #123", "del\x7fchar",
           "rtl\u202eevil", "alm\u061cmark", "isolate\u2067x", "tag\U000e0041hidden",
           "zero\u200bwidth", "bom\ufeffhere", "soft\u00adhyphen", "mongolian\u180evs"]


def shown_raw(text: str) -> list:
    """The characters of text a terminal would act on or hide, by Unicode category: controls,
    format characters (bidi marks, zero-width, tags), surrogates, line/paragraph separators."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


def test_markdown_cells_are_one_line_and_notify_nobody(tmp_path, cli, monkeypatch):
    three_rounds(tmp_path, differ_in_round=2, decisions=HOSTILE)
    summary = tmp_path / "summary.md"
    summary.write_text("")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "markdown", "--per-round")
    for text in (result.out, summary.read_text()):
        for line in text.splitlines():
            assert not shown_raw(line), repr(line)
            if line.startswith("|"):
                assert line.endswith("|"), repr(line)
        assert "@octocat" not in text and "#123" not in text
        assert "@&#8203;octocat" in text and "#&#8203;123" in text
        assert "esc\\u001b[31mred" in text or "esc\\\\u001b\\[31mred" in text
    plain = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--per-round")
    assert not shown_raw(plain.out.replace("\n", ""))
    assert "alm\\u061cmark" in plain.out and "tag\\udb40\\udc41hidden" in plain.out
    as_json = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                  "json")
    json.loads(as_json.out)  # still JSON, with the decision as the router sent it
    assert '"tab\\there"' in as_json.out and '"tab\\\\there"' not in as_json.out
    differ = next(line for line in plain.out.splitlines() if line.startswith("decisions r2"))
    assert "#0 line\\nbreak -> d" in differ and "#3 esc\\u001b[31mred -> d" in differ


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


@pytest.mark.skipif(shutil.which("go") is None, reason="needs go (golang-go)")
def test_a_go_net_http_server_chunked_answers_are_read_strictly_and_whole(tmp_path, cli):
    # the router is a Go net/http server: the strict chunk-size reading must take every
    # chunked answer it writes (flushed pieces, lowercase hex sizes)
    binary = tmp_path / "server"
    build = subprocess.run(["go", "build", "-o", str(binary), "."], cwd=GO_SERVER,
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "GOCACHE": str(tmp_path / "gocache"),
                                "GOFLAGS": "-mod=mod", "GO111MODULE": "on"})
    assert build.returncode == 0, build.stderr
    server = subprocess.Popen([str(binary)], stdout=subprocess.PIPE, text=True)
    try:
        address = server.stdout.readline().strip()
        corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(6)])
        out = tmp_path / "run.json"
        result = cli("run", "--url", f"http://{address}", "--corpus", corpus, "--out", out,
                     "--label", "go", "--concurrency", "1,4", "--warmup", "2", "--quiet")
        assert result.code == 0, result.err
        document = json.loads(out.read_text())
        for item in document["passes"]:
            assert item["summary"]["ok"] == 6
            assert {r["decision"] for r in item["requests"]} == {"go"}
        assert document["passes"][0]["config_hashes"] == ["c" * 64]
    finally:
        server.kill()
        server.wait(timeout=10)


def test_a_closed_terminal_saves_the_run_and_exits_129(simulator, tmp_path):
    router = simulator(delay_ms=1)
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(50)])
    out = tmp_path / "run.json"
    pid, terminal = pty.fork()  # run on a terminal of its own, as over SSH
    if pid == 0:  # the child: nothing of pytest runs on here
        try:
            os.execv(sys.executable, [sys.executable, str(TOOL_PYC), "run", "--url", router.url,
                                      "--corpus", str(corpus), "--out", str(out), "--label",
                                      "x", "--warmup", "0", "--concurrency", "1", "--duration",
                                      "20s"])
        finally:
            os._exit(127)
    try:
        deadline = time.monotonic() + 20
        while router.served < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.read(terminal, 4096).startswith(b"run x: 50 prompts")  # the header drawn
    finally:
        os.close(terminal)  # the connection drops: the kernel hangs up the terminal's session
    for _ in range(200):  # bounded: 20 s
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("run did not end after its terminal closed")
    assert os.waitstatus_to_exitcode(status) == 129
    document = json.loads(out.read_text())
    assert document["complete"] is False and document["passes"][0]["summary"]["requests"] > 0


# --- review: more cases of the same classes ---

LF_OK = len(OK)


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 200 OK\nContent-Length: %d\n\n%s" % (LF_OK, OK),
    b"HTTP/1.1 200 OK\r\nContent-Length: %d\n\r\n%s" % (LF_OK, OK),
    b"HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nContent-Length: %d\n\n%s" % (LF_OK, OK),
    b"HTTP/1.1 200 OK\nX-Note: a\n\tb\nContent-Length: %d\n\n%s" % (LF_OK, OK),
    b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n%x;x=y\n%s\r\n0\nT: 1\n\n" % (LF_OK, OK),
])
@pytest.mark.parametrize("pieces", [None, 1, 7])
def test_lines_ended_by_a_bare_lf_are_read_as_gos_client_reads_them(data, pieces):
    reader = feed_pieces(data, pieces)  # RFC 9112 2.2; today such an answer waits to time out
    assert reader.status == 200 and bytes(reader.body) == OK


@pytest.mark.parametrize("pieces", [None, 1])
def test_chunk_data_needs_its_crlf_as_gos_client_asks(pieces):
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\n0\r\n\r\n" % (
        LF_OK, OK)
    failure = refused(data, pieces)
    assert failure.kind == "malformed" and "CRLF" in failure.detail


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


@pytest.mark.parametrize("cell,field", [
    ("9" * 400, "sclk_mhz"), ("99999999999999999999", "used_mib"), ("-1", "power_w"),
    ("1" * 30, "temp_c"),
])
def test_a_gpu_figure_the_reader_would_refuse_is_no_figure(tmp_path, cell, field):
    row = {"temp_c": "40", "sclk_mhz": "1980 MHz", "mclk_mhz": "1593 MHz", "power_w": "70 W",
           "util_pct": "3 %", "used_mib": "1024 MiB"}
    row[field] = cell
    columns = ["temp_c", "sclk_mhz", "mclk_mhz", "power_w", "util_pct", "used_mib"]
    reading = parse_nvidia_smi("0, " + ", ".join(row[c] for c in columns) + "\n")
    device = reading.devices["gpu0"]
    assert device[field] is None  # today inf (a traceback at the write, the run lost) or
    assert device["temp_c" if field != "temp_c" else "util_pct"] is not None  # a refused file
    make_run(tmp_path / "r.json", environment={"gpu": {"tool": "nvidia-smi", "before": reading.to_json(),
                                                        "after": reading.to_json()}})
    load_run(str(tmp_path / "r.json"))


@pytest.mark.parametrize("value", ["a\x00b", "a\x01b", "esc\x1b[2J", "del\x7f", "bell\x07"])
def test_a_header_value_with_a_control_character_is_refused(tmp_path, cli, value):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "r.json", "--label", "x", "--header", f"X-A: {value}", "--check")
    assert result.code == 2 and "control character" in result.err, result
    assert value not in result.err


@pytest.mark.parametrize("where", ["file", "below a file"])
def test_demo_into_a_path_that_cannot_be_a_folder_is_one_line(tmp_path, cli, where):
    (tmp_path / "taken").write_text("x")
    keep = tmp_path / "taken" if where == "file" else tmp_path / "taken" / "sub"
    assert_one_line_error(cli("demo", "--rounds", "3", "--keep", keep), "cannot make the folder")


def test_html_cells_and_record_folders_are_one_line(tmp_path, cli):
    folder = tmp_path / "r@x #1 `q`\x1b[31m"
    folder.mkdir()
    corpus = write_corpus(tmp_path / "corpus.json", HOSTILE + ["d"] * 90)
    sha = hashlib.sha256(Path(corpus).read_bytes()).hexdigest()
    three_rounds(folder, differ_in_round=2, decisions=HOSTILE, sha=sha)
    page = tmp_path / "page.html"
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "gpu", "--corpus", corpus,
                 "--html", page)
    assert result.code in (0, 1, 3), result.err
    html = page.read_text()
    assert not shown_raw(html.replace("\n", "")), "a raw control in the page"
    for line in html.splitlines():  # a cell is one line: no row continues on the next
        assert line.count("<td") == line.count("</td>"), repr(line)
    record = tmp_path / "record.md"
    result = cli("record", "--section", f"s={folder}:cpu:gpu", "--json", tmp_path / "rec.json",
                 "--markdown", record)
    assert result.code in (0, 1, 3), result.err
    text = record.read_text()
    assert not shown_raw(text.replace("\n", ""))
    assert "``" in text and "\\u001b[31m" in text  # a code span with the backticks inside


@pytest.mark.parametrize("closed", [(1,), (2,), (1, 2)])
def test_run_started_with_its_output_streams_closed_measures_and_saves(simulator, tmp_path,
                                                                       closed):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "run.json"
    process = subprocess.run(  # `run ... >&-`: Python starts with sys.stdout None
        [sys.executable, str(TOOL_PYC), "run", "--url", router.url, "--corpus", corpus, "--out",
         str(out), "--label", "x", "--concurrency", "1", "--warmup", "0"],
        preexec_fn=lambda: [os.close(fd) for fd in closed], timeout=60)
    assert process.returncode == 0  # today 1: a traceback after the file, or before the run
    assert json.loads(out.read_text())["complete"] is True


def test_two_outputs_named_dash_collide(tmp_path, cli, monkeypatch):
    three_rounds(tmp_path)
    monkeypatch.chdir(tmp_path)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    results = [  # today: JSON and CSV mixed on stdout, or one file '-' written twice
        cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out", "-", "--csv",
            "-", "--label", "x", "--check"),
        cli("record", "--section", f"s={tmp_path}:cpu:gpu", "--json", "-", "--markdown", "-"),
        cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--html", "-",
            "--junit", "-"),
    ]
    for result in results:
        assert_one_line_error(result, "- is the same file as", "--")
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("cases", [
    [{"name": "big", "text": "x" * 200, "repeat": 100_000}],
    [{"name": f"c{i}", "text": "y" * 160, "repeat": 100_000} for i in range(20)],
])
def test_a_boundary_case_repeated_beyond_the_corpus_bound_is_refused(tmp_path, cli, cases):
    repo = tmp_path / "repo" / "e2e" / "x" / "testdata"
    repo.mkdir(parents=True)
    (repo / "a.json").write_text('[{"question": "hello there friend"}]')
    boundary = tmp_path / "boundary.json"
    boundary.write_text(json.dumps({"cases": cases}))
    result = cli("corpus", "--repo", tmp_path / "repo", "--out", tmp_path / "c.json",
                 "--boundary", boundary)  # today 20 MB made per case, 1 TB a MemoryError
    assert_one_line_error(result, "the text repeated makes", "boundary.json: cases[")
    assert not (tmp_path / "c.json").exists()


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


def test_a_ctrl_c_while_python_joins_the_last_threads_keeps_the_exit_code():
    # main() has returned (the file written, the code chosen) and a thread is still joined
    # at exit; a Ctrl-C pressed again then ended the process by SIGINT with a traceback. The
    # thread says when main() has returned and console_main() has set SIGINT aside (10 s at
    # most), not a sleep that a loaded machine outlasts: the signal comes while it is joined
    child = ("import signal, sys, threading, time; sys.path.insert(0, %r)\n"
             "import router_latency as rl\n"
             "def joined():\n"
             "    for _ in range(2000):\n"
             "        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:\n"
             "            break\n"
             "        time.sleep(0.005)\n"
             "    print('returned', flush=True)\n"
             "    time.sleep(1.0)\n"
             "def main(argv=None, program=False):\n"
             "    threading.Thread(target=joined).start()\n"
             "    return 3\n"
             "rl.main = main\n"
             "rl.console_main()\n") % str(TOOL_PYC.parent)
    process = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "returned\n"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 3 and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("header", ["Content-Length: 5", "transfer-encoding: chunked",
                                    "TRANSFER-ENCODING: hdr-5ecret-98765"])
def test_a_header_that_frames_the_body_is_refused(tmp_path, cli, header):
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "r.json", "--label", "x", "--header", header, "--check")
    # today sent beside the tool's own Content-Length: the router reads another body's end
    assert result.code == 2 and "is set from each request's body" in result.err, result
    assert HEADER_VALUE not in result.err


# --- outputs onto devices, pipes and links; appended outputs whole or not at all ---

def rounds_with(tmp_path, cli, *options):
    (tmp_path / "r").mkdir(exist_ok=True)
    three_rounds(tmp_path / "r")
    return cli("rounds", "--dir", tmp_path / "r", "--base", "cpu", "--new", "gpu", *options)


def test_an_output_through_a_link_replaces_the_file_it_names_and_keeps_the_link(tmp_path, cli):
    (tmp_path / "real").mkdir()
    old = tmp_path / "real" / "old.xml"
    old.write_text("old")
    (tmp_path / "junit.xml").symlink_to(old)
    (tmp_path / "page.html").symlink_to(tmp_path / "real" / "new.html")  # dangling: made
    result = rounds_with(tmp_path, cli, "--junit", tmp_path / "junit.xml", "--html",
                         tmp_path / "page.html")
    assert result.code == 3, result.err
    assert (tmp_path / "junit.xml").is_symlink() and (tmp_path / "page.html").is_symlink()
    assert old.read_text().startswith("<?xml")
    assert (tmp_path / "real" / "new.html").read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["new.html", "old.xml"]


def test_an_output_onto_a_fifo_is_written_through_or_refused_never_replaced(tmp_path, cli):
    fifo = tmp_path / "junit.fifo"
    os.mkfifo(fifo)
    result = rounds_with(tmp_path, cli, "--junit", fifo)  # nobody reads it: refused, at once
    assert_one_line_error(result, str(fifo), "a FIFO that nobody reads")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the reader's open is what lets the write start
            result = rounds_with(tmp_path, cli, "--junit", fifo)
            if "nobody reads" not in result.err:
                break
            time.sleep(0.01)
    finally:
        reader.join(10)
    assert result.code == 3 and result.err == "", result.err
    assert got and got[0].startswith(b"<?xml") and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_an_output_onto_a_character_device_is_written_through(tmp_path, cli, simulator):
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
        os.open(null, os.O_WRONLY)
    except OSError:
        pytest.skip("this user cannot make or open a device file")
    for options in (["--junit", null], ["--html", null]):
        result = rounds_with(tmp_path, cli, *options)
        assert result.code == 3 and result.err == "", result.err
        assert stat.S_ISCHR(os.lstat(null).st_mode)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    for force in ((), ("--force",)):
        ran = cli("run", "--url", simulator(delay_ms=0).url, "--corpus", corpus, "--out", null,
                  "--label", "x", "--warmup", "0", "--concurrency", "1", *force)
        assert ran.code == 0 and ran.err == "", ran.err
        assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_socket_is_refused_as_an_output(tmp_path, cli):
    where = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(where))
    try:
        result = rounds_with(tmp_path, cli, "--junit", where)
    finally:
        server.close()
    assert_one_line_error(result, str(where), "is a socket")
    assert stat.S_ISSOCK(os.lstat(where).st_mode)


def test_html_to_dev_fd_1_reaches_the_pipe(tmp_path):
    three_rounds(tmp_path)
    done = subprocess.run(
        [sys.executable, str(TOOL_PYC), "rounds", "--dir", str(tmp_path), "--base", "cpu", "--new",
         "gpu", "--html", "/dev/fd/1", "--format", "json"],
        capture_output=True, timeout=60, check=False)
    assert done.returncode == 3, done.stderr
    assert b"<!DOCTYPE html>" in done.stdout and b"</html>" in done.stdout, done.stdout[-200:]


@pytest.mark.parametrize("allowed", [0, 1000])
def test_the_step_summary_is_appended_whole_or_not_at_all(tmp_path, cli, monkeypatch, allowed):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    real_write = os.write

    def full_disk(fd, data):  # the disk takes `allowed` bytes of the summary, then is full
        if os.path.realpath(f"/proc/self/fd/{fd}") != str(summary):
            return real_write(fd, data)
        if not allowed:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, bytes(data[:allowed]))

    monkeypatch.setattr(os, "write", full_disk)
    result = rounds_with(tmp_path, cli)
    monkeypatch.setattr(os, "write", real_write)
    assert result.code == 3
    assert result.err.startswith("router-latency: warning: cannot append to "
                                 "GITHUB_STEP_SUMMARY: ") and result.err.count("\n") == 1
    assert "nothing of it was left in the file" in result.err, result.err
    assert summary.read_text() == "# earlier step\n"


# --- request targets ---

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
