"""Tests of console.py: lines printed with control characters escaped, a closed pipe dropped
quietly, one-line messages on stderr, signals relayed to an event."""

import io
import os
import signal
import threading

from router_latency.console import emit, SignalRelay, stderr_line


def test_emitted_lines_keep_their_line_breaks_and_escape_every_other_control_character():
    stream = io.StringIO()
    emit(["a\tb", "{\n  \"x\": 1\n}", "\x1b[2Jcleared", "plain"], stream)
    assert stream.getvalue() == 'a\\tb\n{\n  "x": 1\n}\n\\u001b[2Jcleared\nplain\n'


class ClosedPipe(io.StringIO):
    """A stream whose reader went away: every write fails, and it has no descriptor."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self):
        raise io.UnsupportedOperation("no descriptor")


def test_a_closed_pipe_is_dropped_quietly():
    emit(["lost"], ClosedPipe())  # no BrokenPipeError reaches the command


def test_a_closed_standard_output_prints_nothing(monkeypatch):
    monkeypatch.setattr("sys.stdout", None)  # started with >&-
    emit(["nobody reads this"])


def test_a_message_on_stderr_is_one_line_naming_the_tool(capsys):
    stderr_line("error: no rounds (folder)\x1b[31m")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "router-latency: error: no rounds (folder)" \
        "\\u001b[31m\n"


def test_a_relayed_signal_sets_the_event_and_restore_puts_the_handler_back():
    before = signal.getsignal(signal.SIGUSR1)
    event = threading.Event()
    relay = SignalRelay(event, (signal.SIGUSR1,))
    try:
        assert signal.getsignal(signal.SIGUSR1) == relay._on_signal
        os.kill(os.getpid(), signal.SIGUSR1)
        assert event.wait(timeout=10)
        assert relay.caught == [signal.SIGUSR1]
    finally:
        relay.restore()
    assert signal.getsignal(signal.SIGUSR1) == before and not relay.thread.is_alive()


def test_restore_without_a_signal_leaves_the_event_unset():
    event = threading.Event()
    relay = SignalRelay(event, (signal.SIGUSR2,))
    relay.restore()
    assert not event.is_set() and relay.caught == []


def test_a_signal_ignored_at_the_start_stays_ignored_when_asked():
    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        relay = SignalRelay(threading.Event(), (signal.SIGUSR2,), keep_ignored=True)
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN and relay.previous == {}
        relay.restore()
    finally:
        signal.signal(signal.SIGUSR2, previous)
