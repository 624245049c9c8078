"""Which instance of a pool a run measured: its round, side, number, port, GPU and cores, and
the facts that could make it differ from the others; written and read by the run file
(runfile.RunFile.instance, schema run/3)."""

from __future__ import annotations

import math
from typing import Any, Optional, Union

from .constants import lazy_pattern, NamedTuple
from .errors import is_whole, RouterLatencyError

__all__ = ["Instance", "INSTANCE_FACT"]


# an instance's facts: what could make it differ from its pool's others, each a text or a
# number (the CPUs its threads ran on, its NUMA node, its GPU's bus id and clocks at start,
# its start-up time, its start order); read and shown, never judged
INSTANCE_FACT = lazy_pattern(r"[a-z][a-z0-9_]{0,39}")


class Instance(NamedTuple):
    """Which instance of a pool a run measured (run_rounds.sh --instances): its round, side,
    number (1 to count), and where it ran."""
    round: int
    side: str
    number: int
    pool_size: int  # the pool's instances (JSON: count)
    port: Optional[int] = None
    gpu: Optional[str] = None  # the GPU it was placed on (its index, as --gpus lists it)
    cores: Optional[str] = None  # its share of the router's cores (a CPU list)
    facts: dict[str, Union[str, float]] = {}  # what could make it differ (INSTANCE_FACT names)

    def to_json(self) -> dict:
        return {"round": self.round, "side": self.side, "number": self.number,
                "count": self.pool_size, "port": self.port, "gpu": self.gpu, "cores": self.cores,
                "facts": self.facts}

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Optional["Instance"]:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise RouterLatencyError("expected an object", where)
        for key in ("round", "number", "count", "port"):
            value = raw.get(key)
            if (value is not None or key != "port") and not is_whole(value, 1):
                raise RouterLatencyError("expected a whole number >= 1", f"{where}.{key}")
        if raw["number"] > raw["count"]:
            raise RouterLatencyError(f"instance {raw['number']} of {raw['count']}",
                                     f"{where}.number")
        for key in ("gpu", "cores"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise RouterLatencyError("expected a string", f"{where}.{key}")
        facts = raw.get("facts", {})
        if not isinstance(facts, dict) or not all(
                isinstance(k, str) and INSTANCE_FACT.fullmatch(k) and not isinstance(v, bool)
                and (isinstance(v, (str, int)) or (isinstance(v, float) and math.isfinite(v)))
                for k, v in facts.items()):
            raise RouterLatencyError("expected facts named in lowercase, each a text or a "
                                     "number", f"{where}.facts")
        side = raw.get("side")
        if not isinstance(side, str):
            raise RouterLatencyError("expected a string", f"{where}.side")
        return cls(raw["round"], side, raw["number"], raw["count"],
                   raw.get("port"), raw.get("gpu"), raw.get("cores"), facts)
