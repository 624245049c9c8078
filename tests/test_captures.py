"""What run captures around each pass: probes, GPU memory, router metrics, CPU sets, load."""

import json
import os
import re
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import router_latency as rl
from conftest import write_corpus

# Recorded in the formats the tools document: `rocm-smi --showmeminfo vram --json` (one object
# per card, values in bytes as strings, a "system" object beside them) and `nvidia-smi
# --query-gpu=index,memory.used --format=csv,noheader,nounits`.
ROCM_SMI_SAMPLE = """WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status

{"card0": {"VRAM Total Memory (B)": "206158430208", "VRAM Total Used Memory (B)": "17179869184"}, "card1": {"VRAM Total Memory (B)": "206158430208", "VRAM Total Used Memory (B)": "283115520"}, "system": {"Driver version": "6.8.5"}}
"""
NVIDIA_SMI_SAMPLE = "0, 1024\n1, 40960\n2, [N/A]\n"
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
    samples = rl.parse_prometheus(PROMETHEUS_SAMPLE)
    assert samples['llm_model_routing_modifications_total{source_model="MoM",target_model="qwen3"}'] == 12
    assert samples["process_restarts_total"] == 2
    assert samples[r'classifier_errors_total{reason="say \"hi\", {x}",signal="pii"}'] == 3
    assert samples['request_duration_seconds_bucket{le="+Inf"}'] == 7
    assert "malformed" not in " ".join(samples)


def test_metric_deltas_keep_matching_series_only():
    before = rl.parse_prometheus(PROMETHEUS_SAMPLE)
    after = dict(before, process_restarts_total=3.0, go_goroutines=50.0)
    after['panic_total{where="x"}'] = 1.0
    pattern = re.compile(rl.DEFAULT_METRIC_PATTERN)
    assert rl.metric_deltas(before, after, [pattern]) == {
        'classifier_errors_total{reason="say \\"hi\\", {x}",signal="pii"}': 0.0,
        'panic_total{where="x"}': 1.0, "process_restarts_total": 1.0}


def test_parse_gpu_tool_samples():
    assert rl.parse_rocm_smi(ROCM_SMI_SAMPLE) == {"card0": 16384.0, "card1": 270.0}
    assert rl.parse_nvidia_smi(NVIDIA_SMI_SAMPLE) == {"gpu0": 1024.0, "gpu1": 40960.0}
    with pytest.raises(ValueError):
        rl.parse_rocm_smi('{"system": {}}')
    with pytest.raises(ValueError):
        rl.parse_nvidia_smi("Failed to initialize NVML: Driver/library version mismatch\n")


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


def test_gpu_memory_from_a_fake_rocm_smi(simulator, fake_tools, tmp_path, cli):
    fake_tools("rocm-smi", ROCM_SMI_SAMPLE)
    document, _ = run_once(cli, simulator(delay_ms=0), tmp_path)  # --gpu auto finds it
    assert document["captures"]["gpu"] == "rocm-smi"
    for item in document["passes"]:
        gpu = item["environment"]["gpu"]
        assert gpu["tool"] == "rocm-smi"
        assert gpu["before"] == gpu["after"] == {"used_mib": {"card0": 16384.0, "card1": 270.0}}


def test_gpu_memory_from_a_fake_nvidia_smi(simulator, fake_tools, tmp_path, cli):
    fake_tools("nvidia-smi", NVIDIA_SMI_SAMPLE)
    document, _ = run_once(cli, simulator(delay_ms=0), tmp_path, "--gpu", "nvidia")
    assert document["passes"][0]["environment"]["gpu"]["after"] == {
        "used_mib": {"gpu0": 1024.0, "gpu1": 40960.0}}


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
    assert document["router"] == {"pid": None, "cgroup": str(cgroup)}
    assert document["driver"]["cpu_affinity"] == sorted(os.sched_getaffinity(0))


def test_load_sampler_keeps_the_range_of_its_readings(tmp_path):
    load = tmp_path / "loadavg"
    load.write_text("5.0 1 1 1/1 1\n")
    sampler = rl.LoadSampler(str(load), interval=3600).start()
    load.write_text("7.5 1 1 1/1 1\n")
    assert sampler.stop() == {"start": 5.0, "end": 7.5, "min": 5.0, "max": 7.5, "samples": 2}


def test_run_records_driver_cpu_and_warns_when_the_driver_is_the_limit(
        simulator, tmp_path, cli, monkeypatch):
    readings = iter([0.0, 5.0, 5.0, 5.0])
    monkeypatch.setattr(rl, "driver_cpu_seconds", lambda: next(readings))
    router = simulator(delay_ms=600)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0")
    assert result.code == 0
    item = json.loads(out.read_text())["passes"][0]
    assert item["driver_cpu_s"] == 5.0
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
                           (["--gpu", "intel"], "--gpu")):
        result = cli(*base, *extra)
        assert result.code == 2 and message in result.err and result.err.count("\n") == 1
