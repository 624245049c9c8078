"""demo and the rounds/ shell driver, run as a user runs them."""

import json
import shlex
import subprocess
import sys

from conftest import ROOT, TOOL, write_corpus

DRIVER = ROOT / "rounds" / "run_rounds.sh"


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
