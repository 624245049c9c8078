"""command line: bad input exits 2 with one line naming the file or field, no traceback and
nothing written; --version; exit codes kept when stdout is closed or full; bytes that are not
UTF-8 in paths and labels; output files and the umask, --out -; the demo and the
rounds/run_rounds.sh driver, run as a user runs them."""

import errno
import http.client
import json
import os
import re
import socket
import stat

import pytest

from router_latency.constants import __version__, DEFAULT_GLOB, PREVIEW_PATH
from router_latency.corpus import CORPUS_SCHEMA, load_corpus
from router_latency.runfile import dump_run, load_run
from router_latency.command_demo import demo_next_steps
from router_latency.cli import main
from conftest import (assert_one_line_error, bad_file, BAD_FILES, final_answer, hold_a_slot,
                      make_run, NOT_UTF8, ROOT, three_rounds, write_corpus)

# its runs and reports write files only to read them back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_run_rejects_bad_corpus_files(tmp_path, cli, kind):
    path = bad_file(tmp_path, kind)
    out = tmp_path / "out.json"
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", path, "--out", out,
                 "--label", "x")
    assert_one_line_error(result, str(path), BAD_FILES[kind][1])
    assert not out.exists()


@pytest.mark.parametrize("prompts,field,message", [
    ([], "prompts", "the corpus has no prompts"),
    ([{"id": 0, "text": 5}], "prompts[0]", "each prompt needs a string 'text'"),
    ([{"id": 3, "text": "a"}], "prompts[0]", "'id' must be 0"),
    ("text", "prompts", "'prompts' must be a list"),
])
def test_run_rejects_corpus_contents(tmp_path, cli, prompts, field, message):
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({"schema": CORPUS_SCHEMA, "prompts": prompts}))
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", path, "--out",
                 tmp_path / "o.json", "--label", "x")
    assert_one_line_error(result, f"{path}: {field}", message)


@pytest.mark.parametrize("url,message", [
    ("127.0.0.1:8801", "the URL must start with http:// or https://"),
    ("router:8801", "the URL must start with http:// or https://"),
    ("file:///etc/passwd", "scheme file:// is not supported"),
    ("ftp://127.0.0.1/", "scheme ftp:// is not supported"),
    ("http://", "the URL has no host"),
    ("http://127.0.0.1:99999", "not a valid URL"),
])
def test_run_rejects_bad_urls(tmp_path, cli, corpus, url, message):
    out = tmp_path / "out.json"
    result = cli("run", "--url", url, "--corpus", corpus, "--out", out, "--label", "x")
    assert_one_line_error(result, "--url", message)
    assert not out.exists()


def test_run_check_checks_and_sends_nothing(tmp_path, cli, corpus):
    out = tmp_path / "r1.json"
    # nothing listens on port 1: a run would fail, a check does not look
    result = cli("run", "--check", "--url", "http://127.0.0.1:1", "--corpus", corpus, "--out", out,
                 "--label", "cpu")
    assert result.code == 0 and result.err == ""
    assert result.out == (f"run cpu: checked: corpus {load_corpus(corpus).sha256[:12]} "
                          f"(1 prompts), http://127.0.0.1:1/api/v1/routing/preview, {out} "
                          f"writable; nothing sent\n")
    assert not out.exists()
    assert_one_line_error(cli("run", "--check", "--url", "http://127.0.0.1:1", "--corpus", corpus,
                              "--out", tmp_path / "no" / "r1.json", "--label", "cpu"),
                          "the folder does not exist")


def test_run_host_that_does_not_resolve(tmp_path, cli, corpus, monkeypatch):
    def no_such_host(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    result = cli("run", "--url", "http://router.invalid:8801", "--corpus", corpus, "--out",
                 tmp_path / "o.json", "--label", "x")
    assert_one_line_error(result, "cannot resolve host 'router.invalid' (--url)")


@pytest.mark.parametrize("option,value,message", [
    ("--concurrency", "0", "expected whole numbers from 1 to 1024"),
    ("--concurrency", "-4", "expected whole numbers from 1 to 1024"),
    ("--concurrency", "1.5", "expected whole numbers from 1 to 1024"),
    ("--concurrency", "4,4", "concurrency 4 given twice"),
    ("--timeout", "0", "expected a number > 0"),
    ("--timeout", "nan", "expected a number > 0"),
    ("--warmup", "-1", "expected a whole number >= 0"),
    ("--header", "NoColon", "expected 'Name: value'"),
    ("--max-load", "-5", "expected a number >= 0"),
    ("--repeat", "0", "expected a whole number >= 1"),
    ("-n", "2.5", "expected a whole number >= 1"),
    ("--duration", "0", "expected a time above 0 and up to a day"),
    ("-d", "25h", "expected a time above 0 and up to a day"),
    ("--duration", "soon", "expected a time above 0 and up to a day"),
    ("--rate", "50/0s", "expected requests per second above 0"),
    ("--rate", "50/fortnight", "expected requests per second above 0"),
    ("--rate", "50/s,50", "rate 50 given twice"),
])
def test_run_rejects_bad_options(tmp_path, cli, corpus, option, value, message):
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "o.json", "--label", "x", option, value)
    assert_one_line_error(result, option, message)


@pytest.mark.parametrize("options,message", [
    (["-n", "2", "-d", "5"], "argument -d/--duration: not allowed with argument -n/--repeat"),
    (["-n", "1000001"], "a pass of 1,000,001 requests; at most 1,000,000 are kept in memory "
                        "(--repeat)"),
    (["--rate", "1000/s", "-d", "1001s"], "a pass of 1,001,000 requests; at most 1,000,000 are "
                                          "kept in memory (--duration)"),
])
def test_run_rejects_passes_of_the_wrong_length(tmp_path, cli, corpus, options, message):
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "o.json", "--label", "x", *options)
    assert_one_line_error(result, message)
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("value,options,message", [
    (None, [], "environment variable VSR_MGMT_TOKEN is not set or empty (--token-env)"),
    ("  ", [], "environment variable VSR_MGMT_TOKEN is not set or empty (--token-env)"),
    ("abc\r\nX-Evil: 1", [], "the value of VSR_MGMT_TOKEN is not a token"),
    ("s3cret", ["-H", "authorization: Basic x"], "Authorization is already set"),
])
def test_run_token_env_errors_never_show_the_token(tmp_path, cli, corpus, monkeypatch, value,
                                                    options, message):
    monkeypatch.delenv("VSR_MGMT_TOKEN", raising=False)
    if value is not None:
        monkeypatch.setenv("VSR_MGMT_TOKEN", value)
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "o.json", "--label", "x", "--token-env", "VSR_MGMT_TOKEN", *options)
    assert_one_line_error(result, message)
    assert "s3cret" not in result.err and "abc" not in result.err


@pytest.mark.parametrize("name", ["eyJhbGciOiJIUzI1NiJ9.e30.sig", "sk_live_Xq83hdTq"])
def test_run_token_env_given_a_token_by_mistake_does_not_print_it(tmp_path, cli, corpus,
                                                                  monkeypatch, name):
    monkeypatch.delenv(name, raising=False)
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "o.json", "--label", "x", "--token-env", name)
    assert_one_line_error(result, "--token-env")
    assert name not in result.err and name[:8] not in result.err
    assert "not the token itself" in result.err or "the variable it names is not set" in \
        result.err


@pytest.mark.parametrize("side", ["a/b", "..", "../up", "-x", ""])
def test_rounds_rejects_side_names_that_could_leave_the_folder(tmp_path, cli, side):
    result = cli("rounds", "--dir", tmp_path, "--base", side, "--new", "gpu")
    assert_one_line_error(result, "--base")


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "abc"])
def test_rounds_rejects_bad_tolerance(tmp_path, cli, value):
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                 "--tolerance", value)
    assert_one_line_error(result, "--tolerance")


def test_rounds_bad_folders(tmp_path, cli):
    assert_one_line_error(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"),
                          "no r<N>-cpu.json or r<N>-gpu.json files", str(tmp_path))
    assert_one_line_error(cli("rounds", "--dir", tmp_path / "nope", "--base", "cpu", "--new",
                              "gpu"), "no such folder")
    make_run(tmp_path / "r1-cpu.json", label="cpu")
    make_run(tmp_path / "r1-gpu.json", label="gpu")
    misnamed = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "rocm")
    assert misnamed.code == 2 and misnamed.err == (
        f"router-latency: error: no r<N>-rocm.json files; the folder holds sides cpu, gpu "
        f"({tmp_path})\n")
    neither = cli("rounds", "--dir", tmp_path, "--base", "a", "--new", "b")
    assert "no r<N>-a.json or r<N>-b.json files; the folder holds sides cpu, gpu" in neither.err
    assert_one_line_error(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "cpu"),
                          "--base and --new name the same side")


def test_corpus_bad_input(tmp_path, cli):
    out = tmp_path / "corpus.json"
    assert_one_line_error(cli("corpus", "--repo", tmp_path / "nope", "--out", out),
                          "not a folder")
    assert_one_line_error(cli("corpus", "--repo", tmp_path, "--out", out),
                          "no file matches e2e/**/testdata/**/*.json")
    data = tmp_path / "e2e" / "testdata"
    data.mkdir(parents=True)
    (data / "bad.json").write_text("{oops")
    assert_one_line_error(cli("corpus", "--repo", tmp_path, "--out", out),
                          str(data / "bad.json"), "invalid JSON")
    (data / "bad.json").write_text("[]")
    boundary = tmp_path / "boundary.json"
    boundary.write_text('{"cases": [{"name": "x"}]}')
    assert_one_line_error(cli("corpus", "--repo", tmp_path, "--out", out, "--boundary",
                              boundary), f"{boundary}: cases[0]")
    assert_one_line_error(cli("corpus", "--repo", tmp_path, "--out", tmp_path / "no" / "c.json"),
                          "the folder does not exist")
    assert not out.exists()


def repo_with_a_previous_corpus(tmp_path, name, content):
    """Write a repo of one E2E data file and an earlier corpus.json beside it; return the
    corpus's path."""
    out = tmp_path / "corpus.json"
    out.write_text("previous")
    data = tmp_path / "e2e" / "testdata"
    data.mkdir(parents=True)
    (data / name).write_text(content)
    return out


def test_corpus_failure_leaves_the_previous_file_untouched(tmp_path, cli):
    out = repo_with_a_previous_corpus(tmp_path, "bad.json", "{oops")
    assert cli("corpus", "--repo", tmp_path, "--out", out, "--force").code == 2
    assert out.read_text() == "previous"


def test_corpus_refuses_an_existing_output_without_force(tmp_path, cli):
    out = repo_with_a_previous_corpus(tmp_path, "cases.json", '[{"query": "hello"}]')
    assert_one_line_error(cli("corpus", "--repo", tmp_path, "--out", out),
                          f"exists; pass --force to overwrite it ({out})")
    assert out.read_text() == "previous"
    result = cli("corpus", "--repo", tmp_path, "--out", out, "--force")
    assert result.code == 0 and result.err == ""
    assert '"hello"' in out.read_text()


def test_simulate_and_demo_bad_options(cli):
    assert_one_line_error(cli("simulate", "--port", "70000"), "--port")
    assert_one_line_error(cli("simulate", "--max-concurrency", "0"), "--max-concurrency")
    assert_one_line_error(cli("demo", "--rounds", "1"), "--rounds")


def test_run_help_explains_the_timeout_and_the_router_limit(cli):
    text = " ".join(cli("run", "--help").out.split())
    assert "--timeout TIMEOUT seconds per request; keep it above the router's " \
           "request_timeout_seconds (default 120): a request given up on earlier keeps its " \
           "router slot until its inference ends" in text
    assert "--router-max-concurrency N previews the router admits at once" in text
    assert "429 OVERLOADED (default: 16)" in text


def preview(router, body):
    """Return (status, headers, body) of one preview POSTed to a simulated router."""
    connection = http.client.HTTPConnection("127.0.0.1", int(router.url.rsplit(":", 1)[1]),
                                            timeout=10)
    try:
        connection.request("POST", PREVIEW_PATH, body)
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        connection.close()


@pytest.mark.parametrize("body,message", [
    ('{"model": "MoM", "text": ""}', "text cannot be empty"),
    ('{"model": "MoM", "messages": [{"role": "user", "content": ""}]}', "text cannot be empty"),
    ('{"model": "MoM", "messages": [{"role": "system", "content": "no user"}]}',
     "text cannot be empty"),
    ('{"model": "MoM", "messages": [', "failed to parse JSON"),
])
def test_simulate_rejects_empty_text_as_the_router_does(simulator, body, message):
    status, headers, answer = preview(simulator(delay_ms=0), body)
    error = json.loads(answer)["error"]
    assert (status, error["code"]) == (400, "INVALID_INPUT")
    assert error["message"].startswith(message) and "timestamp" in error
    assert "x-vsr-config-hash" not in {name.lower() for name in headers}


def test_simulate_answers_with_a_config_hash_of_its_settings(simulator):
    router = simulator(delay_ms=0)
    status, headers, answer = preview(router, '{"messages": [{"role": "user", "content": "hi"}]}')
    assert status == 200 and json.loads(answer)["decision_result"]["decision_name"]
    assert headers["x-vsr-config-hash"] == router.config_hash
    assert re.fullmatch("[0-9a-f]{64}", router.config_hash)
    assert simulator(delay_ms=0, seed=7).config_hash == router.config_hash  # seed: not config
    assert simulator(delay_ms=1).config_hash != router.config_hash
    assert simulator(delay_ms=0, max_concurrency=4).config_hash != router.config_hash


def test_simulate_sheds_previews_beyond_its_limit(simulator):
    router = simulator(delay_ms=30_000, max_concurrency=1)
    with hold_a_slot(router):
        status, _, answer = preview(router, '{"messages": [{"role": "user", "content": "x"}]}')
    assert status == 429 and json.loads(answer)["error"]["code"] == "OVERLOADED"
    assert router.in_flight == 1  # the held preview, whose client has gone


def test_demo_keeps_nothing_over_earlier_files(tmp_path, cli):
    (tmp_path / "corpus.json").write_text("mine")
    assert_one_line_error(cli("demo", "--keep", tmp_path),
                          f"already holds demo files; use an empty folder ({tmp_path})")
    assert (tmp_path / "corpus.json").read_text() == "mine"


def test_simulate_on_a_port_in_use_or_an_address_not_here(cli):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert_one_line_error(cli("simulate", "--port", port), f"cannot listen on 127.0.0.1:"
                              f"{port}: {os.strerror(errno.EADDRINUSE)} (--port)")
    # a documentation address (RFC 5737): binding fails here, no packet leaves
    assert_one_line_error(cli("simulate", "--host", "192.0.2.1", "--port", "0"),
                          f"cannot listen on 192.0.2.1:0: {os.strerror(errno.EADDRNOTAVAIL)} "
                          f"(--host)")


def test_unknown_subcommand_and_missing_arguments(cli):
    assert_one_line_error(cli("frobnicate"), "unknown command")
    assert_one_line_error(cli("run"), "required")


def test_version(cli, capsys):
    result = cli("--version")
    assert result.code == 0 and result.out == f"router-latency {__version__}\n"


def test_demo_runs_the_whole_method_and_keeps_files(demo_kept):
    result, kept = demo_kept  # demo --rounds 3 --keep KEPT, run once (conftest)
    # gpu is about twice as fast: never a FAIL, though on a loaded machine three rounds may
    # leave a row undecided
    assert result.code in (0, 3), result.err
    lines = result.out.splitlines()
    assert "round 1: cpu then gpu" in lines and "round 2: gpu then cpu" in lines
    assert any(line.startswith("rounds: 3 used (r1, r2, r3); base cpu, new gpu")
               for line in lines)
    header = next(line for line in lines if line.startswith("pass "))
    assert header.split()[:4] == ["pass", "metric", "cpu", "gpu"]
    # the report opens with its verdict and ends with it
    verdict = max(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert lines[verdict].startswith(("verdict: PASS", "verdict: INCONCLUSIVE: "))
    assert lines[verdict] in lines[:verdict]
    assert lines[verdict + 2] == f"the corpus and run files are kept in {kept}"
    assert lines[verdict + 3:] == demo_next_steps(True)  # the package: the installed commands
    files = sorted(p.name for p in kept.glob("r*.json"))
    assert files == ["r1-cpu.json", "r1-gpu.json", "r2-cpu.json", "r2-gpu.json",
                     "r3-cpu.json", "r3-gpu.json"]
    run = json.loads((kept / "r2-gpu.json").read_text())
    assert run["complete"] is True and run["label"] == "gpu"
    # the simulated routers route the whitespace-only case as the current router does (its
    # expectation allows that), and each side answers with its own configuration
    assert not any(line.startswith("expected rejections") for line in lines)
    configuration = next(line for line in lines[:verdict]
                         if line.startswith("configuration (x-vsr-config-hash)"))
    assert re.fullmatch(r"configuration \(x-vsr-config-hash\): cpu [0-9a-f]{12}; "
                        r"gpu [0-9a-f]{12}", configuration)
    assert configuration[-12:] != configuration[-30:-18]


def test_record_bad_input(tmp_path, cli):
    out = ["--json", tmp_path / "r.json", "--markdown", tmp_path / "r.md"]
    for spec, message in (("noequals", "expected NAME=DIR or NAME=DIR:BASE:NEW"),
                          ("a=dir:cpu", "expected NAME=DIR or NAME=DIR:BASE:NEW")):
        result = cli("record", "--section", spec, *out)
        assert result.code == 2 and message in result.err
    sides_missing = cli("record", "--section", f"a={tmp_path}", *out)
    assert_one_line_error(sides_missing, "section a names no sides")
    (tmp_path / "r.md").write_text("keep")
    exists = cli("record", "--section", f"a={tmp_path}:cpu:gpu", *out)
    assert_one_line_error(exists, "exists; pass --force to overwrite it")
    assert (tmp_path / "r.md").read_text() == "keep" and not (tmp_path / "r.json").exists()


def test_rounds_appends_its_markdown_to_the_github_step_summary(tmp_path, cli, monkeypatch):
    three_rounds(tmp_path, differ_in_round=2)
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    text = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    markdown = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                   "markdown")
    assert text.code == markdown.code == 1 and text.err == markdown.err == ""
    assert text.out.endswith("verdict: FAIL: decisions differ in r2 (1 input)\n")
    # appended by each run, whatever it printed, after what was there
    assert summary.read_text(encoding="utf-8") == (
        "# earlier step\n" + markdown.out + "\n" + markdown.out + "\n")


@pytest.mark.parametrize("where", ["missing.md", "folder"])
def test_an_unwritable_step_summary_is_a_warning(tmp_path, cli, monkeypatch, where):
    three_rounds(tmp_path)
    (tmp_path / "folder").mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / where))
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert result.code == 3 and re.search(r"about \d+ more rounds? would decide it\n$", result.out)
    assert result.err.startswith("router-latency: warning: cannot append to "
                                 "GITHUB_STEP_SUMMARY: ")
    assert result.err.endswith(f"({tmp_path / where})\n") and result.err.count("\n") == 1
    assert not (tmp_path / "missing.md").exists()


def test_rounds_refuses_outputs_it_cannot_write_and_a_corpus_of_other_runs(tmp_path, cli):
    three_rounds(tmp_path)
    for option in ("--junit", "--html"):
        result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", option,
                     tmp_path / "no" / "such" / "out")
        assert_one_line_error(result, "the folder does not exist", str(tmp_path / "no"))
        assert result.out == ""
    corpus = write_corpus(tmp_path / "c.json", ["other"])
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--corpus",
                 corpus, "--html", tmp_path / "page.html")
    assert_one_line_error(result, "not the corpus of the runs", str(corpus))
    assert not (tmp_path / "page.html").exists()


def test_run_csv_writes_a_line_per_request(simulator, tmp_path, cli, corpus):
    router = simulator(delay_ms=0)
    out, table = tmp_path / "r1.json", tmp_path / "r1.csv"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--warmup", "0", "--csv", table)
    assert result.code == 0 and result.err == ""
    assert f"wrote {out} and {table}" in result.out
    run = load_run(str(out))
    lines = table.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "pass,id,start_ms,latency_ms,status,decision,error"
    expected = [f"{p.name},{r.id},{r.start_ms},{r.latency_ms},{r.status},{r.decision},"
                for p in run.passes for r in p.requests]
    assert lines[1:] == expected and len(expected) == 3
    again = cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "r2.json",
                "--label", "x", "--csv", table)
    assert_one_line_error(again, "exists; pass --force to overwrite it", str(table))
    same = cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "r3.json",
               "--label", "x", "--csv", tmp_path / "r3.json")
    assert_one_line_error(same, f"--csv {tmp_path / 'r3.json'} is the same file as --out", "--csv")
    assert not (tmp_path / "r2.json").exists() and not (tmp_path / "r3.json").exists()


def test_bytes_that_are_not_utf8_give_run_files_that_read_back(tmp_path, cli, scripted):
    # a router's decision with an escaped lone surrogate, a label and a corpus path of bytes
    # that are not UTF-8
    router = scripted(lambda prompt, _: [final_answer(
        b'{"decision_result": {"decision_name": "\\ud800' + prompt.encode() + b'"}}')])
    corpus = write_corpus(tmp_path / f"corpus-{NOT_UTF8}.json", ["a", "b"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label",
                 f"x{NOT_UTF8}", "--concurrency", "1", "--warmup", "0")
    assert result.code == 0 and "run x\\udcff\\udcfe: 2 prompts" in result.out
    data = out.read_bytes()
    data.decode("utf-8")  # valid UTF-8
    run = load_run(str(out))
    assert run.label == f"x{NOT_UTF8}" and run.corpus["path"] == corpus
    assert [r.decision for r in run.passes[0].requests] == ["\ud800a", "\ud800b"]
    assert b"".join(dump_run(run)) == data
    compared = cli("compare", out, out)
    assert compared.code == 0 and compared.err == ""


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640)])
def test_output_files_respect_the_umask(tmp_path, cli, simulator, umask, mode):
    repo = tmp_path / "repo" / "e2e" / "x" / "testdata"
    repo.mkdir(parents=True)
    (repo / "q.json").write_text('[{"question": "What is 2+2?"}]')
    previous = os.umask(umask)
    try:
        assert cli("corpus", "--repo", tmp_path / "repo", "--out", tmp_path / "c.json").code == 0
        assert cli("run", "--url", simulator(delay_ms=0).url, "--corpus", tmp_path / "c.json",
                   "--out", tmp_path / "r.json", "--label", "x", "--concurrency", "1",
                   "--quiet").code == 0
    finally:
        os.umask(previous)
    for name in ("c.json", "r.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode


def test_out_dash_writes_to_stdout(tmp_path, cli, simulator, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    result = cli("run", "--url", simulator(delay_ms=0).url, "--corpus", corpus, "--out", "-",
                 "--label", "x", "--concurrency", "1")
    assert result.code == 0 and not (tmp_path / "-").exists()
    document = json.loads(result.out)
    assert document["complete"] is True and document["passes"][0]["summary"]["ok"] == 2
    assert result.err.startswith("run x: 2 prompts") and "wrote" not in result.err
    made = cli("corpus", "--repo", ROOT / "corpus", "--glob", "*.json", "--key", "text",
               "--out", "-")
    assert made.code == 0 and json.loads(made.out)["schema"] == CORPUS_SCHEMA


@pytest.mark.parametrize("argv, said", [
    (["run", "--concurency", "4", "--url", "http://127.0.0.1:9"],
     "unrecognized option --concurency: did you mean --concurrency? (router-latency run)"),
    (["run", "--corpsu", "c.json"],  # before: only that --corpus was missing
     "unrecognized option --corpsu: did you mean --corpus? (router-latency run)"),
    (["rounds", "--dir", ".", "--bsae", "a", "--new", "b"],
     "unrecognized option --bsae: did you mean --base? (router-latency rounds)"),
    (["simulate", "--prot=8801"],
     "unrecognized option --prot: did you mean --port? (router-latency simulate)"),
    (["compare", "a.json", "b.json", "--fromat", "json"],
     "unrecognized option --fromat: did you mean --format? (router-latency compare)"),
    (["corpus", "--repo", ".", "--out", "c.json", "--zzz"],
     "unrecognized option --zzz (router-latency corpus)"),
])
def test_a_mistyped_option_names_the_closest_real_one(cli, argv, said):
    result = cli(*argv)
    assert result.code == 2 and result.out == ""
    assert result.err == f"router-latency: error: {said}\n"


@pytest.mark.parametrize("argv, said", [
    (["simulat", "--port", "8801"], "unknown command 'simulat': did you mean simulate?"),
    (["histroy", "report"], "unknown command 'histroy': did you mean history?"),
    (["--version-x", "rounsd", "--dir", "."], "unknown command 'rounsd': did you mean rounds?"),
    (["frobnicate"], "unknown command 'frobnicate': the commands are corpus, run, compare, "
                     "rounds, record, history, simulate, demo"),
])
def test_a_mistyped_command_names_the_closest_real_one_before_its_options(cli, argv, said):
    # the command's options are not the top parser's: "unrecognized option --port" named the
    # wrong mistake
    result = cli(*argv)
    assert result.code == 2 and result.out == ""
    assert result.err == f"router-latency: error: {said} (router-latency)\n"


def test_an_abbreviated_option_still_works(tmp_path, cli):
    corpus = write_corpus(tmp_path / "c.json", ["a"])
    result = cli("run", "--check", "--url", "http://127.0.0.1:1", "--corp", corpus, "--out",
                 tmp_path / "o.json", "--label", "x", "--conc", "2")
    assert result.code == 0, result.err


@pytest.mark.parametrize("argv, said", [
    (["rounds", "--dir", ".", "--base", "a", "--new", "b", "--format", "junit"],
     "junit is a file of its own: --junit FILE (router-latency rounds)"),
    (["rounds", "--dir", ".", "--base", "a", "--new", "b", "--format", "html"],
     "html is a file of its own: --html FILE (router-latency rounds)"),
    (["compare", "a.json", "b.json", "--format", "junit"],
     "junit is a file of its own: --junit FILE of rounds (router-latency compare)"),
    (["compare", "a.json", "b.json", "--format", "csv"],
     "csv is a file of its own: --csv FILE of run (router-latency compare)"),
])
def test_format_junit_or_html_points_to_the_option_that_writes_the_file(cli, argv, said):
    result = cli(*argv)
    assert result.code == 2
    assert result.err.startswith("router-latency: error: argument --format: invalid choice: ")
    assert result.err.endswith(f"; {said}\n")


@pytest.mark.parametrize("inside", ["e2e", "e2e/testdata", None])
def test_corpus_on_a_folder_without_e2e_says_what_to_give(tmp_path, cli, inside):
    repo = tmp_path / "repo"
    (repo / "e2e" / "testdata").mkdir(parents=True)
    (repo / "e2e" / "testdata" / "a.json").write_text('[{"query": "hi"}]')
    folder = repo / inside if inside else tmp_path / "elsewhere"
    folder.mkdir(exist_ok=True)
    result = cli("corpus", "--repo", folder, "--out", tmp_path / "c.json")
    assert result.code == 2 and not (tmp_path / "c.json").exists()
    top = f" ({repo})" if inside else ""
    assert result.err == (
        f"router-latency: error: no file matches {DEFAULT_GLOB}: the folder has no e2e/; "
        f"give the router repository's top folder{top} as --repo, or say where the data is "
        f"with --glob ({folder})\n")
    # a --glob of one's own that matches nothing is only that
    result = cli("corpus", "--repo", repo, "--glob", "x/*.json", "--out", tmp_path / "c.json")
    assert result.err == f"router-latency: error: no file matches x/*.json ({repo})\n"


@pytest.mark.parametrize("out", ["/proc/r1.json", "/sys/r1.json"])
def test_run_check_checks_that_the_output_folder_accepts_a_file(tmp_path, cli, corpus, out):
    # os.access says yes to root on /proc; making the file says no: the check makes one
    result = cli("run", "--check", "--url", "http://127.0.0.1:1", "--corpus", corpus, "--out",
                 out, "--label", "x")
    assert result.code == 2 and result.out == ""
    assert re.fullmatch(r"router-latency: error: the folder does not accept a new file: "
                        rf"[A-Za-z ]+ \({re.escape(out)}\)\n", result.err), result.err
    result = cli("run", "--check", "--url", "http://127.0.0.1:1", "--corpus", corpus, "--out",
                 tmp_path / "r1.json", "--csv", out, "--label", "x")
    assert result.code == 2 and result.err.endswith(f"({out})\n")
    assert os.listdir(tmp_path) == ["corpus.json"]


def test_run_help_groups_its_options(capsys):
    assert main(["run", "--help"]) == 0
    text = capsys.readouterr().out
    titles = ["what to send:", "passes:", "what to record around each pass:", "output:"]
    starts = [text.index(f"\n{title}\n") for title in titles]
    assert starts == sorted(starts)
    sections = dict(zip(titles, (text[a:b] for a, b in zip(starts, starts[1:] + [len(text)]))))
    for title, options in {"what to send:": ["--url", "--corpus", "--header", "--timeout"],
                           "passes:": ["--warmup", "--concurrency", "--rate", "--wait-ready"],
                           "what to record around each pass:": ["--max-load", "--probe"],
                           "output:": ["--out", "--label", "--csv", "--check"]}.items():
        for option in options:
            assert f" {option}" in sections[title], (title, option)


class Answers:
    """--check-lines' answer stream, which fails the test at its 20th write: a check that ran
    one line for ever (a count of -1 did) fails, not hangs."""

    def __init__(self):
        import io
        self.kept, self.writes = io.BytesIO(), 0

    def write(self, data):
        self.writes += 1
        assert self.writes < 20, "--check-lines answered 20 times: it runs a line for ever"
        return self.kept.write(data)

    def flush(self):
        pass


@pytest.mark.parametrize("sent, said", [
    pytest.param(b"x\0--version\0", "line 1 begins with 'x', not its count of words",
                 id="not-a-number"),
    # a negative count ran the same empty line for ever
    pytest.param(b"-1\0", "line 1 begins with '-1', not its count of words", id="negative"),
    pytest.param(b"\xc2\xb2\0--version\0", "line 1 begins with '\xb2', not its count of words",
                 id="superscript-two"),
    pytest.param(b"+1\0--version\0", "line 1 begins with '+1', not its count of words",
                 id="plus-one"),
    pytest.param(b"1\0--version\x003\0--version\0", "line 2 says 3 words; 1 follows",
                 id="fewer-words-than-said"),
    pytest.param(b"0003\0a\0b\0", "line 1 says 3 words; 2 follow", id="leading-zeros"),
    # int() refuses a string of over 4,300 digits (a ValueError of its own)
    pytest.param(b"1" * 5000 + b"\0a\0", "line 1 says 11111111111111111111... words; 1 follows",
                 id="5000-digits"),
    pytest.param(b"x" * 5000 + b"\0", "line 1 begins with 'xxxxxxxxxxxxxxxxxxxx...', not its "
                 "count of words", id="a-long-word"),
    pytest.param(b"1\0--version", "the input does not end with a NUL", id="no-last-nul"),
])
def test_check_lines_refuses_input_that_is_not_lines_and_runs_none(sent, said, capsys):
    # run_rounds.sh's own protocol (each line's count of words, then its words, each ended by
    # NUL); read whole before a line runs, so a bad one answers nothing, not half
    import io
    from router_latency.cli import check_lines
    answer = Answers()
    code = check_lines(io.BytesIO(sent), answer)
    result = capsys.readouterr()
    assert (code, result.out, answer.kept.getvalue()) == (2, "", b"")
    assert result.err == f"router-latency: error: {said} (--check-lines)\n"
    good = Answers()  # leading zeros are a count; an empty line is run too (main's usage)
    assert check_lines(io.BytesIO(b"001\0--version\0" b"0\0"), good) == 0
    answered = good.kept.getvalue().split(b"\0")
    assert answered[:2] == [b"0", f"router-latency {__version__}\n".encode()]
    assert answered[2] == b"2" and len(answered) == 5
