"""command line: bad input exits 2 with one line naming the file or field, no traceback and
nothing written; --version; exit codes kept when stdout is closed or full; bytes that are not
UTF-8 in paths and labels; output files and the umask, --out -; the demo and the
rounds/run_rounds.sh driver, run as a user runs them."""

import errno
import json
import os
import shlex
import socket
import stat
import subprocess
import sys

import pytest

import router_latency as rl
from conftest import (BAD_FILES, ROOT, TOOL, assert_one_line_error, bad_file, final_answer,
                      three_rounds, two_runs, write_corpus)

DRIVER = ROOT / "rounds" / "run_rounds.sh"


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
    assert_one_line_error(cli("frobnicate"), "invalid choice")
    assert_one_line_error(cli("run"), "required")


def test_errors_from_a_subprocess_have_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, str(TOOL), "compare", str(tmp_path / "a.json"),
                             str(tmp_path / "b.json")], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert result.stderr == f"router-latency: error: no such file ({tmp_path / 'a.json'})\n"
    assert result.stdout == ""


def run_with_stdout(arguments, stdout, env=None):
    """Run the tool with stdout "closed" (a pipe whose reader has gone, as after `| head`)
    or "full" (/dev/full); return (exit code, stderr)."""
    if stdout == "closed":
        read_end, target = os.pipe()
        os.close(read_end)
    else:
        target = os.open("/dev/full", os.O_WRONLY)
    try:
        process = subprocess.Popen([sys.executable, str(TOOL), *map(str, arguments)],
                                   stdout=target, stderr=subprocess.PIPE, text=True, env=env)
    finally:
        os.close(target)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return process.returncode, stderr


@pytest.mark.parametrize("stdout", ["closed", "full"])
def test_a_failed_gate_keeps_exit_1_when_stdout_is_closed_or_full(tmp_path, scripted, stdout):
    three_rounds(tmp_path, differ_in_round=1)
    assert run_with_stdout(["rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"],
                           stdout) == (1, "")
    assert run_with_stdout(["rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json"], stdout) == (1, "")
    a, b = two_runs(tmp_path)
    assert run_with_stdout(["compare", a, b, "--fail-on-decision-change"], stdout) == (1, "")
    router = scripted(lambda prompt, _: [final_answer(status=b"500 Internal Server Error")
                                         if prompt == "bad" else final_answer()])
    corpus = write_corpus(tmp_path / "corpus.json", ["good", "bad"])
    code, stderr = run_with_stdout(["run", "--url", router.url, "--corpus", corpus, "--out",
                                    tmp_path / "run.json", "--label", "x", "--concurrency", "1",
                                    "--gpu", "none"], stdout)
    assert code == 1 and stderr == "router-latency: 1 requests failed (--max-errors 0)\n"
    assert json.loads((tmp_path / "run.json").read_text())["complete"] is True
    assert run_with_stdout(["--help"], stdout) == (0, "")


def test_version(cli, capsys):
    result = cli("--version")
    assert result.code == 0 and result.out == f"router-latency {rl.__version__}\n"


def test_demo_runs_the_whole_method_and_keeps_files(tmp_path, cli):
    result = cli("demo", "--dir", tmp_path / "demo", "--rounds", "2")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "round 1: cpu then gpu" in lines and "round 2: gpu then cpu" in lines
    assert any(line.startswith("rounds: 2 used (r1, r2); base cpu, new gpu") for line in lines)
    header = next(line for line in lines if line.startswith("pass "))
    assert header.split()[:4] == ["pass", "metric", "cpu", "gpu"]
    assert lines[-1].startswith("verdict: PASS")
    files = sorted(p.name for p in (tmp_path / "demo").glob("r*.json"))
    assert files == ["r1-cpu.json", "r1-gpu.json", "r2-cpu.json", "r2-gpu.json"]
    run = json.loads((tmp_path / "demo" / "r2-gpu.json").read_text())
    assert run["complete"] is True and run["label"] == "gpu"


def simulate_command(tmp_path, side, delay):
    """A start command that runs `simulate` on port 0 and records its pid and URL."""
    return (f"{shlex.quote(sys.executable)} {shlex.quote(str(TOOL))} simulate --port 0 "
            f"--delay-ms {delay} --url-file {shlex.quote(str(tmp_path / (side + '.url')))} "
            f">/dev/null 2>&1 & echo $! > {shlex.quote(str(tmp_path / (side + '.pid')))}")


def driver_args(tmp_path, corpus, *extra):
    stop = 'kill "$(cat {dir}/$SIDE.pid)"; echo "stopped $SIDE $ROUND" >> {dir}/log'.format(
        dir=shlex.quote(str(tmp_path)))
    return ["bash", str(DRIVER), "--rounds", "2", "--dir", str(tmp_path / "results"),
            "--corpus", corpus, "--wait-ready", "20",
            "--base", "cpu", "--base-start", simulate_command(tmp_path, "cpu", 2),
            "--base-stop", stop, "--base-url-file", str(tmp_path / "cpu.url"),
            "--new", "gpu", "--new-start", simulate_command(tmp_path, "gpu", 0.5),
            "--new-stop", stop, "--new-url-file", str(tmp_path / "gpu.url"),
            *extra, "--", "--concurrency", "1,2", "--warmup", "2",
            "--probe", "side=echo $SIDE $ROUND"]


def test_driver_runs_interleaved_rounds_with_simulate(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.json", [f"prompt {i}" for i in range(8)])
    result = subprocess.run(driver_args(tmp_path, corpus), capture_output=True, text=True,
                            timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        "r1-cpu.json", "r1-gpu.json", "r2-cpu.json", "r2-gpu.json"]
    assert (tmp_path / "log").read_text().splitlines() == [
        "stopped cpu 1", "stopped gpu 1", "stopped gpu 2", "stopped cpu 2"]
    assert result.stderr.splitlines() == ["round 1/2: cpu", "round 1/2: gpu", "round 2/2: gpu",
                                          "round 2/2: cpu"]
    assert result.stdout.startswith("rounds: 2 used (r1, r2); base cpu, new gpu")
    probe = json.loads((tmp_path / "results" / "r2-gpu.json").read_text())["passes"][0]
    assert probe["environment"]["probes"]["before"]["side"]["stdout"] == "gpu 2\n"
    assert result.stdout.splitlines()[-1].startswith("verdict: PASS")


def test_driver_dry_run_prints_the_schedule_and_runs_nothing(tmp_path):
    corpus = str(tmp_path / "corpus.json")
    result = subprocess.run(driver_args(tmp_path, corpus, "--dry-run"), capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if ": start:" in line] == [
        "round 1 cpu", "round 1 gpu", "round 2 gpu", "round 2 cpu"]
    assert lines[-1].startswith("then: ") and " rounds --dir " in lines[-1]
    assert not (tmp_path / "results").exists() and not (tmp_path / "log").exists()


def test_driver_rotates_the_start_order_as_start_order_does(tmp_path):
    command = driver_args(tmp_path, str(tmp_path / "corpus.json"), "--dry-run")
    command[command.index("--rounds") + 1] = "4"
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    printed = {}
    for line in result.stdout.splitlines():
        if ": start: " in line:
            _, number, side = line.split(":")[0].split()
            printed.setdefault(int(number), []).append(side)
    assert printed == {n: rl.start_order(n, ["cpu", "gpu"]) for n in range(1, 5)}


def test_driver_stops_the_router_when_a_run_fails_and_exits_2(tmp_path):
    result = subprocess.run(driver_args(tmp_path, str(tmp_path / "missing.json")),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "run_rounds.sh: error: round 1 cpu: run exited 2" in result.stderr
    assert (tmp_path / "log").read_text().splitlines() == ["stopped cpu 1"]


def test_driver_rejects_bad_options(tmp_path):
    for args, message in ((["--rounds", "1"], "--rounds must be a whole number >= 2"),
                          (["--base", "../x"], "--base needs a side name")):
        command = driver_args(tmp_path, "c.json")
        index = command.index(args[0])
        command[index + 1] = args[1]
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert result.returncode == 2 and message in result.stderr


def test_driver_pins_itself_with_taskset_when_asked(tmp_path):
    result = subprocess.run(driver_args(tmp_path, "c.json", "--dry-run"), capture_output=True,
                            text=True, timeout=30, env={"PATH": "/usr/bin:/bin",
                                                        "DRIVER_CPUS": "1"})
    runs = [line for line in result.stdout.splitlines() if ": run: " in line]
    assert len(runs) == 4 and all(" taskset -c 1 " in line for line in runs)
    assert "--probe side=echo\\ \\$SIDE\\ \\$ROUND" in runs[0]


def test_driver_runs_nothing_but_the_commands_given(tmp_path):
    # a corpus path and a URL that a careless script would evaluate, in the folder it runs in
    corpus = str(tmp_path / "c$(touch evaluated).json")
    write_corpus(corpus, ["a"])
    command = driver_args(tmp_path, corpus)
    command[command.index("--base-url-file")] = "--base-url"
    command[command.index("--base-url") + 1] = "http://127.0.0.1:1/`touch evaluated`"
    command[command.index("--wait-ready") + 1] = "1"  # nothing listens there: fail soon
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    assert not (tmp_path / "evaluated").exists()


NOT_UTF8 = os.fsdecode(b"\xff\xfe")  # bytes a UTF-8 path or argument cannot hold, as Python
#                                       hands them over (surrogate escapes)


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
    run = rl.load_run(str(out))
    assert run.label == f"x{NOT_UTF8}" and run.corpus["path"] == corpus
    assert [r.decision for r in run.passes[0].requests] == ["\ud800a", "\ud800b"]
    assert b"".join(rl.dump_run(run)) == data
    compared = cli("compare", out, out)
    assert compared.code == 0 and compared.err == ""


def test_paths_that_are_not_utf8_under_a_strict_utf8_stdout(tmp_path, simulator):
    env = dict(os.environ, PYTHONIOENCODING="utf-8")  # strict, as under en_US.UTF-8
    data = tmp_path / "repo" / "e2e" / "x" / "testdata"
    data.mkdir(parents=True)
    (data / f"q{NOT_UTF8}.json").write_text('[{"question": "What is 2+2?"}]')
    corpus = tmp_path / f"corpus{NOT_UTF8}.json"
    made = subprocess.run([sys.executable, str(TOOL), "corpus", "--repo", str(tmp_path / "repo"),
                           "--out", str(corpus)], capture_output=True, env=env, timeout=60)
    assert made.returncode == 0 and b"Traceback" not in made.stderr, made.stderr
    assert b"q\\udcff\\udcfe.json" in made.stdout and corpus.exists()
    out = tmp_path / f"run{NOT_UTF8}.json"
    ran = subprocess.run([sys.executable, str(TOOL), "run", "--url", simulator(delay_ms=0).url,
                          "--corpus", str(corpus), "--out", str(out), "--label", "x",
                          "--concurrency", "1", "--gpu", "none"], capture_output=True, env=env,
                         timeout=60)
    assert ran.returncode == 0 and ran.stderr == b"", ran.stderr
    assert ran.stdout.endswith(b"wrote " + os.fsencode(tmp_path).replace(b"\\", b"\\\\")
                               + b"/run\\udcff\\udcfe.json\n")
    assert json.loads(out.read_bytes())["corpus"]["path"] == str(corpus)


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
    made = cli("corpus", "--repo", ROOT / "corpus", "--glob", "*.json", "--out", "-")
    assert made.code == 0 and json.loads(made.out)["schema"] == rl.CORPUS_SCHEMA
