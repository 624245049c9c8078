"""rendering: the exact text, Markdown and JSON that compare and rounds print for run files
written with known figures."""

import csv
import hashlib
import math
import html.parser
import io
import json
import re
import statistics
import textwrap
import xml.etree.ElementTree as ElementTree

import html5lib
import pytest
from junitparser import Failure, JUnitXml, Skipped

from router_latency.roundset import Rounds
from router_latency.words import change_text, pct_text
from router_latency.gpu import GPU_RANGED
from router_latency.runfile import Attempt, load_run, PassRecord, RunFile
from router_latency.captured import RouterCpu
from router_latency.phases import PhaseWindow
from router_latency.requests import pass_summary, Request
from router_latency.rounds import pass_latencies
from router_latency.environment import environment_rows
from router_latency.slower import InputSlowdowns, Slowdown, slowdown_tables
from router_latency.report import Table, text_lines
from router_latency.render_markdown import markdown_blocks
from router_latency.render_junit import requests_csv
from router_latency.page import forest_axis, forest_ticks, line_plot
from router_latency.report import Lines, LinePlot, Panel, Scale, Section, Series
from router_latency.rounds import find_round_files, judge_rounds
from router_latency.render_text import format_rounds
from router_latency.render_markdown import format_rounds_markdown
from router_latency.page import report_page
from conftest import make_run, three_rounds, two_runs, write_corpus


def test_compare_table_and_differing_inputs(tmp_path, cli):
    corpus = write_corpus(tmp_path / "c.json", ["first", "second", "third prompt " * 10]
                          + [f"prompt {i}" for i in range(3, 101)])
    sha = hashlib.sha256(open(corpus, "rb").read()).hexdigest()
    a, b = two_runs(tmp_path, sha=sha)
    result = cli("compare", a, b, "--corpus", corpus)
    assert result.code == 0 and result.err == ""
    assert result.out == textwrap.dedent(f"""\
        A: {a} (cpu)
        B: {b} (rocm)
        corpus: {sha[:12]} (101 prompts)

        pass        metric     A     B  B - A  change, + slower
        Sequential  p50 ms  10.0  4.00  -6.00            -60.0%
                    p95 ms  20.0  8.00  -12.0            -60.0%
                    p99 ms  30.0  9.00  -21.0            -70.0%
                    req/s    100   250   +150            -60.0%
                    errors     0     1     +1
        Conc 4      p50 ms  12.0  5.00  -7.00            -58.3%
                    p95 ms  25.0  9.00  -16.0            -64.0%
                    p99 ms  40.0  12.0  -28.0            -70.0%
                    req/s    300   700   +400            -57.1%
                    errors     0     1     +1
        errors in Sequential: B timeout 1
        errors in Conc 4: B timeout 1

        decisions: 99/101 inputs agree (sequential pass)
          #2 "third prompt third prompt third prompt third prompt third pr": z -> w
          #100 "prompt 100": d -> (no decision)
        A consistency: 0 inputs changed decision between passes
        B consistency: 0 inputs changed decision between passes
        verdict: PASS: one run each, no interval (rounds judges with intervals); decisions diff\
er in 2 inputs (not gated: --fail-on-decision-change fails on them)
        """)


def test_rounds_table_reads_like_the_published_record(tmp_path, cli):
    three_rounds(tmp_path, differ_in_round=2)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--per-round")
    assert result.err == ""
    assert result.out == textwrap.dedent("""\
        verdict: FAIL: decisions differ in r2 (1 input)

        rounds: 3 used (r1, r2, r3); base cpu, new gpu; corpus aaaaaaaaaaaa (101 prompts)
        change: gpu against cpu in time per request (for req/s, its inverse), + slower, - faster; t\
he geometric mean of the per-round ratios with a 95% Student t interval on their logs, df 2; slower\
 in: the rounds in which gpu was slower; gpu - cpu: mean paired difference; medians over rounds, de\
scriptive; tolerance 5%; detects: the slowdown of that row alone the gate finds 80% of the time, at\
 the 90% upper bound of its spread (so it holds in about 90% of runs)
        gate (*): p50, p95, req/s of every pass, 3 rows worth 2.0 independent; worse: one-sided tes\
ts at 2.5% each on their per-round mean and by Holm across them (family-wise 5%); within: each row'\
s worse end inside the tolerance (one-sided 2.5%)

        pass        metric    cpu   gpu     gpu - cpu [95% CI]          change [95% CI]  slower in \
       detects  verdict
        Sequential  p50 ms*  10.0  6.00   -4.00 [-6.48, -1.52]   -40.6% [-60.9%, -9.7%]        0/3 \
 more than 10x  better
                    p95 ms*  20.0  20.5  +0.500 [-0.742, 1.74]     +2.5% [-3.5%, +8.9%]        2/3 \
        >= 65%  inconclusive
                    p99 ms   30.0  41.0     +11.0 [8.52, 13.5]  +36.6% [+28.6%, +45.2%]        3/3 \
        >= 36%  worse
                    mean ms  15.4  14.4  -1.25 [-2.45, -0.052]    -8.1% [-15.7%, +0.0%]        0/3 \
        >= 51%  no worse
                    req/s*    100   100    0.000 [-2.48, 2.48]     +0.0% [-2.5%, +2.5%]        1/3 \
        >= 26%  same

        gated rows together: -15.2% [-25.3%, -3.8%] per round, one-sided p 0.991 of worse than the \
5% tolerance (not of any change); every gated row slowing together: detects >= 80%

        pass        metric   r1 cpu / gpu  r2 cpu / gpu  r3 cpu / gpu
        Sequential  p50 ms    10.0 / 5.00   10.0 / 6.00   10.0 / 7.00
                    p95 ms    20.0 / 20.5   20.0 / 21.0   20.0 / 20.0
                    p99 ms    30.0 / 40.0   30.0 / 41.0   30.0 / 42.0
                    mean ms   15.4 / 13.6   15.4 / 14.4   15.4 / 14.5
                    req/s      100 / 99.0     100 / 101     100 / 100

        decisions r1: 101/101 agree in every pass
        decisions r2: 100/101 agree in every pass; differ: #2 d -> e (Sequential)
        decisions r3: 101/101 agree in every pass
        errors Sequential (cpu/gpu): r1 0/0, r2 0/0, r3 0/0

        slower inputs: 5 of 101 (Sequential pass; change in latency of each input, gpu against cpu:\
 median over 3 rounds, 95% t interval of the geometric mean; called slower when its own rounds carr\
y it beyond the 5% tolerance, false discovery rate 5% over the inputs and again over the groups (on\
e input may be noise among many and its group of one slower); a call is a one-sided test, so it may\
 stand where the interval reaches inside the tolerance; noise: beyond the tolerance but not carried\
)

        input          change [95% CI]  slower in  call    decision
        #96    +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #97    +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #98    +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #99    +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #100   +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #51       +2.5% [-3.5%, +8.9%]        2/3  -       d
        #52       +2.5% [-3.5%, +8.9%]        2/3  -       d
        #53       +2.5% [-3.5%, +8.9%]        2/3  -       d
        #54       +2.5% [-3.5%, +8.9%]        2/3  -       d
        #55       +2.5% [-3.5%, +8.9%]        2/3  -       d

        group       inputs         change [95% CI]  slower in  call
        decision d     101  -19.8% [-35.6%, -3.3%]        0/3  -

        round  side        load  router cpus      gpu MiB  restarts/faults  discarded   driver cpu \
 flags
        r1     cpu   0.500-1.50  0-15                 n/a              n/a          0  0.01 s (2%) \
 -
        r1     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (2%) \
 -
        r2     cpu   0.500-1.50  0-7                  n/a              n/a          0  0.01 s (2%) \
 cpuset differs (usually 0-15)
        r2     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (2%) \
 -
        r3     cpu   0.500-1.50  0-15                 n/a              n/a          0  0.01 s (2%) \
 -
        r3     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (2%) \
 -

        order: cpu first in r1, r3; gpu first in r2; balanced
        mean p50 gpu - cpu when cpu / gpu started first: Sequential -4.00 / -4.00
        order effect (crossover, gated rows): running second costs -0.6% [-42.8%, +72.9%]
        verdict: FAIL: decisions differ in r2 (1 input)
        """)
    assert result.code == 1


def markdown_kind(line):
    """Return what GitHub makes of a line of our Markdown."""
    if not line:
        return "blank"
    if line.startswith("|"):
        return "table"
    if line.startswith(("- ", "  - ")):
        return "list"
    return "bold" if line.startswith("**") and line.count("**") >= 2 else "text"


def assert_renders_as_blocks(lines):
    """Assert that every line is a table row, a list item, bold or blank, that blocks of
    different kinds stand apart (GitHub would run them into one paragraph or table), and
    that each table row has as many cells as its header."""
    kinds = [markdown_kind(line) for line in lines]
    assert "text" not in kinds, [line for line in lines if markdown_kind(line) == "text"]
    for before, after in zip(kinds, kinds[1:]):
        assert before == after or "blank" in (before, after), (before, after)
    width = None
    for line, kind in zip(lines, kinds):
        cells = len(re.split(r"(?<!\\)\|", line)) if kind == "table" else None
        width = (width or cells) if cells else None
        assert cells == width, line
    assert_tables_as_github_reads_them("\n".join(lines) + "\n")


DELIMITER_ROW = re.compile(r"\|(\s*:?-+:?\s*\|)+")


class HtmlTables(html.parser.HTMLParser):
    """The tables of an HTML document: each a list of rows, each row a list of cell texts."""

    def __init__(self):
        super().__init__()
        self.tables, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self.cell).strip())
            self.cell = None


def html_tables(document):
    parser = HtmlTables()
    parser.feed(document)
    return parser.tables


def assert_tables_as_github_reads_them(markdown):
    """Parse the Markdown as GitHub does (cmark-gfm) and assert that every table the source
    starts is a table of its own, with the source's header, no row that is another table's
    header or delimiter, and every source row as wide as its header (GitHub would pad or cut
    it silently)."""
    import cmarkgfm  # test-only dependency: GitHub's own CommonMark+GFM parser
    lines, fenced = markdown.splitlines(), False
    for i, line in enumerate(lines):  # a table in a code block is text
        fenced ^= line.startswith("```")
        lines[i] = "" if fenced or line.startswith("```") else line
    starts = [i for i, line in enumerate(lines) if DELIMITER_ROW.fullmatch(line.strip())]
    tables = html_tables(cmarkgfm.github_flavored_markdown_to_html(markdown))
    assert len(tables) == len(starts), (len(tables), [lines[i - 1] for i in starts])
    for start, table in zip(starts, tables):
        header = [c.strip() for c in re.split(r"(?<!\\)\|", lines[start - 1].strip())[1:-1]]
        assert len(table[0]) == len(header), (table[0], header)
        end = start + 1
        while end < len(lines) and lines[end].startswith("|"):
            cells = re.split(r"(?<!\\)\|", lines[end].strip())[1:-1]
            assert len(cells) == len(header), (lines[end], header)
            end += 1
        assert len(table) == end - start  # the header and every row, nothing more
        for row in table[1:]:
            assert not DELIMITER_ROW.fullmatch("|" + "|".join(row) + "|"), row
            assert row != table[0], row


def assert_page_tables_keep_their_columns(page):
    """Assert that every table of the report page has a header row and rows as wide as it,
    and no row that is a Markdown delimiter or another header."""
    tables = html_tables(page)
    assert tables
    for table in tables:
        for row in table[1:]:
            assert len(row) == len(table[0]), (row, table[0])
            assert not all(re.fullmatch(r":?-+:?", c) for c in row), row
            assert row != table[0], row


def test_rounds_markdown_leads_with_the_verdict_then_the_table_then_lists(tmp_path, cli):
    three_rounds(tmp_path, differ_in_round=2)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "markdown", "--per-round")
    assert result.code == 1 and result.err == ""
    lines = result.out.splitlines()
    assert lines[:4] == ["**Verdict: FAIL**: gpu against cpu, 3 rounds used", "",
                         "- decisions differ in r2 (1 input)", ""]
    assert lines[4] == "| pass | metric | cpu | gpu | gpu - cpu [95% CI] | change [95% CI] " \
                       "| slower in | detects | verdict |"
    assert lines[6] == "| Sequential | p50 ms* | 10.0 | 6.00 | -4.00 [-6.48, -1.52] | " \
                       "-40.6% [-60.9%, -9.7%] | 0/3 | more than 10x | better |"
    assert ("- decisions r2: 100/101 agree in every pass; differ: \\#&#8203;2 d -\\> e "
            "(Sequential)") in lines
    for caption in ("**Called slower, then the largest noise**", "**Each round**",
                    "**Environment**"):
        assert caption in lines
    assert "| #&#8203;96 | +36.7% [+28.6%, +45.2%] | 3/3 | slower | d |" in lines
    assert_renders_as_blocks(lines)


def test_markdown_renders_tables_from_their_data_and_every_line_as_a_list_item():
    # the same blocks as text and as Markdown: a table is known by being one, not by a line
    # that starts with |, which is a list item (escaped) like any other line
    blocks = ["| a line, not a table", Table("Caption", ["a", "b"], [["1", "|x"]], [False, True]),
              Table("", ["c"], [["2"]], [True]), "  nested", "**Bold**"]
    assert text_lines(blocks) == ["| a line, not a table", "a   b", "1  |x", "c", "2",
                                  "  nested", "**Bold**"]
    lines = markdown_blocks(blocks)
    assert lines == ["- \\| a line, not a table", "", "**Caption**", "",
                     "| a | b |", "|:---|---:|", "| 1 | \\|x |", "",  # two tables stay two
                     "| c |", "|---:|", "| 2 |", "", "  - nested", "", "**Bold**"]
    assert_renders_as_blocks(lines)


def test_markdown_escapes_what_github_would_read_as_markup(tmp_path, cli):
    texts = [f"prompt {i}" for i in range(101)]
    texts[96] = "a | b *bold* <img src=x> [link](y) #1"
    corpus = write_corpus(tmp_path / "c.json", texts)
    sha = hashlib.sha256(open(corpus, "rb").read()).hexdigest()
    three_rounds(tmp_path, differ_in_round=2, sha=sha, decisions=["x|y"] * 3)
    lines = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                "markdown", "--corpus", corpus).out.splitlines()
    row = next(line for line in lines if line.startswith("| #&#8203;96 "))
    assert row == ("| #&#8203;96 | +36.7% [+28.6%, +45.2%] | 3/3 | slower | d | 37 | "
                   "\"a \\| b \\*bold\\* "
                   "\\<img src=x\\> \\[link\\](y) \\#&#8203;1\" |")
    assert "| decision x\\|y | 3 | -40.0% [-60.9%, -9.7%] | 0/3 | - |" in lines
    assert_renders_as_blocks(lines)


def test_compare_markdown_and_json(tmp_path, cli):
    a, b = two_runs(tmp_path)
    result = cli("compare", a, b, "--format", "markdown", "--fail-on-decision-change")
    assert result.code == 1 and result.err == ""
    lines = result.out.splitlines()
    assert lines[:5] == [
        "**Verdict: FAIL**: rocm against cpu, one run each, no interval (rounds judges with "
        "intervals)", "", "- decisions differ in 2 inputs (sequential pass, "
        "--fail-on-decision-change)", "", "| pass | metric | A | B | B - A | change, + slower |"]
    assert "  - \\#&#8203;2: z -\\> w" in lines
    assert_renders_as_blocks(lines)
    passed = cli("compare", a, b, "--format", "json")
    report = json.loads(passed.out)
    assert passed.code == 0 == report["exit_code"]
    assert (report["schema"], report["status"], report["reasons"]) == (
        "router-latency/compare/1", "pass", [])
    sequential = report["passes"][0]
    assert sequential["pass"] == "sequential" and sequential["errors"] == {"a": 0, "b": 1}
    assert sequential["metrics"]["p50_ms"] == {"a": 10.0, "b": 4.0, "diff": -6.0, "ratio": 0.4}
    assert report["decisions"] == {
        "pass": "sequential", "compared": 101, "agree": 99, "unmeasured": 0,
        "changes": [{"id": 2, "a": "z", "b": "w", "text": None},
                    {"id": 100, "a": "d", "b": None, "text": None}]}
    assert report["consistency"] == {"A": [], "B": []}
    failed = json.loads(cli("compare", a, b, "--format", "json",
                            "--fail-on-decision-change").out)
    assert (failed["status"], failed["exit_code"]) == ("fail", 1)
    assert failed["reasons"] == [
        "decisions differ in 2 inputs (sequential pass, --fail-on-decision-change)"]


def test_rounds_json_carries_rows_and_agreement(tmp_path, cli):
    three_rounds(tmp_path, differ_in_round=2)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "json")
    report = json.loads(result.out)
    assert report["schema"] == "router-latency/rounds/1"
    row = report["rows"][0]
    assert (row["pass"], row["metric"], row["verdict"], row["gated"]) == (
        "sequential", "p50_ms", "better", True)
    assert row["diff"]["mean"] == pytest.approx(-4.0)
    assert row["speedup"] == pytest.approx(1 / (0.5 * 0.6 * 0.7) ** (1 / 3))
    assert row["diff"]["df"] == 2 and row["base_values"] == [10, 10, 10]
    assert [r["verdict"] for r in report["rows"]] == ["better", "inconclusive", "worse",
                                                      "no worse", "same"]
    assert report["agreement"][1]["differ"] == [
        {"id": 2, "pass": "sequential", "base": "d", "new": "e"}]
    assert report["status"] == "fail"
    assert report["reasons"] == ["decisions differ in r2 (1 input)"]
    assert report["exit_code"] == result.code == 1
    text = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu").out
    for warning in report["warnings"]:
        assert warning in text


def test_rounds_json_carries_the_environment(tmp_path, cli):
    three_rounds(tmp_path, flagged=True)
    report = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json").out)
    rows = {(r["round"], r["side"]): r for r in report["environment"]}
    assert rows[(2, "cpu")]["flags"] == ["cpuset differs (usually 0-15)"]
    assert rows[(3, "gpu")]["faults"] == 1.0
    assert rows[(1, "gpu")]["gpu_mib_min"] == 1024.0 and rows[(1, "gpu")]["gpu_mib_max"] == 1100.0
    assert rows[(2, "gpu")]["above_load_limit"] is True
    assert report["order"]["first"] == {"r1": "cpu", "r2": "gpu", "r3": "cpu"}
    assert [item["round"] for item in report["left_out"]] == [2, 3]
    assert report["status"] == "inconclusive" and report["exit_code"] == 3


def windows_of(p95s, rate=100.0):
    return tuple(PhaseWindow(10 * i, 10, 0, 0.1 * i, 0.1, p95 / 2, p95, rate)
                 for i, p95 in enumerate(p95s))


def gpu_reading(temp, sclk, power, util, used):
    return {"used_mib": {"card0": used}, "devices": {"card0": {
        "temp_c": temp, "temp_sensor": "junction", "sclk_mhz": sclk, "mclk_mhz": 1600.0,
        "power_w": power, "util_pct": util, "used_mib": used}}}


def suspect_rounds(folder):
    """Three rounds of two passes with router CPU, foreign vCPUs, GPU state and time series:
    r2's gpu router shares its CPUs (1.4 vCPUs of others) on a powersave governor, and its
    Conc 4 pass has a slow phase (window 4: p95 40 against a median of 15)."""
    for number in (1, 2, 3):
        for side, cpu_ms in (("cpu", 3.0), ("gpu", 1.0 * number)):
            odd = side == "gpu" and number == 2
            make_run(
                folder / f"r{number}-{side}.json", label=side, started_unix=10.0 * number
                + 5 * (side == "gpu"), passes={1: (10, 20, 30, 100), 4: (12, 25, 40, 300)},
                router_cpu={c: RouterCpu(0.1, cpu_ms * c, "0-11", 1.0, 2.0,
                                            1.4 if odd else 0.25 + 0.05 * c) for c in (1, 4)},
                windows={1: windows_of([15, 16, 14, 15]),
                         4: windows_of([15, 15, 15, 40] if odd else [15, 15, 16, 15])},
                environment={"gpu": {"tool": "rocm-smi",
                                     "before": gpu_reading(40.0 + number, 800.0, 91.0, 0.0, 512.0),
                                     "after": gpu_reading(48.5, 2100.0, 300.0, 100.0, 520.0)}}
                if side == "gpu" else None,
                host_settings={"driver": {"cpus": "0-1", "governors": {
                    "powersave" if odd else "performance": "0-1"}, "boost": {}}})


def test_an_environment_row_is_a_record_written_as_the_json_report_always_held_it(tmp_path,
                                                                                   cli):
    suspect_rounds(tmp_path)
    runs = {n: {s: load_run(str(tmp_path / f"r{n}-{s}.json")) for s in ("cpu", "gpu")}
            for n in (1, 2, 3)}
    rows = environment_rows(Rounds(runs, "cpu", "gpu"))
    assert [(r.round, r.side) for r in rows] == [(n, s) for n in (1, 2, 3) for s in ("cpu", "gpu")]
    odd = rows[3]  # r2 gpu: its driver's CPUs run powersave, its router's foreign vCPUs 1.4
    assert odd.flags == ("foreign cpus above 1", "slow phase: Conc 4", "governor powersave")
    assert odd.gpu_range("temp_c") == (42.0, 48.5) and rows[2].gpu_range("temp_c") == (None, None)
    assert odd.governors == ("powersave",) and odd.slow_passes == ("c4",)
    keys = list(odd.to_json())
    assert keys[:13] == ["round", "side", "load_min", "load_max", "router_cpus", "gpu_mib_min",
                         "gpu_mib_max", "faults", "discarded_attempts", "driver_cpu_s",
                         "driver_cpu_pct", "above_load_limit", "max_load"]
    assert keys[13:] == ["router_cpu_ms_min", "router_cpu_ms_max", "foreign_vcpus_max",
                         "max_foreign_cpus", "above_foreign_limit",
                         *(f"gpu_{f.key}_{end}" for f in GPU_RANGED for end in ("min", "max")),
                         "slow_passes", "governors", "flags"]
    document = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                              "--format", "json").out)
    assert document["environment"] == [json.loads(json.dumps(r.to_json())) for r in rows]
    assert document["environment"][3]["gpu_sclk_mhz_max"] == 2100.0


def test_rounds_environment_shows_router_cpu_gpu_state_and_slow_phases(tmp_path, cli):
    suspect_rounds(tmp_path)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    lines = result.out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("round  side")))
    assert "\n".join(lines[start:start + 17]) + "\n" == textwrap.dedent("""\
        round  side  gpu MiB  discarded  flags
        r1     cpu       n/a          0  -
        r1     gpu   512-520          0  -
        r2     cpu       n/a          0  -
        r2     gpu   512-520          0  foreign cpus above 1, slow phase: Conc 4, governor powersave
        r3     cpu       n/a          0  -
        r3     gpu   512-520          0  -

        round  side  router cpu ms/req  foreign vCPUs (max)  gpu temp C   sclk MHz  mclk MHz  \
 gpu W  gpu use %  slow phases
        r1     cpu           3.00-12.0                0.450         n/a        n/a       n/a  \
   n/a        n/a  -
        r1     gpu           1.00-4.00                0.450     41-48.5  800-2,100     1,600  \
91-300      0-100  -
        r2     cpu           3.00-12.0                0.450         n/a        n/a       n/a  \
   n/a        n/a  -
        r2     gpu           2.00-8.00                 1.40     42-48.5  800-2,100     1,600  \
91-300      0-100  Conc 4
        r3     cpu           3.00-12.0                0.450         n/a        n/a       n/a  \
   n/a        n/a  -
        r3     gpu           3.00-12.0                0.450     43-48.5  800-2,100     1,600  \
91-300      0-100  -

        not recorded in any run: load, router cpus, restarts/faults, driver cpu
        """)
    report = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json").out)
    row = report["environment"][3]
    assert (row["router_cpu_ms_min"], row["router_cpu_ms_max"]) == (2.0, 8.0)
    assert row["foreign_vcpus_max"] == 1.4 and row["above_foreign_limit"] is True
    assert (row["gpu_temp_c_min"], row["gpu_temp_c_max"]) == (42.0, 48.5)
    assert row["slow_passes"] == ["c4"] and row["governors"] == ["powersave"]


def test_compare_shows_router_cpu_and_slow_phases(tmp_path, cli):
    suspect_rounds(tmp_path)
    result = cli("compare", tmp_path / "r2-cpu.json", tmp_path / "r2-gpu.json")
    assert result.code == 0
    table = result.out.split("\n\n")[1]
    assert table == textwrap.dedent("""\
        pass        metric                 A     B   B - A  change, + slower
        Sequential  p50 ms              10.0  10.0   0.000             +0.0%
                    p95 ms              20.0  20.0   0.000             +0.0%
                    p99 ms              30.0  30.0   0.000             +0.0%
                    req/s                100   100   0.000             +0.0%
                    errors                 0     0       0
                    router cpu ms/req   3.00  2.00   -1.00
                    foreign vCPUs      0.300  1.40   +1.10
        Conc 4      p50 ms              12.0  12.0   0.000             +0.0%
                    p95 ms              25.0  25.0   0.000             +0.0%
                    p99 ms              40.0  40.0   0.000             +0.0%
                    req/s                300   300   0.000             +0.0%
                    errors                 0     0       0
                    router cpu ms/req   12.0  8.00   -4.00
                    foreign vCPUs      0.450  1.40  +0.950
        slow phase: B Conc 4 (window 4 of 4)""")


def test_record_rebuilds_a_section_from_per_round_values(tmp_path, cli):
    # per-round sequential p50 in the published record's form: rocm 8.65-8.72 ms against
    # cpu 22.8-23.6 ms, three rounds
    folder = tmp_path / "stack_b"
    folder.mkdir()
    for number, (cpu, rocm) in enumerate(((22.8, 8.65), (23.2, 8.70), (23.6, 8.72)), 1):
        make_run(folder / f"r{number}-cpu.json", label="cpu", passes={1: (cpu, 30, 40, 40)},
                 started_unix=10.0 * number + 5 * (number % 2))
        make_run(folder / f"r{number}-rocm.json", label="rocm", passes={1: (rocm, 12, 14, 110)},
                 started_unix=10.0 * number + 5 - 5 * (number % 2))
    result = cli("record", "--section", f"stack_b_image={folder}:cpu:rocm", "--json",
                 tmp_path / "record.json", "--markdown", tmp_path / "record.md")
    assert result.code == 0, result.err
    markdown = (tmp_path / "record.md").read_text().splitlines()
    diffs = [8.65 - 22.8, 8.70 - 23.2, 8.72 - 23.6]
    mean = sum(diffs) / 3
    half = 4.302653 * statistics.stdev(diffs) / 3 ** 0.5
    speedup = ((22.8 / 8.65) * (23.2 / 8.70) * (23.6 / 8.72)) ** (1 / 3)
    row = next(line for line in markdown if line.startswith("| Sequential | p50 |"))
    assert row.split(" | ")[2:5] == ["23.2", "8.70",
                                     f"{mean:.1f} [{mean - half:.1f}, {mean + half:.1f}]"]
    assert row.split(" | ")[5].startswith(f"{100 * (1 / speedup - 1):+.1f}% [")
    assert row.split(" | ")[6].startswith(f"{speedup:.2f}x [")  # the published form, labelled
    assert "- Sequential p50 per round: cpu 22.8–23.6 ms, rocm 8.65–8.72 ms" in markdown
    assert "- 101/101 inputs agreed in every pass of every round" in markdown
    assert "- failed requests: none" in markdown
    document = json.loads((tmp_path / "record.json").read_text())
    section = document["sections"]["stack_b_image"]
    assert section["report"]["rows"][0]["new_values"] == [8.65, 8.7, 8.72]
    assert section["rounds"]["r2"]["rocm"]["passes"][0]["summary"]["p50_ms"] == 8.7
    assert "requests" not in section["rounds"]["r2"]["rocm"]["passes"][0]


def regressed_rounds(folder):
    """Three rounds in which gpu's p95 is 50% slower every round, r2 changes a decision whose
    name holds a control character and markup, and gpu times out once in r3."""
    for number, p95 in enumerate((30.0, 30.5, 31.0), 1):
        make_run(folder / f"r{number}-cpu.json", label="cpu", passes={1: (10, 20, 30, 100)},
                 decisions=["d\x01<&>"], started_unix=1000.0 * number)
        make_run(folder / f"r{number}-gpu.json", label="gpu", passes={1: (10, p95, 40, 100)},
                 decisions=["e" if number == 2 else "d\x01<&>"],
                 errors={"timeout": 1} if number == 3 else None,
                 started_unix=1000.0 * number + (-300 if number == 2 else 300))


def junit_cases(path):
    suites = list(JUnitXml.fromfile(str(path)))
    assert len(suites) == 1
    return {case.name: case for case in suites[0]}, suites[0]


def test_junit_has_a_test_per_gated_row_and_round_and_fails_on_the_regression(tmp_path, cli):
    regressed_rounds(tmp_path)
    out = tmp_path / "out" / "junit.xml"
    out.parent.mkdir()
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--junit", out)
    assert result.code == 1 and result.err == ""
    cases, suite = junit_cases(out)
    assert list(cases) == ["Sequential p50", "Sequential p95", "Sequential req/s",
                           "gated rows together", "r1 decisions", "r2 decisions",
                           "r3 decisions", "Sequential errors", "verdict"]
    # the regression, the gated rows together, r2's changed decision, r3's timeout (a failed
    # request has no decision), the errors and the verdict
    assert (suite.tests, suite.failures, suite.skipped) == (9, 6, 0)
    assert cases["Sequential p50"].is_passed and cases["Sequential req/s"].is_passed
    regression = cases["Sequential p95"].result[0]
    assert isinstance(regression, Failure) and regression.type == "regression"
    # ln(30/20), ln(30.5/20), ln(31/20): mean 0.42190, s 0.016395, t(2) 4.302653
    assert regression.message == ("worse: change +52.5% [+46.4%, +58.8%], + is slower "
                                  "(new - base +10.5 [9.26, 11.7]; t interval over 3 rounds, the "
                                  "one its word judges); tolerance 5%")
    decisions = cases["r2 decisions"].result[0]
    assert isinstance(decisions, Failure)
    assert decisions.message == "100/101 inputs agree in every pass"
    assert decisions.text == "#0 d\\u0001<&> -> e (Sequential)"
    assert cases["r1 decisions"].is_passed and cases["r3 decisions"].is_failure
    assert cases["Sequential req/s"].system_out.startswith(
        "same: change +0.0% [+0.0%, +0.0%], + is slower")
    errors = cases["Sequential errors"].result[0]
    assert errors.message == "failed requests cpu/gpu: r1 0/0, r2 0/0, r3 0/1"
    verdict = cases["verdict"].result[0]
    report = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json").out)
    assert verdict.text.splitlines() == report["reasons"] and verdict.message.startswith(
        "verdict: FAIL: ")


def test_junit_skips_an_inconclusive_row_with_the_reason(tmp_path, cli):
    three_rounds(tmp_path)
    out = tmp_path / "junit.xml"
    assert cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--junit",
               out).code == 3
    cases, suite = junit_cases(out)
    skipped = cases["Sequential p95"].result[0]
    assert isinstance(skipped, Skipped)
    assert skipped.message.startswith("inconclusive: change +2.5% [-3.5%, +8.9%]")
    assert skipped.message.endswith(
        "tolerance 5%; Sequential p95 undecided: its worse end reaches +8.9% (tolerance 5%); "
        "about 4 more rounds would decide it at the spread seen")
    assert (suite.tests, suite.failures, suite.skipped) == (9, 0, 2)
    assert isinstance(cases["verdict"].result[0], Skipped)


def page_of(tmp_path, cli, *options):
    page = tmp_path / "report.html"
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--html", page,
                 *options)
    text = page.read_text(encoding="utf-8")
    # well-formed as XML (polyglot markup) and without a parse error as HTML5
    root = ElementTree.fromstring(text.split("\n", 1)[1])
    html5lib.HTMLParser(strict=True).parse(text)
    return result, text, root


def test_report_page_is_well_formed_self_contained_and_leads_with_the_verdict(tmp_path, cli):
    texts = [f"prompt {i}" for i in range(101)]
    texts[96] = "<script>alert(1)</script> & \x01 done"
    corpus = write_corpus(tmp_path / "c.json", texts)
    sha = hashlib.sha256(open(corpus, "rb").read()).hexdigest()
    three_rounds(tmp_path, differ_in_round=2, sha=sha)
    result, text, root = page_of(tmp_path, cli, "--corpus", corpus)
    assert result.code == 1
    ns = {"h": "http://www.w3.org/1999/xhtml", "s": "http://www.w3.org/2000/svg"}
    body = root.find("h:body", ns)
    assert body[0].tag == "{http://www.w3.org/1999/xhtml}header"
    assert body[0].find("h:h1", ns).text == "FAIL"
    assert [li.text for li in body[0].iter("{http://www.w3.org/1999/xhtml}li")] == [
        "decisions differ in r2 (1 input)"]
    svgs = list(root.iter("{http://www.w3.org/2000/svg}svg"))
    forests = [s for s in svgs if s.find("s:rect", ns) is not None]
    assert [s.get("aria-label") for s in forests] == ["Sequential p50", "Sequential p95",
                                                      "Sequential req/s"]
    assert len(forests[0].findall("s:circle", ns)) == 3  # one per round
    # these runs recorded no send times: no latency-over-time plot
    assert [s.get("aria-label") for s in svgs[3:]] == ["Sequential: latency distribution"]
    # no script, nothing fetched: the only URLs are the XML namespaces
    assert "<script" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in text
    assert set(re.findall(r"https?://[^\s\"]+", text)) == {"http://www.w3.org/1999/xhtml",
                                                          "http://www.w3.org/2000/svg"}
    assert "\x01" not in text


def test_report_page_of_rounds_that_cannot_be_judged(tmp_path, cli):
    three_rounds(tmp_path, flagged=True)
    result, text, root = page_of(tmp_path, cli)
    assert result.code == 3
    assert root.find(".//{http://www.w3.org/1999/xhtml}h1").text == "INCONCLUSIVE"
    assert "1 usable round, fewer than 3" in text


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


def test_requests_csv_has_a_line_per_request(tmp_path):
    path = make_run(tmp_path / "run.json", passes={1: (10, 20, 30, 100), 4: (12, 25, 40, 300)},
                    decisions=["a,b", 'say "x"'], errors={"timeout": 1})
    rows = list(csv.reader(io.StringIO(requests_csv(load_run(path).passes).decode())))
    assert rows[0] == ["pass", "id", "start_ms", "latency_ms", "status", "decision", "error"]
    assert len(rows) == 1 + 2 * 101
    assert rows[1] == ["sequential", "0", "", "10", "200", "a,b", ""]
    assert rows[2][5] == 'say "x"'
    assert rows[101] == ["sequential", "100", "", "10", "500", "", "timeout"]
    assert rows[102][:2] == ["c4", "0"]


def test_a_change_is_a_signed_percent_of_time_with_its_interval_the_same_way():
    assert change_text(1.35) == "-25.9%"
    assert change_text(1 / 1.14) == "+14.0%"
    assert change_text(1.0) == "+0.0%"
    assert change_text(None) == change_text(0.0) == "n/a"
    assert change_text(1.68, 1.11, 2.56) == "-40.5% [-60.9%, -9.9%]"
    # a slowdown's interval: 1/high - 1 to 1/low - 1 of the speedup's
    assert change_text(0.8, 0.5, 1.25) == "+25.0% [-20.0%, +100.0%]"
    assert pct_text(-1e-17) == "+0.0%"


def test_every_report_says_the_same_change_the_same_way(tmp_path, cli):
    # gpu takes 14% longer and serves 14% fewer requests a second, in every round alike: text,
    # Markdown, JSON, JUnit, the page and the record all say +14.0%, never 1.14x or 0.88x
    for number, factor in enumerate((1.13, 1.14, 1.15), 1):
        make_run(tmp_path / f"r{number}-cpu.json", label="cpu", passes={1: (10, 20, 30, 100)},
                 started_unix=1000.0 * number)
        make_run(tmp_path / f"r{number}-gpu.json", label="gpu",
                 passes={1: (10 * factor, 20 * factor, 30 * factor, 100 / factor)},
                 started_unix=1000.0 * number + (300 if number % 2 else -300))
    compared = cli("compare", tmp_path / "r2-cpu.json", tmp_path / "r2-gpu.json").out
    changes = [line for line in compared.splitlines() if " ms " in line or " req/s " in line]
    assert len(changes) == 4 and all(line.endswith("  +14.0%") for line in changes)
    report = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json").out)
    for row in report["rows"]:
        assert row["change_text"].startswith("+14.0% [")
        assert row["speedup"] == pytest.approx(1 / 1.14, rel=1e-3)  # the number stays
    text = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--junit",
               tmp_path / "junit.xml", "--html", tmp_path / "page.html").out
    rows = [line for line in text.splitlines()[1:] if "+14.0% [" in line]
    for metric, row in zip(["p50 ms*", "p95 ms*", "p99 ms ", "mean ms", "req/s*"], rows):
        assert f" {metric} " in row
    assert rows[5].startswith("gated rows together: +14.0% [")
    verdict = text.splitlines()[-1]
    assert "the 3 gated rows together are +14.0% [" in verdict  # the verdict's reason
    markdown = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                   "markdown").out
    table = markdown.split("| pass | metric |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert len(table) == 5 and all(" | +14.0% [" in line for line in table)
    junit = (tmp_path / "junit.xml").read_text()
    assert junit.count("change +14.0% [") >= 3 and "x slower" not in junit
    page = (tmp_path / "page.html").read_text()
    assert page.count("+14.0% [") >= 8 and "x slower" not in page and "x faster" not in page
    cli("record", "--section", f"s={tmp_path}:cpu:gpu", "--json", tmp_path / "record.json",
        "--markdown", tmp_path / "record.md")
    record = (tmp_path / "record.md").read_text()
    assert record.count("| +14.0% [") == 5 and "| published speedup, above 1 faster" in record
    for output in (text, markdown, junit, page, record):
        assert "1.14x" not in output and "x slower" not in output and "x faster" not in output


def test_every_table_keeps_its_columns_in_markdown_and_on_the_page(tmp_path, cli):
    # rounds with router CPU and GPU state: two environment tables, the slower inputs, each
    # round; compare and record too
    suspect_rounds(tmp_path)
    for extra in ((), ("--per-round",)):
        result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                     "markdown", "--html", tmp_path / "page.html", *extra)
        assert result.code in (0, 3), result.err
        assert_renders_as_blocks(result.out.splitlines())
        assert result.out.count("| round | side |") == 2  # the two environment tables
        page = (tmp_path / "page.html").read_text()
        assert_page_tables_keep_their_columns(page)
        environment = page.split("<h2>Environment</h2>", 1)[1]
        assert len(html_tables(environment)) == 2
    compared = cli("compare", tmp_path / "r2-cpu.json", tmp_path / "r2-gpu.json", "--format",
                   "markdown").out
    assert_renders_as_blocks(compared.splitlines())
    cli("record", "--section", f"s={tmp_path}:cpu:gpu", "--json", tmp_path / "record.json",
        "--markdown", tmp_path / "record.md")
    assert_tables_as_github_reads_them((tmp_path / "record.md").read_text())


def test_a_table_parser_finds_tables_run_together(tmp_path):
    # the check itself: two tables with no blank line between read as one
    joined = "| a | b |\n|:---|---:|\n| 1 | 2 |\n| c | d | e |\n|:---|---:|---:|\n| 3 | 4 | 5 |\n"
    with pytest.raises(AssertionError):
        assert_tables_as_github_reads_them(joined)
    assert_tables_as_github_reads_them(joined.replace("| 2 |\n", "| 2 |\n\n"))


def test_environment_columns_no_run_recorded_are_left_out_and_named(tmp_path, cli):
    # GPU memory recorded on one side only: the column stays, n/a where it was not recorded
    three_rounds(tmp_path)
    text = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu").out
    header = next(line for line in text.splitlines() if line.startswith("round  side"))
    assert header.split() == ["round", "side", "load", "router", "cpus", "gpu", "MiB",
                              "restarts/faults", "discarded", "driver", "cpu", "flags"]
    assert "not recorded in any run" not in text
    # runs that recorded none of them (no GPU, no load, no router): those columns go
    bare = tmp_path / "bare"
    bare.mkdir()
    for number in (1, 2, 3):
        for side in ("cpu", "gpu"):
            make_run(bare / f"r{number}-{side}.json", label=side,
                     started_unix=1000.0 * number + 500 * ((side == "gpu") == number % 2))
    text = cli("rounds", "--dir", bare, "--base", "cpu", "--new", "gpu", "--html",
               bare / "page.html").out
    header = next(line for line in text.splitlines() if line.startswith("round  side"))
    assert header.split() == ["round", "side", "discarded", "flags"]
    assert ("not recorded in any run: load, router cpus, gpu MiB, restarts/faults, "
            "driver cpu") in text
    page = (bare / "page.html").read_text()
    assert "gpu MiB</th>" not in page and "not recorded in any run: load" in page


def test_slower_inputs_lead_with_those_called_slower_then_the_largest_noise(tmp_path, cli):
    # 15 noisy inputs with the largest ratios, then 12 called slower: the table shows the 12
    # its header counts first, then the largest noise, and names none as "more"
    noise = [Slowdown(i, 2.0 - i / 100, 0.5, 4.0, 2, 3, 0.3, "noise") for i in range(15)]
    slower = [Slowdown(100 + i, 1.3, 1.2, 1.4, 3, 3, 0.001, "slower") for i in range(12)]
    rest = [Slowdown(200 + i, 1.0, 0.9, 1.1, 1, 3, 0.9, "") for i in range(5)]
    found = InputSlowdowns("sequential", (1, 2, 3), tuple(noise + slower + rest), (), (),
                              0.05, 5.0)
    intro, inputs, more, _ = slowdown_tables(found, "base", "new", 20)
    assert intro.startswith("slower inputs: 12 of 32 (")
    assert inputs.caption == "Called slower, then the largest noise"
    assert [row[0] for row in inputs.rows] == [f"#{100 + i}" for i in range(12)] + [
        f"#{i}" for i in range(8)]
    assert [row[3] for row in inputs.rows] == ["slower"] * 12 + ["noise"] * 8
    assert inputs.rows[0][1] == "+30.0% [+20.0%, +40.0%]" and more == ""
    _, inputs, more, _ = slowdown_tables(found, "base", "new", 10)
    assert [row[3] for row in inputs.rows] == ["slower"] * 10
    assert more.startswith("2 more called slower: #110, #111")


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
