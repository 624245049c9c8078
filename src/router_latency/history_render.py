"""The history report as text, Markdown, JSON and one self-contained HTML page that plots each
gated row's series and its cumulative change from the baseline."""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

from .constants import __version__
from .words import fmt_value, metric_label, plural
from .history import (Change, history_change_text, HISTORY_SCHEMA, HistoryReport,
                      RowTrend, TrendPoint)
from .report import md_text, Outside, render_table, Table
from .page import Axis, esc, padded, PAGE_STYLE, PlotBox, table_html, VERDICT_COLORS

__all__ = ["format_history", "format_history_markdown", "history_json", "history_page"]


def level_cell(point: TrendPoint) -> str:
    if point.level_low is None or point.level_high is None:
        return f"{fmt_value(point.level)} (one run)"
    return (f"{fmt_value(point.level)} [{fmt_value(point.level_low)}, "
            f"{fmt_value(point.level_high)}]")


def row_table(row: RowTrend) -> Table:
    """Return a row's series: each commit's level, step and cumulative change (worse
    direction), each with its 95% interval, and whether its step is a change point."""
    lines = []
    for p in row.points:
        step = "-" if p.step is None else history_change_text(p.step)
        total = "-" if p.cumulative is None else "0 (baseline)" \
            if p.cumulative.variance == 0 and p.cumulative.mean == 0 else \
            history_change_text(p.cumulative)
        # the commit and its label come from outside (git, --label): escaped by each format
        lines.append([Outside(p.commit + (f" ({p.label})" if p.label else "")), p.date[:10],
                      level_cell(p), step, total, "step" if p.change_point else "",
                      p.verdict or p.kind])
    held = " (Holm)" if row.held_by_holm else ""
    return Table(f"{row.title}: {row.status.upper()}{held}, drift {drift_words(row)}",
                 ["commit", "date", f"{metric_label(row.metric)} [95%]", "step [95%]",
                  "cumulative [95%]", "change point", "its folder's verdict"], lines,
                 [False, False, True, True, True, False, False])


def drift_words(row: RowTrend, index: int = -1) -> str:
    """Return the cumulative change at a point (the last: the drift) with its interval."""
    found = row.points[index].cumulative if row.points else None
    if found is None or index == -1 and row.drift is None:
        return "no paired step after the baseline"
    return history_change_text(found)


def what_line(report: HistoryReport) -> str:
    counted = max((len(r.points) for r in report.rows), default=0)
    return (f"{plural(counted, 'commit')} like {report.reference} since {report.baseline}, "
            f"tolerance {report.tolerance_pct:g}% (+ slower; for req/s, of the time per "
            f"request)")


def detail_lines(report: HistoryReport) -> List[str]:
    """Return the change points, what was left out and the notes."""
    lines = []
    for row in report.rows:
        steps = sum(p.step is not None for p in row.points)
        found = [p.commit for p in row.points if p.change_point]
        lines.append(f"{row.title}: change points (Holm over {plural(steps, 'step')}, "
                      f"family-wise 5%): {', '.join(found) or 'none'}")
    lines += [f"left out: {commit}: {why}" for commit, why in report.left_out]
    if report.left_out:
        lines.append("(--allow-mismatch corpus|node|config compares them anyway, where a "
                     "change of that kind is the change under test)")
    return lines + [f"note: {note}" for note in report.notes]


def format_history(report: HistoryReport) -> List[str]:
    """Return the history report as text: the drift gate's verdict, then a table per row."""
    lines = [f"DRIFT {report.status.upper()}: {what_line(report)}"]
    lines += [f"  {reason}" for reason in report.reasons]
    for row in report.rows:
        table = row_table(row)
        lines += ["", table.caption] + render_table(table.header, table.rows, right=table.right)
    return lines + [""] + detail_lines(report)


def format_history_markdown(report: HistoryReport) -> List[str]:
    """Return the history report as Markdown for a job summary."""
    lines = [f"**Drift: {report.status.upper()}**: {md_text(what_line(report))}", ""]
    lines += [f"- {md_text(reason)}" for reason in report.reasons]
    for row in report.rows:
        table = row_table(row)
        lines += ["", f"**{md_text(table.caption)}**", ""]
        lines += render_table([md_text(h) for h in table.header], table.rows, markdown=True,
                              right=table.right)
    return lines + [""] + [f"- {md_text(line)}" for line in detail_lines(report)]


def change_json(change: Optional[Change]) -> Optional[Dict[str, float]]:
    """Return a change as JSON, in its worse direction as every change is written (for req/s,
    of the time per request): its percent with the 95% interval, and its log ratio with its
    standard error and df."""
    if change is None:
        return None
    return {"pct": 100 * math.expm1(change.mean), "low_pct": 100 * math.expm1(change.low),
            "high_pct": 100 * math.expm1(change.high), "worse_log": change.mean,
            "se_log": math.sqrt(change.variance), "df": change.df}


def history_json(report: HistoryReport) -> Dict[str, object]:
    """Return the report as a JSON document, every figure at full precision."""
    return {"schema": HISTORY_SCHEMA.replace("history/", "history-report/"),
            "status": report.status, "exit_code": report.exit_code,
            "reasons": list(report.reasons), "baseline": report.baseline,
            "reference": report.reference, "tolerance_pct": report.tolerance_pct,
            "report": report.report, "fail_level": report.fail_level,
            "left_out": [{"commit": c, "why": w} for c, w in report.left_out],
            "notes": list(report.notes),
            "rows": [{"pass": r.pass_name, "metric": r.metric, "status": r.status,
                      "held_by_holm": r.held_by_holm,
                      "drift": change_json(r.drift), "p_beyond": r.p_beyond,
                      "most": [{"commit": c, "worse_log": v}
                               for c, v in r.most],
                      "points": [{"commit": p.commit, "label": p.label, "date": p.date,
                                  "kind": p.kind, "verdict": p.verdict, "level": p.level,
                                  "level_low": p.level_low, "level_high": p.level_high,
                                  "step": change_json(p.step),
                                  "cumulative": change_json(p.cumulative),
                                  "change_point": p.change_point} for p in r.points]}
                     for r in report.rows]}


SERIES_COLOR, DRIFT_COLOR, LIMIT_COLOR = "#1f77b4", "#e6550d", "#c62828"


def svg_open(title: str, y_label: str, width: int, height: int) -> List[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
            f'<text x="{width / 2:.0f}" y="14" text-anchor="middle" font-weight="bold">'
            f'{esc(title)}</text>',
            f'<text x="{width / 2:.0f}" y="{height - 4}" text-anchor="middle">commit, '
            f'oldest first</text>',
            f'<text transform="translate(12 {height / 2:.0f}) rotate(-90)" '
            f'text-anchor="middle">{esc(y_label)}</text>']


def commit_axis(first: int, count: int, box: PlotBox) -> Axis:
    """Return the x axis of a plot of commits, indexes first to first + count - 1."""
    return Axis(*padded([float(first), float(first + count - 1)], False), box.left, box.right)


def commit_grid(names: Sequence[str], x_axis: Axis, first: int, y_axis: Axis,
                box: PlotBox) -> List[str]:
    """Return a plot's grid: a line per y tick, labelled, and the commits' names along x
    (as many as fit, the last always), the first at index `first`."""
    parts = []
    for value in y_axis.ticks():
        y = y_axis.at(value)
        parts.append(f'<line x1="{box.left}" y1="{y:.1f}" x2="{box.right}" y2="{y:.1f}" '
                     f'stroke="#e5e5e5"/><text x="{box.left - 4}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{esc(f"{value:g}")}</text>')
    every = max(1, math.ceil(len(names) * 70 / (box.right - box.left)))
    for index, name in enumerate(names):
        if index % every == 0 or index == len(names) - 1:
            x = x_axis.at(first + index)
            parts.append(f'<text x="{x:.1f}" y="{box.bottom + 14}" text-anchor="middle">'
                         f"{esc(name[:10])}<title>{esc(name)}</title></text>")
    return parts


def interval_marks(x: float, y: Sequence[float], color: str, title: str,
                   marked: bool = False) -> str:
    """Return a point (y[1]) with its interval bar (y[0] to y[2]) at pixel x."""
    bar = "" if y[0] == y[2] else (f'<line x1="{x:.1f}" y1="{y[0]:.1f}" x2="{x:.1f}" '
                                   f'y2="{y[2]:.1f}" stroke="{color}" stroke-width="1.6"/>')
    return (f'<g>{bar}<circle cx="{x:.1f}" cy="{y[1]:.1f}" r="{5 if marked else 3.5}" '
            f'fill="{"#fff" if marked else color}" stroke="{color}" stroke-width="2"/>'
            f"<title>{esc(title)}</title></g>")


def series_svg(row: RowTrend, width: int = 560, height: int = 270) -> str:
    """Return the plot of a row's level per commit with its 95% interval; a change point
    drawn hollow and larger."""
    points = row.points
    values = [v for p in points for v in (p.level, p.level_low, p.level_high) if v is not None]
    box = PlotBox(58, 24, width - 14, height - 38)
    x_axis = commit_axis(0, len(points), box)
    y_axis = Axis(*padded(values, False), height - 38, 24)
    parts = svg_open(f"{row.title}: the series", metric_label(row.metric), width, height)
    parts += commit_grid([p.commit for p in points], x_axis, 0, y_axis, box)
    for i, p in enumerate(points):
        low = p.level if p.level_low is None else p.level_low
        high = p.level if p.level_high is None else p.level_high
        parts.append(interval_marks(x_axis.at(i), [y_axis.at(v) for v in (low, p.level, high)],
                                    SERIES_COLOR, f"{p.commit}: {level_cell(p)}",
                                    p.change_point))
    return "\n".join(parts) + "\n</svg>"


def drift_svg(row: RowTrend, tolerance_pct: float, width: int = 560, height: int = 270) -> str:
    """Return the plot of the cumulative change from the baseline with its 95% band, and the
    tolerance's line."""
    shown = [(i, p.cumulative) for i, p in enumerate(row.points) if p.cumulative is not None]
    # from the first entry's base (the default baseline): its origin, 0%, one place before it
    first = -1 if shown and shown[0][0] == 0 and shown[0][1].variance > 0 else 0
    names = (["base"] if first < 0 else []) + [p.commit for p in row.points]
    if first < 0:
        shown.insert(0, (-1, Change(0.0, 0.0, 0.0, 0.0, 1.0)))
    tolerance = math.log1p(tolerance_pct / 100)
    values = [100 * math.expm1(v) for _, c in shown for v in (c.low, c.high)] + \
        [0.0, 100 * math.expm1(tolerance)]
    box = PlotBox(58, 24, width - 14, height - 38)
    x_axis = commit_axis(first, len(names), box)
    y_axis = Axis(*padded(values, False), height - 38, 24)

    def y(log_value: float) -> float:
        return y_axis.at(100 * math.expm1(log_value))

    parts = svg_open(f"{row.title}: cumulative change", "change since the baseline, %",
                     width, height)
    parts += commit_grid(names, x_axis, first, y_axis, box)
    limit = y(tolerance)
    parts.append(f'<line x1="{box.left}" y1="{limit:.1f}" x2="{box.right}" y2="{limit:.1f}" '
                 f'stroke="{LIMIT_COLOR}" stroke-dasharray="6 4"><title>tolerance '
                 f'{tolerance_pct:g}%</title></line>')
    if shown:
        band = [f"{x_axis.at(i):.1f},{y(c.high):.1f}" for i, c in shown] + \
            [f"{x_axis.at(i):.1f},{y(c.low):.1f}" for i, c in reversed(shown)]
        parts.append(f'<polygon points="{" ".join(band)}" fill="{DRIFT_COLOR}" '
                     f'fill-opacity="0.18" stroke="none"/>')
        line = " ".join(f"{x_axis.at(i):.1f},{y(c.mean):.1f}" for i, c in shown)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{DRIFT_COLOR}" '
                     f'stroke-width="1.6"/>')
        parts += [interval_marks(x_axis.at(i), [y(c.low), y(c.mean), y(c.high)], DRIFT_COLOR,
                                 f"{names[i - first]}: {drift_words(row, i) if i >= 0 else '0'}")
                  for i, c in shown]
    return "\n".join(parts) + "\n</svg>"


def history_page(report: HistoryReport) -> str:
    """Return the history page: one self-contained HTML file (polyglot XHTML, no script)."""
    title = f"router-latency history: drift {report.status.upper()}"
    reasons = "".join(f"<li>{esc(r)}</li>" for r in report.reasons)
    body = [f'<header class="verdict" style="background: {VERDICT_COLORS[report.status]}">'
            f"<h1>DRIFT {esc(report.status.upper())}</h1><p>{esc(what_line(report))}</p>"
            + (f"<ul>{reasons}</ul>" if reasons else "") + "</header>"]
    for row in report.rows:
        table = row_table(row)
        body += [f"<h2>{esc(table.caption)}</h2>",
                 f'<div class="grid">{series_svg(row)}\n'
                 f"{drift_svg(row, report.tolerance_pct)}</div>",
                 '<p class="note">Left: the new side\'s geometric mean over the rounds of each '
                 "commit with its 95% interval; a hollow point is a change point. Right: the "
                 "change since the baseline, the sum of the paired steps, with its 95% band; "
                 "the dashed line is the tolerance.</p>",
                 table_html(table.header, table.rows, table.right)]
    body += ["<h2>Details</h2>", "<ul>" + "".join(f"<li>{esc(line)}</li>"
                                                 for line in detail_lines(report)) + "</ul>"]
    return ('<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en">\n'
            f'<head><meta charset="utf-8"/><title>{esc(title)}</title>'
            f"<style>{PAGE_STYLE}</style></head>\n<body>\n" + "\n".join(body)
            + f'\n<p class="note">router-latency {esc(__version__)}; history '
            f"{esc(report.store)}</p>\n</body>\n</html>\n")
