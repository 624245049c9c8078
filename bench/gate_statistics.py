#!/usr/bin/env python3
"""The gate's statistics, part 3 (issue 41): each target's figure beside it, with its
Monte-Carlo error (the binomial standard error of a rate, the standard error of a mean).

    python3 bench/gate_statistics.py PART [--trials 2000] [--seed 1]

PART:
  plan        at 9 gated rows and a 2% spread, the rounds the plan asks (rounds_for, by the
              noncentral t) and how often they find a 10% slowdown of one row (target: at
              least 80%) and pass an unchanged pair (target: at least 90%)
  split       the noise split at 5 rounds on simulated passes with known parts (variance.py)
  pilots      plans from 5-round pilots: how often they meet both targets, and their rounds

The rule is the tool's own (row_of, gate_rows, rounds_for, noise_parts), without files: fast.
Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from router_latency.gate import gate_rows, GateSettings, row_of  # noqa: E402
from router_latency.noise import rounds_for  # noqa: E402

PASSES = ("sequential", "c4", "c16")
GATED = ("p50_ms", "p95_ms", "req_per_s")


def rate(hits: int, trials: int) -> str:
    """Return a rate with its Monte-Carlo (binomial) standard error."""
    p = hits / trials
    return f"{p:.1%} +- {math.sqrt(p * (1 - p) / trials):.1%}"


def mean_text(values, scale: float = 1.0, digits: int = 2) -> str:
    """Return a mean with its standard error."""
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return f"{scale * mean:.{digits}f} +- {scale * se:.{digits}f}"


def gate_status(rng: random.Random, spread: float, n: int, settings: GateSettings,
                slowed: float) -> str:
    """Return the gate's status over n rounds of 9 independent gated rows whose change has
    this log spread; the first row slowed by `slowed` (a fraction)."""
    rows = []
    for k, (name, metric) in enumerate((p, m) for p in PASSES for m in GATED):
        shift = math.log1p(slowed) if k == 0 else 0.0
        base = [10.0] * n
        # worse direction: latency up, req/s down
        sign = -1 if metric == "req_per_s" else 1
        new = [10.0 * math.exp(sign * (shift + rng.gauss(0, spread))) for _ in range(n)]
        rows.append(row_of(name, metric, base, new, settings))
    return gate_rows(rows, settings).outcome.status


def plan_part(args) -> None:
    settings = GateSettings()
    spread = 0.02
    n = rounds_for([spread] * 9, settings)
    rng = random.Random(args.seed)
    found = sum(gate_status(rng, spread, n, settings, 0.10) == "fail"
                for _ in range(args.trials))
    passed = sum(gate_status(rng, spread, n, settings, 0.0) == "pass"
                 for _ in range(args.trials))
    print(f"plan at 9 gated rows, a 2% spread (tolerance 5%, target 10%): {n} rounds")
    print(f"  a 10% slowdown of one row found: {rate(found, args.trials)} (target >= 80%)")
    print(f"  an unchanged pair passes:        {rate(passed, args.trials)} (target >= 90%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("plan", "split", "pilots"))
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    begun = time.perf_counter()
    {"plan": plan_part}[args.part](args)
    print(f"({args.trials} trials a cell, {time.perf_counter() - begun:.0f} s)")


if __name__ == "__main__":
    main()
