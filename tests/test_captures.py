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
from router_latency.errors import RouterLatencyError
from router_latency.corpus import load_corpus
from router_latency.gpu import (GPU_FIELDS, gpu_reading_of, GPU_TOOLS, GpuReading, GpuTool,
                                parse_amd_smi, parse_nvidia_smi, parse_rocm_smi, resolve_gpu,
                                select_gpus)
from router_latency.runfile import CpuSettings, load_run
from router_latency.client import parse_endpoint
from router_latency.captures import CaptureSettings, DEFAULT_METRIC_PATTERN
from router_latency.host import (container_cgroup, cpu_busy_seconds, cpufreq_settings,
                                 format_cpu_list, host_settings, host_warnings, LoadSampler,
                                 parse_cpu_list, process_tree_cpu_seconds)
from router_latency.prometheus import metric_deltas, parse_prometheus
from router_latency.measuring import measure_run, plan_passes, RunContext, RunPlan
from router_latency.passloop import Target
from conftest import write_corpus

# Real output of the GPU tools, as excerpts: whole keys, devices or columns left out, no value
# changed. rocm-smi prints one line of JSON, every value a string; a warning (wording from
# rocm_smi.py) may stand before it.
ROCM_WARNING = ("WARNING: AMD GPU device(s) is/are in a low-power state. Check power "
                "control/runtime_status\n\n")
# Radeon RX 7900 XTX, `rocm-smi --showtemp --showuse --showpower --showmeminfo vram --json`,
# pasted whole in github.com/henrygd/beszel/issues/414
ROCM_RX7900XTX = (
    '{"card0": {"Temperature (Sensor edge) (C)": "49.0", "Temperature (Sensor junction) (C)": '
    '"49.0", "Temperature (Sensor memory) (C)": "62.0", "Average Graphics Package Power (W)": '
    '"19.0", "GPU use (%)": "0", "VRAM Total Memory (B)": "25753026560", "VRAM Total Used '
    'Memory (B)": "794341376"}}\n')
# MI250, `rocm-smi -a --json` under ROCm 6: excerpt of the mock in github.com/wandb/wandb
# core/pkg/monitor/gpu_amd_test.go (PR 8493); the cap 'Max Graphics Package Power' is not power
ROCM_MI250 = (
    '{"card0": {"Temperature (Sensor edge) (C)": "43.0", "Temperature (Sensor junction) (C)": '
    '"44.0", "Temperature (Sensor memory) (C)": "53.0", "fclk clock speed:": "(400Mhz)", '
    '"mclk clock speed:": "(1600Mhz)", "sclk clock speed:": "(800Mhz)", "sclk clock level:": '
    '"1", "Max Graphics Package Power (W)": "560.0", "Average Graphics Package Power (W)": '
    '"91.0", "GPU use (%)": "0", "GFX Activity": "387664097"}, "system": {"Driver version": '
    '"6.2.4"}}')
# RX 6700 XT, ROCm 6.0.2 (the secondary-die string printed for a single die, rocm_smi_lib#149):
# excerpt of influxdata/telegraf plugins/inputs/amd_rocm_smi/testdata/rx6700xt_rocm602.json
ROCM_RX6700XT_602 = (
    '{"card0": {"Temperature (Sensor edge) (C)": "45.0", "Temperature (Sensor junction) (C)": '
    '"47.0", "mclk clock speed:": "(96Mhz)", "sclk clock speed:": "(500Mhz)", '
    '"Average Graphics Package Power (W)": "N/A (Secondary die)", "GPU use (%)": "0", '
    '"VRAM Total Used Memory (B)": "1572757504", "VIS_VRAM Total Used Memory (B)": '
    '"70930432"}}')
# ROCm of 2019 (lower-case '(c)', 'Sensor mem'), `rocm-smi -f -t -P --json`, pasted whole in
# github.com/RainbowMiner/RainbowMiner/issues/749
ROCM_2019 = (
    '{"card0": {"Fan Speed (%)": "45", "Average Graphics Package Power (W)": "222.0", '
    '"Temperature (Sensor mem) (c)": "79.0", "Fan Speed (level)": "117", "Temperature (Sensor '
    'junction) (c)": "103.0", "Temperature (Sensor edge) (c)": "77.0"}}')
# Radeon 780M APU, rocm-smi-lib 6.2.4: edge sensor only, current socket power; excerpt of the
# output pasted in github.com/sebhildebrandt/systeminformation/pull/960
ROCM_780M = (
    '{"card0": {"Temperature (Sensor edge) (C)": "31.0", "mclk clock speed:": "(400Mhz)", '
    '"sclk clock speed:": "(800Mhz)", "Current Socket Graphics Package Power (W)": "7.222", '
    '"GPU use (%)": "19"}}')
# amd-smi metric -p --json, ROCm 6.1: the example in the official amdsmi CHANGELOG (whole)
AMD_SMI_61_POWER = """[
    {
        "gpu": 0,
        "power": {
            "socket_power": {"value": 10, "unit": "W"},
            "gfx_voltage": {"value": 6, "unit": "mV"},
            "soc_voltage": {"value": 918, "unit": "mV"},
            "mem_voltage": {"value": 1250, "unit": "mV"},
            "power_management": "ENABLED",
            "throttle_status": "UNTHROTTLED"
        }
    }
]
"""
# amd-smi metric --gpu 1 --json, AMD-SMI 26.2.1 / ROCm 7.2.0 (two Radeon AI PRO R9700): the
# "gpu_data" wrapper, an excerpt of github.com/ROCm/ROCm/issues/5706 (jpeg_activity and the
# sections after usage left out, braces closed)
AMD_SMI_72_USAGE = """{
    "gpu_data": [
        {
            "gpu": 1,
            "usage": {
                "gfx_activity": {"value": 100, "unit": "%"},
                "umc_activity": {"value": 0, "unit": "%"},
                "mm_activity": {"value": 0, "unit": "%"},
                "vcn_activity": [{"value": 0, "unit": "%"}, "N/A", "N/A", "N/A"]
            }
        }
    ]
}
"""
# Not a capture: no real MI300X `amd-smi metric --json` was found. Keys as the amd-smi CLI
# source (6.1+) writes them; the values are those of GPU 0 in AMD's blog "Getting to Know Your
# GPU: A Deep Dive into AMD SMI" (`amd-smi metric` and `amd-smi monitor -putm` as text).
AMD_SMI_MI300X_SHAPED = """[{"gpu": 0,
  "usage": {"gfx_activity": {"value": 100, "unit": "%"}, "umc_activity": {"value": 0, "unit": "%"}},
  "power": {"socket_power": {"value": 234, "unit": "W"}, "gfx_voltage": "N/A"},
  "clock": {"gfx_0": {"clk": {"value": 2102, "unit": "MHz"}},
            "gfx_1": {"clk": {"value": 2101, "unit": "MHz"}},
            "gfx_2": {"clk": {"value": 2107, "unit": "MHz"}},
            "mem_0": {"clk": {"value": 1230, "unit": "MHz"}}},
  "temperature": {"edge": "N/A", "hotspot": {"value": 42, "unit": "C"},
                  "mem": {"value": 41, "unit": "C"}}}]
"""
# `nvidia-smi --query-gpu=... --format=csv` (header and units), captured by
# github.com/utkuozdemir/nvidia_gpu_exporter internal/captures (H100, driver 590.48), columns
# cut to ours: under load, and with MIG on (utilization.gpu [N/A])
NVIDIA_H100 = """name, index, memory.used [MiB], utilization.gpu [%], temperature.gpu, \
power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz]
NVIDIA H100 80GB HBM3, 0, 19818 MiB, 100 %, 59, 631.95 W, 1980 MHz, 2619 MHz
"""
NVIDIA_H100_MIG = """name, index, memory.used [MiB], utilization.gpu [%], temperature.gpu, \
power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz]
NVIDIA H100 80GB HBM3, 0, 11125 MiB, [N/A], 53, 433.78 W, 1980 MHz, 2619 MHz
"""
# two GPUs, no index column, the graphics clock asked instead of the SM clock: pasted in
# github.com/aristocratos/bpytop/issues/26 (fan and memory.total columns left out)
NVIDIA_TWO = """name, memory.used [MiB], utilization.gpu [%], temperature.gpu, power.draw [W], \
clocks.current.graphics [MHz], clocks.current.memory [MHz]
GeForce GTX 1080 Ti, 2856 MiB, 36 %, 60, 106.56 W, 1936 MHz, 5508 MHz
GeForce GTX 1060 6GB, 4 MiB, 0 %, 49, 5.68 W, 139 MHz, 405 MHz
"""
PROMETHEUS_SAMPLE = r'''# HELP llm_model_routing_modifications_total Model routing changes.
# TYPE llm_model_routing_modifications_total counter
llm_model_routing_modifications_total{source_model="MoM",target_model="qwen3"} 12
# HELP process_restarts_total Restarts.
# TYPE process_restarts_total counter
process_restarts_total 2
classifier_errors_total{signal="pii",reason="say \"hi\", {x}"} 3 1712345678000
go_goroutines 41
request_duration_seconds_bucket{le="+Inf"} 7
request_duration_seconds_sum NaN
malformed line without value
'''


def test_parse_prometheus_sample():
    samples = parse_prometheus(PROMETHEUS_SAMPLE)
    assert samples['llm_model_routing_modifications_total{source_model="MoM",target_model="qwen3"}'] == 12
    assert samples["process_restarts_total"] == 2
    assert samples[r'classifier_errors_total{reason="say \"hi\", {x}",signal="pii"}'] == 3
    assert samples['request_duration_seconds_bucket{le="+Inf"}'] == 7
    assert "malformed" not in " ".join(samples)


def test_metric_deltas_keep_matching_series_only():
    before = parse_prometheus(PROMETHEUS_SAMPLE)
    after = dict(before, process_restarts_total=3.0, go_goroutines=50.0)
    after['panic_total{where="x"}'] = 1.0
    pattern = re.compile(DEFAULT_METRIC_PATTERN)
    assert metric_deltas(before, after, [pattern]) == {
        'classifier_errors_total{reason="say \\"hi\\", {x}",signal="pii"}': 0.0,
        'panic_total{where="x"}': 1.0, "process_restarts_total": 1.0}


def state(temp=None, sensor=None, sclk=None, mclk=None, power=None, util=None, used=None):
    return {"temp_c": temp, "temp_sensor": sensor, "sclk_mhz": sclk, "mclk_mhz": mclk,
            "power_w": power, "util_pct": util, "used_mib": used}


def test_parse_rocm_smi_real_samples():
    reading = parse_rocm_smi(ROCM_WARNING + ROCM_RX7900XTX)
    assert reading.to_json() == {"used_mib": {"card0": 757.5}, "devices": {"card0": state(
        49.0, "junction", power=19.0, util=0.0, used=757.5)}}
    assert parse_rocm_smi(ROCM_MI250).devices == {"card0": state(
        44.0, "junction", 800.0, 1600.0, 91.0, 0.0)}
    assert parse_rocm_smi(ROCM_RX6700XT_602).devices["card0"] == state(
        47.0, "junction", 500.0, 96.0, None, 0.0, 1499.9)
    assert parse_rocm_smi(ROCM_2019).devices["card0"] == state(
        103.0, "junction", power=222.0)
    assert parse_rocm_smi(ROCM_780M).devices["card0"] == state(
        31.0, "edge", 800.0, 400.0, 7.222, 19.0)
    for text in ('{"system": {}}', "WARNING: No JSON data to report\n", "[]"):
        with pytest.raises(ValueError):
            parse_rocm_smi(text)


def test_parse_amd_smi_real_samples():
    assert parse_amd_smi(AMD_SMI_61_POWER).to_json() == {"used_mib": {}, "devices": {
        "gpu0": state(power=10.0)}}
    assert parse_amd_smi(AMD_SMI_72_USAGE).devices == {"gpu1": state(util=100.0)}
    assert parse_amd_smi(AMD_SMI_MI300X_SHAPED).devices == {"gpu0": state(
        42.0, "hotspot", 2107.0, 1230.0, 234.0, 100.0)}
    for text in ('{"gpu_data": []}', '{"gpu_data": {}}', "no json here"):
        with pytest.raises(ValueError):
            parse_amd_smi(text)


def test_parse_nvidia_smi_real_samples():
    h100 = state(59.0, "gpu", 1980.0, 2619.0, 631.95, 100.0, 19818.0)
    assert parse_nvidia_smi(NVIDIA_H100).to_json() == {"used_mib": {"gpu0": 19818.0},
                                                          "devices": {"gpu0": h100}}
    assert parse_nvidia_smi(NVIDIA_H100_MIG).devices["gpu0"]["util_pct"] is None
    assert parse_nvidia_smi(NVIDIA_TWO).devices == {
        "gpu0": state(60.0, "gpu", None, 5508.0, 106.56, 36.0, 2856.0),
        "gpu1": state(49.0, "gpu", None, 405.0, 5.68, 0.0, 4.0)}
    # without a header the columns follow the query (the H100's figures, in that order)
    assert parse_nvidia_smi("0, 59, 1980, 2619, 631.95, 100, 19818\n").devices == {
        "gpu0": h100}
    with pytest.raises(ValueError):
        parse_nvidia_smi("Failed to initialize NVML: Driver/library version mismatch\n")


def test_select_gpus_by_the_tools_index():
    reading = parse_nvidia_smi(NVIDIA_TWO)
    assert list(select_gpus(reading, (1,)).devices) == ["gpu1"]
    assert select_gpus(reading, (1,)).used_mib == {"gpu1": 4.0}
    assert select_gpus(reading, (1, 3)).note == "no GPU 3 in the tool's output"
    assert select_gpus(reading, ()) == reading
    assert select_gpus(GpuReading(error="x"), (0,)) == GpuReading(error="x")


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
    document, _ = run_once(cli, simulator(delay_ms=0), tmp_path,
                           "--probe", "cpus=echo 0-15", "--probe", "fails=echo out; exit 3",
                           "--probe", "slow=sleep 5; echo never", "--probe-timeout", "0.3",
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
    assert document["router"] == {"pid": None, "cgroup": str(cgroup), "container": None,
                                  "cpus": None}
    assert document["driver"]["cpu_affinity"] == sorted(os.sched_getaffinity(0))


def test_load_sampler_keeps_the_range_of_its_readings(tmp_path):
    load = tmp_path / "loadavg"
    load.write_text("5.0 1 1 1/1 1\n")
    sampler = LoadSampler(str(load), interval=3600).start()
    load.write_text("7.5 1 1 1/1 1\n")
    assert sampler.stop() == {"start": 5.0, "end": 7.5, "min": 5.0, "max": 7.5, "samples": 2}


def test_run_records_driver_cpu_and_warns_when_the_driver_is_the_limit(
        simulator, tmp_path, cli, monkeypatch):
    readings = iter([0.0, 5.0, 5.0, 5.0])
    monkeypatch.setattr("router_latency.measuring.driver_cpu_seconds", lambda: next(readings))
    router = simulator(delay_ms=600)
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


def test_cpu_lists_as_the_kernel_writes_them():
    assert parse_cpu_list("0-3,8, 10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpu_list({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11"
    for bad in ("", "3-1", "a", "1,,2"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


def write_proc_stat(proc, ticks):
    """Write a /proc/stat of the given user ticks per CPU (nice 1, system 2, idle 500)."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{cpu} {user} 1 2 500 7 3 4 9 0 0" for cpu, user in sorted(ticks.items())]
    (proc / "stat").write_text("\n".join(lines + ["intr 12 0", "ctxt 99"]) + "\n")


def test_process_tree_and_cpu_busy_seconds_from_a_fake_proc(tmp_path):
    proc = tmp_path / "proc"
    hz = os.sysconf("SC_CLK_TCK")
    # pid, parent, name, utime, stime, cutime, cstime: 100 is the router, 101 its child,
    # 102 a grandchild, 200 a stranger; a name may hold ') ' and spaces
    for pid, parent, name, times in ((100, 1, "router) (x y", (50, 20, 5, 5)),
                                     (101, 100, "worker", (30, 10, 0, 0)),
                                     (102, 101, "helper", (7, 3, 0, 0)),
                                     (200, 1, "other", (999, 999, 0, 0))):
        (proc / str(pid)).mkdir(parents=True)
        fields = ["S", str(parent)] + ["0"] * 9 + [str(t) for t in times] + ["20", "0"]
        (proc / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    (proc / "self").mkdir()
    assert process_tree_cpu_seconds(100, str(proc)) == 130 / hz
    assert process_tree_cpu_seconds(101, str(proc)) == 50 / hz
    with pytest.raises(OSError):
        process_tree_cpu_seconds(4242, str(proc))
    write_proc_stat(proc, {0: 10, 1: 20, 2: 40})
    assert cpu_busy_seconds(frozenset({1, 2, 5}), str(proc)) == ((23 + 43) / hz, {5})


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


def fake_docker(folder, output, code=0):
    script = folder / "docker"
    script.write_text(f"#!/bin/sh\necho '{output}'\n[ {code} = 0 ] || echo 'Error: No such "
                      f"object: x' >&2\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_container_cgroup_found_with_docker_inspect(tmp_path, monkeypatch):
    bin_folder, proc, root = tmp_path / "bin", tmp_path / "proc", tmp_path / "cgroup"
    bin_folder.mkdir()
    monkeypatch.setenv("PATH", f"{bin_folder}:/usr/bin:/bin")
    (proc / "4321").mkdir(parents=True)
    (proc / "4321" / "cgroup").write_text("0::/system.slice/docker-abc123.scope\n")
    scope = root / "system.slice" / "docker-abc123.scope"
    scope.mkdir(parents=True)
    (scope / "cpu.stat").write_text("usage_usec 5\n")
    fake_docker(bin_folder, "abc123 4321 true")
    options = {"proc_root": str(proc), "cgroup_root": str(root)}
    assert container_cgroup("router", **options) == str(scope)
    # the cgroupfs driver's folder, when the process's own cgroup reads '/'
    (proc / "4321" / "cgroup").write_text("0::/\n")
    (root / "docker" / "abc123").mkdir(parents=True)
    (root / "docker" / "abc123" / "cpu.stat").write_text("usage_usec 5\n")
    (scope / "cpu.stat").unlink()
    assert container_cgroup("router", **options) == str(root / "docker" / "abc123")
    fake_docker(bin_folder, "abc123 0 false")
    with pytest.raises(RouterLatencyError, match="container router is not running"):
        container_cgroup("router", **options)


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
    # previews 40-49 and 90-99 of each pass wait 60 ms more: windows 5 and 10 of 10
    router = simulator(delay_ms=0, stall=(50, 10, 60.0), serial=True)
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
