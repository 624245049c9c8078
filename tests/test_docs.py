"""docs: the option tables of docs/cli.md (and any in README.md) hold exactly the options the
parser has, each subcommand's under its own heading, with the parser's defaults."""

import argparse
import re

import pytest

from router_latency.cli import build_parser
from conftest import ROOT


def test_ci_runs_the_readme_set_up_commands_word_for_word():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Set-up: two commands", 1)[1].split("```sh\n", 1)[1]
    demo, tests = block.split("```", 1)[0].strip().splitlines()
    assert demo == "python3 router_latency.py demo"
    assert tests.startswith("python3 -m venv --clear .venv && ")
    assert tests in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


DOCS = [ROOT / "README.md", ROOT / "docs" / "cli.md"]


OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def subcommands():
    """{name: its parser} of the command line."""
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def option_tables(path):
    """{command: [(option strings, default cell)]} of every `| option | default |` table
    under a heading named for a command (`## run`, `## simulate and demo`: each command the
    heading names, the first one for the table)."""
    tables, command, header = {}, None, None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            words = re.findall(r"[a-z]+", line[3:])
            command = next((w for w in words if w in subcommands()), None)
            header = None
        elif line.startswith("| option | default |"):
            header = tables.setdefault(command, [])
        elif header is not None and line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            header.append((OPTION.findall(cells[0]), cells[1]))
        elif not line.startswith("|"):
            header = None
    return tables


def parser_options(parser):
    """{option string: its action} of a subcommand, without -h/--help."""
    return {o: a for a in parser._actions for o in a.option_strings
            if not isinstance(a, argparse._HelpAction)}


def shown_default(action):
    """The default as a table writes it, or None where the table may say it in words."""
    value = action.default
    if value is None or value is False or value == [] or value == ():
        return None
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def test_every_command_has_an_option_table_in_the_docs():
    tables = option_tables(ROOT / "docs" / "cli.md")
    assert sorted(tables) == sorted(subcommands())


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_option_tables_hold_exactly_the_parsers_options_and_defaults(path):
    assert_tables_match_the_parser(path)


@pytest.mark.parametrize("change", [
    lambda text: text.replace("| `--serial` |", "| `--serially` |"),  # one it does not have
    lambda text: "\n".join(l for l in text.splitlines() if "`--seed`" not in l),  # one left out
    lambda text: text.replace("| `--port` | 8801 |", "| `--port` | 8080 |"),  # a wrong default
])
def test_the_check_finds_a_table_that_differs_from_the_parser(tmp_path, change):
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    start = text.index("## simulate\n")
    section = text[start:text.index("## demo\n", start)]
    assert "| `--serial` |" in section
    changed = tmp_path / "cli.md"
    changed.write_text(change(section), encoding="utf-8")
    with pytest.raises(AssertionError):
        assert_tables_match_the_parser(changed)
    changed.write_text(section, encoding="utf-8")
    assert_tables_match_the_parser(changed)


def assert_tables_match_the_parser(path):
    for command, rows in option_tables(path).items():
        assert command is not None, f"{path.name}: an option table under no command's heading"
        options = parser_options(subcommands()[command])
        listed = [o for names, _ in rows for o in names]
        assert sorted(set(listed)) == sorted(listed), (command, "listed twice")
        # every option the parser has, each named once, none it does not have
        missing = sorted(set(options) - set(listed))
        unknown = sorted(set(listed) - set(options))
        assert (missing, unknown) == ([], []), (path.name, command)
        for names, cell in rows:
            wanted = shown_default(options[names[0]])
            shown = cell.strip("`")
            if wanted is not None and re.fullmatch(r"[\w.,:|-]+", shown):
                same = shown == wanted or (re.fullmatch(r"[\d.]+", shown) is not None
                                           and float(shown) == float(wanted))
                assert same, (path.name, command, names, cell, wanted)


@pytest.mark.parametrize("path", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))],
                         ids=lambda p: p.name)
def test_the_docs_tables_keep_their_columns_as_github_reads_them(path):
    from conftest import assert_tables_as_github_reads_them
    assert_tables_as_github_reads_them(path.read_text(encoding="utf-8"))


def test_the_docs_links_lead_to_files_and_headings_that_exist():
    # a link to another file of the repository, or to a heading of it, finds it
    def anchors(path):
        return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in path.read_text(encoding="utf-8").splitlines()
                if re.match(r"#{1,6} ", line)}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, heading = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            assert linked.exists(), (path.name, target)
            if heading and linked.suffix == ".md":
                assert heading in anchors(linked), (path.name, target)
