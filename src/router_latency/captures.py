"""What a pass captures before and after it: the probes, the GPU tool's reading, the router's
metrics scraped, the router's CPU set and CPU time; the pass's environment record made of
them. The commands they run are run here, in their own session, ended by the stop flag."""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from .constants import (CACHE_SERIES, DEFAULT_HISTOGRAMS, NamedTuple, RUNTIME_COUNTERS,
                        RUNTIME_GAUGES, STOP_POLL_S)
from .words import scrubbed, scrubbed_cut
from .gpu import GpuReading, gpu_tool, select_gpus
from .prometheus import histogram_deltas, metric_deltas, parse_prometheus
from .captured import CapturedEnvironment, ProbeResult, RouterCpu
from .client import Connection, encode_request, Endpoint, RequestFailed, tls_context
from .host import (cgroup_cpu_seconds, cpu_busy_seconds, format_cpu_list, parse_cpu_list,
                   process_tree_cpu_seconds, session_cpu_seconds, session_member)

__all__ = [
    "capture_snapshot", "CaptureSettings", "DEFAULT_METRIC_PATTERN", "environment_record",
    "Probe", "read_cpu_use", "router_cpu_use", "router_cpus", "utc_now",
]


PROBE_OUTPUT_BYTES = 4096
# unknown_answers: the router's vsr_model_runtime_unknown_answers_total{reason}, the answers
# it left unknown (a signal's model timed out, was unavailable or overloaded): kept, but not
# a fault (PassRecord.environment)
DEFAULT_METRIC_PATTERN = "restart|fault|error|panic|unknown_answers"


class Probe(NamedTuple):
    """A probe of --probe NAME=COMMAND: a shell line run before and after each pass."""
    name: str
    command: str


class CaptureSettings(NamedTuple):
    probes: tuple[Probe, ...] = ()
    probe_timeout: float = 10.0
    gpu: Optional[str] = None  # the choice of one of GPU_TOOLS, or None
    metrics: Optional[Endpoint] = None
    metric_patterns: tuple[re.Pattern[str], ...] = ()
    histograms: tuple[str, ...] = DEFAULT_HISTOGRAMS  # kept whole: buckets, sum and count
    router_pid: Optional[int] = None
    router_session: Optional[int] = None  # --router-session: every process of this session
    router_cgroup: Optional[str] = None
    router_container: Optional[str] = None  # its name; router_cgroup holds its cgroup
    router_cpu_list: Optional[str] = None  # --router-cpus: instead of the cgroup's CPU set
    gpu_indexes: tuple[int, ...] = ()  # the GPU tool's own device indexes; all when empty
    proc_root: str = "/proc"  # where the kernel's files are read: tests give a fake one
    sys_root: str = "/sys"
    hidden_variables: tuple[str, ...] = ()  # not passed to probes and GPU tools: --token-env's
    secrets: tuple[str, ...] = ()  # scrubbed from every text recorded (see secret_values)
    sample_ms: float = 0.0  # --sample-ms: the telemetry's interval through a pass; 0: none


def run_command(command: Any, timeout: float, stop: Optional[threading.Event],
                hidden: Sequence[str] = ()) -> tuple[Optional[int], bytes, str]:
    """Return (exit code or None, stdout bytes, how it ended: "", "timed out" or "interrupted")
    of a command (a shell line when a str) run in its own session, so that a timeout or the
    stop flag, looked at every STOP_POLL_S, ends the whole pipeline, not just the shell. The
    environment variables named in `hidden` (the token's) are not passed to it."""
    import subprocess
    if stop is not None and stop.is_set():
        return None, b"", "interrupted"
    env = {k: v for k, v in os.environ.items() if k not in hidden} if hidden else None
    process = subprocess.Popen(command, shell=isinstance(command, str),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    deadline = time.monotonic() + timeout
    ended = ""
    while not ended:
        try:
            output, _ = process.communicate(timeout=max(min(deadline - time.monotonic(),
                                                            STOP_POLL_S), 0.001))
            return process.returncode, output, ""
        except subprocess.TimeoutExpired:
            if stop is not None and stop.is_set():
                ended = "interrupted"
            elif time.monotonic() >= deadline:
                ended = "timed out"
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        output, _ = process.communicate(timeout=1.0)
    except subprocess.TimeoutExpired:  # a descendant in another session holds the pipe
        process.kill()
        output = b""
    return None, output or b"", ended


def gpu_reading(key: str, timeout: float, stop: Optional[threading.Event] = None,
                hidden: Sequence[str] = ()) -> GpuReading:
    """Return the GPU tool's reading, or one with the error that kept it from reading.

    A tool that exits non-zero but prints readable figures (rocm-smi does when one of its
    queries is unsupported) gives them, with a note of the exit code.
    """
    chosen = gpu_tool(key)
    tool, command, parse = chosen.name, list(chosen.command), chosen.parse
    if not shutil.which(tool):
        return GpuReading(error=f"{tool} not found")
    try:
        code, output, ended = run_command(command, timeout, stop, hidden)
    except OSError as exc:
        return GpuReading(error=f"{tool}: {exc.__class__.__name__}")
    if ended:
        return GpuReading(error=f"{tool}: {ended}")
    try:
        reading = parse(output.decode("utf-8", "replace"))
    except (ValueError, TypeError, AttributeError) as exc:
        return GpuReading(error=f"{tool} exited {code}" if code != 0 else f"{tool}: {exc}")
    return reading if code == 0 else reading._replace(note=f"{tool} exited {code}")


def run_probe(command: str, timeout: float, stop: Optional[threading.Event] = None,
              hidden: Sequence[str] = (), secrets: Sequence[str] = ()) -> ProbeResult:
    """Return exit code, the first 4 KB of stdout and the seconds of one probe command, run
    without the environment variables named in `hidden`; the output scrubbed of `secrets`
    before it is cut, so that no part of one is kept."""
    started = time.monotonic()
    code, output, ended = run_command(command, timeout, stop, hidden)
    text = scrubbed_cut(output.decode("utf-8", "replace"), PROBE_OUTPUT_BYTES, secrets)
    record: ProbeResult = {"exit": code, "timed_out": ended == "timed out",
              "stdout": text.encode()[:PROBE_OUTPUT_BYTES].decode("utf-8", "ignore"),
              "seconds": round(time.monotonic() - started, 3)}
    if ended == "interrupted":
        record["interrupted"] = True
    return record


def router_cpus(capture: CaptureSettings) -> Optional[str]:
    """Return the router's effective CPU list, as the kernel writes it ('0-15'), or None."""
    try:
        if capture.router_cgroup:
            folder = Path(capture.router_cgroup)
            for name in ("cpuset.cpus.effective", "cpuset.effective_cpus", "cpuset.cpus"):
                if (folder / name).is_file():
                    return (folder / name).read_text().strip()
            return None
        if capture.router_pid or capture.router_session:
            status = Path(capture.proc_root, str(capture.router_pid or session_member(
                capture.router_session or 0, capture.proc_root)), "status")
            for line in status.read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


class CpuReading(NamedTuple):
    """The router's CPU time and its CPUs' busy time at one moment, as counters."""
    at_s: float  # time.monotonic()
    router_s: Optional[float]
    busy_s: Optional[float]
    notes: tuple[str, ...]


def read_cpu_use(capture: CaptureSettings, cpus: Optional[str]) -> CpuReading:
    """Return the router's CPU seconds and the busy seconds of its CPUs so far."""
    router_s = busy_s = None
    notes = []
    try:
        if capture.router_cgroup:
            router_s = cgroup_cpu_seconds(capture.router_cgroup)
        elif capture.router_pid:
            router_s = process_tree_cpu_seconds(capture.router_pid, capture.proc_root)
        elif capture.router_session:
            router_s = session_cpu_seconds(capture.router_session, capture.proc_root)
    except (OSError, ValueError) as exc:
        notes.append(f"router CPU time not read: {exc}")
    try:
        if cpus:
            busy_s, missing = cpu_busy_seconds(parse_cpu_list(cpus), capture.proc_root)
            if missing:
                notes.append(f"CPUs {format_cpu_list(missing)} not in /proc/stat")
    except (OSError, ValueError, IndexError) as exc:
        notes.append(f"/proc/stat not read: {exc}")
    return CpuReading(time.monotonic(), router_s, busy_s, tuple(notes))


def router_cpu_use(before: CpuReading, after: CpuReading, cpus: Optional[str],
                   requests: int) -> Optional[RouterCpu]:
    """Return the router's CPU time over a pass and the foreign vCPUs on its CPUs, or None
    when there was nothing to read."""
    if before.router_s is None and before.busy_s is None and not before.notes + after.notes:
        return None
    interval_s = after.at_s - before.at_s
    router_s = busy_s = foreign = None
    if before.router_s is not None and after.router_s is not None:
        router_s = after.router_s - before.router_s
    if before.busy_s is not None and after.busy_s is not None:
        busy_s = after.busy_s - before.busy_s
    if router_s is not None and busy_s is not None and interval_s > 0:
        # ticks of /proc/stat against the cgroup's microseconds: never below none
        foreign = max(busy_s - router_s, 0.0) / interval_s
    return RouterCpu(
        None if router_s is None else round(router_s, 6),
        None if router_s is None or not requests else round(1000 * router_s / requests, 4),
        cpus, None if busy_s is None else round(busy_s, 6), round(interval_s, 6),
        None if foreign is None else round(foreign, 3),
        tuple(dict.fromkeys(before.notes + after.notes)))


def scrape_metrics(endpoint: Endpoint, timeout: float,
                   stop: Optional[threading.Event] = None) -> dict:
    """Return {"samples": {...}} of one Prometheus scrape, or {"error": why}."""
    if stop is not None and stop.is_set():
        return {"error": "interrupted"}
    connection = Connection(endpoint, timeout, tls_context(endpoint), stop)
    try:
        status, body = connection.exchange(encode_request(endpoint, "GET", b"", ()))
    except RequestFailed as failure:
        return {"error": failure.kind}
    finally:
        connection.close()
    if status != 200:
        return {"error": f"HTTP {status}"}
    return {"samples": parse_prometheus(body.decode("utf-8", "replace"))}


def capture_snapshot(capture: CaptureSettings, stop: Optional[threading.Event] = None) -> dict:
    """Return the probes, GPU memory, metrics and router CPU set at one moment. Once `stop` is
    set, what is under way ends and what is left is not started: recorded as interrupted."""
    return {
        "probes": {name: run_probe(command, capture.probe_timeout, stop,
                                   capture.hidden_variables, capture.secrets)
                   for name, command in capture.probes},
        "gpu": select_gpus(gpu_reading(capture.gpu, capture.probe_timeout, stop,
                                       capture.hidden_variables),
                           capture.gpu_indexes) if capture.gpu else None,
        "metrics": scrape_metrics(capture.metrics, capture.probe_timeout, stop)
        if capture.metrics else None,
        "router_cpus": router_cpus(capture),
    }


def environment_record(capture: CaptureSettings, before: dict,
                       after: dict) -> CapturedEnvironment:
    """Return what a pass records of its environment from the snapshots around it."""
    record: CapturedEnvironment = {"router_cpus": after["router_cpus"] or before["router_cpus"]}
    if capture.probes:
        record["probes"] = {"before": before["probes"], "after": after["probes"]}
    if capture.gpu:
        record["gpu"] = {"tool": gpu_tool(capture.gpu).name, "before": before["gpu"].to_json(),
                         "after": after["gpu"].to_json()}
    if capture.metrics:
        errors = [s["error"] for s in (before["metrics"], after["metrics"]) if "error" in s]
        record["metrics"] = {"error": errors[0]} if errors else {
            "deltas": metric_deltas(before["metrics"]["samples"], after["metrics"]["samples"],
                                    (*capture.metric_patterns, CACHE_SERIES,
                                     RUNTIME_COUNTERS))}
        if not errors:
            record["metrics"]["histograms"] = histogram_deltas(
                before["metrics"]["samples"], after["metrics"]["samples"], capture.histograms)
            gauges = {series: value for series, value in after["metrics"]["samples"].items()
                      if RUNTIME_GAUGES.match(series.split("{", 1)[0])}
            if gauges:
                record["metrics"]["gauges"] = gauges
    return scrubbed_texts(record, capture.secrets)


def scrubbed_texts(value: Any, secrets: Sequence[str]) -> Any:
    """Return a record with every secret scrubbed from its texts, keys included: probe
    output, GPU tools' notes, metric series' labels."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrubbed(value, secrets)
    if isinstance(value, dict):
        return {scrubbed_texts(k, secrets): scrubbed_texts(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed_texts(v, secrets) for v in value]
    return value


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
