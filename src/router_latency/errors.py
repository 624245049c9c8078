"""The one error type, RouterLatencyError, the warning record a report carries (Notice), and
the checks of values in files: the reader's (checked_*) and, beside each, the writer's twin
(file_*, unique_names), so that what the tool writes its reader reads back."""

from __future__ import annotations

import math
from typing import Any, List, Literal, Optional, Sequence, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only, never imported when run: typing has it from 3.10 on
    from typing_extensions import TypeGuard

from .constants import MAX_FILE_NUMBER, MAX_LATENCY_MS, NamedTuple

__all__ = [
    "checked_number", "checked_object", "checked_text", "file_number", "is_whole", "Notice",
    "RouterLatencyError", "SignalInterrupt", "unique_names",
]


class SignalInterrupt(KeyboardInterrupt):
    """SIGTERM or SIGHUP in a command that writes reports: raised where the command stands,
    so that every writer's cleanup runs as for Ctrl-C; main() exits 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class RouterLatencyError(ValueError):
    """Bad input or invocation: main() prints it on one line and exits 2."""

    def __init__(self, message: str, where: Optional[str] = None):
        super().__init__(message)
        self.where = where

    def __str__(self) -> str:
        message = super().__str__()
        return f"{message} ({self.where})" if self.where else message


# the kinds of warning a report carries, each named where it is found:
# result_cache: a result cache answered a side: the figures measure cache hits (cache_warnings)
# floor: a p50 difference below the driver's own spread on loopback (floor_warnings)
# inconclusive: a gated row undecided under --pass-unless-worse, which passes it (rounds_warnings)
# order_effect: the side started second ran slower (rounds_warnings)
# config_changed: a side's configuration changed between or within rounds (config_hash_findings)
# same_config: both sides answered with one configuration (config_hash_findings)
# stall: most answers' bodies came late behind their heads (stall.stall_notices)
NoticeKind = Literal["result_cache", "floor", "inconclusive", "order_effect", "config_changed",
                     "same_config", "stall"]


class Notice(NamedTuple):
    """A warning a report carries, as data: what it is about (its kind, which the command line
    reads to decide what it says loudly) and the line every renderer prints."""
    kind: NoticeKind
    text: str  # the whole line, "warning: ..." (against trusting a gate at all: "WARNING: ...")


def is_whole(value: Any, minimum: int = 0) -> TypeGuard[int]:
    """Return True for an int (not a bool) of at least minimum and at most MAX_FILE_NUMBER."""
    return isinstance(value, int) and not isinstance(value, bool) \
        and minimum <= value <= MAX_FILE_NUMBER


def checked_number(value: Any, where: str, *, nullable: bool = False,
                   positive: bool = False, maximum: float = MAX_FILE_NUMBER) -> Any:
    """Return value when it is a finite number >= 0 (> 0 with positive) and at most maximum
    (MAX_FILE_NUMBER, or MAX_LATENCY_MS for a latency); raise otherwise."""
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RouterLatencyError("expected a finite number", where)
    if value < 0 or (positive and value == 0):
        raise RouterLatencyError("expected a positive number" if positive
                                 else "expected a number >= 0", where)
    if value > maximum:  # finite, but its sums would overflow or lose every digit
        raise RouterLatencyError(
            f"expected at most {maximum:,.0f}" + (" ms (a day)" if maximum == MAX_LATENCY_MS
                                                  else " (2^53)"), where)
    return value


def checked_object(raw: Any, key: str, where: str) -> dict:
    """Return raw[key] when it is an object, {} when absent or null; raise otherwise."""
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        # a top-level field is named "file: key", a nested one "file: outer.key"
        raise RouterLatencyError("expected an object",
                                 f"{where}{key}" if where.endswith(" ") else f"{where}.{key}")
    return value


def checked_text(raw: Any, key: str, where: str) -> Optional[str]:
    """Return raw[key] when a string, None when absent or null; raise otherwise."""
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise RouterLatencyError("expected a string or null", f"{where}.{key}")
    return value


# ---- what a writer records: the twins of the reader's checks ----
# Every value from outside that a file keeps (a GPU tool's figure or clock-event mask, a load
# file, a name or text the router sent) is recorded through these, so that a file the tool
# writes is one its reader takes: a run written with exit 0 that `compare` then refused, or a
# history line every later `history add` refused, lost the measurement. A new field: its reader
# checks it with checked_*, its writer records it with the twin here, and a round-trip test
# writes a hostile value and reads the file back.

def file_number(value: Any, *, positive: bool = False,
                maximum: float = MAX_FILE_NUMBER) -> Optional[float]:
    """Return value when checked_number accepts it (finite, >= 0 or > 0 with positive, at
    most maximum: 2^53 unless said), else None: the reading is no figure."""
    try:
        return checked_number(value, "", positive=positive, maximum=maximum)
    except RouterLatencyError:
        return None


def unique_names(names: Sequence[str], limit: int) -> List[str]:
    """Return names (each already cut to at most limit characters) made unique in order: a
    name equal to one before it ends in '~2', '~3', ..., cut shorter to keep the limit. Two
    names equal once cut (or '' beside '(unnamed)') were counted apart but kept as one key,
    and the reader found the counts short."""
    taken: set = set()
    kept = []
    for name in names:
        candidate, number = name, 1
        while candidate in taken:
            number += 1
            suffix = f"~{number}"
            candidate = name[:limit - len(suffix)] + suffix
        taken.add(candidate)
        kept.append(candidate)
    return kept
