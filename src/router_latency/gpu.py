"""A GPU tool's readings as the run file holds them: the figures per device and their fields."""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Optional, Union, TypedDict

from .errors import checked_number, checked_object, checked_text, RouterLatencyError

__all__ = ["check_telemetry", "EnergyJson", "GPU_FIELDS", "GpuPassFigures", "GPU_RANGED",
           "GpuCapture", "GpuField", "GpuReading", "gpu_readings", "MAX_SAMPLES",
           "SAMPLED_FIELDS", "TELEMETRY_VERSION", "TelemetryJson"]


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
    """One GPU's figures over every sample of a pass (telemetry.pass_figures)."""
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
