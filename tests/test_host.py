"""Tests of host.py: /proc, cgroup CPU, cpufreq, load: the host as the kernel shows it."""

import os

import pytest

from router_latency.errors import RouterLatencyError
from router_latency.host import (container_cgroup, cpu_busy_seconds, format_cpu_list, LoadSampler,
                                 parse_cpu_list, process_tree_cpu_seconds)
from conftest import fake_docker, write_proc_stat


def test_load_sampler_keeps_the_range_of_its_readings(tmp_path):
    load = tmp_path / "loadavg"
    load.write_text("5.0 1 1 1/1 1\n")
    sampler = LoadSampler(str(load), interval=3600).start()
    load.write_text("7.5 1 1 1/1 1\n")
    assert sampler.stop() == {"start": 5.0, "end": 7.5, "min": 5.0, "max": 7.5, "samples": 2}


def test_cpu_lists_as_the_kernel_writes_them():
    assert parse_cpu_list("0-3,8, 10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpu_list({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11"
    for bad in ("", "3-1", "a", "1,,2"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


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
