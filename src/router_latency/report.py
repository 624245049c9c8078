"""The report model: what every renderer draws. Tables and lines (Block), a capability's
Section (a key, a title, its blocks, its JSON, its notices, its checks, a headline, its
panels of the report page: figures as data), and the escaping of text from outside (router
answers, labels, GPU names, decisions) done once here."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .constants import lazy_pattern, NamedTuple
from .errors import Notice
from .words import visible

__all__ = [
    "BANNER", "Bar", "Block", "Check", "Grid", "Group", "Heading", "LinePlot", "Lines",
    "md_code", "md_text", "Note", "one_line", "Outside", "PageItem", "Panel", "ParetoPlot",
    "render_table",
    "Scale", "Section", "Series", "StackedBars", "Table", "text_lines",
]


class Table(NamedTuple):
    """A table as data, rendered as aligned text, a Markdown table or HTML alike."""
    caption: str  # Markdown's bold line above it; text leaves a blank line
    header: List[str]
    rows: List[List[str]]
    right: List[bool]  # right-aligned columns


# a report's body as data: lines of text, and tables; text_lines() renders it as text, the
# Markdown renderer (markdown_blocks) as list items and tables
Block = Union[str, Table]


def text_lines(blocks: Sequence[Block]) -> List[str]:
    """Return blocks as text: each line as it is, each table aligned."""
    lines: List[str] = []
    for block in blocks:
        lines += [block] if isinstance(block, str) else render_table(
            block.header, block.rows, right=block.right)
    return lines


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]], *,
                 markdown: bool = False, right: Sequence[bool] = ()) -> List[str]:
    """Return the lines of an aligned text table, or a Markdown table."""
    right = list(right) + [True] * (len(header) - len(right))
    if markdown:  # text from outside escaped as Markdown; every cell one line
        rows = [[md_text(c) if isinstance(c, Outside) else visible(str(c)) for c in row]
                for row in rows]
        lines = ["| " + " | ".join(header) + " |",
                 "|" + "|".join("---:" if r else ":---" for r in right) + "|"]
        return lines + ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    rows = [[visible(str(c)) for c in row] for row in rows]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w)
                         for c, w, r in zip(cells, widths, right)).rstrip()

    return [line(header)] + [line(row) for row in rows]


UNESCAPED_BAR = lazy_pattern(r"(?<!\\)\|")


# @name notifies a person and #123 links an issue wherever GitHub renders Markdown: a
# zero-width space after the sign keeps the text as it reads and does neither (an e-mail
# address, a@b, never notifies and is left alone)
MENTION = lazy_pattern(r"(?<![\w&])@(?=[A-Za-z0-9])|(?<!&)#(?=[0-9])")


def unlinked(text: str) -> str:
    """Return Markdown text whose @name and #123 neither notify nor link."""
    return MENTION.sub(lambda m: m.group() + "&#8203;", text)


def md_cell(text: str) -> str:
    """Return a table cell for Markdown: its bars escaped (once), nothing notifying."""
    return unlinked(UNESCAPED_BAR.sub(r"\|", text))


# Markdown renders as intended on GitHub when the verdict leads in bold, the table stands
# apart, and the details are list items: lines of plain text would run together into one
# paragraph.
MARKDOWN_SPECIAL = lazy_pattern(r"([\\`*_<>\[\]|#~])")


def md_text(text: str) -> str:
    """Return text with every character Markdown could read as markup escaped, on one line,
    with nothing that notifies a person or links an issue."""
    return unlinked(MARKDOWN_SPECIAL.sub(r"\\\1", visible(text)))


def md_code(text: str) -> str:
    """Return text as a Markdown code span on one line: control characters escaped, fenced by
    more backticks than any run of them inside (in a span, @ and # neither notify nor link)."""
    text = visible(text)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


class Outside(str):
    """Text from outside (a router's answer, a label, a decision, a GPU's name) in a table
    cell or a line: each renderer escapes it for its format (Markdown's markup, HTML), once."""


class Check(NamedTuple):
    """One check a section holds: a JUnit test case."""
    group: str  # rows, decisions, errors, rounds or gate: the case's class name
    name: str
    outcome: str  # passed, failure or skipped
    message: str
    # the failure's or skip's text; '' for the message again; its lines as a tuple, each
    # escaped onto one line by the Section (a text given whole is one line)
    details: Union[str, Tuple[str, ...]]


def one_line(text: str) -> str:
    """Return a line of a report as every format draws it: on one line, each line break and
    control character from outside (a degraded reason, a decision) as its escape (visible)."""
    return visible(text)


# ---- the report page's figures and panels: data the page draws (as SVG and HTML) without
# knowing whose they are; text and Markdown draw none of them

class Series(NamedTuple):
    """A line of a plot: its points (x, y), whose it is (0 base, 1 new: its colour), dashed
    or not, and what it shows when the pointer rests on it."""
    points: Tuple[Tuple[float, float], ...]
    side: int
    dashed: bool
    label: str


class Scale(NamedTuple):
    """How a plot draws one axis: its label, linear or log10, and a unit after the y axis's
    tick labels ("%")."""
    label: str
    log: bool = False
    suffix: str = ""


class LinePlot(NamedTuple):
    """Lines over two axes, with ticks and grid lines."""
    title: str
    series: Tuple[Series, ...]
    x: Scale
    y: Scale


class Bar(NamedTuple):
    """One bar of stacked parts, (name, value) from the left, and a dark mark at a value."""
    label: str
    parts: Tuple[Tuple[str, float], ...]
    mark: float
    mark_label: str


class StackedBars(NamedTuple):
    """Horizontal bars of stacked parts: the named parts in colour order, the rest grey."""
    title: str
    names: Tuple[str, ...]  # the coloured parts, in order; any other part is the rest
    rest: str  # the grey part's name, in the key
    unit: str  # after each part's value
    bars: Tuple[Bar, ...]
    caption: str  # under the bars


class ParetoPlot(NamedTuple):
    """Throughput (x, from 0) against latency (y, log) of steps: each round a faint line,
    the medians bold with their points, a limit a horizontal line and marks on it."""
    title: str
    label: str  # what a screen reader says
    x: Scale
    y: Scale
    faint: Tuple[Series, ...]
    bold: Tuple[Series, ...]
    limit: Optional[float]  # the SLO on the y axis; None: none
    limit_label: str
    marks: Tuple[Tuple[int, float, str], ...]  # (side, x on the limit, label)


Figure = Union[LinePlot, StackedBars, ParetoPlot]


class Heading(NamedTuple):
    text: str
    level: int = 2


class Note(NamedTuple):
    """A paragraph, in small print unless not (a line, str, is a paragraph unless empty)."""
    text: str
    small: bool = True


class Lines(NamedTuple):
    """Lines as a list; a note's list in small print."""
    lines: Tuple[str, ...]
    note: bool = False


class Grid(NamedTuple):
    """Figures side by side, as many as the width holds."""
    figures: Tuple[Figure, ...]


class Group(NamedTuple):
    """Items kept together (a panel within a panel)."""
    items: Tuple["PageItem", ...]


# a line as a paragraph ('' draws nothing), a table, a figure, and the items above
PageItem = Union[str, Table, LinePlot, StackedBars, ParetoPlot, Heading, Note, Lines, Grid,
                 Group]


BANNER = 0  # the place of panels whose lines the page's banner shows, in bold


class Panel(NamedTuple):
    """A section's part of the report page. The page draws panels by place, after the
    verdict and the gated rows; a panel of lines alone, without a heading, continues the
    list that ends the panel before it (the page's closing list gathers several sections').
    Places in use: 0 the banner (BANNER), 20 the noise, 30 the ladders, 40 the latencies,
    50 where the time goes, 60 decisions and errors, 70 slower inputs, 80 the environment,
    then the closing list: 82 warnings, 83 the start order, 84 the rounds left out and the
    notes (the page's own), 85 degraded answers."""
    place: int
    heading: str = ""
    note: str = ""  # under the heading, after the keys
    keys: Tuple[Tuple[int, str], ...] = ()  # (side, label): the colours of the figures
    items: Tuple[PageItem, ...] = ()
    apart: bool = False  # each item on a line of its own, the note among them


class SectionFields(NamedTuple):
    """The fields of a Section, as its capability gives them (escaped by Section)."""
    key: str  # what names it; its JSON keys stand in `json`
    title: str = ""  # Markdown's caption above its blocks ('' none)
    blocks: Tuple[Block, ...] = ()
    json: Dict[str, object] = {}  # merged into the report's JSON document
    notices: Tuple[Notice, ...] = ()  # warnings, drawn after its blocks
    headline: Tuple[str, ...] = ()  # lines drawn before the gated table (and again last)
    lead: Tuple[str, ...] = ()  # a line above the gated table (Markdown: in bold)
    checks: Tuple[Check, ...] = ()
    apart: bool = True  # text: a blank line above its blocks
    beside_table: bool = False  # text: right below the gated table, not in order
    on_request: bool = False  # drawn only when asked (--per-round)
    page: Tuple[Panel, ...] = ()  # what the report page draws of it
    plan: Tuple[Block, ...] = ()  # --plan: drawn below its table (a blank line first), in order
    # the sentences it gives a published record (`record`), each at its place there: 20 the
    # decisions, 30 failed requests, 40 restarts and faults, 80 the ladders, 90 where the time
    # changed most (the record's own: 10 the per-round ranges, 50 the surroundings, 70 the
    # result caches)
    record: Tuple[Tuple[int, str], ...] = ()


class Section(SectionFields):
    """What one capability found, as every renderer draws it: text and Markdown its blocks
    in order (Markdown its title as a caption above them), JSON its keys, JUnit its checks.
    Renderers read these fields only, never which capability made it.

    Made (and _replace'd), it escapes every line it holds once, for every format: its title,
    lines, headline, lead, notices, checks, record sentences and the page's texts, each on one
    line (one_line), so that text from outside embedded in a line (a degraded reason holding a
    line break) cannot forge report lines in the terminal, Markdown, JUnit, the page or the
    record; table cells are escaped as they are drawn, JSON by its encoder."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "Section":
        given = SectionFields(*args, **kwargs)
        return super().__new__(cls, *given._replace(
            title=one_line(given.title), blocks=escaped_blocks(given.blocks),
            notices=tuple(n._replace(text=one_line(n.text)) for n in given.notices),
            headline=tuple(map(one_line, given.headline)),
            lead=tuple(map(one_line, given.lead)),
            checks=tuple(escaped_check(check) for check in given.checks),
            page=tuple(p._replace(heading=one_line(p.heading), note=one_line(p.note),
                                  items=escaped_items(p.items)) for p in given.page),
            plan=escaped_blocks(given.plan),
            record=tuple((place, one_line(text)) for place, text in given.record)))

    @classmethod
    def _make(cls, iterable: Any) -> "Section":  # type: ignore[override]
        # _replace goes through __new__ too
        return cls(*iterable)


def escaped_blocks(blocks: Sequence[Block]) -> Tuple[Block, ...]:
    return tuple(one_line(b) if isinstance(b, str) else b for b in blocks)


def escaped_check(check: Check) -> Check:
    details = check.details
    return check._replace(name=one_line(check.name), message=one_line(check.message),
                          details=one_line(details) if isinstance(details, str)
                          else "\n".join(map(one_line, details)))


def escaped_items(items: Sequence[PageItem]) -> Tuple[PageItem, ...]:
    """Return a panel's items with every text on one line; figures as they are."""
    escaped: List[PageItem] = []
    for item in items:
        if isinstance(item, str):
            item = one_line(item)
        elif isinstance(item, (Heading, Note)):
            item = item._replace(text=one_line(item.text))
        elif isinstance(item, Lines):
            item = item._replace(lines=tuple(map(one_line, item.lines)))
        elif isinstance(item, Group):
            item = item._replace(items=escaped_items(item.items))
        escaped.append(item)
    return tuple(escaped)
