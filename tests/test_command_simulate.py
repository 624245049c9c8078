"""Tests of command_simulate.py: the simulate command's instance speed (--instance-sd)."""

import math
import statistics

import pytest

from router_latency.command_simulate import instance_speed
from router_latency.simulator import start_simulator


def test_each_instance_draws_its_own_speed_and_keeps_its_configuration():
    environ = {"ROUND": "3", "SIDE": "gpu", "INSTANCE": "2"}
    assert instance_speed(0.0, 7, environ) == 1.0
    assert instance_speed(20.0, 7, environ) == instance_speed(20.0, 7, dict(environ))
    speeds = [instance_speed(20.0, 7, {**environ, "INSTANCE": str(i)}) for i in range(2000)]
    assert len(set(speeds)) == len(speeds)
    assert statistics.stdev(math.log(s) for s in speeds) == pytest.approx(0.2, rel=0.1)
    assert instance_speed(20.0, 8, environ) != instance_speed(20.0, 7, environ)
    plain, slow = start_simulator(delay_ms=2.0), start_simulator(delay_ms=2.0, speed=1.5)
    try:
        # the same configuration (its hash), 1.5 times the time per preview
        assert slow.config_hash == plain.config_hash
        assert slow.delay_s == pytest.approx(1.5 * plain.delay_s)
    finally:
        plain.stop()
        slow.stop()
