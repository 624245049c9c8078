"""Tests of captured.py: what a pass captured around it, as the run file holds it."""

import json

import pytest

from router_latency.errors import RouterLatencyError
from router_latency.captured import PassEnvironment, RouterCpu


def test_the_routers_cpu_time_is_written_and_read_back_as_it_was():
    cpu = RouterCpu(router_s=1.5, per_request_ms=0.75, cpus="0-11", busy_s=3.0, interval_s=2.0,
                    foreign_vcpus=0.75, notes=("no cgroup",))
    document = json.loads(json.dumps(cpu.to_json()))
    assert document == {"router_s": 1.5, "per_request_ms": 0.75, "cpus": "0-11", "busy_s": 3.0,
                        "interval_s": 2.0, "foreign_vcpus": 0.75, "notes": ["no cgroup"]}
    assert RouterCpu.from_json(document, "r.json: passes[0].router_cpu") == cpu


def test_an_absent_router_cpu_reads_as_none_and_missing_figures_as_none():
    assert RouterCpu.from_json(None, "f") is None
    assert RouterCpu.from_json({}, "f") == RouterCpu()
    assert RouterCpu.from_json({"notes": None, "router_s": None}, "f") == RouterCpu()


@pytest.mark.parametrize("raw, where, message", [
    ([], "f", "expected an object or null"),
    ({"cpus": 3}, "f.cpus", "expected a CPU list or null"),
    ({"notes": "one"}, "f.notes", "expected a list of strings"),
    ({"notes": ["a", 1]}, "f.notes", "expected a list of strings"),
    ({"router_s": -1.0}, "f.router_s", "expected a number >= 0"),
    ({"foreign_vcpus": "1"}, "f.foreign_vcpus", "expected a finite number"),
])
def test_a_router_cpu_of_the_wrong_shape_is_refused_naming_the_field(raw, where, message):
    with pytest.raises(RouterLatencyError) as raised:
        RouterCpu.from_json(raw, "f")
    assert str(raised.value) == f"{message} ({where})"


def test_a_pass_environment_reads_nothing_captured_by_default():
    environment = PassEnvironment()
    assert environment.faults is None and environment.discarded_attempts == 0
    assert environment.gpu_mib == () and environment.gpu_state == {}
