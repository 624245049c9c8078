"""compare_runs(): two runs side by side as one complete report object (CompareReport), with
the decision, warning and part figures and one run's capacity that rounds reuses."""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence, Tuple

from .constants import EXIT_GATE, EXIT_OK, NamedTuple
from .errors import Notice
from .words import (change_text, failure_text, fmt_signed, fmt_value, metric_label, plural,
                    shown_decision, worse_sign)
from .report import one_line, Section, Table
from .cache import cache_warnings
from .stall import stall_notices
from .versions import sampled_models
from .degraded import degraded_answers_line
from .runfile import PassRecord, RunFile
from .requests import pass_title
from .attribution import decomposition_text, part_title, part_values, pass_attribution

__all__ = [
    "compare_runs", "CompareReport", "decision_agreement", "DecisionChange",
    "floor_warnings", "sampled_selections",
]


# compare_runs() and judge_rounds() return complete report objects: every renderer below
# works from a report alone, and the rounds gate's rule is written once, in gate.py.


METRICS = ("p50_ms", "p95_ms", "p99_ms", "req_per_s")  # compared side by side


def reference_pass(run: RunFile) -> Optional[PassRecord]:
    """Return the pass decisions are compared in: the sequential (else the first measured)."""
    measured = [p for p in run.passes if not p.discarded]
    if not measured:
        return None
    chosen = run.pass_named("sequential")
    return measured[0] if chosen is None or chosen.discarded else chosen


def reference_decisions(run: RunFile) -> Dict[int, Optional[str]]:
    """Return the decision per prompt id from the sequential pass (else the first measured)."""
    chosen = reference_pass(run)
    return {} if chosen is None else chosen.decisions


def sampled_selections(run: RunFile) -> Tuple[int, Tuple[str, ...]]:
    """Return how many inputs of the reference pass got a selected model the router sampled
    or chose by its state, and which models: left out of decision agreement, which compares
    what the router decided (versions.without_sampled)."""
    chosen = reference_pass(run)
    ids, models = set(), set()
    for r in chosen.requests if chosen is not None else ():
        found = sampled_models(r.decision) if r.error is None else []
        if found:
            ids.add(r.id)
            models.update(found)
    return len(ids), tuple(sorted(models))


def decision_changes(run: RunFile) -> List[int]:
    """Return the prompt ids whose answered decisions differ within a run: between its
    measured passes, or between the repetitions of one pass."""
    seen: Dict[int, set] = {}
    for item in run.passes:
        if not item.discarded:
            for prompt_id, decisions in item.decision_sets.items():
                seen.setdefault(prompt_id, set()).update(decisions)
    return sorted(i for i, decisions in seen.items() if len(decisions) > 1)


class Agreement(NamedTuple):
    compared: int  # inputs measured on both sides
    differ: List[int]  # their ids whose decisions are not the same answered decision


def decision_agreement(base: dict, new: dict) -> Agreement:
    """Return how the decisions of two runs agree over the inputs both measured.

    A failed request has no decision, so it never agrees: a gate must not pass an input
    that one side could not route.
    """
    both = sorted(set(base) & set(new))
    return Agreement(len(both), [i for i in both
                                 if base[i] is None or new[i] is None or base[i] != new[i]])


class DecisionChange(NamedTuple):
    """An input whose decision differs between base and new (None: the request failed)."""
    id: int
    base: Optional[str]
    new: Optional[str]
    text: Optional[str] = None  # the prompt, where the corpus was given
    pass_name: Optional[str] = None  # the first pass where it differs


def floor_warnings(p50s: Sequence[Tuple[str, Optional[float], Optional[float]]],
                   runs: Sequence[RunFile]) -> List[Notice]:
    """Return a warning for each p50 difference smaller than the driver's floor spread.

    p50s: (title, base p50, new p50); the spread is the largest any of the runs measured.
    """
    spreads = [r.floor_spread_ms for r in runs if r.floor_spread_ms is not None]
    if not spreads:
        return []
    spread = max(spreads)
    return [Notice("floor", f"warning: {title} p50 differs by {fmt_value(abs(new - base))} ms, "
                   f"less than the driver's own spread on loopback ({fmt_value(spread)} ms, "
                   f"p90 - p10): below what this driver resolves")
            for title, base, new in p50s
            if base is not None and new is not None and abs(new - base) < spread]


class ComparePass(NamedTuple):
    name: str
    discarded: bool  # on either side: no figures
    # (metric, A's value, B's value) for p50, p95, p99 and req/s
    figures: Tuple[Tuple[str, Optional[float], Optional[float]], ...] = ()
    errors: Tuple[int, int] = (0, 0)  # failed requests of A and B
    # A's and B's errors by kind and by code
    failures: Tuple[Tuple[Dict[str, int], Dict[str, Dict[str, int]]], ...] = (({}, {}), ({}, {}))
    rejected: Tuple[int, int] = (0, 0)  # expected rejections of A and B
    # (name, A's value, B's value): CPU ms per request, foreign vCPUs
    router_cpu: Tuple[Tuple[str, Optional[float], Optional[float]], ...] = ()
    slow: Tuple[Tuple[int, ...], Tuple[int, ...]] = ((), ())  # A's and B's windows in a slow phase
    windows: Tuple[int, int] = (0, 0)  # how many windows A's and B's time series have
    # (part metric, A's, B's) of where the time goes, the most moved first
    parts: Tuple[Tuple[str, float, float], ...] = ()
    # A's and B's (client mean ms, {part metric: value}) where either reports parts
    decompositions: Tuple[Tuple[Optional[float], Dict[str, Optional[float]]], ...] = ()
    degraded: Tuple[int, int] = (0, 0)  # A's and B's answers that skipped a signal
    # A's and B's degraded answers by signal and reason ({signal: {reason: count}})
    degraded_signals: Tuple[Dict[str, Dict[str, int]], ...] = ({}, {})


def router_cpu_figures(a: PassRecord,
                       b: PassRecord) -> Tuple[Tuple[str, Optional[float], Optional[float]], ...]:
    """Return (name, A's, B's) of the router CPU figures either side measured."""
    ea, eb = a.environment, b.environment
    return tuple(figure for figure in (
        ("router_cpu_ms", ea.router_cpu_ms, eb.router_cpu_ms),
        ("foreign_vcpus", ea.foreign_vcpus, eb.foreign_vcpus))
        if figure[1] is not None or figure[2] is not None)


def compared_parts(a: RunFile, pa: PassRecord, b: RunFile, pb: PassRecord) -> Tuple[
        Tuple[Tuple[str, float, float], ...],
        Tuple[Tuple[Optional[float], Dict[str, Optional[float]]], ...]]:
    """Return (the parts of a pass's time both runs report as (part metric, A's, B's), the
    one that moved most first; each side's (client mean, part values) where either reports
    any); the signals' times are matched by name."""
    sides = [pass_attribution(a, pa), pass_attribution(b, pb)]
    found_a, found_b = (part_values(side) for side in sides)
    both = [(m, a_ms, b_ms) for m, a_ms in found_a.items()
            for b_ms in (found_b.get(m),) if a_ms is not None and b_ms is not None]
    reported = any(side.parts for side in sides)
    return (tuple(sorted(both, key=lambda f: -abs(f[2] - f[1]))),
            tuple((side.client_mean_ms, part_values(side)) for side in sides) if reported
            else ())


class CompareReport(NamedTuple):
    """Two runs side by side: figures per pass, decision agreement and consistency."""
    a_path: str
    a_label: str
    b_path: str
    b_label: str
    corpus_sha256: Tuple[str, str]  # A's and B's
    corpus_count: int
    passes: Tuple[ComparePass, ...]  # ComparePass
    warnings: Tuple[Notice, ...]  # a result cache that answered, a p50 below the driver's floor
    compared: int  # inputs measured on both sides
    changes: Tuple[DecisionChange, ...]  # DecisionChange, sequential pass
    unmeasured: int  # inputs measured on one side only
    # (tag, ids whose decision changed within that run, sent repeatedly)
    consistency: Tuple[Tuple[str, Tuple[int, ...], bool], ...]
    status: str  # pass or fail
    exit_code: int
    # A's and B's x-vsr-config-hash values, in order seen
    config_hashes: Tuple[Tuple[str, ...], Tuple[str, ...]] = ((), ())
    reasons: Tuple[str, ...] = ()  # why it failed
    # A's and B's sampled selections (sampled_selections): inputs, models; not in agreement
    sampled: Tuple[Tuple[int, Tuple[str, ...]], ...] = ()
    # what every renderer draws (with_compare_sections): the table of passes, then the details
    sections: Tuple[Section, ...] = ()


def compare_runs(a: RunFile, b: RunFile, *, prompts_text: Optional[dict] = None,
                 fail_on_decision_change: bool = False) -> CompareReport:
    """Return the comparison of run B against run A."""
    passes = []
    for pa in a.passes:
        pb = b.pass_named(pa.name)
        if pb is None:
            continue
        if pa.discarded or pb.discarded:
            passes.append(ComparePass(pa.name, True))
            continue
        sa, sb = pa.measured, pb.measured
        figures = tuple((metric, getattr(sa, metric), getattr(sb, metric))
                        for metric in METRICS)
        passes.append(ComparePass(pa.name, False, figures,
                                  (sum(sa.errors.values()), sum(sb.errors.values())),
                                  tuple((s.errors, s.error_codes) for s in (sa, sb)),
                                  (sa.rejected, sb.rejected),
                                  router_cpu_figures(pa, pb),
                                  (a.slow_windows(pa), b.slow_windows(pb)),
                                  (len(pa.attempt.windows), len(pb.attempt.windows)),
                                  *compared_parts(a, pa, b, pb), (sa.degraded, sb.degraded),
                                  (sa.degraded_signals, sb.degraded_signals)))
    warnings = cache_warnings([("A", a.cache_finding), ("B", b.cache_finding)]) + floor_warnings(
        [(pass_title(p.name), p.figures[0][1], p.figures[0][2]) for p in passes
         if not p.discarded], [a, b]) + stall_notices([("A", a.passes), ("B", b.passes)])
    da, db = reference_decisions(a), reference_decisions(b)
    agree = decision_agreement(da, db)
    texts = prompts_text or {}
    changes = tuple(DecisionChange(i, da[i], db[i], texts.get(i)) for i in agree.differ)
    failed = bool(changes) and fail_on_decision_change
    return with_compare_sections(CompareReport(
        a.path, a.label, b.path, b.label, (a.corpus_sha256, b.corpus_sha256), a.corpus_count,
        tuple(passes), tuple(warnings), agree.compared, changes, len(set(da) ^ set(db)),
        tuple((tag, tuple(decision_changes(run)),
               any(r.rep for item in run.passes for r in item.requests))
              for tag, run in (("A", a), ("B", b))),
        "fail" if failed else "pass", EXIT_GATE if failed else EXIT_OK,
        (a.config_hashes, b.config_hashes),
        (f"decisions differ in {plural(len(changes), 'input')} (sequential pass, "
         f"--fail-on-decision-change)",) if failed else (),
        (sampled_selections(a), sampled_selections(b))))


def with_compare_sections(report: CompareReport) -> CompareReport:
    """Return the comparison with its sections: its table of passes (figures, errors,
    rejections, degraded answers, router CPU and the parts' times), then its details below."""
    table = Table("", ["pass", "metric", "A", "B", "B - A", "change, + slower"],
                  compare_rows(report), [False, False, True, True, True, True])
    return report._replace(sections=(Section(key="passes", blocks=(table,)),
                                     Section(key="details", blocks=tuple(compare_details(report)))))


def compare_rows(report: CompareReport) -> List[List[str]]:
    """Return the rows of compare's table: figures, errors, rejections and router CPU."""
    rows = []
    for item in report.passes:
        if item.discarded:
            rows.append([pass_title(item.name), "discarded", "", "", "", ""])
            continue
        for metric, va, vb in item.figures:
            diff = fmt_signed(vb - va) if va is not None and vb is not None else "n/a"
            # as rounds says it: above 1 is better, A/B for latency, B/A for req/s
            speedup = (va / vb) ** worse_sign(metric) if va and vb else None
            rows.append([pass_title(item.name) if metric == "p50_ms" else "",
                         metric_label(metric), fmt_value(va), fmt_value(vb), diff,
                         change_text(speedup)])
        for metric, (ea, eb) in (("errors", item.errors), ("rejected", item.rejected),
                                 ("degraded", item.degraded)):
            if metric == "errors" or ea or eb:  # rejections and degraded, where there are any
                rows.append(["", metric, str(ea), str(eb),
                             f"{eb - ea:+d}" if eb != ea else "0", ""])
        for name, va, vb in item.router_cpu:
            rows.append(["", {"router_cpu_ms": "router cpu ms/req",
                              "foreign_vcpus": "foreign vCPUs"}[name], fmt_value(va),
                         fmt_value(vb), "n/a" if va is None or vb is None else fmt_signed(vb - va),
                         ""])
        rows += [["", part_title(metric) + " ms", fmt_value(va), fmt_value(vb),
                  fmt_signed(vb - va), change_text(va / vb if va > 0 and vb > 0 else None)]
                 for metric, va, vb in item.parts]
    return rows


def compare_details(report: CompareReport) -> List[str]:
    """Return what a comparison says below its table: errors, slow phases, where the time
    goes, warnings, and the decisions that differ."""
    lines = []
    for item in report.passes:
        failed = [f"{tag} {failure_text(*counts)}" for tag, counts in zip("AB", item.failures)
                  if counts[0]]
        if failed:
            lines.append(f"errors in {pass_title(item.name)}: {'; '.join(failed)}")
        lines += [degraded_answers_line(f"{tag} {pass_title(item.name)}", count, signals)
                  for tag, count, signals in zip("AB", item.degraded, item.degraded_signals)
                  if count]
    lines += [f"slow phase: {tag} {pass_title(item.name)} "
              f"({'window' if len(slow) == 1 else 'windows'} "
              f"{', '.join(str(i + 1) for i in slow)} of {count})"
              for item in report.passes if not item.discarded
              for tag, slow, count in zip("AB", item.slow, item.windows) if slow]
    lines += [f"{pass_title(item.name)}, where the time goes: " + decomposition_text(
        tag, values, client) for item in report.passes
        for tag, (client, values) in zip("AB", item.decompositions)]
    lines += [warning.text for warning in report.warnings]
    lines += ["", f"decisions: {report.compared - len(report.changes)}/{report.compared} "
                  f"inputs agree (sequential pass)"
              + (f"; {report.unmeasured} inputs measured on one side only"
                 if report.unmeasured else "")]
    lines += sampled_lines(report)
    for change in report.changes:
        snippet = "" if change.text is None else \
            " " + json.dumps(change.text[:60], ensure_ascii=False)
        lines.append(f"  #{change.id}{snippet}: {shown_decision(change.base)} -> "
                     f"{shown_decision(change.new)}")
    for tag, changed, repeated in report.consistency:
        lines.append(f"{tag} consistency: {len(changed)} inputs changed decision between passes"
                     + (" or repetitions" if repeated else "")
                     + (f" ({', '.join(f'#{i}' for i in changed[:20])}"
                        f"{', ...' if len(changed) > 20 else ''})" if changed else ""))
    # each on one line, as a Section's lines are: a degraded reason holds what the router sent
    return [one_line(line) for line in lines]


def sampled_lines(report: CompareReport) -> List[str]:
    """Return the selections each side's router sampled or chose by its state, apart from
    decision agreement, which leaves them out: how many inputs, which models."""
    return [f"{tag} sampled selections: {plural(count, 'input')} got a model the router "
            f"sampled or chose by its state ({', '.join(models[:8])}"
            f"{', ...' if len(models) > 8 else ''}); not counted as changed decisions"
            for tag, (count, models) in zip("AB", report.sampled) if count]
