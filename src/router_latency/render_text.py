"""Text: the reports as aligned tables and lines; tables as data (Table) rendered for
text and Markdown alike."""

from __future__ import annotations

import collections
import json
from typing import List, NamedTuple, Optional, Sequence

from .constants import __version__, LADDER_METRICS, ROUTER_MAX_CONCURRENCY, ROUTER_TIMEOUT_S
from .words import (change_text, failure_text, fmt_reading, fmt_signed, fmt_value, metric_label,
                    metric_title, plural, shown_decision, span_text, worse_sign)
from .stats import percentile
from .report import md_code, render_table, Section, Table, text_lines
from .gpu import GPU_FIELDS, GPU_RANGED, GpuReading
from .degraded import unknown_answers
from .runfile import (HostSettings, pass_title, PassRecord, PhaseWindow, RunSettings, slow_phase,
                      SlowPhase, Thresholds)
from .compare import CompareReport
from .gate import (composite_text, DETECTS_CONFIDENCE, detectable_text,
                   detects_text, GateSettings, missed_text, row_word)
from .rounds import Overload, RoundsReport
from .outcomes import degraded_line
from .judged import pass_cell, row_change_text
from .attribution import decomposition_text, part_title
from .record import RecordSection, record_sentences

__all__ = [
    "compare_caveat", "compare_parts", "format_closing", "format_compare", "format_host",
    "format_plan", "format_record", "format_rounds", "format_run_header", "format_run_summary",
    "overload_note", "rounds_table_parts", "verdict_line",
]


# Every renderer takes a report object (or a run's passes) and returns lines; the command
# handlers print them.


def format_run_header(label: str, prompts: int, sha256: str, url: str,
                      settings: RunSettings) -> str:
    """Return the line `run` starts with: what it measures where, and how long a pass is."""
    line = f"run {label}: {prompts} prompts, corpus {sha256[:12]}, {url}"
    ladder = settings.ladder
    if ladder:  # the steps it may climb, and what ends the climb
        steps = [f"{c}" for c in settings.concurrency] or \
            [f"{r:g}/s" for r in settings.rates]
        slo = ladder.slo_p95_ms
        line += (f"; a ladder of up to {', '.join(steps)}"
                 f"{'' if settings.rates else ' callers'}, margin "
                 f"{ladder.margin_pct:g}%" + (f", SLO p95 {slo:g} ms" if slo else ""))
    repeat, duration = settings.repeat, settings.duration_s
    if duration:
        return f"{line}; each pass cycles the corpus for {duration:g} s"
    return f"{line}; each pass sends the corpus {repeat} times" if repeat > 1 else line


def format_run_summary(passes: Sequence[PassRecord],
                       thresholds: Thresholds = Thresholds()) -> List[str]:
    """Return the lines of a run's per-pass table, its slow phases and GPU state."""
    cpu = any(item.attempt.router_cpu is not None for item in passes)
    rows = []
    for item in passes:
        if item.discarded:
            rows.append([pass_title(item.name), "discarded: load above the limit"]
                        + [""] * (10 if cpu else 8))
            continue
        s = item.measured
        # a pass the stop flag cut short: its figures are of the requests it measured
        title = pass_title(item.name) + (" (interrupted)" if item.interrupted else "")
        rows.append([title, str(s.requests), str(s.ok),
                     str(sum(s.errors.values())), fmt_value(s.p50_ms), fmt_value(s.p95_ms),
                     fmt_value(s.p99_ms), fmt_value(s.mean_ms), fmt_value(s.req_per_s),
                     f"{s.wall_s:.2f}"])
        if cpu:
            rows[-1] += [fmt_value(item.environment.router_cpu_ms),
                         fmt_value(item.environment.foreign_vcpus)]
    lines = render_table(["pass", "requests", "ok", "errors", "p50_ms", "p95_ms", "p99_ms",
                          "mean_ms", "req/s", "wall_s"]
                         + (["router cpu ms/req", "foreign vCPUs"] if cpu else []),
                         rows, right=[False])
    for item in passes:
        if item.summary and item.summary.errors:
            lines.append(f"errors in {pass_title(item.name)}: "
                         f"{failure_text(item.summary.errors, item.summary.error_codes)}")
            lines += malformed_lines(item)
        if item.summary and item.summary.degraded:
            lines.append(degraded_line(f"in {pass_title(item.name)}", item.summary.degraded,
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
    return lines + format_gpu_state(passes) + format_sampled(passes)


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


def format_gpu_state(passes: Sequence[PassRecord]) -> List[str]:
    """Return the ranges of each pass's GPU readings (before and after it, over devices), and
    why a reading is missing."""
    gpu = [(item, record) for item in passes
           if isinstance(record := item.attempt.environment.get("gpu"), dict)]
    if not gpu:
        return []
    rows, notes = [], []
    for item, record in gpu:
        state = item.environment.gpu_state
        rows.append([pass_title(item.name)]
                    + [span_text(min(state[f.key]), max(state[f.key]), fmt_reading)
                       if state.get(f.key) else "n/a" for f in GPU_RANGED]
                    + [span_text(min(item.environment.gpu_mib, default=None),
                                 max(item.environment.gpu_mib, default=None), fmt_reading)])
        for moment in ("before", "after"):
            reading = GpuReading.from_json(record.get(moment), moment) or GpuReading()
            notes += [f"gpu {moment} {pass_title(item.name)}: {text}"
                      for text in (reading.error, reading.note) if text]
    tool = gpu[0][1].get("tool") or "gpu"
    return ([f"gpu ({tool}), before and after each pass:"]
            + render_table(["pass", *(f"{f.title} {f.unit}" for f in GPU_RANGED),
                            *(f"{f.title} {f.unit}" for f in GPU_FIELDS if f.summed)], rows,
                           right=[False]) + notes)


def format_sampled(passes: Sequence[PassRecord]) -> List[str]:
    """Return what the router's GPUs did through each pass, sampled (telemetry.py): lowest
    SM clock, highest temperature, mean and peak power, mean use, clock events, joules per
    request; and the sampler's notes."""
    rows, notes, tool = [], [], None
    for item in passes:
        record = item.attempt.environment.get("telemetry") or {}
        summary = record.get("summary") or {}
        mine = [summary[d] for d in record.get("router_gpus") or () if d in summary]
        tool = tool or record.get("tool")
        notes += [f"sampled {pass_title(item.name)}: {note}" for note in record.get("notes", [])]
        if not mine:
            continue

        def values(key: str) -> List[float]:
            return [float(v) for figures in mine if isinstance(v := figures.get(key), (int, float))]

        energy = (record.get("energy") or {}).get("per_request_j")
        rows.append([pass_title(item.name), fmt_reading(min(values("sclk_min_mhz"), default=None)),
                     fmt_reading(max(values("temp_max_c"), default=None)),
                     fmt_reading(sum(values("power_mean_w")) if values("power_mean_w") else None),
                     fmt_reading(max(values("power_peak_w"), default=None)),
                     fmt_reading(max(values("util_mean_pct"), default=None)),
                     "n/a" if energy is None else f"{energy:.4g}",
                     ", ".join(sorted({r for f in mine for r in f.get("reasons", [])})) or "-"])
    if not rows:
        return notes
    return ([f"gpu ({tool}), sampled through each pass (the router's GPUs):"]
            + render_table(["pass", "sclk min MHz", "temp max C", "power W", "peak W", "use %",
                            "J/request", "clock events"], rows, right=[False])
            + notes)


def format_host(settings: Optional[HostSettings]) -> List[str]:
    """Return the run's host settings in one or two lines."""
    if not settings:
        return []
    parts = []
    for role, cpus in (("driver", settings.driver), ("router", settings.router)):
        if cpus:
            governors = ", ".join(f"{g} ({c})" for g, c in cpus.governors.items()) or "n/a"
            boost = ", ".join(f"{b} ({c})" for b, c in cpus.boost.items()) or "n/a"
            parts.append(f"{role} CPUs {cpus.cpus}: governor {governors}, boost {boost}")
    return [f"host: {settings.cpu_model or 'CPU n/a'}; kernel {settings.kernel}; "
            f"Python {settings.python}; router-latency {settings.tool_version}"] \
        + ([f"cpufreq: {'; '.join(parts)}"] if parts else [])


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


def overload_note(overload: Optional[Overload]) -> List[str]:
    """Return why requests were shed with 429 OVERLOADED, when any were, naming the setting."""
    if overload is None:
        return []
    return [f"{plural(overload.shed, 'request')} answered 429 OVERLOADED: the router admits at "
            f"most global.services.api.routing_preview.max_concurrency previews at once "
            f"(default {ROUTER_MAX_CONCURRENCY}, declared {overload.declared_limit} with "
            f"--router-max-concurrency) and sheds the rest at once, without a queue",
            f"a preview holds its slot until its inference ends, even after the router's "
            f"request_timeout_seconds (default {ROUTER_TIMEOUT_S}) or the client's --timeout"
            + (f" ({overload.timeout_s:g} s here)" if overload.timeout_s is not None else "")
            + " gave up on it: keep the concurrency at or below the setting (or raise it and "
              "restart the router) and --timeout above the router's timeout"]


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


class TabledReport(NamedTuple):
    """A report around its main table, as data: the lines above the table, the table, the
    lines below it; text keeps that order, Markdown puts the table first."""
    above: List[str]
    table: Optional[Table]  # None: nothing to tabulate
    below: List[str]


def format_compare(report: CompareReport) -> List[str]:
    """Return the lines of the side-by-side comparison of two runs, its verdict last."""
    above, table, below = compare_parts(report)
    return above + [""] + text_lines([table] if table else []) + below \
        + [compare_verdict_line(report)]


def compare_parts(report: CompareReport) -> TabledReport:
    """Return the comparison of two runs around its table: which runs, then the table, then
    errors, slow phases, where the time goes, warnings and the decisions."""
    lines = [f"A: {report.a_path} ({report.a_label or 'no label'})",
             f"B: {report.b_path} ({report.b_label or 'no label'})"]
    sha_a, sha_b = report.corpus_sha256
    if sha_a == sha_b:
        lines.append(f"corpus: {sha_a[:12]} ({report.corpus_count} prompts)")
    else:
        lines.append(f"warning: different corpora: A {sha_a[:12]}, B {sha_b[:12]}")
    if any(report.config_hashes):
        lines.append("config (x-vsr-config-hash): " + ", ".join(
            f"{tag} {' then '.join(h[:12] for h in hashes) or 'none recorded'}"
            for tag, hashes in zip("AB", report.config_hashes)))
    table = Table("", ["pass", "metric", "A", "B", "B - A", "change, + slower"],
                  compare_rows(report), [False, False, True, True, True, True])
    return TabledReport(lines, table, compare_details(report))


def compare_details(report: CompareReport) -> List[str]:
    """Return what a comparison says below its table: errors, slow phases, where the time
    goes, warnings, and the decisions that differ."""
    lines = []
    for item in report.passes:
        failed = [f"{tag} {failure_text(*counts)}" for tag, counts in zip("AB", item.failures)
                  if counts[0]]
        if failed:
            lines.append(f"errors in {pass_title(item.name)}: {'; '.join(failed)}")
        lines += [degraded_line(f"{tag} {pass_title(item.name)}", count, signals)
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
    return lines


def sampled_lines(report: CompareReport) -> List[str]:
    """Return the selections each side's router sampled or chose by its state, apart from
    decision agreement, which leaves them out: how many inputs, which models."""
    return [f"{tag} sampled selections: {plural(count, 'input')} got a model the router "
            f"sampled or chose by its state ({', '.join(models[:8])}"
            f"{', ...' if len(models) > 8 else ''}); not counted as changed decisions"
            for tag, (count, models) in zip("AB", report.sampled) if count]


def compare_verdict_line(report: CompareReport) -> str:
    """Return the one-line verdict of a comparison, as verdict_line writes that of rounds."""
    if report.reasons:
        return f"verdict: {report.status.upper()}: " + "; ".join(report.reasons)
    return f"verdict: {report.status.upper()}: {compare_caveat(report)}"


def compare_caveat(report: CompareReport) -> str:
    """Return what a comparison's verdict is not: one run each, no interval; and, where it
    passed, the changed decisions it did not gate (a PASS that left them unsaid would read
    as all is well)."""
    return ("one run each, no interval (rounds judges with intervals)"
            + (f"; decisions differ in {plural(len(report.changes), 'input')} (not gated: "
               f"--fail-on-decision-change fails on them)"
               if report.changes and not report.reasons else ""))


def format_rounds(report: RoundsReport, *, per_round: bool = False) -> List[str]:
    """Return the lines of the rounds report as text: the verdict and what would decide it
    first (so that the head of a log shows them), and again last (so that its tail does)."""
    headlines = [line for section in report.sections for line in section.headline]
    opening = [verdict_line(report)] + headlines
    leads = [line for section in report.sections for line in section.lead]
    lines = opening + [""] + leads + format_rounds_table(report)
    lines += [line for section in report.sections if section.beside_table and per_round
              for line in [""] + text_lines(section.blocks) if section.blocks]
    lines += section_lines(report.sections, per_round=per_round)
    lines += format_closing(report) + opening[1:] + opening[:1]
    return lines


def section_lines(sections: Sequence[Section], *, per_round: bool = False) -> List[str]:
    """Return the sections as text, in order: each a blank line below what stands above it
    (unless it runs on), those beside the table left out (format_rounds puts them there)."""
    lines: List[str] = []
    for section in sections:
        if section.blocks and not section.beside_table and (per_round or not section.on_request):
            lines += ([""] if section.apart else []) + text_lines(section.blocks)
        lines += [notice.text for notice in section.notices]
    return lines


def format_closing(report: RoundsReport) -> List[str]:
    """Return the rounds left out, the allowed mismatches and the TLS warning."""
    lines = [f"left out: r{item.round}: {item.why}" for item in report.left_out]
    lines += report.notes
    if report.insecure_files:
        lines.append(f"warning: TLS certificates were not verified (--insecure) in "
                     f"{', '.join(report.insecure_files)}")
    lines += format_config_hashes(report)
    return lines


def format_rounds_table(report: RoundsReport) -> List[str]:
    """Return the heading, the table of rows and the gate's test of a rounds report."""
    above, table, below = rounds_table_parts(report)
    if table is None:
        return above
    return above + [""] + text_lines([table]) + ([""] + below if below else [])


def rounds_table_parts(report: RoundsReport) -> TabledReport:
    """Return the rounds report's table of rows: above it the rounds used and how to read
    it, below it the gated rows' test together; no table without rows."""
    base, new, used, settings = report.base, report.new, report.used, report.settings
    lines = [f"rule: {settings.rule.text}"] if settings.rule.option else []
    lines += [f"rounds: {len(used)} used ({', '.join(f'r{n}' for n in used) or 'none'}); "
              f"base {base}, new {new}; corpus {report.corpus_sha256[:12]} "
              f"({report.corpus_count} prompts)"]
    test = report.test
    if not report.rows or test is None:  # the gate tests wherever there are rows
        return TabledReport(lines, None, [])
    lines += [
        f"change: {new} against {base} in time per request (for req/s, its inverse), + slower, "
        f"- faster; the geometric mean of the per-round ratios with a 95% Student t interval "
        f"on their logs, df {len(used) - 1}; slower in: the rounds in which {new} was slower; "
        f"{new} - {base}: mean paired difference; medians over rounds, descriptive; tolerance "
        f"{settings.tolerance_pct:g}%; detects: the slowdown of that row alone the gate finds "
        f"80% of the time, at the {100 * DETECTS_CONFIDENCE:g}% upper bound of its spread (so "
        f"it holds in about {100 * DETECTS_CONFIDENCE:g}% of runs)"
        + ("; at this look a gated row's interval is the look's (its boundary), the one its "
           "verdict and the gate judge" if settings.sequential_max else "")
        + (f"; (Holm): the interval lies beyond the tolerance, but Holm's correction for the "
           f"{test.rows} gated rows does not show it worse"
           if any(r.held_by_holm for r in report.rows) else ""),
        f"gate (*): {gate_text(settings)}, {plural(test.rows, 'row')} worth "
        f"{test.effective_rows:.1f} independent; worse: one-sided tests at "
        f"{100 * test.level:.3g}% each on their per-round mean and by Holm across them "
        f"(family-wise {100 * 2 * test.level:.3g}%); within: each row's worse end inside the "
        f"tolerance (one-sided {100 * test.level:.3g}%)"
        + (", boundaries of this look" if settings.sequential_max else "")]
    table = []
    for row in report.rows:
        interval = (f"{fmt_signed(row.diff.mean)} [{fmt_value(row.diff.low)}, "
                    f"{fmt_value(row.diff.high)}]")
        table.append([pass_cell(row, report.rows),
                      metric_label(row.metric) + ("*" if row.gated else ""),
                      fmt_value(row.base_median), fmt_value(row.new_median), interval,
                      row_change_text(row), f"{row.worse_rounds}/{row.rounds}",
                      detectable_text(row), row_word(row)])
    below = []
    if test.composite is not None:
        together = "any change" if test.composite_detectable_pct is None \
            else detects_text(test.composite_detectable_pct)
        below = [f"gated rows together: {composite_text(test.composite)} per round, "
                 f"one-sided p {test.composite_p:.3g} of worse than the "
                 f"{settings.tolerance_pct:g}% tolerance (not of any change); every gated row "
                 f"slowing together: detects {together}"]
    return TabledReport(lines, Table(
        "", ["pass", "metric", f"{base}", f"{new}", f"{new} - {base} [95% CI]",
             "change [CI judged]" if settings.sequential_max else "change [95% CI]",
             "slower in", "detects", "verdict"], table,
        [False, False, True, True, True, True, True, True, False]), below)


def gate_text(settings: GateSettings) -> str:
    """Return which rows the gate judges, in words."""
    every = [metric_title(g) for g in settings.gate if ":" not in g and g not in LADDER_METRICS]
    named = [f"{pass_title(g.split(':')[0])} {metric_title(g.split(':')[1])}"
             for g in settings.gate if ":" in g]
    named += [f"the ladder's {metric_title(g)}" for g in settings.gate if g in LADDER_METRICS]
    return ", ".join(([f"{', '.join(every)} of every pass"] if every else []) + named)


def format_config_hashes(report: RoundsReport) -> List[str]:
    """Return each side's configuration (x-vsr-config-hash) and the warnings about them."""
    if not any(report.config_hashes.values()):
        return [warning.text for warning in report.config_warnings]
    shown = "; ".join(f"{side} {', '.join(h[:12] for h in hashes) or 'none recorded'}"
                      for side, hashes in report.config_hashes.items())
    return [f"configuration (x-vsr-config-hash): {shown}"] + [
        warning.text for warning in report.config_warnings]


def verdict_line(report: RoundsReport) -> str:
    """Return the one-line gate verdict of a rounds report."""
    look = f" (round {report.look.rounds} of at most {report.look.max_rounds})" \
        if report.look else ""
    option = report.settings.rule.option
    rule = f" ({option})" if option else ""
    outcome = report.outcome
    missed = missed_text(outcome)
    if outcome.status == "inconclusive":
        return (f"verdict: INCONCLUSIVE{look}{rule}: not a pass: {missed}; "
                + "; ".join(outcome.reasons))
    if outcome.status != "pass":
        return f"verdict: {outcome.status.upper()}{look}{rule}: " + "; ".join(outcome.reasons)
    unsure = len(outcome.undecided)
    return f"verdict: PASS{look}{rule}" + (f" ({unsure} inconclusive gated rows; {missed})"
                                           if unsure else "")


def format_plan(report: RoundsReport) -> List[str]:
    """Return, per row, the spread over rounds, what the rounds could detect and how many
    rounds a target needs: for planning from A/A rounds."""
    settings = report.settings
    lines = [f"plan from {plural(len(report.used), 'round')} "
             f"({', '.join(f'r{n}' for n in report.used)}); target: detect a "
             f"{settings.target_pct:g}% slowdown beyond the {settings.tolerance_pct:g}% "
             f"tolerance 80% of the time, one-sided {100 * settings.alpha / 2:.3g}% (a gated "
             f"row at Holm's first level, that divided by the gated rows, as the gate tests it "
             f"when only that row slows)", ""]
    table = []
    for row in report.rows:
        table.append([pass_cell(row, report.rows),
                      metric_label(row.metric) + ("*" if row.gated else ""),
                      f"{100 * row.spread:.1f}%", detectable_text(row),
                      "> 1,000" if row.rounds_needed is None else str(row.rounds_needed)])
    # spread: 100 x the log standard deviation of a round's change, as the noise lines below
    # take it apart (within and between instances add to it in squares)
    lines += render_table(["pass", "metric", "spread", f"detects at {len(report.used)}",
                           f"rounds for {settings.target_pct:g}%"], table,
                          right=[False, False, True, True, True])
    if report.test is not None:
        lines += ["", f"the {plural(report.test.rows, 'gated row')} (*) are worth "
                      f"{report.test.effective_rows:.1f} independent ones: rows of a round "
                      f"move together"]
    return lines + text_lines([block for section in report.sections for block in section.plan])


def format_record(sections: Sequence[RecordSection]) -> List[str]:
    """Return the record as Markdown: per section the table in the published record's form and
    sentences generated from the data, none typed by hand."""
    lines = ["# Latency record", "",
             f"Made by router-latency {__version__} from {plural(len(sections), 'rounds folder')}; "
             f"every figure below comes from the run files.", ""]
    for section in sections:
        report = section.report
        lines += [f"## {section.name}", "",
                  f"{md_code(section.folder)}: base `{report.base}`, new `{report.new}`; "
                  f"{plural(len(report.used), 'round')} used of {len(section.runs)}; corpus "
                  f"`{report.corpus_sha256[:12]}` ({report.corpus_count} prompts).", "",
                  f"**{verdict_line(report)}**", ""]
        rows = [[pass_cell(r, report.rows), metric_title(r.metric),
                 fmt_value(r.base_median), fmt_value(r.new_median),
                 f"{fmt_signed(r.diff.mean)} [{fmt_value(r.diff.low)}, {fmt_value(r.diff.high)}]",
                 row_change_text(r),
                 f"{r.speedup:.2f}x [{r.speedup_low:.2f}, {r.speedup_high:.2f}]"]
                for r in report.rows]
        if rows:
            # the published records' speedup column stays, labelled, beside the change
            lines += render_table(["pass", "metric", report.base, report.new,
                                   f"{report.new} - {report.base} [95% CI]",
                                   "change [95% CI], + slower",
                                   "published speedup, above 1 faster [95% CI]"],
                                  rows, markdown=True, right=[False, False]) + [""]
        lines += [f"- {sentence}" for sentence in record_sentences(section)] + [""]
    return lines
