"""What a pass captured around it, as the run file holds it: the probes' answers, the load,
the metrics scraped, the router's CPU and a pass's surroundings; each record with its reader
beside it where it has one."""

from __future__ import annotations

from typing import Any, Optional, TypedDict

from .constants import NamedTuple
from .errors import checked_number, RouterLatencyError
from .gpu import GpuCapture, TelemetryJson

__all__ = [
    "CapturedEnvironment", "LoadRange", "PassEnvironment", "ProbeResult", "RouterCpu",
]


class LoadRange(TypedDict, total=False):
    """The 1-minute load average over an attempt (LoadSampler.stop): None where unread."""
    start: Optional[float]
    end: Optional[float]
    min: Optional[float]
    max: Optional[float]
    samples: int


class ProbeResult(TypedDict, total=False):
    """One probe command's run (run_probe)."""
    exit: Optional[int]
    timed_out: bool
    stdout: str  # its first PROBE_OUTPUT_BYTES
    seconds: float
    interrupted: bool  # only when true


class MetricsCapture(TypedDict, total=False):
    """The router's metrics over a pass: the increase of each kept series and histogram
    series, or why the scrape failed."""
    deltas: dict[str, float]
    histograms: dict[str, float]
    gauges: dict[str, float]  # the runtime's load gauges (RUNTIME_GAUGES), after the pass
    error: str


class CapturedEnvironment(TypedDict, total=False):
    """What a pass recorded of its surroundings (environment_record); each part only where
    it was captured."""
    router_cpus: Optional[str]
    probes: dict[str, dict[str, ProbeResult]]  # "before" and "after" -> probe name -> its run
    gpu: GpuCapture
    metrics: MetricsCapture
    telemetry: TelemetryJson  # sampled through the pass (telemetry.py)


class RouterCpu(NamedTuple):
    """The router's CPU time over a pass, and what other processes used of its CPUs."""
    router_s: Optional[float] = None  # user + system seconds of the router
    per_request_ms: Optional[float] = None  # router_s over the requests of the pass
    cpus: Optional[str] = None  # the CPU set read in /proc/stat ('0-11')
    busy_s: Optional[float] = None  # user + nice + system seconds of those CPUs
    interval_s: Optional[float] = None  # between the two readings around the pass
    foreign_vcpus: Optional[float] = None  # (busy_s - router_s) / interval_s
    notes: tuple[str, ...] = ()  # why a figure is missing

    def to_json(self) -> dict:
        return {**self._asdict(), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Optional["RouterCpu"]:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object or null", where)
        cpus, notes = raw.get("cpus"), raw.get("notes") or []
        if cpus is not None and not isinstance(cpus, str):
            raise RouterLatencyError("expected a CPU list or null", f"{where}.cpus")
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise RouterLatencyError("expected a list of strings", f"{where}.notes")
        numbers = {key: checked_number(raw.get(key), f"{where}.{key}", nullable=True)
                   for key in ("router_s", "per_request_ms", "busy_s", "interval_s",
                               "foreign_vcpus")}
        return cls(cpus=cpus, notes=tuple(notes), **numbers)


class PassEnvironment(NamedTuple):
    """What a pass recorded of its surroundings, as rounds reports it."""
    load_min: Optional[float] = None
    load_max: Optional[float] = None
    peak_load: Optional[float] = None  # over every attempt, discarded ones included
    discarded_attempts: int = 0
    driver_cpu_s: Optional[float] = None
    wall_s: Optional[float] = None
    router_cpus: Optional[str] = None
    gpu_mib: tuple[float, ...] = ()  # total used MiB over devices, before and after
    faults: Optional[float] = None  # sum of increases of restart/fault series; None: not read
    router_cpu_ms: Optional[float] = None  # the router's CPU time per request
    foreign_vcpus: Optional[float] = None  # other processes on the router's CPUs
    # GPU_FIELDS key -> every value read, over devices, before and after
    gpu_state: dict[str, tuple[float, ...]] = {}
    energy_j: Optional[float] = None  # the router's GPUs' joules per request (telemetry)
