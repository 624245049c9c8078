"""Tests of command_simulate.py: the simulate command's parser, its argument types and its
handler, which serves the simulated router until SIGTERM (here in-process, on port 0)."""

import argparse
import errno
import json
import math
import os
import signal
import socket
import statistics
import threading

import pytest

from router_latency.constants import PREVIEW_PATH
from router_latency.errors import RouterLatencyError
from router_latency.console import SignalRelay
from router_latency.simulator import SignalTime, start_simulator, Stall
from router_latency.command_simulate import (add_simulate_parser, cmd_simulate, instance_speed,
                                             signals_text)
from conftest import ASK, exchange


def parsed(*argv):
    top = argparse.ArgumentParser(prog="router-latency")
    add_simulate_parser(top.add_subparsers(dest="command", required=True))
    return top.parse_args(["simulate", *map(str, argv)])


def test_the_parser_reads_signals_stalls_shares_and_decisions():
    args = parsed("--signals", "domain:3, pii:5.5", "--stall", "10:2:40", "--decisions",
                  "a, b,,c", "--sampled-share", "0.25", "--workers", "4")
    assert args.signals == (SignalTime("domain", 3.0), SignalTime("pii", 5.5))
    assert args.stall == Stall(10, 2, 40.0)
    assert args.decisions == ("a", "b", "c")
    assert (args.sampled_share, args.workers, args.serial) == (0.25, 4, False)
    defaults = parsed()
    assert (defaults.host, defaults.port, defaults.delay_ms, defaults.no_decision_share) == \
        ("127.0.0.1", 8801, 2.0, 0.1)
    assert defaults.signals is None and defaults.stall is None


@pytest.mark.parametrize("argv, message", [
    (["--signals", "domain:3,domain:4"], "each name once, got 'domain:4'"),
    (["--signals", "domain"], "expected NAME:MS pairs separated by commas"),
    (["--signals", "domain:-1"], "got 'domain:-1'"),
    (["--stall", "2:3:10"], "expected EVERY:LENGTH:MS"),  # LENGTH beyond EVERY
    (["--stall", "10:2"], "got '10:2'"),
    (["--no-decision-share", "1.5"], "expected a share from 0 to 1, got '1.5'"),
    (["--decisions", " , "], "expected decision names separated by commas"),
    (["--serial", "--workers", "2"], "not allowed with argument --serial"),
    (["--port", "70000"], "expected a port from 0 to 65535, got '70000'"),
])
def test_a_bad_option_is_refused_while_parsing(capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        parsed(*argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_the_signals_are_said_with_their_times_and_how_they_run():
    pairs = (SignalTime("domain", 3.0), SignalTime("pii", 5.5))
    assert signals_text(pairs, False) == ", signals domain 3 ms, pii 5.5 ms one after another"
    assert signals_text(pairs, True) == ", signals domain 3 ms, pii 5.5 ms in parallel"
    assert signals_text((), True) == ""


def test_a_port_in_use_is_one_error_naming_the_option():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(RouterLatencyError) as raised:
            cmd_simulate(parsed("--port", port))
    assert str(raised.value) == \
        f"cannot listen on 127.0.0.1:{port}: {os.strerror(errno.EADDRINUSE)} (--port)"


def test_it_serves_previews_until_sigterm_and_says_where(monkeypatch, tmp_path, capsys):
    installed = threading.Event()

    class NotedRelay(SignalRelay):
        def __init__(self, *args, **options):
            super().__init__(*args, **options)
            installed.set()  # from here on SIGTERM is the relay's, not the default's

    answers, abandoned = [], threading.Event()

    def ask_then_stop():
        if installed.wait(timeout=30) and not abandoned.is_set():
            url = (tmp_path / "url").read_text().strip()
            answers.append(exchange(url, "POST", PREVIEW_PATH, ASK,
                                    {"Content-Type": "application/json"}))
            os.kill(os.getpid(), signal.SIGTERM)

    def not_relayed(signum, frame):
        raise AssertionError("SIGTERM reached the handler the relay should have replaced")

    monkeypatch.setattr("router_latency.command_simulate.SignalRelay", NotedRelay)
    # a SIGTERM the relay misses fails the test, where the default would end the test run
    original = signal.signal(signal.SIGTERM, not_relayed)
    asker = threading.Thread(target=ask_then_stop)
    asker.start()
    try:
        code = cmd_simulate(parsed("--port", 0, "--serial", "--signals", "domain:1",
                                   "--url-file", tmp_path / "url"))
        assert signal.getsignal(signal.SIGTERM) == not_relayed  # the relay gave it back
    finally:
        if not installed.is_set():  # a failed start: no relay, so no signal may be sent
            abandoned.set()
            installed.set()
        asker.join(timeout=30)
        signal.signal(signal.SIGTERM, original)
    assert code == 0
    ((status, _, body),) = answers
    assert status == 200 and "decision_result" in json.loads(body)
    out = capsys.readouterr().out.splitlines()
    url = (tmp_path / "url").read_text().strip()
    assert out[0].startswith(f"simulated router at {url}{PREVIEW_PATH} (delay 2 ms, jitter 0 "
                             f"ms, serial, signals domain 1 ms one after another, at most ")
    assert out[1].startswith("metrics at http://127.0.0.1:")


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
