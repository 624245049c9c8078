"""What a command says and hears: its lines printed (control characters escaped, a closed pipe
dropped quietly), its one-line messages on stderr, and the signals it waits for, relayed to an
event."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Iterable

from .words import visible
from .files import drop_output

__all__ = ["emit", "SignalRelay", "stderr_line"]


def emit(lines: Iterable[str], stream: Any = None) -> None:
    """Print lines to stdout (or stream). What nobody can take any more (a pipe `| head`
    closed, a full disk) is dropped quietly: the exit code still carries the verdict."""
    stream = stream or sys.stdout
    if stream is None:  # started with the stream closed (>&-): nobody to show it to
        return
    try:
        for line in lines:  # a line may hold line breaks (JSON), no other control character
            stream.write("\n".join(visible(part) for part in line.split("\n")) + "\n")
        stream.flush()
    except OSError:
        drop_output(stream)


def stderr_line(message: str) -> None:
    emit([f"router-latency: {message}"], sys.stderr)


class SignalRelay:
    """Set an event when one of the signals comes: the handler only notes the signal and
    writes a byte to a pipe, and a thread of its own sets the event.

    A handler that calls Event.set() itself waits on the event's lock, which the main thread
    (where Python runs handlers) may hold at that moment: inside the event's wait(), or in
    the set() of a signal that came just before (Ctrl-C, then the driver's SIGTERM close
    behind it). It then waits on itself, forever: the run never saves its file and its
    driver waits for it. The handlers are installed at once, in the main thread only; with
    keep_ignored, a signal ignored at the start stays ignored (SIGHUP under nohup)."""

    def __init__(self, event: threading.Event, signums: Iterable[int], *,
                 keep_ignored: bool = False) -> None:
        self.event = event
        self.caught: list = []  # the signals, in the order they came
        self.previous: dict = {}
        self.read_end, self.write_end = os.pipe()
        os.set_blocking(self.write_end, False)  # a storm of signals never blocks a handler
        self.thread = threading.Thread(target=self._relay, daemon=True)
        if threading.current_thread() is threading.main_thread():
            for signum in signums:
                if not keep_ignored or signal.getsignal(signum) is not signal.SIG_IGN:
                    self.previous[signum] = signal.signal(signum, self._on_signal)
        self.thread.start()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.caught.append(signum)
        try:
            os.write(self.write_end, b"!")
        except OSError:  # the pipe is full: a byte is there already
            pass

    def _relay(self) -> None:
        if os.read(self.read_end, 1):  # empty: restore() closed the pipe, no signal came
            self.event.set()

    def restore(self) -> None:
        """Put the handlers back and end the relay's thread."""
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        os.close(self.write_end)
        self.thread.join()
        os.close(self.read_end)
