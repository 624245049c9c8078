"""What a reader sees of the gate's words, read from each output as a user reads it (text,
Markdown and the job summary, JSON, JUnit, the page): the verdict first, an undecided result
that is not a pass and says what it could have missed, "no worse" where "same" would mislead,
a row Holm held back, the p's test named, the interval judged shown, and bounds for figures
past sense."""

import html
import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

from router_latency.gate import DETECTS_CONFIDENCE
from conftest import make_run, ROOT, TOOL

MISSED = ("not a pass: it could have missed a slowdown of up to +37.3% (Sequential p50)")


def sides(folder, number, new):
    """Write round `number`: cpu at (10, 20, 30, 100) ms/req/s, gpu at `new`."""
    make_run(folder / f"r{number}-cpu.json", label="cpu", passes={1: (10, 20, 30, 100)},
             started_unix=10.0 * number)
    make_run(folder / f"r{number}-gpu.json", label="gpu", passes={1: new},
             started_unix=10.0 * number + (3 if number % 2 else -3))


def rounds(cli, folder, *extra):
    return cli("rounds", "--dir", folder, "--base", "cpu", "--new", "gpu", *extra)


def undecided(folder):
    # p50 ratios 0.9, 1.15, 1.0: the worse end +37.3%, beyond the 5% tolerance
    for number, new_p50 in enumerate((9.0, 11.5, 10.0), 1):
        sides(folder, number, (new_p50, 20, 30, 100))


def outputs(cli, folder, *extra):
    """Return the text, JSON, JUnit (parsed) and page (text) of one rounds judgement."""
    text = rounds(cli, folder, "--junit", folder / "junit.xml", "--html", folder / "page.html",
                  *extra)
    document = json.loads(rounds(cli, folder, "--format", "json", *extra).out)
    junit = ElementTree.parse(folder / "junit.xml").getroot()
    page = html.unescape(re.sub(r"<[^>]+>", " ", (folder / "page.html").read_text()))
    return text, document, junit, page


def page_without_axes(folder):
    """Return the page's text without its plots' axis marks (a scale, not a figure)."""
    marked = re.sub(r'<text [^>]*y="(88|\d+)" text-anchor="(start|middle|end)">[+-]?[\d.]+%'
                    r'</text>', "", (folder / "page.html").read_text())
    return html.unescape(re.sub(r"<[^>]+>", " ", marked))


def junit_case(junit, name):
    return next(c for c in junit.iter("testcase") if c.get("name") == name)


def test_the_text_report_opens_with_its_verdict_so_its_head_shows_it(tmp_path):
    undecided(tmp_path)
    head = subprocess.run(f"'{sys.executable}' '{TOOL}' rounds --dir '{tmp_path}' --base cpu "
                          f"--new gpu | head -3", shell=True, capture_output=True, text=True,
                          timeout=60, cwd=ROOT).stdout.splitlines()
    assert head[0].startswith(f"verdict: INCONCLUSIVE: {MISSED}; Sequential p50 undecided: ")
    assert head[1] == "undecided: 42 more rounds would decide it (at the spread seen)"
    assert head[2] == ""


def test_an_undecided_gate_is_not_a_pass_and_says_what_it_could_have_missed(
        tmp_path, cli, monkeypatch):
    undecided(tmp_path)
    summary = tmp_path / "summary.md"
    summary.write_text("")  # the runner creates it
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    text, document, junit, page = outputs(cli, tmp_path)
    assert text.code == 3
    lines = text.out.splitlines()
    assert lines[0] == lines[-1] and lines[0].startswith(f"verdict: INCONCLUSIVE: {MISSED}; ")
    # the job summary's first line: the largest slowdown the run could have missed
    assert summary.read_text().splitlines()[0] == (
        f"**Verdict: INCONCLUSIVE**: {MISSED}; gpu against cpu, 3 rounds used")
    assert document["status"] == "inconclusive"
    assert document["could_miss"]["pct"] == document["rows"][0]["judged_interval_pct"][1]
    assert round(document["could_miss"]["pct"], 1) == 37.3
    assert document["could_miss"]["text"] == MISSED.removeprefix("not a pass: ")
    verdict = junit_case(junit, "verdict")
    assert verdict.find("skipped").get("message").startswith(
        f"verdict: INCONCLUSIVE: {MISSED}; ")
    assert f"INCONCLUSIVE {MISSED};" in " ".join(page.split())


def test_a_decided_pass_claims_nothing_missed(tmp_path, cli):
    for number in (1, 2, 3):
        sides(tmp_path, number, (10 + number / 100, 20, 30, 100))
    text, document, junit, page = outputs(cli, tmp_path)
    assert text.code == 0 and text.out.splitlines()[0] == "verdict: PASS"
    assert document["could_miss"] is None
    assert "could have missed" not in text.out + page + ElementTree.tostring(
        junit, encoding="unicode")


def test_a_row_that_may_be_far_faster_reads_no_worse_never_same(tmp_path, cli):
    # the row, -36.1% [-60.2%, +2.8%], read "same": its worse end lies inside the
    # tolerance, its better end 60% faster; shown no worse, not shown the same
    for number, e in enumerate((0.5, -0.5, 0.25, -0.25, 0.0), 1):
        sides(tmp_path, number, (10 * math.exp(math.log(1 - 0.361) + e), 20, 30, 100))
    text, document, junit, page = outputs(cli, tmp_path)
    markdown = rounds(cli, tmp_path, "--format", "markdown").out
    assert text.code == 0
    row = next(line for line in text.out.splitlines() if line.startswith("Sequential  p50"))
    assert re.search(r"-36\.1% \[-60\.\d%, \+4\.\d%\] .* no worse$", row)
    assert re.search(r"\| -36\.1% \[-60\.\d%, \+4\.\d%\] \| [^|]+ \| [^|]+ \| no worse \|",
                     markdown)
    assert document["rows"][0]["verdict"] == "no worse"
    assert junit_case(junit, "Sequential p50").find("system-out").text.startswith("no worse: ")
    assert re.search(r"p50 ms\* 10\.0 6\.39 .{0,40}? -36\.1% \[-60\.\d%, \+4\.\d%\] 1/5 "
                     r"\S+ \S+ no worse", " ".join(page.split()))
    assert not any(line.endswith(" same") for line in text.out.splitlines()
                   if "-60." in line)


def holm_rounds(folder):
    # Sequential p95 +12% over 5 rounds: its own 95% interval lies wholly beyond the 5%
    # tolerance, but Holm at 2.5% / 3 gated rows does not reject it; the rest unchanged
    for number, e in enumerate((0.06, -0.06, 0.03, -0.03, 0.0), 1):
        sides(folder, number, (10, 20 * 1.12 * math.exp(e), 30, 100))


def test_a_row_held_back_by_holm_says_so(tmp_path, cli):
    holm_rounds(tmp_path)
    text, document, junit, page = outputs(cli, tmp_path)
    markdown = rounds(cli, tmp_path, "--format", "markdown").out
    assert text.code == 3
    row = next(line for line in text.out.splitlines() if line.lstrip().startswith("p95 ms*"))
    low = float(re.search(r"\+12\.0% \[\+(\d+\.\d)%, ", row).group(1))
    assert low > 5 and row.endswith(" inconclusive (Holm)")
    assert "(Holm): the interval lies beyond the tolerance, but Holm's correction for the 3 " \
           "gated rows does not show it worse" in text.out
    assert "| inconclusive (Holm) |" in markdown
    p95 = document["rows"][1]
    assert (p95["verdict"], p95["word"], p95["held_by_holm"]) == (
        "inconclusive", "inconclusive (Holm)", True)
    assert [r["held_by_holm"] for r in document["rows"]].count(True) == 1
    assert junit_case(junit, "Sequential p95").find("skipped").get("message").startswith(
        "inconclusive (Holm): change +12.0% [")
    assert "inconclusive (Holm)" in page


def test_the_p_says_what_it_tests(tmp_path, cli):
    holm_rounds(tmp_path)
    text, document, junit, _ = outputs(cli, tmp_path)
    together = next(line for line in text.out.splitlines()
                    if line.startswith("gated rows together: "))
    assert re.search(r"one-sided p [0-9.]+ of worse than the 5% tolerance \(not of any "
                     r"change\)", together)
    assert "of worse than the tolerance 5% (not of any change" in junit_case(
        junit, "gated rows together").find("system-out").text
    assert document["gate_test"]["p_tests"] == "worse than the tolerance"


def test_a_sequential_look_shows_the_interval_it_judges(tmp_path, cli):
    for number, e in enumerate((0.02, -0.03, 0.01, 0.03, -0.02), 1):
        sides(tmp_path, number, (10 * math.exp(e), 20, 30, 100))
    text, document, _, page = outputs(cli, tmp_path, "--sequential", "10")
    lines = text.out.splitlines()
    assert "change [CI judged]" in next(line for line in lines if line.startswith("pass "))
    assert "at this look a gated row's interval is the look's (its boundary)" in text.out
    row = next(line for line in lines if line.startswith("Sequential  p50"))
    shown = re.search(r"([+-]\d+\.\d)% \[([+-]\d+\.\d)%, ([+-]\d+\.\d)%\]", row)
    p50 = document["rows"][0]
    # the table's interval is the judged one, wider than the plain 95% one, and its worse end
    # is the one the verdict names
    assert float(shown.group(3)) == round(p50["judged_interval_pct"][1], 1)
    assert p50["judged_interval_pct"][1] > 100 * math.expm1(p50["log_ratio"]["high"])
    if text.code == 3:
        assert f"Sequential p50 undecided: its worse end reaches {shown.group(3)}%" in lines[0]
    assert f"{shown.group(1)}% [{shown.group(2)}%, {shown.group(3)}%]" in page


def test_figures_past_sense_are_written_as_bounds(tmp_path, cli):
    # a first look, 3 rounds of at most 10: its boundary makes the intervals enormous
    for number, new_p50 in enumerate((9.5, 10.6, 10.0), 1):
        sides(tmp_path, number, (new_p50, 20, 30, 100))
    text, document, junit, page = outputs(cli, tmp_path, "--sequential", "10")
    markdown = rounds(cli, tmp_path, "--format", "markdown", "--sequential", "10").out
    beyond = re.compile(r"\d{4,}(\.\d+)?%|\d,\d{3}(\.\d+)?%")
    page = page_without_axes(tmp_path)
    for shown in (text.out, markdown, ElementTree.tostring(junit, encoding="unicode"), page,
                  document["verdict"], *(r["change_text"] for r in document["rows"])):
        assert beyond.search(shown) is None
    row = next(line for line in text.out.splitlines() if line.startswith("Sequential  p50"))
    assert "more than 10x slower]" in row
    assert "its worse end reaches more than 10x slower" in text.out.splitlines()[0]
    assert "slowdown of up to more than 10x slower" in markdown.splitlines()[0]
    assert re.search(r"Sequential p50: inconclusive +[+-]\d+\.\d% \[[^]]*more than 10x slower\]",
                     " ".join(page.split()))


def test_detects_states_the_bound_it_is_made_from(tmp_path, cli):
    holm_rounds(tmp_path)
    text = rounds(cli, tmp_path).out
    assert (f"detects: the slowdown of that row alone the gate finds 80% of the time, at the "
            f"{100 * DETECTS_CONFIDENCE:g}% upper bound of its spread (so it holds in about "
            f"{100 * DETECTS_CONFIDENCE:g}% of runs)") in text

