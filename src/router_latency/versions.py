"""What routers of different versions say differently: the runtime's two names, /ready's
start-up phases, and the decision keys of selections the router sampled (marked in meaning.py)
rather than decided."""

from __future__ import annotations

import json
from typing import Mapping, Optional, Sequence, Tuple

from .constants import NamedTuple
from .words import visible

__all__ = [
    "ready_words", "runtime_name_warning", "SAMPLED_MARK", "sampled_models",
    "without_sampled",
]

# The model runtime's two names (the router's pkg/modelservice/manager.go, its release note for
# the built-in runtime; the table in docs/gpu-node.md): routers from #4618 on (the newest source)
# start `vllm-srun` (command variable VLLM_SRUN_COMMAND, metrics vllm_srun_*); builds of main
# between #4481 and #4618 start `vllm-sr-runtime` (VLLM_SR_RUNTIME_COMMAND, metrics
# vllm_sr_runtime_*); routers before #4481 had no built-in runtime. Each name: the builds that
# use it, its metrics' prefix and the variables that select it (command, result cache).
class RuntimeName(NamedTuple):
    builds: str
    prefix: str
    variables: Tuple[str, str]


RUNTIME_NAMES = {
    "vllm-srun": RuntimeName("from #4618 on", "vllm_srun_",
                             ("VLLM_SRUN_COMMAND", "VLLM_SRUN_RESULT_CACHE")),
    "vllm-sr-runtime": RuntimeName("main between #4481 and #4618", "vllm_sr_runtime_",
                                   ("VLLM_SR_RUNTIME_COMMAND", "VLLM_SR_RUNTIME_RESULT_CACHE")),
}
# a selected model the router sampled or chose by its state: marked so in the decision key,
# kept apart from the decision that agreement compares
SAMPLED_MARK = "~"
PENDING_SHOWN = 4  # pending models named on the progress line, the rest counted


def runtime_name_warning(series: Sequence[str], environ: Mapping[str, str]) -> Optional[str]:
    """Return a warning when the scraped metrics (series names) show the runtime under one
    name and the environment set only the other name's variables, or None."""
    shown = {name for name, (_, prefix, _) in RUNTIME_NAMES.items()
             if any(s.startswith(prefix) for s in series)}
    set_by = {name for name, (_, _, variables) in RUNTIME_NAMES.items()
              if any(v in environ for v in variables)}
    if len(shown) != 1 or not set_by or shown & set_by:
        return None
    runtime, other = shown.pop(), set_by.pop()
    return (f"warning: the router's metrics show the runtime as {runtime} "
            f"({RUNTIME_NAMES[runtime].prefix}*), but this environment sets "
            f"{', '.join(v for v in RUNTIME_NAMES[other].variables if v in environ)}, which only "
            f"{other} reads: set {' and '.join(RUNTIME_NAMES[runtime].variables)} where the router "
            f"starts")


def ready_words(body: Optional[bytes]) -> str:
    """Return what a /ready answer says of a starting router, in words: its phase, how many
    models are ready of how many, and which are pending ('' when it says none of these)."""
    try:
        document = json.loads(body or b"")
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return ""
    if not isinstance(document, dict):
        return ""
    parts = []
    phase = document.get("phase")
    if isinstance(phase, str) and phase:
        parts.append(f"phase {phase[:40]}")
    ready, total = document.get("ready_models"), document.get("total_models")
    if type(ready) is int and type(total) is int and total > 0:
        parts.append(f"{ready} of {total} models ready")
    listed = document.get("pending_models")
    pending = [p[:60] for p in listed if isinstance(p, str)] if isinstance(listed, list) else []
    if pending:
        more = len(pending) - PENDING_SHOWN
        parts.append("pending: " + ", ".join(pending[:PENDING_SHOWN])
                     + (f" and {more} more" if more > 0 else ""))
    return visible("; ".join(parts))


def without_sampled(decision: Optional[str]) -> Optional[str]:
    """Return a decision key without its sampled selections (the parts SAMPLED_MARK opens):
    what decision agreement compares."""
    if decision is None or SAMPLED_MARK not in decision:
        return decision
    return "|".join(part for part in decision.split("|") if not part.startswith(SAMPLED_MARK))


def sampled_models(decision: Optional[str]) -> list:
    """Return the sampled selections of a decision key (the models, unmarked)."""
    if decision is None or SAMPLED_MARK not in decision:
        return []
    return [part[1:] for part in decision.split("|") if part.startswith(SAMPLED_MARK)]
