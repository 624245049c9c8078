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
