"""The head-and-body stall: a server that writes an answer's head and body apart with Nagle's
algorithm on holds the body back until this host acknowledges the head, which a delayed ACK
does about 40 ms later (Linux), so nearly every answer waits that long whatever the router's
work took. Seen from the answers: most of them with their body LATE_BODY_MS or more after
their head (Request.late_body, noted by the pass loop); named with its cause and its fix."""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from .constants import LATE_BODY_MS
from .errors import Notice

__all__ = ["stall_notices", "stall_text"]

STALL_CAUSE = (f"came with their body {LATE_BODY_MS} ms or more after their head: the server "
               f"writes an answer's head and body apart with Nagle's algorithm on, so each "
               f"body waits for this host's delayed ACK (about 40 ms on Linux) and the "
               f"latencies measure that wait, not the router's work; the fix is on the "
               f"server: TCP_NODELAY on its sockets (or head and body in one write)")


def late_bodies(passes: Sequence[Any]) -> Tuple[int, int]:
    """Return (answers whose body came late, answers) over a run's measured passes."""
    late = answered = 0
    for item in passes:
        if item.discarded:
            continue
        for r in item.requests:
            if r.status is not None:
                answered += 1
                late += r.late_body
    return late, answered


def stall_text(passes: Sequence[Any]) -> str:
    """Return the stall in words when most of a run's answers show it, else ''."""
    late, answered = late_bodies(passes)
    if not answered or late * 2 <= answered:
        return ""
    return f"head-and-body stall: {late} of {answered} answers {STALL_CAUSE}"


def stall_notices(named_runs: Sequence[Tuple[str, Sequence[Any]]]) -> List[Notice]:
    """Return the warnings of the runs (a name, its passes) most of whose answers stalled,
    one per side (the name's first word), naming the runs."""
    stalled: dict = {}
    for name, passes in named_runs:
        late, answered = late_bodies(passes)
        if answered and late * 2 > answered:
            entry = stalled.setdefault(name.split(" ")[0], [[], 0, 0])
            entry[0].append(name)
            entry[1] += late
            entry[2] += answered
    return [Notice("stall", f"warning: {', '.join(names)}: head-and-body stall: {late} of "
                            f"{answered} answers {STALL_CAUSE}")
            for names, late, answered in stalled.values()]
