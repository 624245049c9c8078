"""Telemetry sampled through a pass: the GPU tool's looping query (one process per pass; its
lines and a pass's figures per GPU are read by gpu.py), the router's CPU time, its CPUs' busy
time and the load; per window what they show, the energy per routed request, and what
coincided with a slow phase."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence, TYPE_CHECKING

from .constants import NamedTuple
from .words import plural
from .gpu import (clock_event_names, EnergyJson, known, MAX_SAMPLES, pass_figures,
                  SAMPLED_FIELDS, sampled_tool, sampler_commands, TELEMETRY_VERSION,
                  TelemetryJson)
from .runfile import Attempt
from .phases import PhaseWindow
from .host import cgroup_cpu_seconds, cpu_busy_seconds, parse_cpu_list, process_table, read_load
from .captures import CaptureSettings

if TYPE_CHECKING:
    import subprocess

__all__ = ["coincided_text", "PassSampler", "sampling"]

STOP_WAIT_S = 2.0  # how long the sampler process may take to end after SIGTERM
FIRST_SAMPLE_S = 5.0  # how long a pass waits for the GPU tool's first sample before it starts


class PassSampler:
    """Samples a pass: the GPU tool's looping query in one process of its own session, and
    the router's CPU time, its CPUs' busy time and the load from a thread, every interval.
    start() before the pass, origin() at its first send, stop() after it."""

    def __init__(self, capture: CaptureSettings, cpus: Optional[str], interval_ms: float,
                 loadavg_file: Optional[str] = None):
        self.capture, self.cpus, self.interval = capture, cpus, interval_ms / 1000
        self.loadavg_file = loadavg_file
        self.tool = sampled_tool(capture.gpu)
        self.done = threading.Event()
        self.ready = threading.Event()  # the GPU tool's first sample came, or it gave up
        self.samples: list = []  # (Unix time, device, figures)
        self.cpu: list = []  # (Unix time, router_s, busy_s, load)
        self.notes: list = []
        self.process: Optional[subprocess.Popen] = None
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._sample_cpu, daemon=True)]
        if self.tool:
            self.threads.append(threading.Thread(target=self._sample_gpu, daemon=True))
        self.started = self.first_send = time.time()

    def start(self) -> "PassSampler":
        """Start sampling; return once the GPU tool gave its first sample (a short pass is
        sampled too), it gave up, or FIRST_SAMPLE_S passed."""
        self.started = self.first_send = time.time()
        for thread in self.threads:
            thread.start()
        if self.tool:
            self.ready.wait(FIRST_SAMPLE_S)
        return self

    def origin(self) -> None:
        """Mark the pass's first send: the windows' times count from here."""
        self.first_send = time.time()

    def _sample_cpu(self) -> None:
        router = RouterTicks(self.capture)
        try:
            cpus = parse_cpu_list(self.cpus) if self.cpus else None
        except ValueError:
            cpus = None
        while True:
            busy = None
            try:
                busy = cpu_busy_seconds(cpus, self.capture.proc_root)[0] if cpus else None
            except (OSError, ValueError, IndexError):
                pass
            self.cpu.append((time.time(), router.seconds(), busy, read_load(self.loadavg_file)))
            if self.done.wait(self.interval):
                return

    def _sample_gpu(self) -> None:
        try:
            self._run_gpu_tool()
        finally:
            self.ready.set()

    def _run_gpu_tool(self) -> None:
        import subprocess
        env = {k: v for k, v in os.environ.items() if k not in self.capture.hidden_variables}
        name = self.tool or ""
        for command, reader in sampler_commands(name, self.interval):
            with self.lock:
                if self.done.is_set():
                    return
                try:
                    self.process = subprocess.Popen(
                        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, start_new_session=True, env=env)
                except OSError as exc:
                    self.notes.append(f"{name} not started: {exc.__class__.__name__}")
                    return
            process, before = self.process, len(self.samples)
            for raw in iter(process.stdout.readline if process.stdout else bytes, b""):
                sample = reader.feed(raw.decode("utf-8", "replace"), time.time())
                if sample is not None:
                    self.samples.append(sample)
                    self.ready.set()
            code = process.wait()
            if len(self.samples) > before or self.done.is_set():
                if not self.done.is_set():
                    self.notes.append(f"{name} ended during the pass (exit {code})")
                return
        self.notes.append(f"{name}'s looping query gave no samples")

    def stop(self, requests: int, wall_s: float) -> TelemetryJson:
        """End the sampling; return the pass's telemetry record."""
        import subprocess
        with self.lock:
            self.done.set()
            process = self.process
        if process is not None and process.poll() is None:
            for signum in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(process.pid, signum)
                    process.wait(STOP_WAIT_S)
                    break
                except (OSError, subprocess.TimeoutExpired):
                    continue
        for thread in self.threads:
            thread.join(STOP_WAIT_S)
        return telemetry_record(self, requests, wall_s)


RESCAN_EVERY = 8  # samples between two scans of /proc for the router's processes


class RouterTicks:
    """The router's CPU seconds for the sampler, cheaply: its processes (the tree of
    --router-pid, or every process of --router-session) found by a scan of /proc every
    RESCAN_EVERY samples or when one of them ended, and only their stat files read between
    (a full scan costs milliseconds where a node runs hundreds of processes); a cgroup's
    cpu.stat as it is. A process started between two scans counts from the next."""

    def __init__(self, capture: CaptureSettings):
        self.capture, self.reads = capture, 0
        self.members: list[int] = []
        self.clock_ticks = os.sysconf("SC_CLK_TCK")

    def scan(self) -> list:
        table, capture = process_table(self.capture.proc_root), self.capture
        if capture.router_session:
            return [pid for pid, (_, sid, _) in table.items() if sid == capture.router_session]
        children: dict = {}
        for child, (parent, _, _) in table.items():
            children.setdefault(parent, []).append(child)
        found, pending = [], [capture.router_pid] if capture.router_pid in table else []
        while pending:
            found.append(pending.pop())
            pending.extend(children.get(found[-1], ()))
        return found

    def ticks(self) -> int:
        total = 0
        for pid in self.members:
            text = Path(self.capture.proc_root, str(pid), "stat").read_text()
            total += sum(int(f) for f in text[text.rindex(")") + 2:].split()[11:15])
        return total

    def seconds(self) -> Optional[float]:
        capture = self.capture
        try:
            if capture.router_cgroup:
                return cgroup_cpu_seconds(capture.router_cgroup)
            if not (capture.router_pid or capture.router_session):
                return None
            if self.reads % RESCAN_EVERY == 0 or not self.members:
                self.members = self.scan()
            self.reads += 1
            try:
                total = self.ticks()
            except (OSError, ValueError, IndexError):  # one ended since the scan
                self.members = self.scan()
                total = self.ticks()
        except (OSError, ValueError, IndexError):
            return None
        return total / self.clock_ticks if self.members else None


def thinned(values: Sequence[Any], every: int) -> list:
    return list(values[::every])


def telemetry_record(sampler: PassSampler, requests: int, wall_s: float) -> TelemetryJson:
    """Return what a sampler kept as the run file holds it: series per GPU and of the CPU,
    thinned to MAX_SAMPLES, the pass's figures per GPU over every sample, the energy."""
    started, origin = sampler.started, sampler.first_send
    by_device: dict = {}
    for at, device, figures in sorted(sampler.samples, key=lambda s: s[0]):
        by_device.setdefault(device, []).append((max(at - started, 0.0), figures))
    longest = max([len(s) for s in by_device.values()] + [len(sampler.cpu), 1])
    every = math.ceil(longest / MAX_SAMPLES)
    gpus = {device: {"t_s": thinned([round(t, 3) for t, _ in samples], every),
                     **{key: thinned([f.get(key) for _, f in samples], every)
                        for key in SAMPLED_FIELDS}}
            for device, samples in sorted(by_device.items())}
    cpu: dict = {}
    if sampler.cpu:
        first = sampler.cpu[0]
        cpu = {"t_s": [round(max(at - started, 0.0), 3) for at, *_ in sampler.cpu],
               "router_s": [None if r is None or first[1] is None else round(r - first[1], 4)
                            for _, r, _, _ in sampler.cpu],
               "busy_s": [None if b is None or first[2] is None else round(b - first[2], 4)
                          for _, _, b, _ in sampler.cpu],
               "load": [load for *_, load in sampler.cpu]}
        cpu = {key: thinned(values, every) for key, values in cpu.items()}
    span = (origin - started, origin - started + wall_s)
    indexes = sampler.capture.gpu_indexes
    router = [d for d in by_device if not indexes or int(d[3:]) in indexes]
    record: TelemetryJson = {
        "version": TELEMETRY_VERSION, "interval_ms": round(sampler.interval * 1000, 3),
        "origin_s": round(max(origin - started, 0.0), 3), "tool": sampler.tool,
        "router_gpus": router, "kept_every": every, "gpus": gpus, "cpu": cpu,
        "summary": {d: pass_figures(in_span(s, span)) for d, s in sorted(by_device.items())},
        "energy": energy_of([in_span(by_device[d], span) for d in router], wall_s, requests),
        "notes": list(dict.fromkeys(sampler.notes))}
    return record


def in_span(samples: Sequence[tuple], span: tuple[float, float]) -> list:
    """Return the samples within the pass's span, or all when fewer than two fall in it."""
    inside = [s for s in samples if span[0] <= s[0] <= span[1]]
    return inside if len(inside) >= 2 else list(samples)


def energy_of(devices: Sequence[Sequence[tuple]], wall_s: float,
              requests: int) -> Optional[EnergyJson]:
    """Return the joules of the router's GPUs over a pass and per request: per device from
    its energy counter's rate between its first and last sample where it has one that moved,
    else its mean sampled power, times the pass's wall time. None without a figure for every
    device."""
    import statistics
    if not devices or wall_s <= 0 or not requests:
        return None
    joules, sources = 0.0, set()
    for samples in devices:
        counted = [(t, f["energy_mj"]) for t, f in samples if f.get("energy_mj") is not None]
        power = known([f.get("power_w") for _, f in samples])
        # a counter that went back was reset; one that did not move (it is updated less
        # often than a short pass lasts) says nothing: a GPU never draws 0 W
        if len(counted) >= 2 and counted[-1][0] > counted[0][0] \
                and counted[-1][1] > counted[0][1]:
            watts = (counted[-1][1] - counted[0][1]) / 1000 / (counted[-1][0] - counted[0][0])
            sources.add("energy counter")
        elif power:
            watts = statistics.fmean(power)
            sources.add("sampled power")
        else:
            return None
        joules += watts * wall_s
    return {"joules": round(joules, 3), "per_request_j": round(joules / requests, 6),
            "seconds": round(wall_s, 6), "source": " and ".join(sorted(sources)),
            "devices": len(devices)}


class WindowFigures(NamedTuple):
    """What the samples within one window of a pass show: the router's GPUs, the others,
    the CPU and the load."""
    sclk_min_mhz: Optional[float] = None  # the router's GPUs
    temp_max_c: Optional[float] = None
    power_mean_w: Optional[float] = None  # summed over the router's GPUs
    util_mean_pct: Optional[float] = None
    reasons: tuple[str, ...] = ()
    others: tuple[tuple[str, Optional[float], Optional[float]], ...] = ()  # (GPU, use, W)
    foreign_vcpus: Optional[float] = None  # other processes on the router's CPUs
    load: Optional[float] = None


def series_within(series: dict, start: float, end: float, slack: float) -> list:
    """Return the positions of a series' samples within [start, end] (t_s already counted
    from the first send), else the one nearest the window's middle within `slack`."""
    times = series.get("t_s") or []
    inside = [i for i, t in enumerate(times) if t is not None and start <= t <= end]
    if inside or not times:
        return inside
    middle = (start + end) / 2
    nearest = min(range(len(times)), key=lambda i: abs((times[i] or 0) - middle))
    return [nearest] if abs((times[nearest] or 0) - middle) <= slack + (end - start) / 2 else []


def mean_of(values: Sequence[Optional[float]]) -> Optional[float]:
    import statistics
    found = known(values)
    return statistics.fmean(found) if found else None


def window_figures(telemetry: dict, window: PhaseWindow) -> WindowFigures:
    """Return what a pass's telemetry shows within one of its windows."""
    origin, slack = telemetry.get("origin_s", 0.0), telemetry.get("interval_ms", 250) / 1000
    start, end = origin + window.start_s, origin + window.start_s + window.span_s
    router = set(telemetry.get("router_gpus") or ())
    mine: dict = {"sclk": [], "temp": [], "power": [], "use": [], "reasons": set()}
    others = []
    for device, series in sorted((telemetry.get("gpus") or {}).items()):
        chosen = series_within(series, start, end, slack)

        def pick(key: str, s: dict = series, c: list = chosen) -> list:
            return [s.get(key, [None] * (i + 1))[i] for i in c]

        if device in router:
            mine["sclk"] += known(pick("sclk_mhz"))
            mine["temp"] += known(pick("temp_c"))
            mine["power"].append(mean_of(pick("power_w")))
            mine["use"] += known(pick("util_pct"))
            mine["reasons"].update(n for m in known(pick("reasons")) for n in clock_event_names(m))
        else:
            others.append((device, mean_of(pick("util_pct")), mean_of(pick("power_w"))))
    powers = known(mine["power"])
    return WindowFigures(
        min(mine["sclk"], default=None), max(mine["temp"], default=None),
        math.fsum(powers) if powers else None, mean_of(mine["use"]),
        tuple(sorted(mine["reasons"])), tuple(others),
        *cpu_within(telemetry.get("cpu") or {}, start, end))


def cpu_within(cpu: dict, start: float, end: float) -> tuple[Optional[float], Optional[float]]:
    """Return (foreign vCPUs, mean load) over a window from the CPU series: the counters'
    samples at or before its start and at or after its end."""
    times = cpu.get("t_s") or []
    if len(times) < 2:
        return None, None
    first = max([i for i, t in enumerate(times) if t <= start] or [0])
    last = min([i for i, t in enumerate(times) if t >= end] or [len(times) - 1])
    if last <= first:
        last = min(first + 1, len(times) - 1)
    load = mean_of((cpu.get("load") or [])[first:last + 1])
    router, busy = cpu.get("router_s") or [], cpu.get("busy_s") or []
    if last <= first or None in (router[first], router[last], busy[first], busy[last]):
        return None, load
    seconds = times[last] - times[first]
    used = (busy[last] - busy[first]) - (router[last] - router[first])
    return (round(max(used, 0.0) / seconds, 2) if seconds > 0 else None), load


def gpu_name(device: str) -> str:
    return f"GPU {device[3:]}" if device.startswith("gpu") else device


def coincided(figures: WindowFigures, calm: Sequence[WindowFigures]) -> list:
    """Return what stood out in a slow window against the pass's other windows: another GPU
    busy, foreign CPU on the router's cores, the router's GPU clocked down or throttled, the
    load up."""
    import statistics

    def usual(values: Sequence[Optional[float]]) -> float:
        found = known(values)
        return statistics.median(found) if found else 0.0

    found = []
    for device, use, power in figures.others:
        before = usual([dict((d, u) for d, u, _ in c.others).get(device) for c in calm])
        if use is not None and use >= 50 and use - before >= 25:
            found.append(f"{gpu_name(device)} at {use:.0f}%"
                         + ("" if power is None else f" and {power:.0f} W"))
    foreign = figures.foreign_vcpus
    if foreign is not None and foreign >= 0.5 \
            and foreign - usual([c.foreign_vcpus for c in calm]) >= 0.5:
        found.append(f"{foreign:.1f} foreign vCPUs on the router's cores")
    sclk, usual_sclk = figures.sclk_min_mhz, usual([c.sclk_min_mhz for c in calm])
    if sclk is not None and usual_sclk and sclk < 0.9 * usual_sclk:
        found.append(f"the router's GPU clocked down to {sclk:,.0f} MHz (else {usual_sclk:,.0f})")
    events = set(figures.reasons) - {r for c in calm for r in c.reasons}
    if events:
        found.append(f"clock events on the router's GPU: {', '.join(sorted(events))}")
    load = figures.load
    if load is not None and load >= usual([c.load for c in calm]) + 1.0:
        found.append(f"load {load:.1f}")
    return found


def coincided_text(attempt: Attempt, slow: Sequence[int], shown: int = 3) -> str:
    """Return what coincided with a pass's slow windows ('window 7: GPU 3 at 98% and
    400 W, 2.1 foreign vCPUs on the router's cores'), that nothing measured did, or '' when
    the pass sampled nothing (sampling off, a file from before it)."""
    telemetry = attempt.environment.get("telemetry")
    if not telemetry or not slow:
        return ""
    figures = [window_figures(dict(telemetry), w) for w in attempt.windows]
    calm = [f for i, f in enumerate(figures) if i not in slow]
    parts = []
    for index in slow:
        found = coincided(figures[index], calm)
        if found:
            parts.append(f"window {index + 1}: {', '.join(found)}")
    if not parts:
        measured = [what for what, seen in (
            ("other GPUs", any(f.others for f in figures)),
            ("the router's GPU", any(f.sclk_min_mhz is not None for f in figures)),
            ("foreign CPU on the router's cores",
             any(f.foreign_vcpus is not None for f in figures)),
            ("load", any(f.load is not None for f in figures))) if seen]
        return f"nothing measured coincided ({', '.join(measured) or 'no samples'})"
    more = len(parts) - shown
    return "; ".join(parts[:shown]) + (f"; {plural(more, 'more window')}" if more > 0 else "")


def sampling(capture: CaptureSettings, cpus: Optional[str]) -> bool:
    """Return whether a pass is sampled: an interval, and a GPU tool that loops or a router
    or CPU set to read."""
    return capture.sample_ms > 0 and bool(
        sampled_tool(capture.gpu) or cpus or capture.router_pid or capture.router_session
        or capture.router_cgroup)
