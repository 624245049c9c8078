"""GPU reading in one place: a GPU tool's readings as the run file holds them (the figures per
device and their fields), each tool's output parsed and the tools --gpu offers (GPU_TOOLS), the
lines of the looping queries sampled through a pass, and a pass's figures per GPU. The tools
are run where their readings are taken: once before and after a pass by captures.py, looping
through a pass by telemetry.py's sampler."""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union, TypedDict

from .constants import MAX_FILE_NUMBER, NamedTuple
from .errors import (checked_number, checked_object, checked_text, file_number, is_whole,
                     RouterLatencyError)
from .words import fmt_reading, span_text
from .report import Section, Table

__all__ = ["check_telemetry", "clock_event_names", "energy_ranges_sentence", "EnergyJson",
           "GPU_FIELDS", "GPU_RANGED", "GpuCapture", "GpuReading", "gpu_readings",
           "gpu_state_section", "gpu_tool", "GPU_TOOLS", "known", "MAX_SAMPLES", "pass_figures",
           "resolve_gpu", "SAMPLED_FIELDS", "sampled_section", "sampled_tool", "sampler_commands",
           "select_gpus", "TELEMETRY_VERSION", "TelemetryJson"]


class GpuReadingJson(TypedDict, total=False):
    """A GpuReading as the run file holds it (GpuReading.to_json): figures, or an error."""
    used_mib: dict[str, float]
    devices: dict[str, dict[str, Union[float, str, None]]]
    error: str
    note: str


class GpuCapture(TypedDict, total=False):
    """The GPU tool of a pass and its readings before and after."""
    tool: str
    before: GpuReadingJson
    after: GpuReadingJson


class GpuField(NamedTuple):
    """One figure a GPU reading holds per device (a number or null): its key in the run file,
    and how the GPU tables title it."""
    key: str
    title: str  # the per-pass GPU table's column, before the unit
    unit: str
    column: str  # the rounds report's router CPU and GPU table's column
    summed: bool = False  # summed over devices (memory: gpu_mib), not ranged figure by figure


# what a GPU reading holds per device, whichever tool read it (GPU_TOOLS)
GPU_FIELDS = (GpuField("temp_c", "temp", "C", "gpu temp C"),
              GpuField("sclk_mhz", "sclk", "MHz", "sclk MHz"),
              GpuField("mclk_mhz", "mclk", "MHz", "mclk MHz"),
              GpuField("power_w", "power", "W", "gpu W"),
              GpuField("util_pct", "use", "%", "gpu use %"),
              GpuField("used_mib", "used", "MiB", "gpu MiB", summed=True))
GPU_RANGED = tuple(field for field in GPU_FIELDS if not field.summed)


class GpuReading(NamedTuple):
    """What a GPU tool read at one moment, before or after a pass: per device its GPU_FIELDS
    figures and the temperature sensor they came from, or why there are none."""
    used_mib: dict[str, float] = {}  # device -> memory used
    # device -> GPU_FIELDS key -> its figure or None, and temp_sensor: which sensor it read
    devices: dict[str, dict[str, Union[float, str, None]]] = {}
    error: Optional[str] = None  # no reading: why (the tool missing, timed out, unreadable)
    note: Optional[str] = None  # a reading, and what was odd: the tool's exit code, a device

    def figures(self, key: str) -> list:
        """Return a GPU_FIELDS figure's values over the devices, those read."""
        return [state[key] for state in self.devices.values() if state.get(key) is not None]

    @property
    def total_mib(self) -> Optional[float]:
        """The memory used over every device, None when no device told it."""
        return math.fsum(self.used_mib.values()) if self.used_mib else None

    def to_json(self) -> dict:
        if self.error is not None:
            return {"error": self.error}
        document: dict = {"used_mib": self.used_mib, "devices": self.devices}
        if self.note is not None:
            document["note"] = self.note
        return document

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Optional["GpuReading"]:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object or null", where)
        used = checked_object(raw, "used_mib", where)
        for device, value in used.items():
            checked_number(value, f"{where}.used_mib.{device}")
        devices = checked_object(raw, "devices", where)
        for device, state in devices.items():
            if not isinstance(state, dict):
                raise RouterLatencyError("expected an object", f"{where}.devices.{device}")
            for field in GPU_FIELDS:
                checked_number(state.get(field.key), f"{where}.devices.{device}.{field.key}",
                               nullable=True)
        return cls(used, devices, checked_text(raw, "error", where),
                   checked_text(raw, "note", where))


def gpu_readings(environment: Mapping[str, Any]) -> tuple[GpuReading, ...]:
    """Return a pass's GPU readings that were taken, before and after it."""
    gpu = environment.get("gpu") or {}
    readings = (GpuReading.from_json(gpu.get(moment), f"gpu.{moment}")
                for moment in ("before", "after"))
    return tuple(reading for reading in readings if reading is not None)


# what the sampler keeps per GPU and sample (telemetry.py): GPU_FIELDS keys, and the tool's
# clock-event (throttle) reasons as its bit mask
SAMPLED_FIELDS = ("sclk_mhz", "temp_c", "power_w", "util_pct", "reasons")
TELEMETRY_VERSION = 1  # of a pass's "telemetry" record; a reader refuses a later one
MAX_SAMPLES = 1200  # per series and pass: more are thinned to every k-th (kept_every)


class GpuPassFigures(TypedDict, total=False):
    """One GPU's figures over every sample of a pass (pass_figures)."""
    sclk_min_mhz: Optional[float]
    temp_max_c: Optional[float]
    power_mean_w: Optional[float]
    power_peak_w: Optional[float]
    util_mean_pct: Optional[float]
    reasons: list[str]  # the clock events seen, idle left out
    samples: int


class EnergyJson(TypedDict, total=False):
    """The router's GPUs' energy over a pass (telemetry.energy_of)."""
    joules: float
    per_request_j: float
    seconds: float  # the pass's wall time
    source: str  # "energy counter", "sampled power", or both
    devices: int


class TelemetryJson(TypedDict, total=False):
    """What the sampler recorded through a pass (telemetry.py), compactly: per GPU its series
    of SAMPLED_FIELDS (t_s from the pass's first send), the CPU and load series (counters from
    their first sample), the pass's figures per GPU over every sample, the energy."""
    version: int
    interval_ms: float
    origin_s: float  # the pass's first send, from the sampler's start (t_s counts from there)
    tool: Optional[str]
    router_gpus: list[str]
    kept_every: int
    gpus: dict[str, dict[str, list[Optional[float]]]]
    cpu: dict[str, list[Optional[float]]]
    summary: dict[str, GpuPassFigures]
    energy: Optional[EnergyJson]
    notes: list[str]


def _check_series(series: Any, where: str) -> int:
    """Raise unless series is {name: [number or null]} of one length; return the length."""
    if not isinstance(series, dict):
        raise RouterLatencyError("expected an object", where)
    lengths = set()
    for name, values in series.items():
        if not isinstance(values, list) or len(values) > MAX_SAMPLES:
            raise RouterLatencyError(f"expected a list of at most {MAX_SAMPLES} numbers",
                                     f"{where}.{name}")
        for j, value in enumerate(values):
            checked_number(value, f"{where}.{name}[{j}]", nullable=True)
        lengths.add(len(values))
    if len(lengths) > 1:
        raise RouterLatencyError("series of different lengths", where)
    return lengths.pop() if lengths else 0


def check_telemetry(raw: Any, where: str) -> None:
    """Raise unless a pass's telemetry record is one this version reads: its series numbers
    (or null) of one length per GPU, its summary's and energy's figures numbers."""
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise RouterLatencyError("expected an object or null", where)
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RouterLatencyError("expected a whole version number", f"{where}.version")
    if version > TELEMETRY_VERSION:
        raise RouterLatencyError(f"version {version} is newer than this tool reads "
                                 f"({TELEMETRY_VERSION})", f"{where}.version")
    for device, series in checked_object(raw, "gpus", where).items():
        _check_series(series, f"{where}.gpus.{device}")
    _check_series(raw.get("cpu") or {}, f"{where}.cpu")
    for device, figures in checked_object(raw, "summary", where).items():
        for key, value in (figures.items() if isinstance(figures, dict) else ()):
            if key != "reasons":
                checked_number(value, f"{where}.summary.{device}.{key}", nullable=True)
    energy = raw.get("energy")
    if energy is not None:
        if not isinstance(energy, dict):
            raise RouterLatencyError("expected an object or null", f"{where}.energy")
        for key in ("joules", "per_request_j", "seconds"):
            checked_number(energy.get(key), f"{where}.energy.{key}", nullable=True)


# ---- the tools' readings: each tool's output parsed, the tools --gpu offers ----

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
    return file_number(number)


def first_json(text: str, tool: str) -> Any:
    """Return the first JSON value in a tool's output: warnings may stand before it."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", text):
        try:
            return decoder.raw_decode(text, match.start())[0]
        except ValueError:
            continue
        except RecursionError:  # 5,000 levels deep: no reading, not a traceback
            raise ValueError(f"{tool} output nests deeper than Python's JSON reader goes") \
                from None
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
        raw_clock = gpu.get("clock")
        clock = raw_clock if isinstance(raw_clock, dict) else {}
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
    import csv
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


# ---- the sampler's series: the looping queries' lines read, a pass's figures per GPU ----

# nvidia-smi's looping query: the timestamp of each sample, the device, what a pass's figures
# need, the clock-event (throttle) reasons and the energy counter (mJ since the driver loaded,
# Volta and later); a driver that refuses the last two is asked NVIDIA_LOOP_PLAIN
NVIDIA_LOOP_FIELDS = ("timestamp", "index", "temperature.gpu", "clocks.sm", "power.draw",
                      "utilization.gpu", "clocks_event_reasons.active",
                      "total_energy_consumption")
NVIDIA_LOOP_PLAIN = NVIDIA_LOOP_FIELDS[:6]
SAMPLE_COLUMNS = {"timestamp": "t", "index": "index", "temperature.gpu": "temp_c",
                  "clocks.current.sm": "sclk_mhz", "clocks.sm": "sclk_mhz",
                  "power.draw": "power_w", "utilization.gpu": "util_pct",
                  "clocks_event_reasons.active": "reasons",
                  "clocks_throttle_reasons.active": "reasons",
                  "total_energy_consumption": "energy_mj"}
# the bits of clocks_event_reasons.active (nvidia-smi --help-query-gpu); idle is no event
CLOCK_EVENTS = ((0x2, "applications clocks"), (0x4, "power cap"), (0x8, "hardware slowdown"),
                (0x10, "sync boost"), (0x20, "software thermal slowdown"),
                (0x40, "hardware thermal slowdown"), (0x80, "power brake"),
                (0x100, "display clocks"))


def sampled_tool(choice: Optional[str]) -> Optional[str]:
    """Return the tool sampled through a pass for a --gpu choice: nvidia-smi, whose query
    loops (-lms), and amd-smi's monitor (-w, whole seconds); rocm-smi has no loop and is read
    before and after only (None)."""
    return {"nvidia": "nvidia-smi", "amd": "amd-smi"}.get(choice or "")


# amd-smi monitor's columns (-p power, -t temperatures, -u GFX use and clock), by header name
AMD_MONITOR_COLUMNS = {"GPU": "index", "POWER": "power_w", "GPU_TEMP": "temp_c",
                       "GFX_UTIL": "util_pct", "GFX_CLOCK": "sclk_mhz"}


class AmdMonitorSamples:
    """Reads `amd-smi monitor -p -t -u -w N`: a header of column names (printed again each
    round), then one row per GPU whose values are separated by two or more spaces
    ('  0  182 W     42 °C ...'). feed() returns a sample or None."""

    def __init__(self) -> None:
        self.columns: list = []

    def feed(self, line: str, arrived: float) -> Optional[tuple[float, str, dict]]:
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0] == "GPU":
            self.columns = [AMD_MONITOR_COLUMNS.get(name) for name in line.split()]
            return None
        if not self.columns or len(cells) != len(self.columns):
            return None
        fields = dict(zip(self.columns, cells))
        index = (fields.get("index") or "").strip()
        if not index.isdigit():
            return None
        figures: dict = {key: gpu_number(fields.get(key))
                         for key in ("sclk_mhz", "temp_c", "power_w", "util_pct")}
        return arrived, f"gpu{index}", {**figures, "energy_mj": None, "reasons": None}


def sampler_commands(tool: str, interval_s: float) -> list:
    """Return the (command, reader) to try in turn for a tool's looping query."""
    if tool == "amd-smi":
        return [(["amd-smi", "monitor", "-p", "-t", "-u", "-w",
                  str(max(round(interval_s), 1))], AmdMonitorSamples())]
    return [(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv", "-lms",
              str(max(int(interval_s * 1000), 1))], NvidiaSamples(fields))
            for fields in (NVIDIA_LOOP_FIELDS, NVIDIA_LOOP_PLAIN)]


def clock_event_names(mask: Optional[float]) -> tuple[str, ...]:
    """Return the clock-event reasons of a clocks_event_reasons.active mask, idle left out."""
    if mask is None:
        return ()
    return tuple(name for bit, name in CLOCK_EVENTS if int(mask) & bit)


def sample_time(text: Optional[str]) -> Optional[float]:
    """Return the Unix time of nvidia-smi's timestamp ('2026/12/04 16:53:11.399', local)."""
    if not text:
        return None
    text = text.strip()
    try:
        whole = time.mktime(time.strptime(text[:19], "%Y/%m/%d %H:%M:%S"))
        return whole + (float("0" + text[19:]) if text[19:] else 0.0)
    except (ValueError, OverflowError):
        return None


class NvidiaSamples:
    """Reads the lines of nvidia-smi's looping query: a header (--format=csv) names the
    columns; without one they are those asked, in order. feed() returns a sample or None."""

    def __init__(self, fields: Sequence[str] = NVIDIA_LOOP_FIELDS):
        self.columns = [SAMPLE_COLUMNS.get(field) for field in fields]

    def feed(self, line: str, arrived: float) -> Optional[tuple[float, str, dict]]:
        """Return (Unix time, device, figures) of one line, None for a header or message.
        The time is the tool's timestamp, or when the line arrived without one."""
        import csv
        row = next(csv.reader([line], skipinitialspace=True), [])
        names = [cell.split(" [")[0].strip() for cell in row]
        if row and any(name in SAMPLE_COLUMNS for name in names):
            self.columns = [SAMPLE_COLUMNS.get(name) for name in names]
            return None
        if not row or len(row) != len(self.columns):
            return None  # 'Failed to initialize NVML', a field refused
        fields = dict(zip(self.columns, row))
        index = (fields.get("index") or "").strip()
        if not index.isdigit():
            return None
        figures = {key: gpu_number(fields.get(key))
                   for key in ("sclk_mhz", "temp_c", "power_w", "util_pct", "energy_mj")}
        reasons = (fields.get("reasons") or "").strip()
        try:
            # a mask beyond 2^53 (a driver's new bits) would make a run `compare` refuses
            mask = file_number(int(reasons, 16)) \
                if reasons.startswith("0x") and len(reasons) <= 18 else None
            figures["reasons"] = None if mask is None else float(mask)
        except (ValueError, OverflowError):
            figures["reasons"] = None
        stamp = sample_time(fields.get("t"))
        return (arrived if stamp is None else stamp), f"gpu{index}", figures


def known(values: Sequence[Optional[float]]) -> list:
    return [v for v in values if v is not None]


def pass_figures(samples: Sequence[tuple]) -> GpuPassFigures:
    """Return one GPU's figures over a pass's samples: lowest SM clock, highest temperature,
    mean and peak power, mean use, the clock events seen."""
    import statistics

    def column(key: str) -> list:
        return known([figures.get(key) for _, figures in samples])

    power, use = column("power_w"), column("util_pct")
    events = {name for mask in column("reasons") for name in clock_event_names(mask)}
    return {"sclk_min_mhz": min(column("sclk_mhz"), default=None),
            "temp_max_c": max(column("temp_c"), default=None),
            "power_mean_w": round(statistics.fmean(power), 2) if power else None,
            "power_peak_w": max(power, default=None),
            "util_mean_pct": round(statistics.fmean(use), 1) if use else None,
            "reasons": sorted(events), "samples": len(samples)}


# ---- the I/O edge: PATH ----

def resolve_gpu(choice: str) -> Optional[str]:
    """Return the GPU tool to read: the one asked for, or the first found on PATH for auto."""
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    return next((tool.choice for tool in GPU_TOOLS if shutil.which(tool.name)), None)


def gpu_state_section(passes: Sequence[Tuple[str, Any]]) -> Section:
    """Return the ranges of each pass's GPU readings (before and after it, over devices), and
    why a reading is missing, as a run summary's section; passes: (title, PassRecord) pairs."""
    gpu = [(title, item, record) for title, item in passes
           for record in (item.attempt.environment.get("gpu"),) if isinstance(record, dict)]
    if not gpu:
        return Section(key="gpu_state", apart=False)
    rows: List[List[str]] = []
    notes: List[str] = []
    for title, item, record in gpu:
        state = item.environment.gpu_state
        rows.append([title]
                    + [span_text(min(state[f.key]), max(state[f.key]), fmt_reading)
                       if state.get(f.key) else "n/a" for f in GPU_RANGED]
                    + [span_text(min(item.environment.gpu_mib, default=None),
                                 max(item.environment.gpu_mib, default=None), fmt_reading)])
        for moment in ("before", "after"):
            reading = GpuReading.from_json(record.get(moment), moment) or GpuReading()
            notes += [f"gpu {moment} {title}: {text}"
                      for text in (reading.error, reading.note) if text]
    tool = gpu[0][2].get("tool") or "gpu"
    return Section(key="gpu_state", apart=False, blocks=(
        f"gpu ({tool}), before and after each pass:",
        Table("", ["pass", *(f"{f.title} {f.unit}" for f in GPU_RANGED),
                   *(f"{f.title} {f.unit}" for f in GPU_FIELDS if f.summed)], rows, [False]),
        *notes))


def sampled_section(passes: Sequence[Tuple[str, Any]]) -> Section:
    """Return what the router's GPUs did through each pass, sampled (telemetry.py): lowest
    SM clock, highest temperature, mean and peak power, mean use, clock events, joules per
    request (the energy finding); and the sampler's notes, as a run summary's section;
    passes: (title, PassRecord) pairs."""
    rows: List[List[str]] = []
    notes: List[str] = []
    tool = None
    for title, item in passes:
        record = item.attempt.environment.get("telemetry") or {}
        summary = record.get("summary") or {}
        mine = [summary[d] for d in record.get("router_gpus") or () if d in summary]
        tool = tool or record.get("tool")
        notes += [f"sampled {title}: {note}" for note in record.get("notes", [])]
        if not mine:
            continue

        def values(key: str) -> List[float]:
            return [float(v) for figures in mine for v in (figures.get(key),)
                    if isinstance(v, (int, float))]

        energy = (record.get("energy") or {}).get("per_request_j")
        rows.append([title, fmt_reading(min(values("sclk_min_mhz"), default=None)),
                     fmt_reading(max(values("temp_max_c"), default=None)),
                     fmt_reading(sum(values("power_mean_w")) if values("power_mean_w") else None),
                     fmt_reading(max(values("power_peak_w"), default=None)),
                     fmt_reading(max(values("util_mean_pct"), default=None)),
                     "n/a" if energy is None else f"{energy:.4g}",
                     ", ".join(sorted({r for f in mine for r in f.get("reasons", [])})) or "-"])
    if not rows:
        return Section(key="gpu_sampled", apart=False, blocks=tuple(notes))
    return Section(key="gpu_sampled", apart=False, blocks=(
        f"gpu ({tool}), sampled through each pass (the router's GPUs):",
        Table("", ["pass", "sclk min MHz", "temp max C", "power W", "peak W", "use %",
                   "J/request", "clock events"], rows, [False]),
        *notes))


def energy_ranges_sentence(shown: Sequence[Tuple[str, Tuple[float, float]]]) -> List[str]:
    """Return each side's range over rounds of the router's GPUs' joules per routed request
    ((side, (low, high)) pairs) and, beside the cost per million requests, the energy of a
    million requests: the record's sentence of the energy finding; [] where no pass sampled
    it."""
    if not shown:
        return []
    # J per request -> kWh per million requests: x 1e6 / 3.6e6
    return ["energy of the router's GPUs per routed request: "
            + ", ".join(f"{side} {span_text(low, high)} J" for side, (low, high) in shown)
            + " (a million requests: " + ", ".join(
                f"{side} {span_text(low / 3.6, high / 3.6)} kWh" for side, (low, high) in shown)
            + ")"]
