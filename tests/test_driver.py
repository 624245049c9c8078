"""The driver itself: open-loop passes, the driver's floor."""

import json
import re

import pytest

import router_latency as rl
from conftest import make_run, write_corpus


def test_arrival_schedules():
    assert rl.arrival_schedule(4, 100, "constant", 0) == [0, 10_000_000, 20_000_000, 30_000_000]
    poisson = rl.arrival_schedule(20_000, 500, "poisson", 7)
    assert poisson == rl.arrival_schedule(20_000, 500, "poisson", 7)
    assert poisson != rl.arrival_schedule(20_000, 500, "poisson", 8)
    gaps = [b - a for a, b in zip(poisson, poisson[1:])]
    assert all(g >= 0 for g in gaps)
    assert sum(gaps) / len(gaps) == pytest.approx(2_000_000, rel=0.03)  # mean 1/rate


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
    run = rl.load_run(str(out))
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
        assert cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / f"{name}.json",
                   "--label", name, "--concurrency", "1", "--rate", "500", "--quiet").code == 0
    out = cli("compare", tmp_path / "a.json", tmp_path / "b.json").out
    assert "Sequential  p50 ms" in out and "Rate 500/s  p50 ms" in out


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
    assert floor["requests"] == floor["ok"] == rl.FLOOR_REQUESTS
    assert 0 < floor["p10_ms"] <= floor["p50_ms"] <= floor["p90_ms"] <= floor["p99_ms"]
    assert floor["spread_ms"] == pytest.approx(floor["p90_ms"] - floor["p10_ms"], abs=2e-4)
    assert floor["timer_resolution_ns"] > 0


def with_floor(path, spread):
    document = json.loads(open(path).read())
    document["floor"] = {"spread_ms": spread}
    open(path, "w").write(json.dumps(document))
    return path


def test_compare_and_rounds_warn_below_the_floor(tmp_path, cli):
    a = with_floor(make_run(tmp_path / "r1-cpu.json", passes={1: (1.000, 2, 3, 100)}), 0.02)
    b = with_floor(make_run(tmp_path / "r1-gpu.json", passes={1: (1.010, 2, 3, 100)}), 0.01)
    assert ("warning: Sequential p50 differs by 0.010 ms, less than the driver's own spread on "
            "loopback (0.020 ms, p90 - p10): below what this driver resolves") in cli(
                "compare", a, b).out
    with_floor(make_run(tmp_path / "r2-cpu.json", passes={1: (1.000, 2, 3, 100)}), 0.02)
    with_floor(make_run(tmp_path / "r2-gpu.json", passes={1: (1.012, 2, 3, 100)}), 0.02)
    out = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu").out
    assert "warning: Sequential p50 differs by 0.011 ms, less than the driver's own spread" in out
    far = with_floor(make_run(tmp_path / "far.json", passes={1: (2.0, 2, 3, 100)}), 0.02)
    assert "warning" not in cli("compare", a, far).out
