"""Tests of page.py: one HTML file with SVG plots from a rounds report."""

import math
import re

import pytest
from hypothesis import given, strategies as st

from router_latency.report import LinePlot, Lines, Panel, Scale, Section, Series
from router_latency.requests import pass_summary, Request
from router_latency.runfile import Attempt, load_run, PassRecord, RunFile
from router_latency.roundset import Rounds
from router_latency.rounds import find_round_files, judge_rounds, pass_latencies
from router_latency.render_text import format_rounds
from router_latency.render_markdown import format_rounds_markdown
from router_latency.page import (forest_axis, forest_ticks, line_plot, report_page, table_html,
                                 VERDICT_COLORS)
from conftest import SETTINGS, three_rounds


def test_the_page_draws_a_section_it_has_never_seen_and_text_ignores_its_figures(tmp_path):
    three_rounds(tmp_path)
    runs = {n: {s: load_run(p) for s, p in sides.items()}
            for n, sides in find_round_files(str(tmp_path), "cpu", "gpu").items()}
    report = judge_rounds(runs, "cpu", "gpu")
    plot = LinePlot("a new finding", (Series(((1.0, 2.0), (2.0, 3.0)), 1, False, "r1 gpu"),),
                    Scale("x"), Scale("y", suffix="%"))
    found = Section(key="new_finding", page=(
        Panel(place=45, heading="A new finding", note="what it shows", keys=((1, "gpu"),),
              items=(plot, Lines(("one line <b>",)))),
        Panel(place=84, items=(Lines(("in the closing list",)),))))
    more = report._replace(sections=report.sections + (found,))
    assert format_rounds(more) == format_rounds(report)
    assert format_rounds_markdown(more) == format_rounds_markdown(report)
    page = report_page(more)
    assert '<h2>A new finding</h2><p class="note"><span class="key" style="background: ' \
        '#e6550d"></span>gpu: what it shows</p><svg' in page
    assert "<li>one line &lt;b&gt;</li></ul>" in page
    # between the latencies (40) and the decisions (60); the closing list runs on past 83
    assert page.index("Latency per pass") < page.index("A new finding") \
        < page.index("Decisions and errors per round")
    closing = page[page.index("<h2>Environment</h2>"):]
    assert closing.count("<ul>") == 1 and "<li>in the closing list</li>" in closing


def test_page_axes_follow_the_data(tmp_path):
    # the latency distribution starts at the fastest routed request (an expected rejection
    # answered in 0.1 ms is not drawn), and a pass at 50-70 ms fills its plot
    requests = tuple(Request(i, None, 50.0 + 20 * i / 99, 200, "d", None) for i in range(100))
    rejected = (Request(100, None, 0.1, 400, None, None, outcome="expected_rejection"),)
    summary = pass_summary(requests, 1.0)
    attempt = Attempt(None, None, "2026-01-01T00:00:00Z", 1.0, {}, None, {}, summary,
                         requests + rejected)
    run = RunFile("x", True, {"path": "c.json", "sha256": "a" * 64, "count": 101},
                     (PassRecord("sequential", 1, False, False, attempt),))
    (view,) = pass_latencies(Rounds({1: {"cpu": run, "gpu": run}}, "cpu", "gpu", (1,)))[:1]
    assert view.quantiles[0] == 50.0 and view.quantiles[-1] == 70.0
    svg = line_plot(LinePlot("t", (Series(tuple((q, i) for i, q in enumerate(view.quantiles)),
                                          0, False, "r1"),), Scale("x", log=True), Scale("y")))
    xs = [float(p.split(",")[0]) for p in re.search(r'points="([^"]+)"', svg).group(1).split()]
    assert max(xs) - min(xs) > 0.8 * (560 - 14 - 58)  # the line fills the plot's width


@pytest.mark.parametrize("points", [
    [-0.63, -0.60, -0.66, -0.64],  # about -47%: beyond a last tick of -40% before
    [0.07, 0.075, 0.072],          # +7 to +8%: beyond a last tick of +5% before
    [-0.02, 0.01, 0.3],            # +35%
    [-2.5, -2.0],                  # -92%
    [-0.9, -0.3, 0.013],           # +1.3% at the top of a wide axis: its tick not on 0's
    [-0.02, 0.3, 1.1],             # +200%: its label inside the plot
])
def test_forest_ticks_cover_every_point(points):
    low, high = min(points), max(points)
    tolerance = math.log(1.05)
    axis = forest_axis(points + [tolerance, -tolerance], 16, 544)
    ticks = [math.log1p(t / 100) for t in forest_ticks(axis, (low, high))]
    assert min(ticks) <= low and max(ticks) >= high, (ticks, points)
    assert 0.0 in ticks
    pixels = [axis.at(t) for t in ticks]
    assert all(b - a >= 30 for a, b in zip(pixels, pixels[1:])), pixels


def test_a_verdict_cell_with_its_qualifier_takes_the_words_colour():
    # before: "inconclusive" cells were coloured, "inconclusive (Holm)" ones not at all
    page = table_html(["verdict"], [["inconclusive"], ["inconclusive (Holm)"], ["1.2 ms"]])
    cells = re.findall(r"<td([^>]*)>", page)
    colour = f'style="color: {VERDICT_COLORS["inconclusive"]}; font-weight: bold"'
    assert colour in cells[0] and cells[1] == cells[0] and "style" not in cells[2]


@given(st.text())
@SETTINGS
def test_markup_is_escaped_as_html_escape_writes_it(text):
    import html
    from router_latency.page import markup_escaped
    assert markup_escaped(text, quote=True) == html.escape(text, quote=True)
    assert markup_escaped(text, quote=False) == html.escape(text, quote=False)
