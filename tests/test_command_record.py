"""Tests of command_record.py: record: its parser, --section and its handler."""

import hashlib
import json
import re
import statistics
from pathlib import Path

import pytest

from conftest import (assert_one_line_error, assert_renders_as_blocks,
                      assert_tables_as_github_reads_them, HOSTILE, html_tables, make_run,
                      mark_cached, rounds_folder, shown_raw, suspect_rounds, three_rounds,
                      write_corpus, cpu_gpu_round, undecided)

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


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
    rows = [line for line in text.splitlines()[1:]  # the table's, not the verdict's reasons
            if "+14.0% [" in line and not line.startswith("  the ")]
    for metric, row in zip(["p50 ms*", "p95 ms*", "p99 ms ", "mean ms", "req/s*"], rows):
        assert f" {metric} " in row
    assert rows[5].startswith("gated rows together: +14.0% [")
    reasons = text.split("\n\n", 1)[0].splitlines()  # the verdict's reasons below it
    assert any(line.startswith("  the 3 gated rows together are +14.0% [") for line in reasons)
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


HASH_A, HASH_B = "a" * 64, "b" * 64


def test_record_outputs_never_overwrite_a_round_or_each_other(tmp_path, cli):
    three_rounds(tmp_path)
    round_file = tmp_path / "r1-cpu.json"
    before = round_file.read_bytes()
    base = ("record", "--section", f"a={tmp_path}:cpu:gpu", "--force")
    for extra in [("--json", tmp_path / "rec", "--markdown", tmp_path / "rec"),
                  ("--json", round_file, "--markdown", tmp_path / "rec.md"),
                  ("--json", tmp_path / "rec.json", "--markdown", round_file)]:
        assert_one_line_error(cli(*base, *extra), "is the same file as")
    assert round_file.read_bytes() == before and not (tmp_path / "rec").exists()


def test_html_cells_and_record_folders_are_one_line(tmp_path, cli):
    folder = tmp_path / "r@x #1 `q`\x1b[31m"
    folder.mkdir()
    corpus = write_corpus(tmp_path / "corpus.json", HOSTILE + ["d"] * 90)
    sha = hashlib.sha256(Path(corpus).read_bytes()).hexdigest()
    three_rounds(folder, differ_in_round=2, decisions=HOSTILE, sha=sha)
    page = tmp_path / "page.html"
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "gpu", "--corpus", corpus,
                 "--html", page)
    assert result.code in (0, 1, 3), result.err
    html = page.read_text()
    assert not shown_raw(html.replace("\n", "")), "a raw control in the page"
    for line in html.splitlines():  # a cell is one line: no row continues on the next
        assert line.count("<td") == line.count("</td>"), repr(line)
    record = tmp_path / "record.md"
    result = cli("record", "--section", f"s={folder}:cpu:gpu", "--json", tmp_path / "rec.json",
                 "--markdown", record)
    assert result.code in (0, 1, 3), result.err
    text = record.read_text()
    assert not shown_raw(text.replace("\n", ""))
    assert "``" in text and "\\u001b[31m" in text  # a code span with the backticks inside


def test_two_outputs_named_dash_collide(tmp_path, cli, monkeypatch):
    three_rounds(tmp_path)
    monkeypatch.chdir(tmp_path)
    corpus = write_corpus(tmp_path / "corpus.json", ["a"])
    results = [  # today: JSON and CSV mixed on stdout, or one file '-' written twice
        cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out", "-", "--csv",
            "-", "--label", "x", "--check"),
        cli("record", "--section", f"s={tmp_path}:cpu:gpu", "--json", "-", "--markdown", "-"),
        cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--html", "-",
            "--junit", "-"),
    ]
    for result in results:
        assert_one_line_error(result, "- is the same file as", "--")
    assert not (tmp_path / "-").exists()


def test_rounds_refuses_sides_whose_cache_status_differs_unless_told(tmp_path, cli):
    folder = rounds_folder(tmp_path / "rounds", lambda n, side: side)
    for n in (1, 2, 3):
        mark_cached(folder / f"r{n}-rocm.json")
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert_one_line_error(result, "the runs were not measured alike: cache: r1-rocm.json "
                          "'detected'", "(r1-cpu.json 'not detected by timing')",
                          "--allow-mismatch")
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                 "--allow-mismatch", "cache")
    assert result.code != 2
    assert "warning: rocm r1, rocm r2, rocm r3: a result cache answered: seen by the router's " \
           "metrics (50 hits of 60 lookups during the passes)" in result.out
    assert "warning: a result cache answered rocm but not cpu: the comparison measures the " \
           "cache, not the change" in result.out
    assert "router-latency: warning: a result cache answered rocm but not cpu" in result.err
    assert "a result cache answered rocm but not cpu" in cli(
        "rounds", "--dir", folder, "--base", "cpu", "--new", "rocm", "--allow-mismatch",
        "cache", "--format", "json").err
    page = tmp_path / "page.html"
    cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm", "--allow-mismatch",
        "cache", "--html", page)
    banner = page.read_text().split("</header>")[0]
    assert "a result cache answered rocm but not cpu" in banner
    for n in (1, 2, 3):  # a record judges sides measured alike: both cached
        mark_cached(folder / f"r{n}-cpu.json")
    markdown = tmp_path / "record.md"
    record = cli("record", "--section", f"gpu={folder}:cpu:rocm", "--json", tmp_path / "r.json",
                 "--markdown", markdown)
    assert record.code != 2, record.err
    assert "**a result cache answered cpu r1, rocm r1, cpu r2, rocm r2, cpu r3, rocm r3**" \
        in markdown.read_text()


@pytest.mark.parametrize("order", [("slower", "open"), ("open", "slower")])
def test_record_with_a_failed_and_an_undecided_section_exits_as_failed(tmp_path, cli, order):
    # the largest code would be 3, the neutral check of a CI job: the FAIL must not hide
    folders = {"slower": tmp_path / "slower", "open": tmp_path / "open"}
    for folder in folders.values():
        folder.mkdir()
    for number, new_p50 in enumerate((20.0, 21.0, 20.5), 1):
        cpu_gpu_round(folders["slower"], number, (new_p50, 40, 60, 50))
    undecided(folders["open"])
    sections = [a for name in order for a in ("--section", f"{name}={folders[name]}:cpu:gpu")]
    result = cli("record", *sections, "--json", tmp_path / "record.json", "--markdown",
                 tmp_path / "record.md")
    assert result.code == 1, result.out
    lines = result.out.splitlines()
    assert next(line for line in lines if line.startswith("slower: ")).startswith(
        "slower: verdict: FAIL")
    assert next(line for line in lines if line.startswith("open: ")).startswith(
        "open: verdict: INCONCLUSIVE")
