"""Environment captures: load, probes, GPU tools, Prometheus, the router's CPU set and CPU
time, host settings."""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Optional, Sequence

from .constants import __version__, CACHE_SERIES, DEFAULT_HISTOGRAMS, MAX_FILE_NUMBER, STOP_POLL_S
from .errors import is_whole, RouterLatencyError
from .words import scrubbed, scrubbed_cut
from .gpu import GPU_FIELDS, GpuField, GpuReading
from .runfile import (CapturedEnvironment, CpuSettings, HostSettings, LoadRange, ProbeResult,
                      RouterCpu)
from .client import Connection, encode_request, Endpoint, RequestFailed, tls_context

__all__ = [
    "capture_snapshot", "CaptureSettings", "cgroup_cpu_seconds", "container_cgroup",
    "cpu_affinity", "cpu_busy_seconds", "DEFAULT_METRIC_PATTERN", "driver_cpu_seconds",
    "environment_record", "format_cpu_list", "gpu_number", "gpu_tool", "GPU_TOOLS", "Histogram",
    "histograms_of", "host_settings", "host_warnings", "LoadSampler", "parse_cpu_list", "Probe",
    "process_table", "read_cpu_use", "read_load", "resolve_gpu", "router_cpu_use",
    "router_cpus", "utc_now",
]


PROMETHEUS_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def parse_prometheus(text: str) -> dict[str, float]:
    """Return {series: value} of a Prometheus text exposition (format 0.0.4).

    The series is the metric name with its labels as they stand, sorted by label name, so the
    same series scraped twice has the same key. Comments and malformed lines are skipped.
    """
    samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PROMETHEUS_NAME.match(line)
        if not match:
            continue
        name, rest = match.group(), line[match.end():]
        labels = ""
        if rest.startswith("{"):
            end = _label_block_end(rest)
            if end < 0:
                continue
            pairs = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"',
                               rest[1:end])
            labels = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs)) + "}"
            rest = rest[end + 1:]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        samples[name + labels] = value
    return samples


def _label_block_end(text: str) -> int:
    """Return the index of the brace closing a label block, skipping quoted values; -1 if none."""
    quoted = escaped = False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "}" and not quoted:
            return i
    return -1


def metric_deltas(before: dict[str, float], after: dict[str, float],
                  patterns: Sequence[re.Pattern[str]]) -> dict[str, float]:
    """Return after - before of the series whose name matches a pattern (a new series from 0)."""
    deltas = {}
    for series, value in sorted(after.items()):
        name = series.split("{", 1)[0]
        if any(p.search(name) for p in patterns) and math.isfinite(value):
            previous = before.get(series, 0.0)
            if math.isfinite(previous):
                deltas[series] = value - previous
    return deltas


def histogram_deltas(before: dict[str, float], after: dict[str, float],
                     names: Sequence[str]) -> dict[str, float]:
    """Return after - before of every bucket, sum and count series of the named histograms,
    as the router's bench/cpu-vs-gpu scripts take them (a series new since before from 0; a
    counter that went down, a restart, is left out rather than read as negative)."""
    parts = {f"{name}{end}" for name in names for end in ("_bucket", "_sum", "_count")}
    deltas = {}
    for series, value in sorted(after.items()):
        if series.split("{", 1)[0] in parts and math.isfinite(value):
            delta = value - before.get(series, 0.0)
            if math.isfinite(delta) and delta >= 0:
                deltas[series] = delta
    return deltas


class Histogram(NamedTuple):
    """One histogram series over a pass: the differences of its count, sum and buckets."""
    name: str
    labels: tuple[tuple[str, str], ...]  # (label, value) pairs but le, sorted
    observations: float  # the _count series (a field named count would hide tuple.count)
    sum: float  # in the histogram's unit (seconds for the router's)
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), by bound, +Inf last

    @property
    def mean(self) -> Optional[float]:
        return self.sum / self.observations if self.observations > 0 else None

    def quantile(self, q: float, *, resolved: bool = False) -> Optional[float]:
        """Return the q-quantile (0..1) interpolated linearly within its bucket, as
        Prometheus's histogram_quantile does: an estimate whose error is the bucket's
        width; in the +Inf bucket, the highest finite bound. resolved: None instead where
        the bucket says nothing of the value (the lowest one, from 0, or +Inf): 2.5 ms read
        in the router's 0 to 5 ms bucket would be a figure of the buckets, not of the time."""
        total = self.buckets[-1][1] if self.buckets else 0.0
        if total <= 0:
            return None
        rank, lower, below = q * total, 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if resolved and (lower <= 0 or math.isinf(bound)):
                    return None
                if math.isinf(bound):
                    return lower
                if cumulative == below:
                    return bound
                return lower + (bound - lower) * (rank - below) / (cumulative - below)
            lower, below = bound, cumulative
        return lower


def histograms_of(deltas: dict[str, float]) -> list[Histogram]:
    """Return the Histograms of a pass's histogram differences, by name and labels."""
    found: dict = {}
    for series, value in deltas.items():
        name, _, rest = series.partition("{")
        pairs = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', rest)
        le = next((v for k, v in pairs if k == "le"), None)
        base, _, part = name.rpartition("_")
        entry = found.setdefault((base, tuple((k, v) for k, v in pairs if k != "le")),
                                 {"count": 0.0, "sum": 0.0, "buckets": []})
        if part == "bucket" and le is not None:
            try:
                entry["buckets"].append((float(le), value))
            except ValueError:
                continue
        elif part in ("sum", "count"):
            entry[part] = value
    return [Histogram(name, labels, entry["count"], entry["sum"], tuple(sorted(entry["buckets"])))
            for (name, labels), entry in sorted(found.items())]


def gpu_number(value: Any) -> Optional[float]:
    """Return the number a GPU tool wrote ('49.0', '(800Mhz)', '1980 MHz', 36), or None for
    what it could not read ('N/A', '[N/A]', '[Not Supported]', 'N/A (Secondary die)')."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = float(value) if abs(value) <= MAX_FILE_NUMBER else math.inf
    else:
        text = str(value).strip()
        if text.startswith(("N/A", "[")):
            return None
        match = re.search(r"-?\d+(?:\.\d+)?", text[:64])
        if not match:
            return None
        number = float(match.group())  # 400 digits make inf
    # a figure the run file's reader refuses (inf, 1e20, -1) would lose the run: no figure
    return number if 0 <= number <= MAX_FILE_NUMBER else None


def first_json(text: str, tool: str) -> Any:
    """Return the first JSON value in a tool's output: warnings may stand before it."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", text):
        try:
            return decoder.raw_decode(text, match.start())[0]
        except ValueError:
            continue
    raise ValueError(f"no JSON in {tool} output")


def gpu_reading_of(devices: dict, tool: str) -> GpuReading:
    """Return the GPU reading of these devices' figures (device -> GPU_FIELDS key -> figure)."""
    if not any(v is not None for state in devices.values() for v in state.values()):
        raise ValueError(f"no GPU figures in {tool} output")
    return GpuReading({d: s["used_mib"] for d, s in devices.items()
                       if s.get("used_mib") is not None}, devices)


def parse_rocm_smi(text: str) -> GpuReading:
    """Return the GPU reading of `rocm-smi --showtemp --showclocks --showpower --showuse
    --showmeminfo vram --json`: one object per cardN, every value a string.

    Temperature: the junction sensor where there is one (MI300 has no edge sensor), else
    edge, else memory; the one taken is named. Power: the average, or the current socket
    power that MI300 and APUs report instead; never 'Max Graphics Package Power', the cap.
    """
    document = first_json(text, "rocm-smi")
    if not isinstance(document, dict):
        raise ValueError("rocm-smi output is not a JSON object")
    cards = sorted((k for k in document if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:]))
    devices = {}
    for card in cards:
        raw = document[card] if isinstance(document[card], dict) else {}
        fields = {str(k).lower(): v for k, v in raw.items()}  # 2019 builds wrote '(c)'
        temp = sensor = None
        for name in ("junction", "edge", "memory", "mem"):  # 2019 builds: 'Sensor mem'
            temp = gpu_number(fields.get(f"temperature (sensor {name}) (c)"))
            if temp is not None:
                sensor = "memory" if name == "mem" else name
                break
        power = gpu_number(fields.get("average graphics package power (w)"))
        if power is None:
            power = gpu_number(fields.get("current socket graphics package power (w)"))
        used = gpu_number(fields.get("vram total used memory (b)"))
        devices[card] = {"temp_c": temp, "temp_sensor": sensor,
                         "sclk_mhz": gpu_number(fields.get("sclk clock speed:")),
                         "mclk_mhz": gpu_number(fields.get("mclk clock speed:")),
                         "power_w": power, "util_pct": gpu_number(fields.get("gpu use (%)")),
                         "used_mib": None if used is None else round(used / 2 ** 20, 1)}
    return gpu_reading_of(devices, "rocm-smi")


def _amd_value(section: Any, *keys: str) -> Optional[float]:
    """Return the first readable value of an amd-smi section: {"value": N, "unit": U} from
    ROCm 6.1, a bare number in 6.0, the string 'N/A' where unsupported."""
    for key in keys:
        value = section.get(key) if isinstance(section, dict) else None
        number = gpu_number(value.get("value") if isinstance(value, dict) else value)
        if number is not None:
            return number
    return None


def parse_amd_smi(text: str) -> GpuReading:
    """Return the GPU reading of `amd-smi metric --json`: a list of GPUs (ROCm 6.0-6.2), or
    an object with that list under "gpu_data" (ROCm 7).

    The shader clock is the fastest of gfx_0..gfx_7 (MI300X reports one per XCD); the memory
    used is "MB" by name and MiB in fact. Temperature: hotspot (the junction), else edge,
    else memory.
    """
    document = first_json(text, "amd-smi")
    gpus = document.get("gpu_data", []) if isinstance(document, dict) else document
    if not isinstance(gpus, list):
        raise ValueError("amd-smi output holds no list of GPUs")
    devices = {}
    for position, gpu in enumerate(g for g in gpus if isinstance(g, dict)):
        index = gpu.get("gpu") if is_whole(gpu.get("gpu")) else position
        clock = raw_clock if isinstance(raw_clock := gpu.get("clock"), dict) else {}
        per_xcd = [_amd_value(v, "clk") for k, v in clock.items() if re.fullmatch(r"gfx_\d+", k)]
        shader = [v for v in per_xcd if v is not None] or \
            [v for v in [_amd_value(clock.get("gfx"), "clk", "cur_clk")] if v is not None]
        temp = sensor = None
        for name in ("hotspot", "edge", "mem"):
            temp = _amd_value(gpu.get("temperature"), name)
            if temp is not None:
                sensor = "memory" if name == "mem" else name
                break
        devices[f"gpu{index}"] = {
            "temp_c": temp, "temp_sensor": sensor, "sclk_mhz": max(shader, default=None),
            "mclk_mhz": _amd_value(clock.get("mem_0"), "clk")
            if "mem_0" in clock else _amd_value(clock.get("mem"), "clk", "cur_clk"),
            "power_w": _amd_value(gpu.get("power"), "socket_power", "current_power"),
            "util_pct": _amd_value(gpu.get("usage"), "gfx_activity", "gfx_usage"),
            "used_mib": _amd_value(gpu.get("mem_usage"), "used_vram")}
    return gpu_reading_of(devices, "amd-smi")


# --query-gpu fields in this order; a header (--format=csv) names them canonically
NVIDIA_QUERY = ("index", "temperature.gpu", "clocks.sm", "clocks.mem", "power.draw",
                "utilization.gpu", "memory.used")
NVIDIA_COLUMNS = {"index": "index", "temperature.gpu": "temp_c", "clocks.current.sm": "sclk_mhz",
                  "clocks.sm": "sclk_mhz", "clocks.current.memory": "mclk_mhz",
                  "clocks.mem": "mclk_mhz", "power.draw": "power_w",
                  "utilization.gpu": "util_pct", "memory.used": "used_mib"}


def parse_nvidia_smi(text: str) -> GpuReading:
    """Return the GPU reading of `nvidia-smi --query-gpu=index,temperature.gpu,clocks.sm,
    clocks.mem,power.draw,utilization.gpu,memory.used --format=csv`.

    Columns are found by the header's canonical names ('clocks.current.sm [MHz]'), or by the
    query's order without a header; units ('1980 MHz') are dropped, and '[N/A]',
    '[Not Supported]' and 'N/A' are no figure. Without an index column, rows count from 0.
    """
    rows = [r for r in csv.reader(text.splitlines(), skipinitialspace=True) if r]
    names = None
    if rows and any(cell.split(" [")[0].strip() in NVIDIA_COLUMNS for cell in rows[0]):
        names = [NVIDIA_COLUMNS.get(cell.split(" [")[0].strip()) for cell in rows.pop(0)]
    devices = {}
    for position, row in enumerate(rows):
        if len(row) != len(names or NVIDIA_QUERY):
            continue  # a message such as 'Failed to initialize NVML'
        fields = dict(zip(names or [NVIDIA_COLUMNS[q] for q in NVIDIA_QUERY], row))
        index = fields.pop("index", str(position)).strip()
        fields.pop(None, None)
        if not index.isdigit():
            continue
        devices[f"gpu{index}"] = {**{f.key: gpu_number(fields.get(f.key)) for f in GPU_FIELDS},
                                  "temp_sensor": "gpu"}
    if not devices:
        raise ValueError("unexpected nvidia-smi output")
    return gpu_reading_of(devices, "nvidia-smi")


class GpuTool(NamedTuple):
    """A GPU tool that --gpu reads: its choice, its command line, the parser of its output,
    and the fields its readings hold."""
    choice: str  # --gpu's value
    command: tuple[str, ...]  # its first word is the program looked for on PATH
    parse: Callable[[str], GpuReading]  # its output -> its reading; ValueError if unreadable
    fields: tuple[GpuField, ...] = GPU_FIELDS

    @property
    def name(self) -> str:
        return self.command[0]


# the tools --gpu offers, in the order auto looks for them on PATH
GPU_TOOLS = (
    GpuTool("rocm", ("rocm-smi", "--showtemp", "--showclocks", "--showpower", "--showuse",
                     "--showmeminfo", "vram", "--json"), parse_rocm_smi),
    GpuTool("amd", ("amd-smi", "metric", "--json"), parse_amd_smi),
    GpuTool("nvidia", ("nvidia-smi", "--query-gpu=" + ",".join(NVIDIA_QUERY), "--format=csv"),
            parse_nvidia_smi),
)


def gpu_tool(choice: str) -> GpuTool:
    """Return the GPU tool of a --gpu choice (a key of GPU_TOOLS)."""
    return next(tool for tool in GPU_TOOLS if tool.choice == choice)
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


def resolve_gpu(choice: str) -> Optional[str]:
    """Return the GPU tool to read: the one asked for, or the first found on PATH for auto."""
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    return next((tool.choice for tool in GPU_TOOLS if shutil.which(tool.name)), None)


def run_command(command: Any, timeout: float, stop: Optional[threading.Event],
                hidden: Sequence[str] = ()) -> tuple[Optional[int], bytes, str]:
    """Return (exit code or None, stdout bytes, how it ended: "", "timed out" or "interrupted")
    of a command (a shell line when a str) run in its own session, so that a timeout or the
    stop flag, looked at every STOP_POLL_S, ends the whole pipeline, not just the shell. The
    environment variables named in `hidden` (the token's) are not passed to it."""
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


def select_gpus(reading: GpuReading, indexes: Sequence[int]) -> GpuReading:
    """Return a GPU reading cut to the devices of the tool's own indexes (all when none)."""
    if not indexes or reading.error is not None:
        return reading
    wanted = {d for d in reading.devices if int(re.sub(r"\D", "", d) or -1) in indexes}
    chosen = reading._replace(
        used_mib={d: v for d, v in reading.used_mib.items() if d in wanted},
        devices={d: v for d, v in reading.devices.items() if d in wanted})
    missing = sorted(set(indexes) - {int(re.sub(r"\D", "", d)) for d in wanted})
    if missing:
        return chosen._replace(note=f"no GPU {', '.join(map(str, missing))} in the tool's output")
    return chosen


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


def parse_cpu_list(text: str) -> frozenset:
    """Return the CPUs of a list as the kernel writes it ('0-5,8,10-11'); raise ValueError."""
    cpus: set = set()
    for part in text.strip().split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
            raise ValueError(f"not a CPU list: {text!r}")
        cpus.update(range(int(match.group(1)), int(match.group(2) or match.group(1)) + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """Return CPUs as the kernel writes a list: '0-5,8'."""
    ranges: list = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def cgroup_cpu_seconds(folder: str) -> float:
    """Return the CPU seconds (user + system) of every task of a cgroup v2, ever: cpu.stat's
    usage_usec. Raise OSError or ValueError."""
    for line in Path(folder, "cpu.stat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == "usage_usec":
            return int(value) / 1e6
    raise ValueError("no usage_usec in cpu.stat (a cgroup v2 folder is needed)")


def process_tree_cpu_seconds(pid: int, proc_root: str = "/proc") -> float:
    """Return the CPU seconds (user + system) of a process, all its threads, its living
    descendants and the children they waited for. Raise OSError when the process is gone.

    Each process counts utime + stime + cutime + cstime: a child that ends and is reaped
    moves its time into its parent's cutime, so the sum never goes back.
    """
    table = process_table(proc_root)
    if pid not in table:
        raise OSError(f"no process {pid}")
    children: dict = {}
    for child, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(child)
    ticks, pending = 0, [pid]
    while pending:
        current = pending.pop()
        ticks += table[current][2]
        pending.extend(children.get(current, ()))
    return ticks / os.sysconf("SC_CLK_TCK")


def process_table(proc_root: str = "/proc") -> dict[int, tuple[int, int, int]]:
    """Return pid -> (parent, session, CPU ticks: utime + stime + cutime + cstime) of every
    process in /proc."""
    table = {}
    for entry in os.scandir(proc_root):
        if entry.name.isdigit():
            try:
                text = Path(entry.path, "stat").read_text()
            except OSError:
                continue  # ended while the table was read
            fields = text[text.rindex(")") + 2:].split()  # the name may hold ') '
            table[int(entry.name)] = (int(fields[1]), int(fields[3]),
                                      sum(int(f) for f in fields[11:15]))
    return table


def session_member(session: int, proc_root: str = "/proc") -> int:
    """Return a process of a session, its leader when alive; raise OSError when it is empty."""
    members = sorted(pid for pid, (_, sid, _) in process_table(proc_root).items()
                     if sid == session)
    if not members:
        raise OSError(f"no process in session {session}")
    return session if session in members else members[0]


def session_cpu_seconds(session: int, proc_root: str = "/proc") -> float:
    """Return the CPU seconds of every process of a session (run_rounds.sh starts each router
    in one: setsid), with the children they waited for. Raise OSError when it is empty."""
    members = [ticks for _, sid, ticks in process_table(proc_root).values() if sid == session]
    if not members:
        raise OSError(f"no process in session {session}")
    return sum(members) / os.sysconf("SC_CLK_TCK")


def cpu_busy_seconds(cpus: frozenset[int],
                     proc_root: str = "/proc") -> tuple[float, frozenset[int]]:
    """Return (seconds, CPUs not listed) the CPUs spent on processes, ever, from /proc/stat:
    user + nice + system. Idle, iowait, interrupts and steal are not a process's time, and
    guest time is already inside user."""
    busy, seen = 0, set()
    for line in Path(proc_root, "stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            busy += sum(int(f) for f in fields[:3])
            seen.add(int(name[3:]))
    return busy / os.sysconf("SC_CLK_TCK"), cpus - seen


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


def container_cgroup(name: str, *, proc_root: str = "/proc",
                     cgroup_root: str = "/sys/fs/cgroup", timeout: float = 10.0) -> str:
    """Return the cgroup v2 folder of a running Docker container, found with `docker
    inspect`: its main process's cgroup, else where Docker's two cgroup drivers put it."""
    if not shutil.which("docker"):
        raise RouterLatencyError("docker is not on PATH; --router-cgroup PATH or --router-pid "
                                 "PID read the router without it", "--router-container")
    try:
        done = subprocess.run(["docker", "inspect", "--format",
                               "{{.Id}} {{.State.Pid}} {{.State.Running}}", name],
                              capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RouterLatencyError(f"docker inspect failed: {exc.__class__.__name__}",
                                 "--router-container") from None
    words = done.stdout.decode("utf-8", "replace").split()
    if done.returncode != 0 or len(words) != 3:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RouterLatencyError(f"docker inspect {name} failed"
                                 + (f": {said[0]}" if said else ""), "--router-container")
    container_id, pid, running = words
    if running != "true" or pid == "0":
        raise RouterLatencyError(f"container {name} is not running", "--router-container")
    candidates = []
    try:
        for line in Path(proc_root, pid, "cgroup").read_text().splitlines():
            if line.startswith("0::") and line[3:].strip() not in ("", "/"):
                candidates.append(Path(cgroup_root, line[3:].strip().lstrip("/")))
    except OSError:
        pass
    candidates += [Path(cgroup_root, "system.slice", f"docker-{container_id}.scope"),
                   Path(cgroup_root, "docker", container_id)]
    for folder in candidates:
        if (folder / "cpu.stat").is_file():
            return str(folder)
    raise RouterLatencyError(f"no cgroup v2 folder with cpu.stat for container {name} (looked "
                             f"in {', '.join(map(str, candidates))})", "--router-container")


def cpu_model(proc_root: str = "/proc") -> Optional[str]:
    """Return the CPU's model name from /proc/cpuinfo, or None."""
    try:
        for line in Path(proc_root, "cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def cpufreq_settings(cpus: Iterable[int], sys_root: str = "/sys") -> CpuSettings:
    """Return the CPU list and, per value, the CPUs of each cpufreq governor and boost state;
    empty maps where the kernel has no cpufreq (a VM, a container without /sys)."""
    top = Path(sys_root, "devices", "system", "cpu")

    def read(path: Path) -> Optional[str]:
        try:
            return path.read_text().strip() or None
        except OSError:
            return None

    governors: dict = {}
    boosts: dict = {}
    no_turbo = read(top / "intel_pstate" / "no_turbo")
    shared = read(top / "cpufreq" / "boost") or (
        None if no_turbo is None else "0" if no_turbo == "1" else "1")
    for cpu in sorted(cpus):
        governor = read(top / f"cpu{cpu}" / "cpufreq" / "scaling_governor")
        if governor:
            governors.setdefault(governor, []).append(cpu)
        boost = read(top / f"cpu{cpu}" / "cpufreq" / "boost") or shared
        if boost in ("0", "1"):
            boosts.setdefault("on" if boost == "1" else "off", []).append(cpu)
    return CpuSettings(format_cpu_list(cpus),
                       {g: format_cpu_list(c) for g, c in governors.items()},
                       {b: format_cpu_list(c) for b, c in boosts.items()})


def host_settings(driver_cpus: Optional[Sequence[int]], router_cpus_text: Optional[str], *,
                  proc_root: str = "/proc", sys_root: str = "/sys") -> HostSettings:
    """Return the host's settings that move latency, read once per run."""
    try:
        router = parse_cpu_list(router_cpus_text) if router_cpus_text else None
    except ValueError:
        router = None
    return HostSettings(cpu_model(proc_root), platform.release(), platform.python_version(),
                        __version__,
                        cpufreq_settings(driver_cpus, sys_root) if driver_cpus else None,
                        cpufreq_settings(router, sys_root) if router else None)


def host_warnings(settings: HostSettings) -> list[str]:
    """Return a warning for each side whose CPUs run a cpufreq governor other than
    performance (the clock then follows the load, and latency with it), and when the driver
    may run on the router's CPUs."""
    warnings = []
    driver, router = settings.driver, settings.router
    if driver and router and driver.cpus and router.cpus:
        shared = parse_cpu_list(driver.cpus) & parse_cpu_list(router.cpus)
        if shared:
            warnings.append(f"the driver may run on the router's CPUs {format_cpu_list(shared)}: "
                            f"it competes with the router, and its CPU time counts as foreign "
                            f"(taskset -c pins the driver elsewhere)")
    for role, side in (("driver", driver), ("router", router)):
        slow = {g: cpus for g, cpus in (side.governors if side else {}).items()
                if g != "performance"}
        if slow:
            shown = ", ".join(f"{g} on CPUs {cpus}" for g, cpus in slow.items())
            warnings.append(f"the {role}'s CPUs run the cpufreq governor {shown}, not "
                            f"performance; pin the clocks before measuring (cpupower "
                            f"frequency-set -g performance)")
    return warnings


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
                                    (*capture.metric_patterns, CACHE_SERIES))}
        if not errors:
            record["metrics"]["histograms"] = histogram_deltas(
                before["metrics"]["samples"], after["metrics"]["samples"], capture.histograms)
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


def read_load(loadavg_file: Optional[str] = None) -> Optional[float]:
    """Return the 1-minute load average, or None where the system does not tell."""
    if loadavg_file:
        try:  # its first line only: /dev/zero or a huge file must not fill the memory
            with open(loadavg_file, "rb") as stream:
                load = float(stream.read(4096).split()[0])
        except (OSError, ValueError, IndexError):
            return None
        # inf, nan, -5 or 1e308 would make a run file its own reader refuses: not a load
        return load if 0 <= load <= MAX_FILE_NUMBER else None
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


class LoadSampler:
    """Reads the 1-minute load average at the start, once a second, and at the end."""

    def __init__(self, loadavg_file: Optional[str], interval: float = 1.0):
        self.loadavg_file = loadavg_file
        self.interval = interval
        self.samples: list = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.done.wait(self.interval):
            self.samples.append(read_load(self.loadavg_file))

    def start(self) -> "LoadSampler":
        self.samples.append(read_load(self.loadavg_file))
        self.thread.start()
        return self

    def stop(self) -> LoadRange:
        self.done.set()
        self.thread.join()
        start = self.samples[0]
        self.samples.append(read_load(self.loadavg_file))
        known = [x for x in self.samples if x is not None]
        return {"start": start, "end": self.samples[-1], "min": min(known, default=None),
                "max": max(known, default=None), "samples": len(self.samples)}


def driver_cpu_seconds() -> float:
    """Return the user and system CPU seconds of this process, all its threads."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def cpu_affinity() -> Optional[list[int]]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
