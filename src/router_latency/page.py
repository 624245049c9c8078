"""The report page: one self-contained HTML file with SVG plots."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, List, Sequence, Tuple, cast

from .constants import __version__, NamedTuple
from .words import BOUND_PCT, fmt_value, metric_title, plural, visible, worse_sign
from .report import (BANNER, Grid, Group, Heading, LinePlot, Lines, Note, PageItem, Panel,
                     ParetoPlot, StackedBars, Table)
from .requests import pass_title
from .gate import missed_text, Row, row_word
from .rounds import RoundsReport
from .render_text import format_closing, rounds_table_parts
from .judged import row_change_text
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


def markup_escaped(text: str, quote: bool) -> str:
    """Return text with &, < and > (and with quote, " and ') as character references, as
    html.escape writes them (that module, with its table of entities, is 6-8 ms of every
    start of the tool)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace('"', "&quot;").replace("'", "&#x27;") if quote else text


def esc(text: Any) -> str:
    """Return text for HTML or SVG: escaped, and without characters XML cannot hold."""
    return markup_escaped(xml_safe(str(text)), quote=True)


def plain(line: str) -> str:
    """Return a line the program wrote as an element's text: quotes need no escaping there."""
    return markup_escaped(xml_safe(line), quote=False)


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


def line_plot(plot: LinePlot, *, width: int = 560, height: int = 270) -> str:
    """Return an SVG plot of lines with axes, ticks and grid lines; "" when no point is
    left to draw (a log axis drops values <= 0)."""
    title, x_log, y_log, suffix = plot.title, plot.x.log, plot.y.log, plot.y.suffix
    series = [s._replace(points=tuple((x, y) for x, y in s.points
                                      if (x > 0 or not x_log) and (y > 0 or not y_log)))
              for s in plot.series]
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
             f'{esc(plot.x.label)}</text>',
             f'<text transform="translate(12 {height / 2:.0f}) rotate(-90)" '
             f'text-anchor="middle">{esc(plot.y.label)}</text>']
    parts += grid_lines(x_axis, y_axis, PlotBox(58, 24, width - 14, height - 38),
                        lambda value: f"{value:g}{suffix}")
    for item in series:
        path = " ".join(f"{x_axis.at(x):.1f},{y_axis.at(y):.1f}" for x, y in item.points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{SIDE_COLORS[item.side]}" '
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
        # a word with its qualifier ("inconclusive (Holm)") takes the word's colour
        color = VERDICT_COLORS.get(text.strip().split(" (")[0]) if tag == "td" else None
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
    leads = [line for section in report.sections for line in section.lead]
    leads += [line for section in report.sections for panel in section.page
              if panel.place == BANNER for item in panel.items if isinstance(item, Lines)
              for line in item.lines]
    note = "".join(f"<p><strong>{esc(line)}</strong></p>" for line in leads)
    return (f'<header class="verdict" style="background: {VERDICT_COLORS[report.status]}">'
            f"{note}<h1>{esc(report.status.upper())}</h1><p>{esc(what)}</p>"
            + (f"<ul>{reasons}</ul>" if reasons else "") + "</header>")


def page_rows(report: RoundsReport) -> str:
    """Return the forest plot of every gated row, then the table of all rows."""
    above, table, below = rounds_table_parts(report)
    forests = [forest_svg(r, report.used, report.settings.tolerance_log)
               for r in report.rows if r.gated]
    return ("<h2>Gated rows: each round, and the interval the gate judges</h2>"
            '<p class="note">Right of 0 is worse for new (latency up, req/s down), on a log '
            "scale. Circles: each round's change; bar: the 95% t interval of their geometric "
            "mean, square: the mean; shaded: within the tolerance.</p>"
            f'<div class="grid">{"".join(forests)}</div>'
            f"<h2>All rows</h2>"
            f"{'' if table is None else draw(table)}"
            f"{draw(Lines(tuple(above + below), note=True))}")


PART_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
               "#ff9da7", "#9c755f")
REST_COLOR = "#bab0ac"
CLOSING = 84  # the place of the rounds left out and the notes, in the page's closing list


def stacked_bars_svg(figure: StackedBars, width: int = 560) -> str:
    """Return stacked bars, horizontal, each part's value in its colour (the rest grey) and
    a dark mark at the bar's mark, which parts that overlap may run past; a key under them."""
    colors = {name: PART_COLORS[i % len(PART_COLORS)] for i, name in enumerate(figure.names)}
    longest = max(max(bar.mark, math.fsum(v for _, v in bar.parts)) for bar in figure.bars)
    left, right, bar_height, height = 70, 20, 22, 40 + 36 * len(figure.bars)
    scale = (width - left - right) / longest if longest > 0 else 0.0
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img"><title>{esc(figure.title)}</title>']
    for row, bar in enumerate(figure.bars):
        y, x = 20 + 36 * row, float(left)
        svg.append(f'<text x="4" y="{y + 15}">{esc(bar.label)}</text>')
        for name, value in bar.parts:
            svg.append(f'<rect x="{x:.1f}" y="{y}" width="{value * scale:.1f}" '
                       f'height="{bar_height}" fill="{colors.get(name, REST_COLOR)}"><title>'
                       f'{esc(name)} {esc(fmt_value(value))} {esc(figure.unit)}</title></rect>')
            if value * scale > 34:
                svg.append(f'<text x="{x + 3:.1f}" y="{y + 15}" style="fill: #fff">'
                           f'{esc(name)}</text>')
            x += value * scale
        mark = left + bar.mark * scale
        svg.append(f'<line x1="{mark:.1f}" x2="{mark:.1f}" y1="{y - 3}" '
                   f'y2="{y + bar_height + 3}" stroke="#111" stroke-width="2"><title>'
                   f'{esc(bar.mark_label)}</title></line>')
    svg.append(f'<text x="{left}" y="{height - 6}">{plain(figure.caption)}</text></svg>')
    keys = " ".join(f'<span class="key" style="background: {color}"></span>{esc(name)}'
                    for name, color in (*colors.items(), (figure.rest, REST_COLOR)))
    return "".join(svg) + f'<p class="note">{keys}</p>'


def pareto_svg(plot: ParetoPlot, width: int = 760, height: int = 380) -> str:
    """Return a Pareto plot: throughput (x, from 0) against latency (y, log scale) per step,
    each round a faint line, the medians bold, the limit a horizontal line and the marks on
    it; "" without a point."""
    points = [p for item in plot.faint + plot.bold for p in item.points]
    if not points:
        return ""
    slo = plot.limit
    x_axis = Axis(0.0, max(x for x, _ in points) * 1.08, 62, width - 16)
    ys = [y for _, y in points] + ([slo] if slo else [])
    low, high = padded(ys, True)
    # down to the power of ten below: a narrow log range would otherwise show one tick or two
    y_axis = Axis(min(low, 10.0 ** math.floor(math.log10(min(ys)))), high, height - 40, 28, True)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(plot.label)}">',
             f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" font-weight="bold">'
             f'{esc(plot.title)}</text>',
             f'<text x="{width / 2:.0f}" y="{height - 4}" text-anchor="middle">'
             f'{esc(plot.x.label)}</text>',
             f'<text transform="translate(12 {height / 2:.0f}) rotate(-90)" '
             f'text-anchor="middle">{esc(plot.y.label)}</text>']
    parts += pareto_grid(x_axis, y_axis, width, height)
    for item, weight, opacity in ([(f, 1.2, 0.3) for f in plot.faint]
                                  + [(b, 3.2, 1.0) for b in plot.bold]):
        color = SIDE_COLORS[item.side]
        path = " ".join(f"{x_axis.at(x):.1f},{y_axis.at(y):.1f}" for x, y in item.points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                     f'stroke-width="{weight}" stroke-opacity="{opacity}">'
                     f'<title>{esc(item.label)}</title></polyline>')
        if weight > 2:
            parts += [f'<circle cx="{x_axis.at(x):.1f}" cy="{y_axis.at(y):.1f}" r="3.5" '
                      f'fill="{color}"/>' for x, y in item.points]
    if slo:
        y = y_axis.at(slo)
        parts.append(f'<line x1="62" y1="{y:.1f}" x2="{width - 16}" y2="{y:.1f}" '
                     f'stroke="#c62828" stroke-width="1.5" stroke-dasharray="6 4"/>'
                     f'<text x="66" y="{y - 5:.1f}" fill="#c62828">{esc(plot.limit_label)}'
                     f'</text>')
        for i, (side, value, label) in enumerate(plot.marks):  # marked on the limit's line
            x, y, color = x_axis.at(value), y_axis.at(slo), SIDE_COLORS[side]
            left = x > width * 0.6  # a label near the right edge goes to the left of its mark
            parts.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{height - 40}" '
                         f'stroke="{color}" stroke-dasharray="2 3"/>'
                         f'<path d="M{x:.1f} {y - 7:.1f} l7 7 l-7 7 l-7 -7 z" '
                         f'fill="{color}"/><text x="{x - 10 if left else x + 10:.1f}" '
                         f'y="{y + 20 + 14 * i:.1f}" text-anchor="{"end" if left else "start"}" '
                         f'fill="{color}">{esc(label)}</text>')
    return "\n".join(parts) + "\n</svg>"


def pareto_grid(x_axis: Axis, y_axis: Axis, width: int, height: int) -> List[str]:
    """Return the grid lines and tick labels of the Pareto plot."""
    return grid_lines(x_axis, y_axis, PlotBox(62, 28, width - 16, height - 40))


def draw(item: PageItem) -> str:
    """Return one item of a panel as HTML: a line as a paragraph ('' as nothing), a table,
    a figure, a heading, a note, a list, figures side by side, a group."""
    if isinstance(item, str):
        return f"<p>{esc(item)}</p>" if item else ""
    if isinstance(item, Table):
        return table_html(item.header, item.rows, item.right)
    if isinstance(item, Heading):
        return f"<h{item.level}>{esc(item.text)}</h{item.level}>"
    if isinstance(item, Note):
        return ('<p class="note">' if item.small else "<p>") + f"{esc(item.text)}</p>"
    if isinstance(item, Lines):
        return ('<ul class="note">' if item.note else "<ul>") + "".join(
            f"<li>{esc(line)}</li>" for line in item.lines) + "</ul>"
    if isinstance(item, Grid):
        return f'<div class="grid">{"".join(draw(figure) for figure in item.figures)}</div>'
    if isinstance(item, Group):
        return f'<div>{"".join(draw(part) for part in item.items)}</div>'
    if isinstance(item, LinePlot):
        return line_plot(item)
    if isinstance(item, StackedBars):
        return stacked_bars_svg(item)
    return pareto_svg(item)


def panel_html(panel: Panel) -> List[str]:
    """Return a panel as HTML: its heading, its note after the colours' keys, its items;
    run on, or each on a line of its own."""
    keys = ", ".join(f'<span class="key" style="background: {SIDE_COLORS[side]}"></span>'
                     f"{esc(label)}" for side, label in panel.keys)
    note = f"{keys}: {plain(panel.note)}" if keys else plain(panel.note)
    parts = ([f"<h2>{esc(panel.heading)}</h2>"] if panel.heading else []) + (
        [f'<p class="note">{note}</p>'] if panel.note else []) + [draw(i) for i in panel.items]
    return parts if panel.apart else ["".join(parts)]


def joined(panels: Sequence[Panel]) -> List[Panel]:
    """Return the panels in place order, one of lines alone without a heading joined to the
    list that ends the panel before it."""
    found: List[Panel] = []
    for panel in sorted(panels, key=lambda p: p.place):
        last = found[-1].items[-1] if found and found[-1].items else None
        if (not panel.heading and panel.items and isinstance(last, Lines)
                and all(isinstance(item, Lines) for item in panel.items)):
            lines = tuple(line for item in panel.items for line in cast(Lines, item).lines)
            found[-1] = found[-1]._replace(items=found[-1].items[:-1]
                                           + (last._replace(lines=last.lines + lines),))
        else:
            found.append(panel)
    return found


def report_page(report: RoundsReport) -> str:
    """Return the report page: one self-contained HTML file (polyglot XHTML, no script): the
    verdict, the gated rows, then every section's panels in place order."""
    title = f"router-latency: {report.new} against {report.base}: {report.status.upper()}"
    panels = [panel for section in report.sections for panel in section.page
              if panel.place != BANNER]
    panels.append(Panel(place=CLOSING, items=(Lines(tuple(format_closing(report))),)))
    body = "\n".join([page_verdict(report), page_rows(report)]
                     + [part for panel in joined(panels) for part in panel_html(panel)])
    files = sorted(Path(path).name for sides in report.files.values() for path in sides.values())
    return ('<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en">\n'
            f'<head><meta charset="utf-8"/><title>{esc(title)}</title>'
            f"<style>{PAGE_STYLE}</style></head>\n<body>\n{body}\n"
            f'<p class="note">router-latency {esc(__version__)}; files: '
            f"{esc(', '.join(files))}</p>\n</body>\n</html>\n")
