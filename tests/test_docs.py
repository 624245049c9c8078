"""docs: the option tables of docs/cli.md (and any in README.md) hold exactly the options the
parser has, each subcommand's under its own heading, with the parser's defaults."""

import argparse
import html.parser
import json
import re
import subprocess
import sys
from pathlib import Path

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
    heading names, the first one for the table), as GitHub renders the file: a heading or a
    table inside a code block is text."""
    tables, command, header = {}, None, None
    document = rendered(path)
    headings = {line for level, _, line in document.headings if level == 2}
    in_code = {n for first, last in document.code_blocks for n in range(first, last + 1)}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if number in in_code:  # a table or a heading in a code block is text
            header = None
        elif number in headings:
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


MARKDOWN_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


class Rendered(html.parser.HTMLParser):
    """What GitHub's parser made of a Markdown file: its headings (level, text, first source
    line), its code blocks (first and last source line) and the targets of its links."""

    def __init__(self):
        super().__init__()
        self.headings, self.code_blocks, self.links = [], [], []
        self.heading = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        line = int(attrs.get("data-sourcepos", "0:0").split(":")[0])
        if re.fullmatch(r"h[1-6]", tag):
            self.heading = [int(tag[1]), [], line]
        elif tag == "pre":
            end = int(attrs["data-sourcepos"].split("-")[1].split(":")[0])
            self.code_blocks.append((line, end))
        elif tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])

    def handle_data(self, data):
        if self.heading is not None:
            self.heading[1].append(data)

    def handle_endtag(self, tag):
        if re.fullmatch(r"h[1-6]", tag) and self.heading is not None:
            level, text, line = self.heading
            self.headings.append((level, "".join(text).strip(), line))
            self.heading = None


def rendered(path):
    import cmarkgfm  # test-only dependency: GitHub's own CommonMark+GFM parser
    from cmarkgfm.cmark import Options
    document = Rendered()
    document.feed(cmarkgfm.github_flavored_markdown_to_html(
        path.read_text(encoding="utf-8"), options=Options.CMARK_OPT_SOURCEPOS))
    return document


def anchors(path):
    """The anchors GitHub gives the headings of a rendered file: the text lowercased, every
    character but letters, digits, spaces, - and _ dropped, spaces made -, a repeat numbered."""
    seen, result = {}, set()
    for _, text, _ in rendered(path).headings:
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def fence_problems(path):
    """Each code block of the rendered file that does not close where its writer meant it to:
    one that runs to the end of the file unclosed, and one that holds a fence line (one meant to
    close it or to open another, shorter or of the other character)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    problems = []
    for first, last in rendered(path).code_blocks:
        opener = FENCE.fullmatch(lines[first - 1])
        if opener is None:
            continue  # an indented block
        closer = FENCE.fullmatch(lines[last - 1])
        if last == first or closer is None or closer.group(2).strip():
            problems.append(f"{path.name}:{first}: the code block closes only at the end "
                            f"of the file")
        inner = [n for n in range(first + 1, last) if FENCE.fullmatch(lines[n - 1])]
        problems += [f"{path.name}:{n}: a fence inside the code block opened at line {first}"
                     for n in inner]
    return problems


@pytest.mark.parametrize("path", MARKDOWN_FILES, ids=lambda p: p.name)
def test_every_code_block_closes_where_its_writer_meant(path):
    assert fence_problems(path) == []


@pytest.mark.parametrize("change, problem", [
    ("```sh\nls\n```\n\n## after\n", None),
    ("```sh\nls\n\n## after\n", "closes only at the end"),
    ("````markdown\n```sh\nls\n```\n\n## after\n````\n", "a fence inside"),
])
def test_the_fence_check_finds_a_block_closed_in_the_wrong_place(tmp_path, change, problem):
    path = tmp_path / "doc.md"
    path.write_text("# doc\n\n" + change, encoding="utf-8")
    found = fence_problems(path)
    assert (found == []) if problem is None else any(problem in p for p in found), found


def test_the_docs_links_lead_to_files_and_headings_that_exist():
    # a link to another file of the repository, or to a heading of it, finds it among the
    # headings GitHub renders (a heading swallowed by a code block is no anchor)
    for path in MARKDOWN_FILES:
        for target in rendered(path).links:
            if re.match(r"[a-z]+:", target):
                continue
            file, _, heading = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            assert linked.exists(), (path.name, target)
            if heading and linked.suffix == ".md":
                assert heading in anchors(linked), (path.name, target)


def docs_workflows():
    """{name: text} of every workflow in README.md and docs/*.md: a ```yaml block with jobs."""
    found = {}
    for path in MARKDOWN_FILES:
        blocks = re.findall(r"```yaml\n(.*?)```", path.read_text(encoding="utf-8"), re.S)
        for number, block in enumerate(blocks):
            if re.search(r"^jobs:", block, re.M):
                found[f"{path.stem}-{number}.yml"] = block
    return found


def test_the_action_and_the_docs_workflows_validate_and_pass_zizmor(tmp_path):
    # GitHub's schemas (check-jsonschema's vendored copies) and zizmor's audit, offline, in
    # its default persona: no finding but the one docs/ci.md explains (a reference to this
    # action by its placeholder name cannot be pinned by hash; every other `uses:` is)
    workflows = docs_workflows()
    assert {"ci-0.yml", "history-0.yml"} <= set(workflows)
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    for name, text in workflows.items():
        (folder / name).write_text(text, encoding="utf-8")
    tools = Path(sys.executable).parent
    checks = [["--builtin-schema", "vendor.github-workflows", *map(str, sorted(folder.iterdir()))],
              ["--builtin-schema", "vendor.github-actions", str(ROOT / "action.yml")]]
    for check in checks:
        done = subprocess.run([str(tools / "check-jsonschema"), *check], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    audit = subprocess.run([str(tools / "zizmor"), "--offline", "--format", "json",
                            str(ROOT / "action.yml"), str(folder)], capture_output=True,
                           text=True, timeout=120)
    findings = [(f["ident"], f["locations"][0]["concrete"]["feature"].split()[1])
                for f in json.loads(audit.stdout)]
    assert findings == [("unpinned-uses", "YOUR-ORG/router-latency@v1")], audit.stdout
    pinned = re.findall(r"uses: (\S+)", "".join(workflows.values()))
    assert all(re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", uses) for uses in pinned
               if not uses.startswith("YOUR-ORG/router-latency@")), pinned
