"""Tests of render_markdown.py: the reports as Markdown for a pull request."""

from router_latency.report import Table, text_lines
from router_latency.render_markdown import markdown_blocks
from conftest import assert_renders_as_blocks


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


def test_a_rules_caveat_heads_the_list_below_a_short_verdict_line(tmp_path, cli):
    # under --pass-unless-worse the caveat stood inside the verdict's line: 267-273 characters,
    # a job summary's and a check's title; now it is the first item below the line
    from conftest import three_rounds
    three_rounds(tmp_path)
    caveat = ("--pass-unless-worse: PASS unless a gated row is shown worse than the tolerance; "
              "a PASS does not show that the rows lie within it")
    for extra in ([], ["--strict"]):
        lines = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                    "markdown", "--pass-unless-worse", *extra).out.splitlines()
        assert lines[0].startswith("**Verdict: ") and len(lines[0]) <= 200, lines[0]
        assert "--pass-unless-worse" not in lines[0]
        assert lines[1:3] == ["", f"- {caveat}"], lines[:4]
    plain = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                "markdown").out
    assert "PASS unless a gated row" not in plain  # the default rule has no caveat
