"""Degraded answers: a 200 that names a signal it could not compute (signal_errors), an unknown
policy it applied for one (applied_unknown_policies), or a decision that failed
(decision_error). The router answers so when a signal fails under load or its model errs
(pkg/services EvalResponse); such an answer is not a plain success. Read from the body (in
meaning.py), kept in the run file as the router's members, and counted per signal and reason."""

from __future__ import annotations

import collections
import re
from typing import Any, Dict, Iterable, Tuple

from .constants import MAX_REASON_CHARS, MAX_SIGNALS
from .errors import RouterLatencyError
from .words import plural, visible

__all__ = [
    "degraded_answers_line", "Degraded", "degraded_counts", "degraded_from_json",
    "DEGRADED_MEMBERS", "DEGRADED_SIGNAL_CHARS",
    "degraded_summary_from_json", "degraded_text", "degraded_to_json", "unknown_answers",
    "UNKNOWN_ANSWERS_METRIC",
]

# the EvalResponse members that make an answer degraded, in the router's order (all omitempty:
# a plain answer has none of them); newer routers add signal_error_matches {signal: bool},
# whether a failed signal's policy counted it as a match
DEGRADED_MEMBERS = ("signal_errors", "applied_unknown_policies", "signal_error_matches",
                    "decision_error")
DEGRADED_SIGNAL_CHARS = 128  # a signal's name as kept (the router's "type:rule")
# the router's count of the answers its model runtime left unknown, by reason
# (pkg/modelservice: timeout, unavailable, overloaded): kept by --metric's default pattern
UNKNOWN_ANSWERS_METRIC = "vsr_model_runtime_unknown_answers_total"
# one answer's degraded members: (member, signal, reason), reason the error text or the
# policy applied; decision_error has no signal ("")
Degraded = Tuple[Tuple[str, str, str], ...]


def degraded_to_json(degraded: Degraded) -> dict:
    """Return an answer's degraded members as the router sent them (decision_error a text,
    the others {signal: reason})."""
    document: Dict[str, Any] = {}
    for member, signal, reason in degraded:
        if member == "decision_error" or not signal:
            document[member] = reason
        else:
            document.setdefault(member, {})[signal] = reason
    return document


def degraded_from_json(raw: Any, where: str) -> Degraded:
    """Return a request's degraded members read from a run file; raise unless an object of
    the members, each a text or an object of at most MAX_SIGNALS signals' texts."""
    if not isinstance(raw, dict) or not set(raw) <= set(DEGRADED_MEMBERS):
        raise RouterLatencyError(f"expected an object of {', '.join(DEGRADED_MEMBERS)}", where)
    found = []
    for member in DEGRADED_MEMBERS:
        value = raw.get(member)
        if value is None:
            continue
        if isinstance(value, str) and 0 < len(value) <= MAX_REASON_CHARS:
            found.append((member, "", value))
        elif isinstance(value, dict) and 0 < len(value) <= MAX_SIGNALS and all(
                isinstance(s, str) and 0 < len(s) <= DEGRADED_SIGNAL_CHARS
                and isinstance(r, str) and len(r) <= MAX_REASON_CHARS
                for s, r in value.items()) and member != "decision_error":
            found += [(member, s, value[s]) for s in sorted(value)]
        else:
            raise RouterLatencyError(f"expected a text of at most {MAX_REASON_CHARS} "
                                     f"characters or an object of signals' texts",
                                     f"{where}.{member}")
    if not found:
        raise RouterLatencyError("expected at least one member", where)
    return tuple(found)


def _label(member: str, signal: str, reason: str) -> Tuple[str, str]:
    """Return (signal, reason) as the counts name them: an unknown policy applied reads
    'on_unknown POLICY', the decision's error is the signal 'decision'."""
    if member == "applied_unknown_policies":
        return signal, f"on_unknown {reason}"
    if member == "signal_error_matches":
        return signal, "counted as a match" if reason == "true" else "counted as no match"
    return signal or "decision", reason


def degraded_counts(answers: Iterable[Degraded]) -> Dict[str, Dict[str, int]]:
    """Return {signal: {reason: answers}} over answers' degraded members, sorted."""
    # each answer counts once under a label, whichever members name it
    counts: collections.Counter = collections.Counter(
        label for degraded in answers for label in {_label(*entry) for entry in degraded})
    found: Dict[str, Dict[str, int]] = {}
    for (signal, reason), count in sorted(counts.items()):
        found.setdefault(signal, {})[reason] = count
    return found


def degraded_summary_from_json(raw: dict, where: str) -> Tuple[int, Dict[str, Dict[str, int]]]:
    """Return (degraded answers, {signal: {reason: count}}) of a summary; raise unless
    whole numbers, each count at most the answers, and counts only where answers are."""
    degraded = raw.get("degraded", 0)
    if not (isinstance(degraded, int) and not isinstance(degraded, bool) and degraded >= 0):
        raise RouterLatencyError("expected a whole number >= 0", f"{where}.degraded")
    signals = raw.get("degraded_signals", {})
    if not isinstance(signals, dict) or not all(
            isinstance(s, str) and isinstance(by, dict) and by and all(
                isinstance(r, str) and isinstance(n, int) and not isinstance(n, bool)
                and 0 < n <= degraded for r, n in by.items())
            for s, by in signals.items()) or bool(signals) != bool(degraded):
        raise RouterLatencyError(f"expected an object of counts by signal and reason, each "
                                 f"at most the {degraded} degraded answers",
                                 f"{where}.degraded_signals")
    return degraded, signals


def unknown_answers(deltas: Any) -> Dict[str, float]:
    """Return {reason: increase} of the router's unknown answers in a pass's metric deltas
    (summed over deployments); {} where it counted none or was not scraped."""
    found: Dict[str, float] = {}
    for series, delta in (deltas.items() if isinstance(deltas, dict) else ()):
        if series.split("{", 1)[0] == UNKNOWN_ANSWERS_METRIC and delta > 0:
            match = re.search(r'reason="([^"]*)"', series)
            reason = match.group(1) if match else "unknown"
            found[reason] = found.get(reason, 0.0) + delta
    return dict(sorted(found.items()))


def degraded_text(signals: Dict[str, Dict[str, int]], limit: int = 4) -> str:
    """Return the counts by signal and reason as one line, the most first: 'classifier:intent
    classifier_evaluation_failed 12, ...' (and how many more)."""
    items = sorted(((n, s, r) for s, by in signals.items() for r, n in by.items()),
                   key=lambda item: (-item[0], item[1], item[2]))
    # the router's names and reasons on one line: this text also enters the gate's reasons
    # (the verdict line of every format), which are no Section's lines
    shown = ", ".join(f"{visible(s)} {visible(r)} {n}" for n, s, r in items[:limit])
    return shown + (f", {len(items) - limit} more" if len(items) > limit else "")


def degraded_answers_line(where: str, count: int, signals: Dict[str, Dict[str, int]],
                          percentiles: bool = True) -> str:
    """Return the line of degraded answers: how many, by signal and reason, and that the
    percentiles leave them out."""
    return (f"degraded {where}: {plural(count, 'answer')} skipped a signal or a decision "
            f"({degraded_text(signals)})"
            + ("; left out of the percentiles" if percentiles else ""))
