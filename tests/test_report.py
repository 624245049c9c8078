"""Tests of report.py: the report model every renderer draws, and the escaping of text from
outside done once."""

from router_latency.errors import Notice
from router_latency.report import (BANNER, Check, Lines, md_code, md_text, Outside, Panel,
                                   render_table, Section, Table, text_lines)


def test_a_text_table_aligns_its_columns_right_unless_told_and_ends_no_line_in_spaces():
    rows = [["a", "1"], ["bbb", "22"]]
    assert render_table(["name", "n"], rows) == ["name   n", "   a   1", " bbb  22"]
    assert render_table(["name", "n"], rows, right=[False]) == ["name   n", "a      1",
                                                                "bbb   22"]
    assert render_table(["x", "y"], [["long cell", ""]], right=[False, False]) == \
        ["x          y", "long cell"]


def test_a_text_table_shows_control_characters_escaped_and_aligns_on_what_it_shows():
    assert render_table(["who"], [["a\tb"], ["ok"]], right=[False]) == \
        ["who", "a\\tb", "ok"]


def test_a_markdown_table_escapes_outside_text_as_markdown_and_every_bar_once():
    lines = render_table(["a", "b"], [[Outside("@team *x*|y"), "p|q"], [Outside("a\\|b"), "#12"]],
                         markdown=True, right=[False])
    assert lines == ["| a | b |", "|:---|---:|",
                     "| @&#8203;team \\*x\\*\\|y | p\\|q |",
                     "| a\\\\\\|b | #&#8203;12 |"]


def test_text_lines_draw_lines_as_they_are_and_tables_aligned():
    blocks = ["a line", Table("caption", ["k", "v"], [["x", "10"]], [False, True]), "", "last"]
    assert text_lines(blocks) == ["a line", "k   v", "x  10", "", "last"]
    assert text_lines([]) == []


def test_markdown_text_escapes_markup_and_neither_notifies_nor_links():
    assert md_text("a*b_c `x` <y> [z] ~s~ \\") == "a\\*b\\_c \\`x\\` \\<y\\> \\[z\\] \\~s\\~ \\\\"
    assert md_text("ask @octo about #12") == "ask @&#8203;octo about \\#&#8203;12"
    assert md_text("mail a@b.c, issue #x") == "mail a@b.c, issue \\#x"  # neither is a link
    # on one line: the break escaped, its backslash escaped in turn so Markdown shows it
    assert md_text("two\nlines") == "two\\\\nlines"


def test_a_code_span_is_fenced_by_more_backticks_than_it_holds():
    assert md_code("plain") == "`plain`"
    assert md_code("a`b") == "``a`b``"
    assert md_code("``x") == "``` ``x ```"  # a backtick at an end: padded apart from the fence
    assert md_code("a\x1bb") == "`a\\u001bb`"


def test_outside_text_is_a_string_that_remembers_where_it_came_from():
    name = Outside("gpu|0")
    assert name == "gpu|0" and isinstance(name, str) and isinstance(name, Outside)


def test_a_section_is_its_key_and_nothing_else_unless_given():
    section = Section("plan")
    assert section.key == "plan" and section.blocks == () and section.json == {}
    assert section.apart and not section.beside_table and not section.on_request
    notice = Notice("floor", "warning: x")
    full = Section("x", notices=(notice,), checks=(Check("rows", "n", "passed", "", ""),),
                   page=(Panel(BANNER, items=(Lines(("a",)),)),), record=((20, "s"),))
    assert full.notices == (notice,) and full.page[0].place == BANNER == 0
    assert full.record == ((20, "s"),)
