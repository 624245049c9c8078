"""Text: the reports as aligned tables and lines; tables as data (Table) rendered for
text and Markdown alike."""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

from .constants import (__version__, LADDER_METRICS, NamedTuple, ROUTER_MAX_CONCURRENCY,
                        ROUTER_TIMEOUT_S)
from .words import fmt_signed, fmt_value, metric_label, metric_title, p_text, plural
from .report import md_code, render_table, Section, Table, text_lines
from .runfile import HostSettings, PassRecord, RunSettings
from .phases import Thresholds
from .requests import pass_title
from .compare import CompareReport
from .gate import (BEYOND_LIMIT, composite_text, DETECTS_CONFIDENCE, detectable_text,
                   detects_text, GateSettings, missed_text, more_rounds, row_word,
                   undecided_text)
from .rounds import Overload, RoundsReport
from .summary import run_summary
from .judged import pass_cell, row_change_text
from .record import pool_words, RecordSection, record_sentences, unlike_sections

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
    return lines + text_lines([block for section in run_summary(passes, thresholds)
                                for block in section.blocks])


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
    # its sections: the table of passes, then the details below it
    blocks = [block for section in report.sections for block in section.blocks]
    table = next((block for block in blocks if isinstance(block, Table)), None)
    return TabledReport(lines, table, [block for block in blocks if isinstance(block, str)])


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
    opening = [verdict_line(report)] + verdict_details(report) + headlines
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
        detectable = test.composite_detectable_pct
        together = "any change" if detectable is None else "none yet" \
            if not math.isfinite(detectable) else detects_text(detectable)
        below = [f"gated rows together: {composite_text(test.composite)} per round, "
                 f"one-sided {p_text(test.composite_p)} of worse than the "
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


HEADLINE_CHARS = 200  # the verdict's first line at most: a head of a log, a CI check's title


def verdict_line(report: RoundsReport) -> str:
    """Return the verdict's headline, HEADLINE_CHARS at most where it can be: the verdict, the
    reason that decided it (a FAIL's first, an INCONCLUSIVE's first that is not an undecided
    row; cut to its name, "(below)", where whole it would not fit), what it could have missed
    and the rounds that would decide the undecided rows; every reason in full is in
    verdict_details."""
    return verdict_headline(report)[0]


def verdict_headline(report: RoundsReport) -> Tuple[str, bool]:
    """Return the headline and whether it holds its reason whole."""
    reasons = verdict_head_reasons(report)
    whole = headline(report, reasons)
    if len(whole) <= HEADLINE_CHARS:
        return whole, True
    # a reason of a name and its figures ("futility: the 7 rounds left ...") keeps its name
    cut = [reason.split(": ", 1)[0] + " (below)" if ": " in reason else reason
           for reason in reasons]
    return headline(report, cut), cut == reasons


def headline(report: RoundsReport, head_reasons: List[str]) -> str:
    """Return the verdict's headline with these reasons in it."""
    look = f" (round {report.look.rounds} of at most {report.look.max_rounds})" \
        if report.look else ""
    option = report.settings.rule.option
    rule = f" ({option})" if option else ""
    outcome = report.outcome
    missed = missed_text(outcome)
    head = f"verdict: {outcome.status.upper()}{look}{rule}"
    if outcome.status == "pass":
        unsure = len(outcome.undecided)
        return head + (f" ({plural(unsure, 'inconclusive gated row')}; {missed})"
                       if unsure else "")
    parts = [f"not a pass: {missed}"] if outcome.status == "inconclusive" else []
    parts += head_reasons
    if outcome.status == "fail" and len(outcome.reasons) > 1:
        parts.append(f"{plural(len(outcome.reasons) - 1, 'more reason')} below")
    if outcome.undecided and outcome.status == "inconclusive" and len(parts) == 1:
        more = more_rounds(outcome)
        parts.append(f"{plural(len(outcome.undecided), 'gated row')} undecided, "
                     + (f"{BEYOND_LIMIT} rounds would be needed" if more is None else
                        f"about {plural(more, 'more round')} would decide "
                        f"{'it' if len(outcome.undecided) == 1 else 'them'}"))
    return f"{head}: " + "; ".join(parts)


def verdict_details(report: RoundsReport) -> List[str]:
    """Return the verdict's reasons, one a line below its headline, where it has more than
    its headline says (a reason the headline cut to its name among them)."""
    reasons, undecided = list(report.outcome.reasons), report.outcome.undecided
    whole = verdict_headline(report)[1]
    if whole and (reasons == verdict_head_reasons(report) or len(undecided) == 1 and reasons == [
            undecided_text(undecided[0], report.settings)]):  # the headline says it all
        return []
    return [f"  {reason}" for reason in reasons]


def verdict_head_reasons(report: RoundsReport) -> List[str]:
    """Return the reasons the headline shows: a FAIL's or INCONCLUSIVE's first that is not an
    undecided row."""
    rows = {undecided_text(r, report.settings) for r in report.outcome.undecided}
    return [reason for reason in report.outcome.reasons if reason not in rows][:1]


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
    lines += [line for item in unlike_sections(sections) for line in (item, "")]
    for section in sections:
        report = section.report
        words = pool_words(section)
        pooled = f"; {words}" if words else ""
        lines += [f"## {section.name}", "",
                  f"{md_code(section.folder)}: base `{report.base}`, new `{report.new}`; "
                  f"{plural(len(report.used), 'round')} used of {len(section.runs)}; corpus "
                  f"`{report.corpus_sha256[:12]}` ({report.corpus_count} prompts){pooled}.", "",
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
