"""One run's summary below its per-pass table, as sections: each pass's notes (errors,
malformed, degraded and unknown answers, a slow phase, router CPU) and expected rejections,
then the GPU state and the sampled GPUs with their energy (gpu.py's sections)."""

from __future__ import annotations

import collections
from typing import List, Sequence, Tuple

from .words import failure_text, fmt_value, plural, shown_decision
from .report import Section
from .stats import percentile
from .gpu import gpu_state_section, sampled_section
from .degraded import degraded_answers_line, unknown_answers
from .runfile import PassRecord
from .phases import PhaseWindow, slow_phase, SlowPhase, Thresholds
from .requests import pass_title

__all__ = ["run_summary"]


def run_summary(passes: Sequence[PassRecord],
                thresholds: Thresholds = Thresholds()) -> Tuple[Section, ...]:
    """Return what a run's summary says below its per-pass table, as sections in order: each
    pass's notes and expected rejections, the GPU state, the sampled GPUs and their energy."""
    titled = [(pass_title(item.name), item) for item in passes]
    return (Section(key="pass_notes", apart=False, blocks=tuple(pass_notes(passes, thresholds))),
            gpu_state_section(titled), sampled_section(titled))


def pass_notes(passes: Sequence[PassRecord], thresholds: Thresholds) -> List[str]:
    """Return each pass's errors, malformed, degraded and unknown answers, slow phase and
    router CPU notes, then each pass's expected rejections and surprises."""
    lines: List[str] = []
    for item in passes:
        if item.summary and item.summary.errors:
            lines.append(f"errors in {pass_title(item.name)}: "
                         f"{failure_text(item.summary.errors, item.summary.error_codes)}")
            lines += malformed_lines(item)
        if item.summary and item.summary.degraded:
            lines.append(degraded_answers_line(f"in {pass_title(item.name)}",
                                               item.summary.degraded,
                                               item.summary.degraded_signals))
        unknown = unknown_answers((item.attempt.environment.get("metrics") or {}).get("deltas"))
        if unknown:
            lines.append(f"unknown answers in {pass_title(item.name)} (the router's "
                         f"vsr_model_runtime_unknown_answers_total): " + ", ".join(
                             f"{reason} {count:g}" for reason, count in unknown.items()))
        if not item.discarded:
            phase = slow_phase(item, passes, thresholds)
            if phase.windows:
                lines.append(slow_phase_line(pass_title(item.name), item.attempt.windows, phase))
        notes = (item.attempt.router_cpu.notes if item.attempt.router_cpu else ())
        lines += [f"router cpu in {pass_title(item.name)}: {note}" for note in notes]
    for item in passes:
        lines += expectation_lines(item)
    return lines


def malformed_lines(item: PassRecord) -> List[str]:
    """Return the line saying what the malformed answers of a pass had wrong, or none."""
    reasons = collections.Counter(r.reason for r in item.requests if r.reason)
    if not reasons:
        return []
    (first, count), others = reasons.most_common(1)[0], len(reasons) - 1
    return [f"malformed answers in {pass_title(item.name)}: {first} ({count})"
            + (f" and {plural(others, 'other reason')}" if others else "")]


def slow_phase_line(title: str, windows: Sequence[PhaseWindow], phase: SlowPhase) -> str:
    """Return one line naming the windows of a pass's slow phase and the evidence that made
    it, against its median window."""
    return (f"slow phase in {title}: {'window' if len(phase.windows) == 1 else 'windows'} "
            f"{', '.join(str(i + 1) for i in phase.windows)} of {len(windows)} (from "
            f"{windows[phase.windows[0]].start_s:.1f} s): {phase.evidence(windows)}")


def expectation_lines(item: PassRecord) -> List[str]:
    """Return a pass's expected rejections (how many, the router's codes, how fast) and its
    surprises: prompts that expected only a rejection and were routed."""
    title, lines = pass_title(item.name), []
    rejected = [r for r in item.requests if r.outcome == "expected_rejection"]
    if rejected:
        codes = collections.Counter(r.code or f"HTTP {r.status}" for r in rejected)
        latency = percentile([r.latency_ms for r in rejected if r.latency_ms is not None], 50)
        lines.append(f"expected rejections in {title}: {len(rejected)} ("
                     f"{', '.join(f'{c} {n}' for c, n in sorted(codes.items()))}), "
                     f"p50 {fmt_value(latency)} ms; not in the figures above")
    routed = [r for r in item.requests if r.outcome == "unexpected_routing"]
    if routed:
        listed = ", ".join(f"#{r.id} {shown_decision(r.decision)}" for r in routed[:10])
        lines.append(f"surprise in {title}: {plural(len(routed), 'prompt')} expected a "
                     f"rejection and got routed: {listed}{', ...' if len(routed) > 10 else ''}")
    return lines
