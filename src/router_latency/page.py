"""The report page: one self-contained HTML file with SVG plots."""

from __future__ import annotations

import html
import math
import statistics
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple

from .constants import __version__, TIME_WINDOWS
from .words import (BOUND_PCT, fmt_signed, fmt_value, metric_title, plural, shown_decision,
                    visible, worse_sign)
from .requests import pass_title
from .gate import missed_text, Row, row_word
from .noise import noise_lines
from .rounds import report_ladders, RoundsReport
from .render_text import format_closing, rounds_table_parts
from .capacity import format_capacity_rounds
from .outcomes import degraded_line
from .environment import environment_tables, format_order, OrderAndOutliers
from .judged import row_change_text
from .attribution import decomposition_text, part_title, PassBreakdown
from .slower import slowdown_tables
from .render_junit import xml_safe

__all__ = ["Axis", "esc", "padded", "PAGE_STYLE", "PlotBox", "report_page", "table_html",
           "VERDICT_COLORS"]


# One self-contained HTML file, no network and no script, with SVG plots drawn here with the
# standard library: the forest plot of every gated row, each pass's latency distribution and
# latency over time, decisions and errors per round, the environment. It is polyglot markup,
# so an XML parser reads it as a browser does.

SIDE_COLORS = ("#1f77b4", "#e6550d")  # base, new: blue and orange stay apart for most eyes
VERDICT_COLORS = {"pass": "#1b7a34", "better": "#1b7a34", "same": "#455a64",
                  "no worse": "#455a64", "fail": "#c62828", "worse": "#c62828",
                  "inconclusive": "#9a6700"}
BOUND_LOG = math.log1p(BOUND_PCT / 100)  # a forest plot's interval ends there at most
PAGE_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1d1d1f; margin: 24px auto;
  max-width: 1200px; padding: 0 16px; }
h1 { font-size: 40px; margin: 0; letter-spacing: 1px; }
h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 14px 0 4px; }
.verdict { color: #fff; padding: 14px 20px; border-radius: 8px; }
.verdict p, .verdict ul { margin: 4px 0; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr));
  gap: 8px 16px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { padding: 2px 8px; border-bottom: 1px solid #eee; text-align: left;
  white-space: nowrap; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #555; font-size: 12px; }
.key { display: inline-block; width: 22px; height: 4px; vertical-align: middle;
  margin: 0 4px 0 12px; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
"""


def esc(text: Any) -> str:
    """Return text for HTML or SVG: escaped, and without characters XML cannot hold."""
    return html.escape(xml_safe(str(text)), quote=True)


class Axis(NamedTuple):
    """A value range drawn over a pixel range, linear or log10."""
    low: float
    high: float
    start: float
    end: float
    log: bool = False

    def at(self, value: float) -> float:
        scale = math.log10 if self.log else float
        span = (scale(self.high) - scale(self.low)) or 1.0
        return self.start + (scale(value) - scale(self.low)) / span * (self.end - self.start)

    def ticks(self, count: int = 5) -> List[float]:
        """Return tick values: 1, 2, 5 times powers of ten on a log axis, else steps of them."""
        if self.log:
            found = [m * 10.0 ** e for e in range(math.floor(math.log10(self.low)),
                                                    math.ceil(math.log10(self.high)) + 1)
                     for m in (1, 2, 5) if self.low <= m * 10.0 ** e <= self.high]
            if len(found) >= 2:
                return found
        raw = ((self.high - self.low) or abs(self.high) or 1.0) / count
        step = 10.0 ** math.floor(math.log10(raw))
        step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
        first = math.ceil(self.low / step) * step
        return [first + i * step for i in range(int((self.high - first) / step + 1e-9) + 1)]


def padded(values: Sequence[float], log: bool) -> tuple[float, float]:
    """Return a range holding the values with a margin (a factor on a log axis)."""
    low, high = min(values), max(values)
    if log:  # 6% of the span as on a linear axis, so that the data fills the plot
        factor = (high / low) ** 0.06 if high > low else 1.15
        return low / factor, high * factor
    margin = (high - low) * 0.06 or abs(high) * 0.1 or 1.0
    return low - margin, high + margin


class PlotBox(NamedTuple):
    """Where a plot's grid lines run, in pixels: x from left to right, y from top to bottom."""
    left: float
    top: float
    right: float
    bottom: float


def grid_lines(x_axis: Axis, y_axis: Axis, box: PlotBox,
               y_format: Callable = "{:g}".format) -> List[str]:
    """Return a plot's grid lines across the box, each with its tick label outside it."""
    parts = []
    for value in x_axis.ticks():
        x = x_axis.at(value)
        parts.append(f'<line x1="{x:.1f}" y1="{box.top}" x2="{x:.1f}" y2="{box.bottom}" '
                     f'stroke="#e5e5e5"/><text x="{x:.1f}" y="{box.bottom + 14}" '
                     f'text-anchor="middle">{esc(f"{value:g}")}</text>')
    for value in y_axis.ticks():
        y = y_axis.at(value)
        parts.append(f'<line x1="{box.left}" y1="{y:.1f}" x2="{box.right}" y2="{y:.1f}" '
                     f'stroke="#e5e5e5"/><text x="{box.left - 4}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{esc(y_format(value))}</text>')
    return parts


class Series(NamedTuple):
    points: List[Tuple[float, float]]  # (x, y)
    color: str
    dashed: bool
    label: str  # shown when the pointer rests on the line


class PlotScale(NamedTuple):
    """How a line plot draws one axis: its label, and linear or log10. The y axis's tick
    labels are `tick_format` of their values (the x axis's are always {:g})."""
    label: str
    log: bool = False
    tick_format: Callable[[float], str] = "{:g}".format


def line_plot(series: Sequence[Series], title: str, x: PlotScale, y: PlotScale, *,
              width: int = 560, height: int = 270) -> str:
    """Return an SVG plot of lines with axes, ticks and grid lines; "" when no point is
    left to draw (a log axis drops values <= 0)."""
    x_label, x_log, y_label, y_log, y_format = x.label, x.log, y.label, y.log, y.tick_format
    series = [s._replace(points=[(x, y) for x, y in s.points
                                 if (x > 0 or not x_log) and (y > 0 or not y_log)])
              for s in series]
    points = [p for s in series for p in s.points]
    if not points:
        return ""
    x_axis = Axis(*padded([x for x, _ in points], x_log), 58, width - 14, x_log)
    y_axis = Axis(*padded([y for _, y in points], y_log), height - 38, 24, y_log)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
             f'<text x="{width / 2:.0f}" y="14" text-anchor="middle" font-weight="bold">'
             f'{esc(title)}</text>',
             f'<text x="{width / 2:.0f}" y="{height - 4}" text-anchor="middle">'
             f'{esc(x_label)}</text>',
             f'<text transform="translate(12 {height / 2:.0f}) rotate(-90)" '
             f'text-anchor="middle">{esc(y_label)}</text>']
    parts += grid_lines(x_axis, y_axis, PlotBox(58, 24, width - 14, height - 38), y_format)
    for item in series:
        path = " ".join(f"{x_axis.at(x):.1f},{y_axis.at(y):.1f}" for x, y in item.points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{item.color}" '
                     f'stroke-width="1.4" stroke-opacity="0.85"'
                     + (' stroke-dasharray="5 3"' if item.dashed else "")
                     + f'><title>{esc(item.label)}</title></polyline>')
    return "\n".join(parts) + "\n</svg>"


def nice_percents(steps: Sequence[float] = (1, 2, 5)) -> List[float]:
    """Return round percentages, steps times powers of ten either side of 0, above -100, and
    below -50% those of 4, 5, 10, 20, 50 and 100 times faster."""
    return sorted(t for t in {sign * m * 10.0 ** e for e in range(-1, 4) for m in steps
                              for sign in (1, -1)} | {0.0, -75.0, -80.0, -90.0, -95.0, -98.0,
                                                      -99.0} if t > -100)


def forest_axis(values: Sequence[float], start: float, end: float,
                spacing: float = 44.0) -> Axis:
    """Return the log-ratio axis of a forest plot: the values with a margin, widened to the
    round percentages just beyond the smallest and the largest, so that ticks cover them,
    and further where that tick would sit closer to 0 than a label's width."""
    low, high = padded(values, False)
    logs = [math.log1p(t / 100) for t in nice_percents()]
    below = [v for v in logs if v <= min(values)]
    above = [v for v in logs if v >= max(values)]
    low, high = (min(low, max(below)) if below else low), (max(high, min(above)) if above else high)
    for _ in range(len(logs)):
        axis = Axis(low, high, start, end)
        near = [v for v in (max(below, default=None), min(above, default=None))
                if v is not None and v != 0 and abs(axis.at(v) - axis.at(0.0)) < spacing
                and (low <= v <= high)]
        if not near:
            break
        if max(values) > 0 and min(above, default=0) in near:  # the next round tick above
            above = [v for v in logs if v > min(above)] or above
            high = max(high, min(above))
        if min(values) < 0 and max(below, default=0) in near:
            below = [v for v in logs if v < max(below)] or below
            low = min(low, max(below))
    return Axis(low, high, start, end)


def forest_ticks(axis: Axis, span: Tuple[float, float], spacing: float = 44.0) -> List[float]:
    """Return round percentages for a log-ratio axis, at least spacing pixels apart: 1, 2
    and 5 times powers of ten where they give four ticks, else finer steps. 0 stays, and so
    do the ticks at or just beyond either end of span (the points drawn, as log ratios), so
    that the ticks cover every point; a neighbour too close to one of those goes."""
    for steps in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 7.5)):
        inside = [t for t in nice_percents(steps)
                  if axis.low <= math.log1p(t / 100) <= axis.high]
        zero = axis.at(0.0)

        def apart(ticks: List[float]) -> List[float]:  # those a label's width from 0, else all
            return [t for t in ticks if abs(axis.at(math.log1p(t / 100)) - zero) >= spacing] \
                or ticks
        below = apart([t for t in inside if math.log1p(t / 100) <= min(span[0], 0.0)])
        above = apart([t for t in inside if math.log1p(t / 100) >= max(span[1], 0.0)])
        required = {0.0, *below[-1:], *above[:1]}
        kept: List[float] = []
        for tick in inside:
            gap = axis.at(math.log1p(tick / 100)) - axis.at(math.log1p(kept[-1] / 100)) \
                if kept else spacing
            if gap < spacing and tick in required and kept[-1] not in required:
                kept.pop()
                gap = spacing
            if gap >= spacing or tick in required:
                kept.append(tick)
        if len(kept) >= 4:
            break
    return kept


def forest_svg(row: Row, rounds: Sequence[int], tolerance_log: float, width: int = 560,
               height: int = 96) -> str:
    """Return a row's forest plot: each round's change in the worse direction, the interval
    of their mean its word judges (95%, or a --sequential look's), and the tolerance band, on
    a log-ratio axis labelled in %."""
    sign = worse_sign(row.metric)
    points = row.worse_series
    low, high = sorted(sign * v for v in (row.log_ratio.low, row.log_ratio.high))
    if row.judged is not None:  # drawn to ten times either way at most, as written
        low = max(row.judged.low, -BOUND_LOG) if math.isfinite(row.judged.low) else -BOUND_LOG
        high = min(row.judged.high, BOUND_LOG) if math.isfinite(row.judged.high) else BOUND_LOG
    axis = forest_axis(points + [low, high, tolerance_log, -tolerance_log], 16, width - 16)
    color = VERDICT_COLORS.get(row.verdict, "#333")
    band = (axis.at(-tolerance_log), axis.at(tolerance_log))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{esc(pass_title(row.pass_name))} {esc(metric_title(row.metric))}">',
             f'<text x="16" y="14" font-weight="bold">{esc(pass_title(row.pass_name))} '
             f'{esc(metric_title(row.metric))}: <tspan fill="{color}">{esc(row_word(row))}'
             f'</tspan></text><text x="{width - 16}" y="14" text-anchor="end">'
             f'{esc(row_change_text(row))}</text>',
             f'<rect x="{band[0]:.1f}" y="22" width="{band[1] - band[0]:.1f}" '
             f'height="{height - 46}" fill="#e3f1e5"><title>tolerance '
             f'{100 * math.expm1(tolerance_log):g}%</title></rect>',
             f'<line x1="{axis.at(0):.1f}" y1="22" x2="{axis.at(0):.1f}" y2="{height - 24}" '
             f'stroke="#888"/>']
    for tick in forest_ticks(axis, (min(points + [low]), max(points + [high]))):
        x = axis.at(math.log1p(tick / 100))
        anchor = "start" if x < 36 else "end" if x > width - 36 else "middle"  # inside
        parts.append(f'<line x1="{x:.1f}" y1="{height - 24}" x2="{x:.1f}" y2="{height - 20}" '
                     f'stroke="#888"/><text x="{x:.1f}" y="{height - 8}" '
                     f'text-anchor="{anchor}">{f"{tick:+g}%" if tick else "0%"}</text>')
    for number, value in zip(rounds, points):
        parts.append(f'<circle cx="{axis.at(value):.1f}" cy="38" r="4" fill="none" '
                     f'stroke="{color}" stroke-width="1.5"><title>r{number}: '
                     f'{100 * math.expm1(value):+.1f}%</title></circle>')
    mean = axis.at(sign * row.log_ratio.mean)
    parts.append(f'<line x1="{axis.at(low):.1f}" y1="58" x2="{axis.at(high):.1f}" y2="58" '
                 f'stroke="{color}" stroke-width="3"/><rect x="{mean - 5:.1f}" y="53" '
                 f'width="10" height="10" fill="{color}"/>')
    return "\n".join(parts) + "\n</svg>"


def table_html(header: Sequence[str], rows: Sequence[Sequence[str]],
               right: Sequence[bool] = ()) -> str:
    """Return an HTML table; a verdict cell gets its colour."""
    right = list(right) + [True] * (len(header) - len(right))

    def cell(tag: str, text: str, r: bool) -> str:
        color = VERDICT_COLORS.get(text.strip()) if tag == "td" else None
        attributes = (' class="r"' if r else "") + \
            (f' style="color: {color}; font-weight: bold"' if color else "")
        return f"<{tag}{attributes}>{esc(visible(text))}</{tag}>"  # one line, as every table

    lines = ["<table>", "<tr>" + "".join(cell("th", h, r) for h, r in zip(header, right))
             + "</tr>"]
    lines += ["<tr>" + "".join(cell("td", c, r) for c, r in zip(row, right)) + "</tr>"
              for row in rows]
    return "\n".join(lines + ["</table>"])


def page_verdict(report: RoundsReport) -> str:
    """Return the page's banner: the verdict at a glance, and its reasons."""
    unsure = len(report.outcome.undecided)
    what = (f"{report.new} against {report.base}: {plural(len(report.used), 'round')} judged "
            f"({', '.join(f'r{n}' for n in report.used) or 'none'}), corpus "
            f"{report.corpus_sha256[:12]} ({report.corpus_count} prompts)"
            + (f", round {report.look.rounds} of at most {report.look.max_rounds}"
               if report.look else "")
            + (f"; {plural(unsure, 'inconclusive gated row')}" if unsure else ""))
    missed = missed_text(report.outcome)
    what = (f"not a pass: {missed}; " if report.status == "inconclusive"
            else f"{missed}; " if missed else "") + what
    reasons = "".join(f"<li>{esc(r)}</li>" for r in report.reasons)
    cached = [w.text for w in report.warnings if w.kind == "result_cache"]
    leads = [line for section in report.sections for line in section.lead]
    note = "".join(f"<p><strong>{esc(line)}</strong></p>"
                   for line in [*leads, *cached])
    return (f'<header class="verdict" style="background: {VERDICT_COLORS[report.status]}">'
            f"{note}<h1>{esc(report.status.upper())}</h1><p>{esc(what)}</p>"
            + (f"<ul>{reasons}</ul>" if reasons else "") + "</header>")


def page_rows(report: RoundsReport) -> str:
    """Return the forest plot of every gated row, then the table of all rows."""
    above, table, below = rounds_table_parts(report)
    forests = [forest_svg(r, report.used, report.settings.tolerance_log)
               for r in report.rows if r.gated]
    notes = "".join(f"<li>{esc(line)}</li>" for line in above + below)
    return ("<h2>Gated rows: each round, and the interval the gate judges</h2>"
            '<p class="note">Right of 0 is worse for new (latency up, req/s down), on a log '
            "scale. Circles: each round's change; bar: the 95% t interval of their geometric "
            "mean, square: the mean; shaded: within the tolerance.</p>"
            f'<div class="grid">{"".join(forests)}</div>'
            f"<h2>All rows</h2>"
            f"{'' if table is None else table_html(table.header, table.rows, table.right)}"
            f'<ul class="note">{notes}</ul>')


def page_noise(report: RoundsReport) -> str:
    """Return the gated rows' noise taken apart, the plan and the speed groups."""
    lines = [] if report.noise is None else noise_lines(report.noise, report.rows,
                                                         report.settings)
    return ("<h2>Noise and a plan</h2><ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines)
            + "</ul>") if lines else ""


def page_latencies(report: RoundsReport) -> str:
    """Return, per pass, each side's latency distribution and its latency over time."""
    names = list(dict.fromkeys(v.pass_name for v in report.latencies))
    colors = {report.base: SIDE_COLORS[0], report.new: SIDE_COLORS[1]}
    plots = []
    for name in names:
        views = [v for v in report.latencies if v.pass_name == name]
        cdf = [Series([(q, i) for i, q in enumerate(v.quantiles)], colors[v.side],
                      not v.used, f"r{v.round} {v.side}") for v in views]
        over_time = [Series(list(v.windows), colors[v.side], not v.used,
                            f"r{v.round} {v.side}") for v in views]
        plots += [line_plot(cdf, f"{pass_title(name)}: latency distribution",
                            PlotScale("latency, ms (log scale)", log=True),
                            PlotScale("requests at or below, %",
                                      tick_format=lambda value: f"{value:g}%")),
                  line_plot(over_time, f"{pass_title(name)}: latency over the pass",
                            PlotScale(f"seconds from the first send ({TIME_WINDOWS} windows)"),
                            PlotScale("median latency, ms (log scale)", log=True))]
    legend = ", ".join(f'<span class="key" style="background: {color}"></span>{esc(side)} '
                       f"({role})" for (side, color), role in zip(colors.items(),
                                                                  ("base", "new")))
    return (f'<h2>Latency per pass</h2><p class="note">{legend}: one line per round; dashed: '
            f'a round left out of the verdict</p><div class="grid">{"".join(plots)}</div>')


def page_rounds(report: RoundsReport) -> str:
    """Return the table of decision agreement and failed requests per round."""
    errors = {(e.pass_name, "errors"): {n: (b, w) for n, b, w in e.counts}
              for e in report.errors}
    errors.update({(e.pass_name, "degraded"): {n: (b, w) for n, b, w in e.counts}
                   for e in report.degraded})
    rows = []
    for item in report.agreement:
        differ = ", ".join(f"#{d.id} {shown_decision(d.base)} -> {shown_decision(d.new)}"
                           for d in item.differ[:5]) + (", ..." if len(item.differ) > 5 else "")
        counts = [errors[name].get(item.round) for name in errors]
        rows.append([f"r{item.round}", "yes" if item.used else "left out",
                     f"{item.agree}/{item.total}", differ or "-"]
                    + ["n/a" if c is None else f"{c[0]}/{c[1]}" for c in counts])
    header = ["round", "judged", "decisions agree", "differ"] + [
        f"{pass_title(name)} {what} {report.base}/{report.new}" for name, what in errors]
    return (f"<h2>Decisions and errors per round</h2>"
            f"{table_html(header, rows, [False, False, True, False])}")


def page_details(report: RoundsReport) -> str:
    """Return the slower inputs, the environment, warnings and notes."""
    parts = []
    slowdowns = slowdown_tables(report.slowdowns, report.base, report.new, 20)
    if slowdowns is not None:
        intro, inputs, more, groups = slowdowns
        parts += ["<h2>Which inputs got slower</h2>", f'<p class="note">{esc(intro)}</p>',
                  f"<h3>{esc(inputs.caption)}</h3>",
                  table_html(inputs.header, inputs.rows, inputs.right),
                  f"<p>{esc(more)}</p>" if more else "", f"<h3>{esc(groups.caption)}</h3>",
                  table_html(groups.header, groups.rows, groups.right)]
    found = OrderAndOutliers(report.order_effect, list(report.outliers), report.outlier_changes)
    lines = [w.text for w in report.warnings]
    lines += format_order(report.order, found, report.base, report.new) + format_closing(report)
    lines += [degraded_line(f"r{o.round} {o.side}", o.degraded, o.degraded_signals)
              for o in report.outcomes if o.degraded]
    tables, empty = environment_tables(report.environment)
    if empty:
        lines.insert(0, f"not recorded in any run: {', '.join(empty)}")
    parts += ["<h2>Environment</h2>"] + [table_html(t.header, t.rows, t.right) for t in tables]
    parts += ["<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"]
    return "\n".join(parts)


PART_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
               "#ff9da7", "#9c755f")
REST_COLOR = "#bab0ac"


def stacked_bar_svg(breakdown: PassBreakdown, sides: Sequence[str], width: int = 560) -> str:
    """Return a pass's time per request on each side as horizontal stacked bars: each
    signal's mean time, then what is left of the client's mean latency; a dark mark at the
    client's mean, so that signals that overlap (in parallel) show past it, not forced in."""
    names = [m.split(":")[1] for m, _ in breakdown.base if m.startswith("signal:")
             and m.endswith(":mean")]
    colors = {name: PART_COLORS[i % len(PART_COLORS)] for i, name in enumerate(names)}
    stacks = []
    for parts, client in ((dict(breakdown.base), breakdown.client[0]),
                          (dict(breakdown.new), breakdown.client[1])):
        times = [(name, parts.get(f"signal:{name}:mean", 0.0)) for name in names]
        rest = client - math.fsum(t for _, t in times)
        stacks.append((times + ([("rest", rest)] if rest > 0 else []), client))
    longest = max(max(client, math.fsum(t for _, t in times)) for times, client in stacks)
    left, right, bar = 70, 20, 22
    scale = (width - left - right) / longest if longest > 0 else 0.0
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{40 + 36 * 2}" '
           f'role="img"><title>{esc(pass_title(breakdown.pass_name))}: time per request'
           f'</title>']
    for row, ((times, client), side) in enumerate(zip(stacks, sides)):
        y, x = 20 + 36 * row, float(left)
        svg.append(f'<text x="4" y="{y + 15}">{esc(side)}</text>')
        for name, ms in times:
            color = colors.get(name, REST_COLOR)
            svg.append(f'<rect x="{x:.1f}" y="{y}" width="{ms * scale:.1f}" height="{bar}" '
                       f'fill="{color}"><title>{esc(name)} {fmt_value(ms)} ms</title></rect>')
            if ms * scale > 34:
                svg.append(f'<text x="{x + 3:.1f}" y="{y + 15}" style="fill: #fff">'
                           f'{esc(name)}</text>')
            x += ms * scale
        mark = left + client * scale
        svg.append(f'<line x1="{mark:.1f}" x2="{mark:.1f}" y1="{y - 3}" y2="{y + bar + 3}" '
                   f'stroke="#111" stroke-width="2"><title>client mean {fmt_value(client)} ms'
                   f'</title></line>')
    svg.append(f'<text x="{left}" y="{40 + 36 * 2 - 6}">ms per request, medians over rounds; '
               f'| the client\'s mean latency</text></svg>')
    keys = " ".join(f'<span class="key" style="background: {color}"></span>{esc(name)}'
                     for name, color in (*colors.items(), ("rest", REST_COLOR)))
    return "".join(svg) + f'<p class="note">{keys}</p>'


def page_breakdowns(report: RoundsReport) -> str:
    """Return a panel per pass: where its time went on each side, and the interval of the
    change of each part."""
    if not report.breakdowns:
        return ""
    panels = []
    for breakdown in report.breakdowns:
        rows = [[part_title(r.metric), fmt_value(r.base_median), fmt_value(r.new_median),
                 f"{fmt_signed(r.diff.mean)} [{fmt_value(r.diff.low)}, {fmt_value(r.diff.high)}]",
                 row_change_text(r), row_word(r)]
                for r in breakdown.rows if r.metric.endswith(":mean")]
        decomposition = [decomposition_text(side, dict(parts), client) for side, parts, client
                         in ((report.base, breakdown.base, breakdown.client[0]),
                             (report.new, breakdown.new, breakdown.client[1]))]
        panels.append(
            f"<div><h3>{esc(pass_title(breakdown.pass_name))}</h3>"
            f'<p>{esc(breakdown.sentence)}</p>'
            f"{stacked_bar_svg(breakdown, (report.base, report.new))}"
            + table_html(["part (mean)", f"{report.base} ms", f"{report.new} ms",
                          f"{report.new} - {report.base} [95% CI]",
                          "change [95% CI]", "verdict"], rows,
                         [False, True, True, True, True, False])
            + "".join(f'<p class="note">{esc(line)}</p>' for line in decomposition) + "</div>")
    return ('<h2>Where the time goes</h2><p class="note">Each signal\'s time as the answers '
            "report it, and what is left of the client's mean latency; rows advisory unless "
            f'--gate names them.</p>{"".join(panels)}')


def pareto_series(report: RoundsReport) -> Tuple[List[Series], List[Series], Dict[str, float]]:
    """Return (faint lines, bold lines, capacity per side) of the Pareto plot: each round's
    steps as (req/s, p95), per side the median over rounds of each step every round has, and
    the side's median capacity within the SLO."""
    colors = {report.base: SIDE_COLORS[0], report.new: SIDE_COLORS[1]}
    faint, bold, capacities = [], [], {}
    for side, color in colors.items():
        found = [(n, c) for n, s, c in report.capacity if s == side]
        rounds = [[st for st in c.steps if not st.shed] for _, c in found]
        faint += [Series([(st.req_per_s, st.p95_ms) for st in steps], color, False,
                         f"r{n} {side}") for (n, _), steps in zip(found, rounds)]
        names = [st.name for st in rounds[0]] if rounds else []
        common = [name for name in names if all(any(st.name == name for st in steps)
                                                for steps in rounds)]
        medians = [(statistics.median(st.req_per_s for steps in rounds for st in steps
                                      if st.name == name),
                    statistics.median(st.p95_ms for steps in rounds for st in steps
                                      if st.name == name)) for name in common]
        bold.append(Series(medians, color, False, f"{side}: median over rounds"))
        known = [c.capacity_req_per_s for _, c in found if c.capacity_req_per_s is not None]
        if known:
            capacities[side] = statistics.median(known)
    return faint, bold, capacities


def pareto_svg(report: RoundsReport, width: int = 760, height: int = 380) -> str:
    """Return the Pareto plot of the ladders: throughput (x) against p95 (y, log scale) per
    step, each round a faint line, the medians bold, the SLO a horizontal line and each
    side's capacity within it marked."""
    faint, bold, capacities = pareto_series(report)
    slo = next((c.slo_p95_ms for _, _, c in report.capacity), None)
    points = [p for item in faint + bold for p in item.points]
    if not points:
        return ""
    x_axis = Axis(0.0, max(x for x, _ in points) * 1.08, 62, width - 16)
    ys = [y for _, y in points] + ([slo] if slo else [])
    low, high = padded(ys, True)
    # down to the power of ten below: a narrow log range would otherwise show one tick or two
    y_axis = Axis(min(low, 10.0 ** math.floor(math.log10(min(ys)))), high, height - 40, 28, True)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="throughput against p95">',
             f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" font-weight="bold">'
             f'Throughput against p95, per ladder step</text>',
             f'<text x="{width / 2:.0f}" y="{height - 4}" text-anchor="middle">throughput, '
             f'req/s (routed)</text>',
             f'<text transform="translate(12 {height / 2:.0f}) rotate(-90)" '
             f'text-anchor="middle">p95 latency, ms (log scale)</text>']
    parts += pareto_grid(x_axis, y_axis, width, height)
    colors = {report.base: SIDE_COLORS[0], report.new: SIDE_COLORS[1]}
    for item, weight, opacity in [(f, 1.2, 0.3) for f in faint] + [(b, 3.2, 1.0) for b in bold]:
        path = " ".join(f"{x_axis.at(x):.1f},{y_axis.at(y):.1f}" for x, y in item.points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{item.color}" '
                     f'stroke-width="{weight}" stroke-opacity="{opacity}">'
                     f'<title>{esc(item.label)}</title></polyline>')
        if weight > 2:
            parts += [f'<circle cx="{x_axis.at(x):.1f}" cy="{y_axis.at(y):.1f}" r="3.5" '
                      f'fill="{item.color}"/>' for x, y in item.points]
    if slo:
        y = y_axis.at(slo)
        parts.append(f'<line x1="62" y1="{y:.1f}" x2="{width - 16}" y2="{y:.1f}" '
                     f'stroke="#c62828" stroke-width="1.5" stroke-dasharray="6 4"/>'
                     f'<text x="66" y="{y - 5:.1f}" fill="#c62828">SLO: p95 {slo:g} ms'
                     f'</text>')
        for i, (side, value) in enumerate(capacities.items()):  # marked on the SLO line
            x, y = x_axis.at(value), y_axis.at(slo)
            left = x > width * 0.6  # a label near the right edge goes to the left of its mark
            parts.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{height - 40}" '
                         f'stroke="{colors[side]}" stroke-dasharray="2 3"/>'
                         f'<path d="M{x:.1f} {y - 7:.1f} l7 7 l-7 7 l-7 -7 z" '
                         f'fill="{colors[side]}"/><text x="{x - 10 if left else x + 10:.1f}" '
                         f'y="{y + 20 + 14 * i:.1f}" text-anchor="{"end" if left else "start"}" '
                         f'fill="{colors[side]}">{esc(side)} capacity {esc(fmt_value(value))} '
                         f'req/s</text>')
    return "\n".join(parts) + "\n</svg>"


def pareto_grid(x_axis: Axis, y_axis: Axis, width: int, height: int) -> List[str]:
    """Return the grid lines and tick labels of the Pareto plot."""
    return grid_lines(x_axis, y_axis, PlotBox(62, 28, width - 16, height - 40))


def page_capacity(report: RoundsReport) -> str:
    """Return the ladders' section: the Pareto plot and the sentences under it; nothing for
    runs of fixed passes."""
    plot = pareto_svg(report)
    if not plot:
        return ""
    colors = {report.base: SIDE_COLORS[0], report.new: SIDE_COLORS[1]}
    legend = ", ".join(f'<span class="key" style="background: {color}"></span>{esc(side)}'
                       for side, color in colors.items())
    sentences = "".join(f"<li>{esc(line)}</li>"
                        for line in format_capacity_rounds(report_ladders(report)))
    return ("<h2>Capacity: throughput against latency</h2>"
            f'<p class="note">{legend}: faint, each round\'s ladder; bold, the median over '
            f"rounds of each step; dashed red, the SLO; diamond, each side's median capacity "
            f"within it (steps that shed are left out).</p>{plot}<ul>{sentences}</ul>")


def report_page(report: RoundsReport) -> str:
    """Return the report page: one self-contained HTML file (polyglot XHTML, no script)."""
    title = f"router-latency: {report.new} against {report.base}: {report.status.upper()}"
    body = "\n".join([page_verdict(report), page_rows(report), page_noise(report),
                      page_capacity(report),
                      page_latencies(report), page_breakdowns(report), page_rounds(report),
                      page_details(report)])
    files = sorted(Path(path).name for sides in report.files.values() for path in sides.values())
    return ('<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en">\n'
            f'<head><meta charset="utf-8"/><title>{esc(title)}</title>'
            f"<style>{PAGE_STYLE}</style></head>\n<body>\n{body}\n"
            f'<p class="note">router-latency {esc(__version__)}; files: '
            f"{esc(', '.join(files))}</p>\n</body>\n</html>\n")
