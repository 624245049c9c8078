"""What several commands' parsers share: the argument types (`type=` callables raising
argparse.ArgumentTypeError), the help formatter, the --format, file and ladder options read
from the registry of outputs, and the checks of --cost-per-hour and --corpus against the runs."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .constants import lazy_pattern
from .errors import RouterLatencyError
from .corpus import load_corpus
from .ladder import CostPerHour
from .formats import COMMAND_OUTPUTS, formats_help

__all__ = [
    "add_file_options", "add_format_option", "add_ladder_options", "checked_costs", "corpus_texts",
    "cost_spec", "HelpFormatter", "non_negative_float", "non_negative_int", "NUMBER",
    "positive_float", "positive_int", "real_number", "side_name", "SIDE_PATTERN", "whole_number",
]


SIDE_PATTERN = lazy_pattern(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"  # a number as the options write it: 50, 2.5, .5


def real_number(*, positive: bool) -> Callable[[str], float]:
    """Return an argparse type: a finite number > 0 (positive) or >= 0."""
    bound = "> 0" if positive else ">= 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}")
        return value

    return parse


def whole_number(low: int, high: Optional[int] = None, *,
                 noun: str = "a whole number") -> Callable[[str], int]:
    """Return an argparse type: a whole number from low (up to high)."""
    bound = f">= {low}" if high is None else f"from {low} to {high}"

    def parse(text: str) -> int:
        if not re.fullmatch(r"\s*\d+\s*", text) or int(text) < low \
                or (high is not None and int(text) > high):
            raise argparse.ArgumentTypeError(f"expected {noun} {bound}, got {text!r}")
        return int(text)

    return parse


positive_float = real_number(positive=True)
non_negative_float = real_number(positive=False)
non_negative_int = whole_number(0)
positive_int = whole_number(1)


def side_name(text: str) -> str:
    if not SIDE_PATTERN.match(text) or ".." in text:
        raise argparse.ArgumentTypeError(
            f"a side is letters, digits, '.', '_' or '-' (no '/' or '..'), got {text!r}")
    return text


def cost_spec(text: str) -> CostPerHour:
    """Return (side or None, USD per hour, per what) of a --cost-per-hour [SIDE=]USD[/UNIT]:
    rocm=2.50, cpu=0.90/node, 3.20/GPU."""
    side, sep, rest = text.rpartition("=")
    found = re.fullmatch(rf"\s*\$?{NUMBER}\s*(?:/\s*([A-Za-z][A-Za-z0-9 _-]{{0,31}}))?\s*", rest)
    usd = float(found.group(1)) if found else 0.0
    if not found or not usd > 0 or (sep and not SIDE_PATTERN.match(side)):
        raise argparse.ArgumentTypeError(
            f"expected [SIDE=]USD[/UNIT], US dollars an hour above 0 (rocm=2.50, cpu=0.90/node, "
            f"3.20/GPU), got {text!r}")
    return CostPerHour(side if sep else None, usd, (found.group(2) or "node").strip())


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default in the help only where there is one to show."""

    def _get_help_string(self, action: argparse.Action) -> Optional[str]:
        if action.default is None or action.default is False or action.default == []:
            return action.help or ""
        return super()._get_help_string(action)


def add_format_option(p: Any, command: str, more_help: str = "") -> None:
    """Add the command's --format option: its choices and their help from its registry entry,
    text the default."""
    formats = COMMAND_OUTPUTS[command].formats
    p.add_argument("--format", choices=tuple(formats), default="text",
                   help=formats_help(formats) + more_help)


def add_file_options(p: Any, command: str, *, required: bool = False) -> None:
    """Add the --NAME FILE option of each file the command writes, from its registry entry."""
    for name, exporter in COMMAND_OUTPUTS[command].files.items():
        p.add_argument(f"--{name}", required=required,
                       **({} if required else {"metavar": "FILE"}), help=exporter.about)


def add_ladder_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slo-p95-ms", type=positive_float, metavar="MS",
                   help="ladder runs: capacity within this p95 (default: the SLO they climbed "
                        "with)")
    p.add_argument("--cost-per-hour", type=cost_spec, metavar="SIDE=USD[/UNIT]",
                   action="append", default=[],
                   help="ladder runs: what a side's node costs an hour (rocm=2.50/GPU; "
                        "repeatable; USD alone: both sides), for a row of USD per million "
                        "routed requests at capacity")


def corpus_texts(path: str, sha256: str) -> Dict[int, str]:
    """Return {prompt id: text} of the corpus the runs used; raise for any other file."""
    # a bad or different corpus must not put the wrong text beside an input
    corpus = load_corpus(path)
    if corpus.sha256 != sha256:
        raise RouterLatencyError(f"not the corpus of the runs (sha256 {corpus.sha256[:12]}, "
                                 f"the runs used {sha256[:12]})", path)
    return {p.id: p.text for p in corpus.prompts}


def checked_costs(costs: Sequence[CostPerHour], sides: Sequence[str]) -> Tuple[CostPerHour, ...]:
    """Return --cost-per-hour's entries; raise for one naming no side measured or a side
    priced twice."""
    named = [side for side, _, _ in costs]
    for side in named:
        if side is not None and side not in sides:
            raise RouterLatencyError(f"{side} is not a side measured ({', '.join(sides)})",
                                     "--cost-per-hour")
    if len(set(named)) < len(named) or (None in named and len(named) > 1):
        raise RouterLatencyError("a side priced twice", "--cost-per-hour")
    return tuple(costs)
