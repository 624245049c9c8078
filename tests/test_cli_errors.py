"""Bad input: exit 2, one line naming the file or field, no traceback, nothing written."""

import json
import socket
import subprocess
import sys

import pytest

import router_latency as rl
from conftest import BAD_FILES, TOOL, assert_one_line_error, bad_file, write_corpus


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.json", ["hello"])


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
    path.write_text(json.dumps({"schema": rl.CORPUS_SCHEMA, "prompts": prompts}))
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
])
def test_run_rejects_bad_options(tmp_path, cli, corpus, option, value, message):
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "o.json", "--label", "x", option, value)
    assert_one_line_error(result, option, message)


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


def test_corpus_failure_leaves_the_previous_file_untouched(tmp_path, cli):
    out = tmp_path / "corpus.json"
    out.write_text("previous")
    data = tmp_path / "e2e" / "testdata"
    data.mkdir(parents=True)
    (data / "bad.json").write_text("{oops")
    assert cli("corpus", "--repo", tmp_path, "--out", out).code == 2
    assert out.read_text() == "previous"


def test_simulate_and_demo_bad_options(cli):
    assert_one_line_error(cli("simulate", "--port", "70000"), "--port")
    assert_one_line_error(cli("demo", "--rounds", "1"), "--rounds")


def test_unknown_subcommand_and_missing_arguments(cli):
    assert_one_line_error(cli("frobnicate"), "invalid choice")
    assert_one_line_error(cli("run"), "required")


def test_errors_from_a_subprocess_have_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, str(TOOL), "compare", str(tmp_path / "a.json"),
                             str(tmp_path / "b.json")], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert result.stderr == f"router-latency: error: no such file ({tmp_path / 'a.json'})\n"
    assert result.stdout == ""


def test_version(cli, capsys):
    result = cli("--version")
    assert result.code == 0 and result.out == f"router-latency {rl.__version__}\n"
