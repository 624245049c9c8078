"""The one file run as a process: the demo, the README's commands, signals, pipes and what the
tool prints on its way out (marked process)."""

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from router_latency.corpus import git_commit, load_corpus
from router_latency.runfile import load_run
from router_latency.simulator import SimulatedAnswers, SkippedSignals
from router_latency.command_demo import demo_next_steps
from conftest import (ended, final_answer, history_rounds_folder, MISSED, NOT_UTF8, ROOT,
                      SENT_SIGNALS, three_rounds, TOOL, TOOL_PYC, two_runs, undecided,
                      widened_tool, write_corpus)
from test_process_round_script import foreground_rounds, older_python


def test_errors_from_a_subprocess_have_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, str(TOOL_PYC), "compare", str(tmp_path / "a.json"),
                             str(tmp_path / "b.json")], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert result.stderr == f"router-latency: error: no such file ({tmp_path / 'a.json'})\n"
    assert result.stdout == ""


@pytest.mark.process
def test_an_older_python_gets_one_line_naming_its_version_and_the_floor(tmp_path):
    # before: a 3.7 printed a 4-line SyntaxError and exited 1; a 3.8 ran on into the tool
    python = older_python()
    if python is None:
        pytest.skip("no Python 3.7 or 3.8 here")
    result = subprocess.run([str(python), str(TOOL), "demo"], capture_output=True, text=True,
                            timeout=30, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert re.fullmatch(r"router-latency: error: this is Python 3\.[78] \(.+\); the tool needs "
                        r"3\.9 or newer: run it with python3\.9 or newer\n", result.stderr)
    assert list(tmp_path.iterdir()) == []


def stderr_at_exit(process):
    """Return the stderr of a process started with stderr piped, once it exits (within 60 s:
    killed and raised otherwise)."""
    try:
        return process.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise


def run_with_stdout(arguments, stdout, env=None):
    """Run the tool with stdout "closed" (a pipe whose reader has gone, as after `| head`)
    or "full" (/dev/full); return (exit code, stderr)."""
    if stdout == "closed":
        read_end, target = os.pipe()
        os.close(read_end)
    else:
        target = os.open("/dev/full", os.O_WRONLY)
    try:
        process = subprocess.Popen([sys.executable, str(TOOL_PYC), *map(str, arguments)],
                                   stdout=target, stderr=subprocess.PIPE, text=True, env=env)
    finally:
        os.close(target)
    stderr = stderr_at_exit(process)
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


def run_into_head(arguments, lines):
    """Run the tool into a reader that takes the first `lines` lines and closes the pipe, as
    `| head -n LINES` does; return (exit code, stderr, the lines taken). The pipe holds one
    page, so that an output longer than that waits on the reader, as it would on head's."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)  # Linux's
    try:
        process = subprocess.Popen([sys.executable, str(TOOL_PYC), *map(str, arguments)],
                                   stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    taken = b""
    deadline = time.monotonic() + 60
    with os.fdopen(read_end, "rb", buffering=0) as reader:
        while taken.count(b"\n") < lines and time.monotonic() < deadline:
            if select.select([reader], [], [], 1.0)[0]:
                byte = reader.read(1)
                if not byte:
                    break
                taken += byte
    stderr = stderr_at_exit(process)
    return process.returncode, stderr, taken.decode()


# whether a write meets the closed pipe depends on how far the tool got when the reader left
# (test_a_failed_gate_keeps_exit_1_when_stdout_is_closed_or_full closes it before the start);
# these check what a user of `| head` sees, whichever it was: the lines, no word on stderr,
# and the exit code the result deserves, as main() in-process gives them
@pytest.mark.parametrize("kind, code, json_format", [
    ("pass", 0, True), ("failed gate", 1, False), ("undecided", 3, False)])
def test_rounds_into_head_keeps_its_exit_code_and_says_nothing_on_stderr(
        tmp_path, cli, kind, code, json_format):
    three_rounds(tmp_path, differ_in_round=1 if kind == "failed gate" else None)
    rounds = ["rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"]
    rounds += ["--tolerance", "25"] if kind == "pass" else []
    rounds += ["--format", "json"] if json_format else []
    lines = 3 if json_format else 1
    whole = cli(*rounds)
    assert (whole.code, whole.err) == (code, "")
    first = "".join(whole.out.splitlines(True)[:lines])
    assert run_into_head(rounds, lines) == (code, "", first)


def test_compare_into_head_keeps_its_exit_code_and_says_nothing_on_stderr(tmp_path, cli):
    a, b = two_runs(tmp_path)
    for arguments, code in [(["compare", a, b], 0),
                            (["compare", a, b, "--fail-on-decision-change"], 1)]:
        whole = cli(*arguments)
        assert (whole.code, whole.err) == (code, "")
        assert run_into_head(arguments, 1) == (code, "", whole.out.splitlines(True)[0])


@pytest.mark.process
def test_the_module_alone_builds_a_corpus_and_runs_the_demo(tmp_path):
    # what a user does on a bare node: copy the one file, run it isolated (-I: no user site,
    # no PYTHONPATH, the script's folder not searched), nothing else beside it
    bare = tmp_path / "node"
    bare.mkdir()
    shutil.copy(TOOL, bare / "router_latency.py")
    data = bare / "repo" / "e2e" / "testdata"
    data.mkdir(parents=True)
    (data / "cases.json").write_text('[{"query": "hello"}, {"query": "world"}]')
    python = [sys.executable, "-I", "router_latency.py"]
    corpus = subprocess.run([*python, "corpus", "--repo", "repo", "--out", "corpus.json"],
                            cwd=bare, capture_output=True, text=True, timeout=60)
    assert corpus.returncode == 0 and corpus.stderr == ""
    assert corpus.stdout.startswith("corpus: 14 prompts (2 distinct from 1 files, "
                                    "12 boundary cases)")
    demo = subprocess.run([*python, "demo", "--rounds", "3"], cwd=bare, capture_output=True,
                          text=True, timeout=120)
    # never a FAIL; on a loaded machine three rounds may leave a row undecided (exit 3)
    assert demo.returncode in (0, 3) and demo.stderr == "", demo.stderr
    assert "rounds: 3 used (r1, r2, r3)" in demo.stdout
    assert "deleted at the end; --keep DIR keeps them" in demo.stdout.splitlines()[0]
    assert "the corpus and run files were deleted with " in demo.stdout
    # the one file names itself and the repository's rounds/run_rounds.sh
    steps = demo_next_steps(False)
    assert demo.stdout.splitlines()[-len(steps):] == steps
    assert steps[2].startswith("  python3 router_latency.py corpus ")
    assert sorted(p.name for p in bare.iterdir()) == ["corpus.json", "repo",
                                                      "router_latency.py"]


@pytest.mark.parametrize("command, widen, sent, code, last", [
    # Ctrl-C during a pass, and SIGTERM close behind it while the run handles the first
    ("run", "set", "SIGTERM", 130, "(incomplete: interrupted)"),
    # Ctrl-C during --wait-ready, while the run's main thread waits on its stop flag
    ("run-not-ready", "wait", "SIGINT", 130, "interrupted before anything was measured; "
                                             "nothing written"),
    # a driver's SIGTERM to a simulated router while its main thread waits to be stopped
    ("simulate", "wait", "SIGTERM", 0, "/metrics"),
])
def test_a_signal_while_the_stop_flag_is_held_ends_the_command(tmp_path, simulator, command,
                                                               widen, sent, code, last):
    corpus = write_corpus(tmp_path / "corpus.json", [f"prompt {i}" for i in range(20)])
    out = tmp_path / "run.json"
    marker = tmp_path / "measuring"
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{unused.getsockname()[1]}"
    arguments = {
        "run": ["run", "--url", simulator(delay_ms=20, serial=True).url, "--corpus", corpus,
                "--out", out, "--label", "x", "--warmup", "0", "--concurrency", "1",
                "--repeat", "20", "--probe", f"mark=touch {marker}"],
        "run-not-ready": ["run", "--url", nobody, "--corpus", corpus, "--out", out,
                          "--label", "x", "--wait-ready", "60"],
        "simulate": ["simulate", "--port", "0"]}[command]
    process = subprocess.Popen([sys.executable, str(widened_tool(tmp_path)), *map(str, arguments)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "WIDEN": widen, "WIDEN_SIGNAL": sent},
                               start_new_session=True)
    if command == "run":  # Ctrl-C once the pass runs
        for _ in range(600):
            if marker.exists() or process.poll() is not None:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
    exited = ended(process)
    said = process.stdout.read()
    assert exited == code, said
    assert said.rstrip().endswith(last), said
    assert out.exists() == (command == "run")


def test_paths_that_are_not_utf8_under_a_strict_utf8_stdout(tmp_path, simulator):
    env = dict(os.environ, PYTHONIOENCODING="utf-8")  # strict, as under en_US.UTF-8
    data = tmp_path / "repo" / "e2e" / "x" / "testdata"
    data.mkdir(parents=True)
    (data / f"q{NOT_UTF8}.json").write_text('[{"question": "What is 2+2?"}]')
    corpus = tmp_path / f"corpus{NOT_UTF8}.json"
    made = subprocess.run([sys.executable, str(TOOL_PYC), "corpus", "--repo",
                           str(tmp_path / "repo"), "--out", str(corpus)], capture_output=True,
                          env=env, timeout=60)
    assert made.returncode == 0 and b"Traceback" not in made.stderr, made.stderr
    assert b"q\\udcff\\udcfe.json" in made.stdout and corpus.exists()
    out = tmp_path / f"run{NOT_UTF8}.json"
    ran = subprocess.run([sys.executable, str(TOOL_PYC), "run", "--url", simulator(delay_ms=0).url,
                          "--corpus", str(corpus), "--out", str(out), "--label", "x",
                          "--concurrency", "1", "--gpu", "none"], capture_output=True, env=env,
                         timeout=60)
    assert ran.returncode == 0 and ran.stderr == b"", ran.stderr
    assert ran.stdout.endswith(b"wrote " + os.fsencode(tmp_path).replace(b"\\", b"\\\\")
                               + b"/run\\udcff\\udcfe.json\n")
    assert json.loads(out.read_bytes())["corpus"]["path"] == str(corpus)


INTERRUPT_AT = """\
import os, runpy, signal, sys
tool, compiled, at, argv = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]


def tracer(frame, event, arg):  # SIGINT once the tool's code reaches line `at`
    if frame.f_code.co_filename != tool:
        return None  # no line events in the standard library's frames: they never match
    if frame.f_lineno >= at:
        sys.settrace(None)
        os.kill(os.getpid(), signal.SIGINT)
        return None
    return tracer


sys.argv = [tool, *argv]
sys.settrace(tracer)
runpy.run_path(compiled, run_name="__main__")  # the tool's code, named for tool, compiled once
"""


def line_of(text):
    """The number of the first line of the tool that starts with text."""
    lines = TOOL.read_text(encoding="utf-8").splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.startswith(text))


@pytest.mark.parametrize("where, argv", [
    ("import argparse", ["simulate", "--port", "0"]),
    ("# ==================== src/router_latency/stats.py", ["demo"]),
    ("# ==================== src/router_latency/cli.py", ["corpus", "--repo", ".", "--out", "c.json"]),
    ("def main(", ["rounds", "--dir", ".", "--base", "a", "--new", "b"]),
    ("def build_parser(", ["run", "--url", "http://127.0.0.1:9", "--corpus", "c.json",
                           "--out", "r.json", "--label", "x"]),
])
def test_an_interrupt_while_the_tool_loads_exits_130_without_a_traceback(tmp_path, where, argv):
    # the interrupt arrives while the module's imports and definitions run, or in main()
    # before a command starts: SIGINT's handler is the first thing the module installs
    result = subprocess.run([sys.executable, "-c", INTERRUPT_AT, str(TOOL), str(TOOL_PYC),
                             str(line_of(where)), *argv], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr
    assert result.stdout == "" and sorted(os.listdir(tmp_path)) == []


def test_corpus_records_the_git_commit_without_running_git(repo, tmp_path, cli, monkeypatch):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "data"]):
        subprocess.run(["git", "-C", str(repo), *command], check=True, env=env)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[1:] or kwargs}")

    def guarded(call):  # any child process (git included) fails the test
        with monkeypatch.context() as patch:
            patch.setattr(subprocess.Popen, "__init__", no_process)
            patch.setattr(os, "posix_spawn", no_process, raising=False)
            patch.setattr(os, "system", no_process)
            return call()

    out = tmp_path / "corpus.json"
    assert guarded(lambda: cli("corpus", "--repo", repo, "--out", out)).code == 0
    assert json.loads(out.read_text())["source"]["commit"] == head
    subprocess.run(["git", "-C", str(repo), "pack-refs", "--all"], check=True)
    assert guarded(lambda: git_commit(Path(repo))) == head


def test_the_text_report_opens_with_its_verdict_so_its_head_shows_it(tmp_path):
    undecided(tmp_path)
    head = subprocess.run(f"'{sys.executable}' '{TOOL_PYC}' rounds --dir '{tmp_path}' --base cpu "
                          f"--new gpu | head -3", shell=True, capture_output=True, text=True,
                          timeout=60, cwd=ROOT).stdout.splitlines()
    # the headline, then what would decide it: one figure in both
    more = re.fullmatch(r"undecided: about (\d+) more rounds would decide it 80% of the time, "
                        r"over the change and spread these rounds support \(not their point "
                        r"values\)", head[1]).group(1)
    assert head[0] == (f"verdict: INCONCLUSIVE: {MISSED}; 1 gated row undecided, about {more} "
                       f"more rounds would decide it")
    assert head[2] == ""


def readme_history_step():
    """The shell lines of docs/history.md's workflow step that adds and gates, dedented."""
    readme = (ROOT / "docs" / "history.md").read_text(encoding="utf-8")
    step = readme.split("      - name: add the merge to the history and gate the drift\n"
                        "        run: |\n", 1)[1]
    step = step.split("      - uses: actions/upload-artifact", 1)[0]
    return "\n".join(line[10:] for line in step.splitlines()) + "\n"


def git(*argv, cwd):
    subprocess.run(["git", *argv], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("ratio, code, verdict", [(1.0, 0, "PASS"), (1.3, 1, "FAIL")])
def test_the_readme_history_step_adds_pushes_and_gates(tmp_path, ratio, code, verdict):
    """The workflow step of docs/history.md, run as GitHub runs it (bash -eo pipefail), with the tool at its
    path, a perf-history branch in a local origin, and a rounds folder in results/: the line
    is pushed (a failing drift too), the summary holds the drift's Markdown, and the step's
    exit code is the gate's."""
    origin = tmp_path / "origin.git"
    git("init", "-q", "--bare", str(origin), cwd=tmp_path)
    git("clone", "-q", str(origin), "history", cwd=tmp_path)
    git("switch", "-q", "--orphan", "perf-history", cwd=tmp_path / "history")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m",
        "latency history", cwd=tmp_path / "history")
    git("push", "-q", "origin", "perf-history", cwd=tmp_path / "history")
    (tmp_path / "router-latency").mkdir()
    shutil.copy(ROOT / "router_latency.py", tmp_path / "router-latency" / "router_latency.py")
    history_rounds_folder(tmp_path / "results", ratio, seed=3, sides=("previous", "merged"))
    summary = tmp_path / "summary.md"
    summary.write_text("")
    step = readme_history_step().replace("${{ github.event.before }}", "0123abcd")
    # the step's python3 is this Python, not a version manager's shim on PATH (pyenv's runs
    # some 15 processes before the interpreter)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(sys.executable)
    env = {**os.environ, "GITHUB_SHA": "4567ef01", "GITHUB_STEP_SUMMARY": str(summary),
           "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", step], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    assert summary.read_text().startswith(f"**Drift: {verdict}**: 1 commit like 4567ef01")
    assert (tmp_path / "results" / "drift.html").exists()
    shown = subprocess.run(["git", "show", "perf-history:perf.jsonl"], cwd=origin,
                           capture_output=True, text=True, timeout=60, check=True).stdout
    line = json.loads(shown)
    assert (line["commit"], line["base_commit"], line["node_class"]) == \
        ("4567ef01", "0123abcd", "h200")


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                         (signal.SIGHUP, 129)])
def test_run_interrupted_saves_what_was_measured(simulator, tmp_path, signum, code):
    router = simulator(delay_ms=20)
    corpus = write_corpus(tmp_path / "corpus.json", [f"prompt {i}" for i in range(200)])
    out = tmp_path / "run.json"
    process = subprocess.Popen([sys.executable, str(TOOL_PYC), "run", "--url", router.url,
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
    # the table marks the pass cut short, and no other
    assert re.search(rf"^Sequential \(interrupted\) +{first['summary']['requests']} ", stdout,
                     re.MULTILINE), stdout
    assert stdout.count("(interrupted)") == 1


def test_interrupted_while_waiting_for_the_router_writes_nothing(tmp_path, scripted):
    # a router still starting: every request is answered 503; the signal is sent once the
    # tool has asked (it is then in the readiness wait, whatever its start-up took)
    asked = threading.Event()

    def starting(prompt, number):
        asked.set()
        return [final_answer(b'{"status":"starting","ready":false}',
                             b"503 Service Unavailable")]

    router = scripted(starting)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    out = tmp_path / "run.json"
    process = subprocess.Popen([sys.executable, str(TOOL_PYC), "run", "--url", router.url,
                                "--corpus", corpus, "--out", str(out), "--label", "x",
                                "--wait-ready", "30"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert asked.wait(timeout=30), "the run never asked the router"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130 and "Traceback" not in stderr
    assert not out.exists()


# The tool as a user starts it, but with a tenth of the grace that requests in flight get
# after Ctrl-C or SIGTERM (passloop.STOP_GRACE_NS, 2 s): the tests whose requests never
# answer waited it out, 2 s each. Against answers of 20 s and bounds of 10 and 15 s, a tool
# that waits for them still fails, as does a grace grown past 100 s (before: past 10 s)
SHORT_GRACE = """
import sys
sys.path.insert(0, {root!r})
import router_latency as rl
rl.STOP_GRACE_NS //= 10
sys.argv[0] = {tool!r}
rl.console_main()
"""


def short_grace():
    """Return the command that starts the tool with a tenth of its grace (SHORT_GRACE)."""
    return [sys.executable, "-c", SHORT_GRACE.format(root=str(TOOL_PYC.parent),
                                                     tool=str(TOOL))]


def test_interrupt_does_not_wait_for_a_slow_router(fault_server, tmp_path):
    # every answer would take 20 s; the readiness check's preview is answered at once
    corpus = write_corpus(tmp_path / "corpus.json", ["sleep:20", "sleep:20"])
    out = tmp_path / "run.json"
    process = subprocess.Popen([*short_grace(), "run", "--url", fault_server.url,
                                "--corpus", corpus, "--out", str(out), "--label", "x",
                                "--warmup", "0", "--concurrency", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while fault_server.requests < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=15)  # far less than the 20 s answers
    assert process.returncode == 130, stderr
    item = json.loads(out.read_text())["passes"][0]
    assert item["interrupted"] is True and item["summary"]["requests"] == 0


def test_interrupting_a_timed_pass_stops_it_long_before_its_time(scripted, tmp_path):
    # the server says when it has answered ANSWERED requests: at most two of them were the
    # readiness check (/ready, then one preview) and two may still be in flight when the
    # signal lands, so the pass holds at least ANSWERED - 4; no sleep-polled counter
    answered, lock, enough = [0], threading.Lock(), threading.Event()

    def answer(prompt, number):
        time.sleep(0.002)
        with lock:
            answered[0] += 1
            if answered[0] >= 30:
                enough.set()
        return [final_answer()]

    router = scripted(answer)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "run.json"
    process = subprocess.Popen([sys.executable, str(TOOL_PYC), "run", "--url", router.url,
                                "--corpus", corpus, "-o", str(out), "--label", "x",
                                "--warmup", "0", "-c", "2", "-d", "10m"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert enough.wait(timeout=60), "the run sent fewer than 30 requests in a minute"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)  # far less than the 10 minutes asked for
    assert process.returncode == 130, stderr
    document = json.loads(out.read_text())
    assert document["complete"] is False and document["passes"][0]["interrupted"] is True
    assert document["passes"][0]["summary"]["requests"] >= 26
    assert document["settings"]["duration_s"] == 600


def start_run(url, corpus, out, *options, tool=None):
    """Start `run` as a user would, in its own process (the command `tool`, by default the
    tool); return it."""
    return subprocess.Popen([*(tool or [sys.executable, str(TOOL_PYC)]), "run", "--url", url,
                             "--corpus", str(corpus), "--out", str(out), "--label", "x",
                             "--gpu", "none", *options], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_until(condition, what, limit=20.0):
    """Wait (at most `limit` seconds, polling) until condition() holds; fail if it never does."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def signal_and_wait(process, signum, limit=10.0):
    """Send the signal; return (exit code, stderr) once the process ended, failing (and killing
    it) if it takes longer than `limit` seconds, far more than the few it is allowed."""
    process.send_signal(signum)
    try:
        _, stderr = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"still running {limit:g} s after the signal")
    assert "Traceback" not in stderr, stderr
    return process.returncode, stderr


def test_a_signal_during_a_slow_probe_ends_the_probe_and_the_run(simulator, tmp_path):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out, mark = tmp_path / "run.json", tmp_path / "probe-started"
    process = start_run(router.url, corpus, out, "--warmup", "0", "--probe-timeout", "60",
                        "--probe", f"slow=touch {mark}; sleep 30")
    wait_until(mark.exists, "the probe started")
    code, _ = signal_and_wait(process, signal.SIGTERM)
    assert code == 143
    document = json.loads(out.read_text())
    assert document["complete"] is False and len(document["passes"]) == 1
    first = document["passes"][0]
    assert first["interrupted"] is True and first["summary"]["requests"] == 0
    probes = first["environment"]["probes"]
    assert probes["before"]["slow"]["interrupted"] is True
    assert probes["after"]["slow"]["interrupted"] is True  # not started after the signal


def test_a_signal_during_the_probe_after_a_pass_leaves_that_pass_whole(simulator, tmp_path):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b", "c"])
    out, first, second = tmp_path / "run.json", tmp_path / "first", tmp_path / "second"
    probe = f"if [ -e {first} ]; then touch {second}; sleep 30; else touch {first}; fi"
    process = start_run(router.url, corpus, out, "--warmup", "0", "--concurrency", "1,4",
                        "--probe-timeout", "60", "--probe", f"after={probe}")
    wait_until(second.exists, "the probe after the first pass started")
    code, _ = signal_and_wait(process, signal.SIGINT)
    assert code == 130
    document = json.loads(out.read_text())
    assert document["complete"] is False
    assert [p["name"] for p in document["passes"]] == ["sequential"]
    sequential = document["passes"][0]
    assert sequential["interrupted"] is False and sequential["summary"]["ok"] == 3
    assert sequential["environment"]["probes"]["after"]["after"]["interrupted"] is True


def test_a_signal_during_the_load_pause_ends_the_pause(simulator, tmp_path):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out, load, count = tmp_path / "run.json", tmp_path / "loadavg", tmp_path / "count"
    load.write_text("150.00 90.00 80.00 3/200 1234\n")
    process = start_run(router.url, corpus, out, "--warmup", "0", "--concurrency", "1",
                        "--loadavg-file", load, "--load-retries", "2", "--load-pause", "60",
                        "--probe", f"count=echo x >> {count}")
    # the probes before and after the first attempt have run: the pause comes next
    wait_until(lambda: count.exists() and len(count.read_text().split()) >= 2,
               "the first attempt ended")
    code, _ = signal_and_wait(process, signal.SIGTERM)
    assert code == 143
    document = json.loads(out.read_text())
    assert document["complete"] is False
    item = document["passes"][0]
    assert item["discarded"] is True and item["interrupted"] is True
    assert len(item["discarded_attempts"]) == 1


def test_a_signal_during_the_warm_up_writes_nothing(fault_server, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.json", ["sleep:20"])
    out = tmp_path / "run.json"
    process = start_run(fault_server.url, corpus, out, "--warmup", "3", tool=short_grace())
    wait_until(lambda: fault_server.requests >= 2, "the warm-up started")
    code, stderr = signal_and_wait(process, signal.SIGTERM)
    assert code == 143 and not out.exists()
    assert "interrupted before anything was measured; nothing written" in stderr


HASH_A, HASH_B = "a" * 64, "b" * 64


GO_SERVER = Path(__file__).resolve().parent / "data" / "go-chunked"


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


def test_a_ctrl_c_while_python_joins_the_last_threads_keeps_the_exit_code():
    # main() has returned (the file written, the code chosen) and a thread is still joined
    # at exit; a Ctrl-C pressed again then ended the process by SIGINT with a traceback. The
    # thread says when main() has returned and console_main() has set SIGINT aside (10 s at
    # most), then lives on until the test, having sent the signal, closes its stdin: the
    # signal comes while it is joined, by construction (no sleep a loaded machine outlasts)
    child = ("import signal, sys, threading, time; sys.path.insert(0, %r)\n"
             "import router_latency as rl\n"
             "def joined():\n"
             "    for _ in range(2000):\n"
             "        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:\n"
             "            break\n"
             "        time.sleep(0.005)\n"
             "    print('returned', flush=True)\n"
             "    sys.stdin.read()\n"
             "def main(argv=None, program=False):\n"
             "    threading.Thread(target=joined).start()\n"
             "    return 3\n"
             "rl.main = main\n"
             "rl.console_main()\n") % str(TOOL_PYC.parent)
    process = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "returned\n"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=20)  # closes stdin: the thread ends
    assert process.returncode == 3 and "Traceback" not in stderr, stderr


def test_html_to_dev_fd_1_reaches_the_pipe(tmp_path):
    three_rounds(tmp_path)
    done = subprocess.run(
        [sys.executable, str(TOOL_PYC), "rounds", "--dir", str(tmp_path), "--base", "cpu", "--new",
         "gpu", "--html", "/dev/fd/1", "--format", "json"],
        capture_output=True, timeout=60, check=False)
    assert done.returncode == 3, done.stderr
    assert b"<!DOCTYPE html>" in done.stdout and b"</html>" in done.stdout, done.stdout[-200:]


def vllm_sr():
    """The vllm-sr 0.4.0 CLI, where it is installed (VLLM_SR names it, or it is on PATH)."""
    return os.environ.get("VLLM_SR") or shutil.which("vllm-sr")


# vllm-sr's console script run again and again in one interpreter: each call runs the script
# (runpy, as its own process would) with its arguments, and answers with its exit status,
# stdout and stderr, as a line of JSON. Its CLI imports click, pydantic, requests and its
# configuration models in some 0.45 s of CPU: once a worker, not once in each of 36 previews
VLLM_SR_CALLS = """
import contextlib, io, json, runpy, sys, traceback
script, answers = sys.argv[1], sys.stdout
for line in sys.stdin:
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        sys.argv = [script, *json.loads(line)]
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
            if exit.code is not None and not isinstance(exit.code, int):
                print(exit.code, file=sys.stderr)  # as the interpreter does at its exit
        except BaseException:  # its traceback and status 1, as its own process gives them
            traceback.print_exc()
            code = 1
    answers.write(json.dumps([code, out.getvalue(), err.getvalue()]) + "\\n")
    answers.flush()
"""


@pytest.fixture(scope="module")
def vllm_sr_route():
    """Return a function that runs `vllm-sr ARGS` and returns its (exit status, stdout,
    stderr): in one interpreter a worker (VLLM_SR_CALLS) where the script is Python's, as
    pip writes it, else a process each."""
    script = vllm_sr()
    with open(script, "rb") as head:
        first = head.readline()
    if not (first.startswith(b"#!") and b"python" in first):
        def run_alone(*argv):
            done = subprocess.run([script, *argv], capture_output=True, text=True, timeout=60)
            return done.returncode, done.stdout, done.stderr
        yield run_alone
        return
    calls = subprocess.Popen([*first[2:].decode().split(), "-c", VLLM_SR_CALLS, script],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(*argv):
        calls.stdin.write(json.dumps(argv) + "\n")
        calls.stdin.flush()
        assert select.select([calls.stdout], [], [], 60)[0], "vllm-sr did not answer in 60 s"
        return tuple(json.loads(calls.stdout.readline()))
    try:
        yield run
    finally:
        calls.stdin.close()  # its loop ends
        try:
            calls.wait(timeout=30)
        except subprocess.TimeoutExpired:
            calls.kill()
            calls.wait()


@pytest.mark.skipif(vllm_sr() is None, reason="the vllm-sr package is not installed")
@pytest.mark.parametrize("extra", [[], ["--json"], ["--trace", "--json"],
                                   ["--sampling-seed", "7"]])
@pytest.mark.parametrize("answers", [
    SimulatedAnswers(no_decision_share=0.5),
    SimulatedAnswers(no_decision_share=0.3, sampled_share=0.5, runtime="vllm-sr-runtime"),
    SimulatedAnswers(no_decision_share=0.5, signal_errors=SkippedSignals(1.0, 0.3))],
    ids=["plain", "sampled-renamed-runtime", "signal-errors"])
def test_the_routers_own_client_accepts_the_simulators_answers(simulator, vllm_sr_route, extra,
                                                               answers):
    router = simulator(delay_ms=0, answers=answers)
    for ask in (["--prompt", "What is 2+2?"], ["--prompt", "hello there"],
                ["--messages", '[{"role": "user", "content": " "}]']):
        code, stdout, stderr = vllm_sr_route("route", "preview", "--endpoint", router.url, *ask,
                                             *extra)
        assert code == 0, stderr
        if "--json" in extra:
            answer = json.loads(stdout)
            assert answer["config_hash"] == router.config_hash
            assert ("signal_errors" in answer) == bool(answers.signal_errors.share)


@pytest.mark.process
def test_run_rounds_reads_the_router_it_started_in_the_foreground(tmp_path_factory):
    # done when: router CPU per request and foreign CPU in every run file, the new side's
    # start command staying in the foreground with no stop command (the rounds that
    # test_driver_runs_interleaved_rounds_with_simulate reads too, run once a session)
    (code, _, stderr, _), folder = foreground_rounds(tmp_path_factory)
    assert code == 0, stderr[-3000:]
    files = sorted((folder / "results").glob("r*.json"))
    assert len(files) == 6
    for path in files:
        document = json.loads(path.read_text())
        assert document["router"]["session"] > 1
        for item in document["passes"]:
            # a figure in every pass (0.0 where the router used less than a clock tick)
            assert item["router_cpu"]["per_request_ms"] is not None, (path, item["router_cpu"])
            assert item["router_cpu"]["foreign_vcpus"] is not None
        # what record's ranges read: no longer "not captured"
        for item in load_run(str(path)).passes:
            assert item.environment.router_cpu_ms is not None
            assert item.environment.foreign_vcpus is not None


@pytest.mark.process
def test_the_signals_the_tests_send_reach_the_tests_and_their_children_by_default():
    # started under nohup (SIGHUP ignored), as a background job (SIGINT), after a
    # `trap '' TERM`, with these signals blocked or SIGCHLD ignored, the suite still sees
    # them as a terminal would: conftest.py restores their defaults and unblocks them, and a
    # child inherits that (an ignored or blocked one would stay so), its exit status read
    for signum in SENT_SIGNALS + (signal.SIGCHLD,):
        assert signal.getsignal(signum) is not signal.SIG_IGN, signum
    done = subprocess.run([sys.executable, "-c", "import sys; "
                           "print(open('/proc/self/status').read()); sys.exit(3)"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 3  # 0 where SIGCHLD is ignored: the kernel reaped the child
    for field in ("SigIgn", "SigBlk"):
        mask = int(re.search(rf"^{field}:\s*([0-9a-f]+)$", done.stdout, re.M).group(1), 16)
        assert [signum for signum in SENT_SIGNALS if mask >> (signum - 1) & 1] == [], field
