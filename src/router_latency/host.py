"""The host as the kernel shows it: CPU lists, the CPU seconds of a cgroup, a process tree or a
session (/proc), CPUs' busy time, a Docker container's cgroup (docker inspect), the CPU model
and cpufreq settings with what they warn of, the load, and the driver's own CPU time and
affinity. proc_root and sys_root let tests give fake ones."""

from __future__ import annotations

import os
import re
import resource
import shutil
import threading
from pathlib import Path
from typing import Iterable, Optional, Sequence

from .constants import __version__
from .errors import file_number, RouterLatencyError
from .runfile import CpuSettings, HostSettings
from .captured import LoadRange

__all__ = [
    "cgroup_cpu_seconds", "container_cgroup", "cpu_affinity", "cpu_busy_seconds",
    "driver_cpu_seconds", "format_cpu_list", "host_settings", "host_warnings", "LoadSampler",
    "parse_cpu_list", "process_table", "process_tree_cpu_seconds", "read_load",
    "session_cpu_seconds", "session_member",
]


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


def container_cgroup(name: str, *, proc_root: str = "/proc",
                     cgroup_root: str = "/sys/fs/cgroup", timeout: float = 10.0) -> str:
    """Return the cgroup v2 folder of a running Docker container, found with `docker
    inspect`: its main process's cgroup, else where Docker's two cgroup drivers put it."""
    import subprocess
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
    import platform
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
    import platform
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


def read_load(loadavg_file: Optional[str] = None) -> Optional[float]:
    """Return the 1-minute load average, or None where the system does not tell."""
    if loadavg_file:
        try:  # its first line only: /dev/zero or a huge file must not fill the memory
            with open(loadavg_file, "rb") as stream:
                load = float(stream.read(4096).split()[0])
        except (OSError, ValueError, IndexError):
            return None
        # inf, nan, -5 or 1e308 would make a run file its own reader refuses: not a load
        return file_number(load)
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


def cpu_affinity() -> Optional[list[int]]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
