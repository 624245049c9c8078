"""What run samples through each pass (telemetry.py): the GPUs by nvidia-smi's looping query,
the router's CPU and the load; energy per routed request; what coincided with a slow phase;
run_rounds.sh reading the router it started."""

import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from router_latency.errors import RouterLatencyError
from router_latency.gpu import (AmdMonitorSamples, check_telemetry, clock_event_names, MAX_SAMPLES,
                                NvidiaSamples)
from router_latency.phases import PhaseWindow
from router_latency.runfile import load_run
from router_latency.captures import CaptureSettings
from router_latency.telemetry import (coincided, coincided_text, energy_of, PassSampler,
                                      RESCAN_EVERY, RouterTicks, telemetry_record, WindowFigures,
                                      window_figures)
from conftest import final_answer, write_corpus


DATA = Path(__file__).parent / "data" / "nvidia-smi"


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """Put the stand-in nvidia-smi first on PATH; return a function setting its variables."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    # -SI: no site packages and no user environment to set up, 15 ms less each of the ~80
    # runs of the stand-in (each reading, each pass's sampler) in this file
    script.write_text(f"#!{sys.executable} -SI\n" + (DATA / "standin.py").read_text())
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")

    def setting(**variables):
        for name, value in variables.items():
            monkeypatch.setenv(name, str(value))
    return setting


def test_the_node_s_real_sample_stream_is_read():
    # the H200's 250 ms stream (header and units), the router's GPU warming up into a pass
    reader = NvidiaSamples()
    lines = (DATA / "nvsmi-sampled.csv").read_text().splitlines()
    samples = [s for line in lines if (s := reader.feed(line, 0.0)) is not None]
    assert len(samples) == len(lines) - 1
    first_at, device, figures = samples[0]
    assert device == "gpu0" and figures["sclk_mhz"] == 345.0 and figures["power_w"] == 79.78
    assert figures["reasons"] is None and figures["energy_mj"] is None
    assert samples[6][2]["sclk_mhz"] == 1980.0 and samples[6][0] - first_at == pytest.approx(
        1.502, abs=1e-3)  # the tool's own timestamps, not when the lines arrived
    # the one-shot query's output, with and without its header, reads as samples too
    shot = NvidiaSamples(("index", "temperature.gpu", "clocks.sm", "clocks.mem", "power.draw",
                          "utilization.gpu", "memory.used"))
    text = (DATA / "nvsmi-query-noheader.csv").read_text().strip()
    assert shot.feed(text, 5.0) == (5.0, "gpu0", {
        "sclk_mhz": 345.0, "temp_c": 37.0, "power_w": 79.81, "util_pct": 0.0,
        "energy_mj": None, "reasons": None})
    assert NvidiaSamples().feed("Failed to initialize NVML: Unknown Error", 0.0) is None
    assert clock_event_names(float(0x1 | 0x4 | 0x40)) == ("power cap",
                                                          "hardware thermal slowdown")


def test_energy_from_the_counter_or_the_sampled_power():
    constant = [(t / 4, {"power_w": 120.0}) for t in range(9)]
    assert energy_of([constant], 2.0, 100)["per_request_j"] == pytest.approx(2.4)
    counted = [(t, {"power_w": 1.0, "energy_mj": 1e6 + 300_000 * t}) for t in range(3)]
    energy = energy_of([counted, constant], 2.0, 100)
    assert energy["source"] == "energy counter and sampled power"
    assert energy["joules"] == pytest.approx(600 + 240)
    # a counter that did not move in a short pass (updated less often): the sampled power
    still = [(t, {"power_w": 120.0, "energy_mj": 5e6}) for t in range(3)]
    assert energy_of([still], 2.0, 100) == energy_of([constant], 2.0, 100)
    assert energy_of([[(0.0, {"power_w": None})]], 2.0, 100) is None
    assert energy_of([constant], 2.0, 0) is None
    assert energy_of([constant], 0.0, 100) is None  # no time measured: no figure, not 0 J


@pytest.mark.parametrize("counter", ["0", "1"])
def test_joules_per_request_against_a_constant_power(simulator, standin, tmp_path, cli,
                                                      counter):
    # done when: within 5% of power x pass time / requests, per pass; by the sampled power
    # (a driver refusing the energy counter: the plain query) and by the counter
    standin(STANDIN_POWER=150, STANDIN_COUNTER=counter)
    # one request at a time (serial): the c4 pass lasts as long as the sequential one, 0.45 s,
    # so the sampler's 20 ms stream puts two counter readings in it however loaded the
    # machine (at 4 requests at once, 0.11 s, a loaded machine left one: "sampled power"),
    # and a reading's delay is a small share of the time between the first and the last. The
    # sampled power is the mean of the readings, one at least (the pass waits for the first):
    # 40 prompts, 0.12 s
    prompts = 150 if counter == "1" else 40
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(prompts)])
    out = tmp_path / "run.json"
    result = cli("run", "--url", simulator(delay_ms=3, serial=True).url, "--corpus", corpus,
                 "--out", out, "--label", "x", "--concurrency", "1,4", "--warmup", "0",
                 "--gpu", "nvidia", "--gpu-index", "0", "--sample-ms", "20")
    assert result.code == 0, result.err
    run = load_run(str(out))
    for item in run.passes:
        telemetry = item.attempt.environment["telemetry"]
        expected = 150 * item.measured.wall_s / item.measured.requests
        assert telemetry["energy"]["source"] == ("energy counter" if counter == "1"
                                                 else "sampled power")
        assert item.environment.energy_j == pytest.approx(expected, rel=0.05)
        assert telemetry["router_gpus"] == ["gpu0"] and set(telemetry["gpus"]) == {"gpu0",
                                                                                   "gpu1"}
        assert telemetry["summary"]["gpu1"]["power_mean_w"] == 60.0
    assert "gpu (nvidia-smi), sampled through each pass (the router's GPUs):" in result.out
    assert "J/request" in result.out


def test_joules_are_per_routed_request_not_per_answer(scripted, standin, tmp_path, cli):
    # a pass whose answers are routed, failed (500), shed (429) and degraded (a 200 whose
    # signal failed), each by its prompt: the energy is the GPUs' joules over the fully
    # computed answers only, what routed requests cost
    standin(STANDIN_POWER=150, STANDIN_COUNTER="0")
    degraded = json.dumps({"decision_result": {"decision_name": "ok"},
                           "signal_errors": {"classifier:intent": "failed"},
                           "applied_unknown_policies": {"classifier:intent": "no_match"}})

    def answer(prompt, number):
        time.sleep(0.003)  # a pass longer than the 20 ms sampler's interval
        kind = prompt[:1]
        return [final_answer(b"{}", b"500 Internal Server Error") if kind == "f" else
                final_answer(b'{"error": {"code": "OVERLOADED"}}', b"429 Too Many Requests")
                if kind == "s" else final_answer(degraded.encode()) if kind == "d" else
                final_answer()]

    # 24 of 60 routed; the sampled power (no counter) is the mean of the readings, one at
    # least (the pass waits for the first)
    prompts = [f"{kind}{i}" for i in range(12) for kind in "rrfsd"]
    corpus = write_corpus(tmp_path / "corpus.json", prompts)
    out = tmp_path / "run.json"
    result = cli("run", "--url", scripted(answer).url, "--corpus", corpus, "--out", out,
                 "--label", "x", "--concurrency", "1", "--warmup", "0", "--gpu", "nvidia",
                 "--gpu-index", "0", "--sample-ms", "20", "--max-errors", "1000",
                 "--allow-degraded")
    assert result.code == 0, result.err
    item = load_run(str(out)).passes[0]
    requests = item.attempt.requests
    kinds = {"failed": [r for r in requests if r.error is not None and r.status != 429],
             "shed": [r for r in requests if r.status == 429],
             "degraded": [r for r in requests if r.degraded]}
    assert all(kinds.values()), {k: len(v) for k, v in kinds.items()}
    routed = sum(r.routed for r in requests)
    assert 0 < routed < len(requests)
    joules = 150 * item.measured.wall_s
    assert item.environment.energy_j == pytest.approx(joules / routed, rel=0.05)
    # not the same figure over every answer, nor over every 200
    assert item.environment.energy_j > 1.05 * joules / sum(r.status == 200 for r in requests)


def test_the_cpu_series_follows_the_routers_processes_through_the_pass(simulator, standin,
                                                                        tmp_path, cli):
    # the router here is this process (the simulator's threads): its CPU seconds through the
    # pass are a series from 0 that never goes back, one reading per sample, at its time
    standin(STANDIN_POWER=150)
    # 60 prompts of 3 ms: a pass of 0.18 s, 9 samples 20 ms apart (2 needed), in which this
    # process spends several of the kernel's 10 ms ticks
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(60)])
    out = tmp_path / "run.json"
    result = cli("run", "--url", simulator(delay_ms=3, serial=True).url, "--corpus", corpus,
                 "--out", out, "--label", "x", "--concurrency", "1", "--warmup", "0",
                 "--gpu", "nvidia", "--gpu-index", "0", "--sample-ms", "20",
                 "--router-pid", str(os.getpid()), "--router-cpus", "0")
    assert result.code == 0, result.err
    telemetry = load_run(str(out)).passes[0].attempt.environment["telemetry"]
    cpu = telemetry["cpu"]
    assert telemetry["kept_every"] == 1  # under 1,200 samples: none thinned out
    assert set(cpu) == {"t_s", "router_s", "busy_s", "load"}
    assert len({len(series) for series in cpu.values()}) == 1 and len(cpu["t_s"]) >= 2
    assert cpu["t_s"] == sorted(cpu["t_s"]) and cpu["t_s"][0] >= 0
    assert None not in cpu["router_s"] and cpu["router_s"][0] == 0
    assert cpu["router_s"] == sorted(cpu["router_s"]) and cpu["router_s"][-1] > 0


class SlowWhileFlagged(BaseHTTPRequestHandler):
    """A router whose previews 40 to 65 each take 20 ms, the flag file standing meanwhile:
    the stand-in nvidia-smi reports GPU 1 at full load while it stands."""
    served = 0
    flag: Path = Path("/nonexistent")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        cls = type(self)
        cls.served += 1
        if cls.served == 40:
            cls.flag.write_text("busy")
        if 40 <= cls.served < 66:
            threading.Event().wait(0.02)
        if cls.served == 66:
            cls.flag.unlink()
        body = b'{"decision_result": {"decision_name": "d"}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_slow_phase_made_by_a_neighbouring_gpu_names_it(standin, tmp_path, cli):
    flag = tmp_path / "busy"
    standin(STANDIN_FLAG=flag)
    SlowWhileFlagged.served, SlowWhileFlagged.flag = 0, flag
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowWhileFlagged)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()  # shutdown() waits for a look at its flag
    try:
        # 8 windows of 20 requests (the pass's are previews 2 to 161, after the readiness
        # look): the third slow throughout (0.4 s, 40 of the 10 ms samples), the GPU busy
        # from 2 slow previews before it to 4 after, as 2 before and 8 after a window of 50
        corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(160)])
        result = cli("run", "--url", f"http://127.0.0.1:{server.server_port}", "--corpus",
                     corpus, "--out", tmp_path / "run.json", "--label", "x", "--concurrency",
                     "1", "--warmup", "0", "--gpu", "nvidia", "--gpu-index", "0",
                     "--sample-ms", "10", "--window", "20")
    finally:
        server.shutdown()
        server.server_close()
    assert result.code == 0, result.err
    slow = [line for line in result.err.splitlines() if "slow phase" in line]
    assert len(slow) == 1, result.err
    assert "window 3: GPU 1 at 100% and 400 W" in slow[0]


def telemetry_of(gpu1_use, foreign_busy):
    """A pass's telemetry of four 1-second windows: GPU 1's use per window, and the busy
    seconds of the router's CPUs over the router's own per window."""
    times = [i * 0.5 for i in range(9)]
    busy, router, total, mine = [], [], 0.0, 0.0
    for i in range(9):
        busy.append(total)
        router.append(mine)
        total, mine = total + 0.5 + foreign_busy[min(i // 2, 3)] / 2, mine + 0.5
    return {"version": 1, "interval_ms": 500, "origin_s": 0.0, "router_gpus": ["gpu0"],
            "gpus": {"gpu0": {"t_s": times, "sclk_mhz": [1980] * 9, "power_w": [120] * 9,
                              "util_pct": [5] * 9},
                     "gpu1": {"t_s": times, "util_pct": [gpu1_use[min(i // 2, 3)]
                                                         for i in range(9)],
                              "power_w": [80] * 9}},
            "cpu": {"t_s": times, "router_s": router, "busy_s": busy, "load": [1.0] * 9}}


class PassLike:
    def __init__(self, telemetry):
        self.environment = {"telemetry": telemetry}
        self.windows = tuple(PhaseWindow(50 * i, 50, 0, float(i), 1.0, 1.0, 2.0, 50.0)
                             for i in range(4))


def test_what_coincided_with_a_slow_window_is_named_or_nothing_is():
    hog = telemetry_of([0, 0, 0, 0], [0.0, 0.0, 2.1, 0.0])  # a CPU hog on the router's cores
    assert window_figures(hog, PassLike(hog).windows[2]).foreign_vcpus == pytest.approx(2.1)
    assert coincided_text(PassLike(hog), (2,)) == (
        "window 3: 2.1 foreign vCPUs on the router's cores")
    quiet = telemetry_of([0, 0, 0, 0], [0.0, 0.0, 0.0, 0.0])
    assert coincided_text(PassLike(quiet), (2,)) == (
        "nothing measured coincided (other GPUs, the router's GPU, foreign CPU on the "
        "router's cores, load)")
    busy_always = telemetry_of([98, 98, 98, 98], [0.0] * 4)  # busy throughout: no cause
    assert coincided_text(PassLike(busy_always), (1,)).startswith("nothing measured")
    assert coincided_text(PassLike(None), (1,)) == ""  # nothing sampled: nothing said


def test_a_clock_event_of_the_routers_gpu_is_named_in_the_window_it_fell_in():
    # the router's GPU capped by power in window 3 only: that window names the reason, the
    # others none; another GPU's events are not the router's
    telemetry = telemetry_of([0, 0, 0, 0], [0.0] * 4)
    capped = float(0x4)
    telemetry["gpus"]["gpu0"]["reasons"] = [None, 0.0, 0.0, 0.0, capped, capped, 0.0, 0.0, 0.0]
    telemetry["gpus"]["gpu1"]["reasons"] = [capped] * 9
    windows = PassLike(telemetry).windows
    assert window_figures(telemetry, windows[2]).reasons == clock_event_names(capped)
    assert clock_event_names(capped) != ()
    assert window_figures(telemetry, windows[0]).reasons == ()


def test_a_slow_window_of_a_pass_that_sampled_nothing_usable_says_so():
    # telemetry recorded, but no series a window could read: not a blank in the sentence
    empty = {"version": 1, "interval_ms": 500, "origin_s": 0.0, "router_gpus": [],
             "gpus": {}, "cpu": {}}
    assert coincided_text(PassLike(empty), (1,)) == "nothing measured coincided (no samples)"


def test_another_gpu_busy_in_a_slow_window_is_named_from_25_points_over_its_usual_use():
    calm = [WindowFigures(others=(("gpu1", 50.0, 100.0),))] * 3
    busy = WindowFigures(others=(("gpu1", 75.0, 300.0),))
    assert "GPU 1 at 75% and 300 W" in coincided(busy, calm)
    assert coincided(WindowFigures(others=(("gpu1", 74.0, 300.0),)), calm) == []


def test_the_sampler_reads_the_router_cpus_busy_time_from_the_first_sample():
    sampler = PassSampler(CaptureSettings(), "0", 20).start()
    cpu = sampler.stop(10, 0.1)["cpu"]
    assert cpu["busy_s"] and cpu["busy_s"][0] == 0.0  # each sample's since the first


def test_the_samplers_threads_never_keep_the_run_from_exiting():
    # a GPU tool that hangs past stop()'s wait leaves its reader thread blocked: the run
    # still ends, with its file written
    sampler = PassSampler(CaptureSettings(gpu="nvidia"), None, 20)
    assert len(sampler.threads) == 2 and all(thread.daemon for thread in sampler.threads)


def test_readings_of_one_gpu_stamped_alike_are_kept_in_the_order_they_came():
    # nvidia-smi stamps its lines to the millisecond: sampled faster (--sample-ms 1), two
    # lines of one GPU may carry one time; both are kept, in the order the tool gave them
    sampler = PassSampler(CaptureSettings(), None, 1)
    at = sampler.started + 0.5
    sampler.samples = [(at, "gpu0", {"power_w": 100.0}), (at - 0.1, "gpu1", {"power_w": 60.0}),
                       (at, "gpu0", {"power_w": 120.0}), (at + 0.001, "gpu0", {"power_w": 90.0})]
    gpus = telemetry_record(sampler, 10, 1.0)["gpus"]
    assert gpus["gpu0"]["power_w"] == [100.0, 120.0, 90.0] and gpus["gpu1"]["power_w"] == [60.0]
    assert gpus["gpu0"]["t_s"] == [0.5, 0.5, 0.501]


def test_the_telemetry_record_is_versioned_and_bounded():
    check_telemetry({"version": 1, "gpus": {"gpu0": {"t_s": [0.0], "power_w": [None]}}}, "t")
    with pytest.raises(RouterLatencyError, match="newer than this tool reads"):
        check_telemetry({"version": 2}, "t")
    with pytest.raises(RouterLatencyError, match="different lengths"):
        check_telemetry({"version": 1, "gpus": {"gpu0": {"t_s": [0.0], "power_w": []}}}, "t")
    with pytest.raises(RouterLatencyError, match=f"at most {MAX_SAMPLES}"):
        check_telemetry({"version": 1, "cpu": {"t_s": [0.0] * (MAX_SAMPLES + 1)}}, "t")


def test_energy_in_rounds_record_and_beside_the_cost(simulator, standin, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(30)])
    folder = tmp_path / "rounds"
    folder.mkdir()
    # joules a request are watts x the pass's time / its requests: b draws a tenth of a's
    # power, so it stays below a unless its passes take ten times as long (150 W against
    # 120 W flipped under -n 4 on a loaded machine: one pass 2.4x the other's time), in two
    # rounds of three: b's pass of 30 prompts, 60 ms, stalled by half a second twice
    router = simulator(delay_ms=2)
    for number in (1, 2, 3):
        for side, watts in (("a", 300), ("b", 30)):
            standin(STANDIN_POWER=watts)
            result = cli("run", "--url", router.url, "--corpus", corpus, "--out",
                         folder / f"r{number}-{side}.json", "--label", f"{side}-r{number}",
                         "--concurrency", "1", "--warmup", "0", "--gpu", "nvidia",
                         "--gpu-index", "0", "--sample-ms", "20", "--quiet")
            assert result.code == 0, result.err
    rounds = cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--format", "json")
    rows = [r for r in json.loads(rounds.out)["rows"] if r["metric"] == "j_per_request"]
    assert len(rows) == 1 and rows[0]["gated"] is False  # a row, not gated by default
    assert rows[0]["new_median"] < rows[0]["base_median"]
    record = cli("record", "--section", f"s={folder}:a:b", "--json", tmp_path / "r.json",
                 "--markdown", tmp_path / "r.md")
    assert record.code in (0, 1, 3), record.err  # the verdict is not what is tested here
    assert "energy of the router's GPUs per routed request: a " in (tmp_path / "r.md").read_text()
    standin(STANDIN_POWER=150)
    # two steps, not five: each starts the stand-in three times (before, through, after)
    ladder = cli("run", "--url", router.url, "--corpus", corpus, "--out", tmp_path / "l.json",
                 "--label", "x", "--ladder", "--warmup", "0", "--gpu", "nvidia",
                 "--cost-per-hour", "3.50/GPU", "--sample-ms", "20", "--slo-p95-ms", "60000",
                 "--router-max-concurrency", "2")
    assert ladder.code == 0, ladder.err
    # an SLO no step misses: the cost is counted at capacity within it whatever the machine's
    # load (at the plateau, a ladder whose throughput still grew has no step to count it at)
    assert re.search(r"^energy beside the cost: the router's GPUs [\d.]+ J per routed request "
                     r"at \d+ callers? \(the step nearest [\d.]+ req/s\) = [\d.]+ kWh per "
                     r"million routed requests$", ladder.out, re.M), ladder.out


# `amd-smi monitor -putm` on an 8-GPU MI300X node, whole: the example of AMD's ROCm blog
# "Getting to Know Your GPU: A Deep Dive into AMD SMI" (17 Sep 2024); monitor -p -t -u prints
# these columns but the memory's, in the same layout
AMD_MONITOR = (Path(__file__).parent / "data" / "amd-smi" / "monitor-putm.txt").read_text()


def test_amd_smi_monitor_is_sampled_through_the_pass(simulator, tmp_path, cli, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "amd-smi"
    script.write_text('#!/bin/sh\n[ "$1" = monitor ] || exit 1\n'
                      f'for i in $(seq 1 2000); do cat "{tmp_path / "monitor.txt"}"; '
                      'sleep 0.02; done\n')
    script.chmod(0o755)
    (tmp_path / "monitor.txt").write_text(AMD_MONITOR)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    # 30 prompts: the pass waits for the monitor's first sample, and every sample is alike
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(30)])
    result = cli("run", "--url", simulator(delay_ms=2).url, "--corpus", corpus, "--out",
                 tmp_path / "run.json", "--label", "x", "--concurrency", "1", "--warmup", "0",
                 "--gpu", "amd", "--gpu-index", "0")
    assert result.code == 0, result.err
    item = load_run(str(tmp_path / "run.json")).passes[0]
    telemetry = item.attempt.environment["telemetry"]
    assert telemetry["tool"] == "amd-smi" and len(telemetry["gpus"]) == 8
    assert telemetry["summary"]["gpu0"]["sclk_min_mhz"] == 1613.0
    assert telemetry["summary"]["gpu1"]["util_mean_pct"] == 13.0
    assert item.environment.energy_j == pytest.approx(
        182 * item.measured.wall_s / item.measured.requests, rel=1e-3)
    reader = AmdMonitorSamples()
    rows = [reader.feed(line, 1.0) for line in AMD_MONITOR.splitlines()]
    assert rows[0] is None and rows[1] == (1.0, "gpu0", {
        "sclk_mhz": 1613.0, "temp_c": 42.0, "power_w": 182.0, "util_pct": 83.0,
        "energy_mj": None, "reasons": None})


def fake_process(proc, pid, parent, session, ticks):
    folder = proc / str(pid)
    folder.mkdir(exist_ok=True)
    (folder / "stat").write_text(f"{pid} (a ) b) S {parent} {pid} {session} 0 0 0 0 0 0 0 "
                                 f"{ticks} 0 0 0 20 0 1 0\n")


def test_the_sampler_reads_the_router_s_processes_without_scanning_every_time(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    for pid, parent, session, ticks in ((10, 1, 10, 100), (11, 10, 10, 50), (12, 1, 12, 999)):
        fake_process(proc, pid, parent, session, ticks)
    tick = os.sysconf("SC_CLK_TCK")
    by_session = RouterTicks(CaptureSettings(router_session=10, proc_root=str(proc)))
    by_tree = RouterTicks(CaptureSettings(router_pid=10, proc_root=str(proc)))
    assert by_session.seconds() == by_tree.seconds() == 150 / tick
    fake_process(proc, 13, 10, 10, 7)  # started after the scan: counted from the next
    assert by_session.seconds() == 150 / tick
    (proc / "11" / "stat").unlink()  # ended: a scan at once
    (proc / "11").rmdir()
    assert by_session.seconds() == by_tree.seconds() == 107 / tick
    fake_process(proc, 14, 10, 10, 3)  # started, nothing ended: counted from the next scan,
    seen = [by_session.seconds() for _ in range(RESCAN_EVERY)]  # within RESCAN_EVERY reads
    assert seen[0] == 107 / tick and seen[-1] == 110 / tick
    assert RouterTicks(CaptureSettings(router_session=99, proc_root=str(proc))).seconds() is None
