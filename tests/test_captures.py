"""What run captures around each pass: probes, GPU memory, router metrics, CPU sets, load."""

import json
import os
import re
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from router_latency.constants import PREVIEW_PATH
from router_latency.corpus import load_corpus
from router_latency.gpu import (GPU_FIELDS, gpu_reading_of, GPU_TOOLS, GpuTool, parse_rocm_smi,
                                resolve_gpu)
from router_latency.prometheus import metric_deltas, parse_prometheus
from router_latency.runfile import CpuSettings, load_run
from router_latency.client import parse_endpoint
from router_latency.host import cpufreq_settings, host_settings, host_warnings
from router_latency.captures import CaptureSettings, DEFAULT_METRIC_PATTERN
from router_latency.passloop import Target
from router_latency.measuring import measure_run, plan_passes, RunContext, RunPlan
from conftest import (AMD_SMI_MI300X_SHAPED, NVIDIA_TWO, PROMETHEUS_SAMPLE, ROCM_MI250,
                      ROCM_RX7900XTX, ROCM_WARNING, state, write_corpus, write_proc_stat)


def test_metric_deltas_keep_matching_series_only():
    before = parse_prometheus(PROMETHEUS_SAMPLE)
    after = dict(before, process_restarts_total=3.0, go_goroutines=50.0)
    after['panic_total{where="x"}'] = 1.0
    pattern = re.compile(DEFAULT_METRIC_PATTERN)
    assert metric_deltas(before, after, [pattern]) == {
        'classifier_errors_total{reason="say \\"hi\\", {x}",signal="pii"}': 0.0,
        'panic_total{where="x"}': 1.0, "process_restarts_total": 1.0}


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """Put fake rocm-smi and nvidia-smi executables first on PATH; return their folder."""
    folder = tmp_path / "bin"
    folder.mkdir()

    def install(name, output, code=0):
        data = folder / f"{name}.out"
        data.write_text(output)
        script = folder / name
        script.write_text(f"#!/bin/sh\ncat '{data}'\nexit {code}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)

    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    install.folder = folder
    return install


def run_once(cli, router, tmp_path, *extra):
    corpus = write_corpus(tmp_path / "corpus.json", ["hello", "world"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1,2", "--warmup", "0", *extra)
    assert result.code == 0, result.err
    return json.loads(out.read_text()), result


def test_gpu_state_from_a_fake_rocm_smi(simulator, fake_tools, tmp_path, cli):
    fake_tools("rocm-smi", ROCM_WARNING + ROCM_RX7900XTX)
    document, result = run_once(cli, simulator(delay_ms=0), tmp_path)  # --gpu auto finds it
    assert document["captures"]["gpu"] == "rocm-smi"
    for item in document["passes"]:
        gpu = item["environment"]["gpu"]
        assert gpu["tool"] == "rocm-smi"
        assert gpu["before"] == gpu["after"] == parse_rocm_smi(ROCM_RX7900XTX).to_json()
    assert "gpu (rocm-smi), before and after each pass:" in result.out
    assert re.search(r"^Sequential\s+49\s+n/a\s+n/a\s+19\s+0\s+757\.5$", result.out, re.M)


def test_a_gpu_tool_is_one_entry_of_the_table_of_tools(simulator, fake_tools, tmp_path, cli,
                                                       monkeypatch):
    # a tool added to GPU_TOOLS is a --gpu choice, in its help, found by auto, run with its
    # command, read by its parser, and shown in the GPU table under the fields' titles
    def parse_xpu(text):
        return gpu_reading_of({"xpu0": {f.key: float(i + 1) for i, f in enumerate(
            GPU_FIELDS)} | {"temp_sensor": "gpu"}}, "xpu-smi")

    tools = (GpuTool("xpu", ("xpu-smi", "dump"), parse_xpu), *GPU_TOOLS)
    for module in ("gpu", "command_run"):  # the table, and the parser's choices read from it
        monkeypatch.setattr(f"router_latency.{module}.GPU_TOOLS", tools)
    fake_tools("xpu-smi", "anything\n")
    assert "{auto,xpu,rocm,amd,nvidia,none}" in cli("run", "--help").out
    assert "with xpu-smi, rocm-smi, amd-smi or nvidia-smi" in " ".join(
        cli("run", "--help").out.split())
    assert resolve_gpu("auto") == "xpu"
    for extra in ((), ("--gpu", "xpu")):
        (tmp_path / "run.json").unlink(missing_ok=True)
        document, result = run_once(cli, simulator(delay_ms=0), tmp_path, *extra)
        assert document["captures"]["gpu"] == "xpu-smi"
        assert document["passes"][0]["environment"]["gpu"]["after"]["devices"]["xpu0"][
            "power_w"] == 4.0
        assert re.search(r"^pass\s+temp C\s+sclk MHz\s+mclk MHz\s+power W\s+use %\s+used MiB$",
                         result.out, re.M)
        assert re.search(r"^Sequential\s+1\s+2\s+3\s+4\s+5\s+6$", result.out, re.M)
    refused = cli("run", "--url", "http://127.0.0.1:1", "--corpus", "c", "--out", "o",
                  "--gpu", "tpu")
    assert refused.code == 2 and "invalid choice: 'tpu'" in refused.err


def test_gpu_state_from_a_fake_amd_smi_and_nvidia_smi(simulator, fake_tools, tmp_path, cli):
    fake_tools("amd-smi", AMD_SMI_MI300X_SHAPED)
    fake_tools("nvidia-smi", NVIDIA_TWO)
    router = simulator(delay_ms=0)
    document, _ = run_once(cli, router, tmp_path, "--gpu", "amd")
    assert document["passes"][0]["environment"]["gpu"]["after"]["devices"]["gpu0"][
        "sclk_mhz"] == 2107.0
    (tmp_path / "run.json").unlink()
    document, _ = run_once(cli, router, tmp_path, "--gpu", "nvidia", "--gpu-index", "1")
    assert document["captures"]["gpu_indexes"] == [1]
    assert document["passes"][0]["environment"]["gpu"]["after"] == {
        "used_mib": {"gpu1": 4.0}, "devices": {"gpu1": state(49.0, "gpu", None, 405.0, 5.68,
                                                             0.0, 4.0)}}


def test_absent_or_failing_gpu_tools_are_not_an_error(simulator, fake_tools, tmp_path, cli):
    router = simulator(delay_ms=0)
    document, _ = run_once(cli, router, tmp_path)
    assert document["captures"]["gpu"] is None and "gpu" not in document["passes"][0]["environment"]
    (tmp_path / "run.json").unlink()
    document, _ = run_once(cli, router, tmp_path, "--gpu", "rocm")
    assert document["passes"][0]["environment"]["gpu"]["before"] == {"error": "rocm-smi not found"}
    (tmp_path / "run.json").unlink()
    fake_tools("nvidia-smi", "NVIDIA-SMI has failed\n", code=9)
    document, _ = run_once(cli, router, tmp_path, "--gpu", "nvidia")
    assert document["passes"][0]["environment"]["gpu"]["before"] == {
        "error": "nvidia-smi exited 9"}
    (tmp_path / "run.json").unlink()
    fake_tools("rocm-smi", ROCM_MI250, code=2)  # some query unsupported, the rest printed
    document, result = run_once(cli, router, tmp_path, "--gpu", "rocm")
    reading = document["passes"][0]["environment"]["gpu"]["before"]
    assert reading["note"] == "rocm-smi exited 2" and reading["devices"]["card0"]["power_w"] == 91
    assert "gpu before Sequential: rocm-smi exited 2" in result.out


def test_probes_run_before_and_after_each_pass(simulator, tmp_path, cli):
    # the slow probe is waited for its timeout at each of the 4 moments; the others take 15 ms
    # or less (a shell, or three in a pipe): 0.2 s leaves them a stall of the machine's 130 ms
    document, _ = run_once(cli, simulator(delay_ms=0), tmp_path,
                           "--probe", "cpus=echo 0-15", "--probe", "fails=echo out; exit 3",
                           "--probe", "slow=sleep 5; echo never", "--probe-timeout", "0.2",
                           "--probe", "big=head -c 10000 /dev/zero | tr '\\0' x")
    assert document["captures"]["probes"] == ["cpus", "fails", "slow", "big"]
    for item in document["passes"]:
        for moment in ("before", "after"):
            probes = item["environment"]["probes"][moment]
            assert probes["cpus"]["exit"] == 0 and probes["cpus"]["stdout"] == "0-15\n"
            assert probes["fails"]["exit"] == 3 and probes["fails"]["stdout"] == "out\n"
            assert probes["slow"]["exit"] is None and probes["slow"]["timed_out"] is True
            assert probes["big"]["stdout"] == "x" * 4096


def metrics_server(counter):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            counter["scrapes"] += 1
            body = (f"router_restarts_total {counter['scrapes'] // 2}\n"
                    f"requests_total {counter['scrapes'] * 10}\n"
                    f'classifier_errors_total{{signal="pii"}} {counter["scrapes"]}\n').encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return server


def test_metrics_deltas_per_pass(simulator, tmp_path, cli):
    counter = {"scrapes": 0}
    server = metrics_server(counter)
    try:
        document, _ = run_once(cli, simulator(delay_ms=0), tmp_path, "--metrics-url",
                               f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    first, second = (p["environment"]["metrics"]["deltas"] for p in document["passes"])
    # scrapes 1 and 2 around the first pass, 3 and 4 around the second
    assert first == {'classifier_errors_total{signal="pii"}': 1.0, "router_restarts_total": 1.0}
    assert second == {'classifier_errors_total{signal="pii"}': 1.0, "router_restarts_total": 1.0}
    assert document["captures"]["metrics_url"].endswith("/metrics")


def test_metric_option_chooses_the_series_and_errors_are_recorded(simulator, tmp_path, cli):
    counter = {"scrapes": 0}
    server = metrics_server(counter)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        document, _ = run_once(cli, simulator(delay_ms=0), tmp_path, "--metrics-url", url,
                               "--metric", "^requests_")
        (tmp_path / "run.json").unlink()
        missing, _ = run_once(cli, simulator(delay_ms=0), tmp_path, "--metrics-url",
                              url + "/nope")
    finally:
        server.shutdown()
        server.server_close()
    assert document["passes"][0]["environment"]["metrics"]["deltas"] == {"requests_total": 10.0}
    assert missing["passes"][0]["environment"]["metrics"] == {"error": "HTTP 404"}


def test_router_cpu_set_from_a_pid_and_from_a_cgroup(simulator, tmp_path, cli):
    router = simulator(delay_ms=0)
    document, _ = run_once(cli, router, tmp_path, "--router-pid", str(os.getpid()))
    expected = next(line.split(":", 1)[1].strip()
                    for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("Cpus_allowed_list:"))
    assert document["passes"][0]["environment"]["router_cpus"] == expected
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "cpuset.cpus.effective").write_text("4-7,12\n")
    (tmp_path / "run.json").unlink()
    document, _ = run_once(cli, router, tmp_path, "--router-cgroup", str(cgroup))
    assert {p["environment"]["router_cpus"] for p in document["passes"]} == {"4-7,12"}
    not_recorded = {"value": None, "source": "not recorded"}
    assert document["router"] == {"pid": None, "cgroup": str(cgroup), "container": None,
                                  "cpus": None, "told": {"signal deadline": not_recorded,
                                                         "VLLM_SRUN_CPU_THREADS": not_recorded}}
    assert document["driver"]["cpu_affinity"] == sorted(os.sched_getaffinity(0))


def test_run_records_driver_cpu_and_warns_when_the_driver_is_the_limit(
        simulator, tmp_path, cli, monkeypatch):
    readings = iter([0.0, 5.0, 5.0, 5.0])
    monkeypatch.setattr("router_latency.measuring.driver_cpu_seconds", lambda: next(readings))
    # the shortest pass whose share of a core is warned about: 0.1 s here, not 1 s to wait
    monkeypatch.setattr("router_latency.measuring.DRIVER_BUSY_MIN_S", 0.1)
    router = simulator(delay_ms=51)  # two answers: a pass of 0.102 s at least, over it
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0")
    assert result.code == 0
    item = json.loads(out.read_text())["passes"][0]
    # the fake clock's 5 s, less the real thread time of reading the two answers' signal
    # times after the pass (AnswerBook.settle: well under 50 ms)
    assert item["driver_cpu_s"] == pytest.approx(5.0, abs=0.05)
    assert re.search(r"Sequential: the driver kept a core \d+% busy; the driver, not the router, "
                     r"may be the limit", result.err)


def cpu_burning_router(simulator, cgroup, proc, ticks):
    """A simulated router whose every preview adds 2 ms to the cgroup's usage_usec and one
    tick to CPU 2 (the router's) and CPU 5 (not the router's) in a fake /proc/stat."""
    router = simulator(delay_ms=0)
    answer, lock = router._answer, threading.Lock()
    usage = {"usec": 1_000_000}

    def burn(method, path, headers, body):
        if path == PREVIEW_PATH.encode():
            with lock:
                usage["usec"] += 2000
                ticks[2] += 1
                ticks[5] += 1
                (cgroup / "cpu.stat").write_text(f"usage_usec {usage['usec']}\nuser_usec 1\n")
                write_proc_stat(proc, ticks)
        return answer(method, path, headers, body)

    router._answer = burn
    return router


def test_router_cpu_per_request_and_foreign_vcpus_from_a_fake_cgroup(simulator, tmp_path):
    cgroup, proc = tmp_path / "cgroup", tmp_path / "proc"
    cgroup.mkdir()
    proc.mkdir()
    (cgroup / "cpuset.cpus.effective").write_text("2-3\n")
    (cgroup / "cpu.stat").write_text("usage_usec 1000000\n")
    ticks = {0: 0, 1: 0, 2: 100, 3: 100, 5: 0}
    write_proc_stat(proc, ticks)
    router = cpu_burning_router(simulator, cgroup, proc, ticks)
    corpus = load_corpus(write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(30)]))
    run = measure_run(RunContext(Target(parse_endpoint(router.url)),
                                       RunPlan(plan_passes((1, 4)), warmup=5),
                                       capture=CaptureSettings(router_cgroup=str(cgroup),
                                                                  proc_root=str(proc))),
                         corpus, label="x")
    hz = os.sysconf("SC_CLK_TCK")
    for item in run.passes:
        use = item.attempt.router_cpu
        assert (use.router_s, use.per_request_ms, use.cpus) == (0.06, 2.0, "2-3")
        assert use.busy_s == round(30 / hz, 6) and use.notes == ()
        # interval_s is stored rounded to the microsecond, foreign_vcpus to 0.001
        assert use.foreign_vcpus == pytest.approx(max(30 / hz - 0.06, 0) / use.interval_s,
                                                  abs=0.002)
        assert item.environment.router_cpu_ms == 2.0
    assert run.host_settings.router.cpus == "2-3"


def test_router_cpu_of_a_real_process_and_its_threads(simulator, tmp_path, cli):
    # the simulator's threads are this process's: their time is the router's
    document, result = run_once(cli, simulator(delay_ms=0), tmp_path, "--router-pid",
                                str(os.getpid()))
    for item in document["passes"]:
        use = item["router_cpu"]
        assert use["router_s"] >= 0 and use["notes"] == []
        assert use["per_request_ms"] == round(1000 * use["router_s"] / 2, 4)
        assert use["cpus"] == item["environment"]["router_cpus"]
    assert result.out.splitlines()[1].split()[-4:] == ["cpu", "ms/req", "foreign", "vCPUs"]


def test_host_settings_and_a_governor_warning(simulator, tmp_path):
    sys_root, cpu = tmp_path / "sys", tmp_path / "sys" / "devices" / "system" / "cpu"
    for number, governor in ((0, "performance"), (1, "powersave"), (2, "powersave")):
        (cpu / f"cpu{number}" / "cpufreq").mkdir(parents=True)
        (cpu / f"cpu{number}" / "cpufreq" / "scaling_governor").write_text(governor + "\n")
    (cpu / "intel_pstate").mkdir()
    (cpu / "intel_pstate" / "no_turbo").write_text("1\n")
    settings = host_settings([0, 1], "1-2,7", sys_root=str(sys_root))
    assert settings.driver == CpuSettings("0-1", {"performance": "0", "powersave": "1"},
                                             {"off": "0-1"})
    assert settings.router.governors == {"powersave": "1-2"}
    assert settings.kernel and settings.python and settings.tool_version
    assert host_warnings(settings) == [
        "the driver may run on the router's CPUs 1: it competes with the router, and its CPU "
        "time counts as foreign (taskset -c pins the driver elsewhere)",
        "the driver's CPUs run the cpufreq governor powersave on CPUs 1, not performance; pin "
        "the clocks before measuring (cpupower frequency-set -g performance)",
        "the router's CPUs run the cpufreq governor powersave on CPUs 1-2, not performance; "
        "pin the clocks before measuring (cpupower frequency-set -g performance)"]
    heard = []
    router = simulator(delay_ms=0)
    corpus = load_corpus(write_corpus(tmp_path / "corpus.json", ["a", "b"]))
    run = measure_run(RunContext(
        Target(parse_endpoint(router.url)), RunPlan(plan_passes((1,)), warmup=0),
        capture=CaptureSettings(router_cpu_list="1-2", sys_root=str(sys_root)),
        notify=heard.append), corpus, label="x")
    assert run.host_settings.router.governors == {"powersave": "1-2"}
    assert "warning: the router's CPUs run the cpufreq governor powersave on CPUs 1-2" in heard[-1]
    assert cpufreq_settings([0], str(tmp_path / "nothing")) == CpuSettings("0", {}, {})


def test_a_stalling_router_makes_a_slow_phase_that_run_names(simulator, tmp_path, cli):
    # previews 45-49 and 95-99 of each pass wait 60 ms more: half of windows 5 and 10 of 10,
    # whose p95 they make (a window's whole ten waited twice as long in all)
    router = simulator(delay_ms=0, stall=(50, 5, 60.0), serial=True)
    corpus = write_corpus(tmp_path / "corpus.json", [f"p{i}" for i in range(100)])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0", "--window", "10")
    assert result.code == 0
    run = load_run(str(out))
    item = run.passes[0]
    assert len(item.attempt.windows) == 10 and {4, 9} <= set(run.slow_windows(item))
    assert item.attempt.windows[4].p95_ms >= 60
    assert re.search(r"^slow phase in Sequential: windows [0-9, ]*5[0-9, ]*10 of 10 ",
                     result.out, re.M)
    assert "Sequential: slow phase in " in result.err
    assert run.settings.thresholds.window_requests == 10 and run.thresholds.slow_p95_factor == 2.0
