"""Rounds: the run files of interleaved rounds as the judging takes them, typed: each round's
run per side, which side is base and which new, and the rounds used."""

from __future__ import annotations

from typing import Dict, Tuple

from .constants import NamedTuple
from .runfile import RunFile

__all__ = ["Rounds"]


class Rounds(NamedTuple):
    """Interleaved rounds to judge: {round: {side: RunFile}}, the sides, and the rounds used
    (every round until the usable ones are chosen)."""
    runs: Dict[int, Dict[str, RunFile]]
    base: str
    new: str
    used: Tuple[int, ...] = ()

    @property
    def sides(self) -> Tuple[str, str]:
        """(base, new)."""
        return self.base, self.new
