#!/usr/bin/env python3
"""How often the drift gate of `history report --gate` fails, passes and cannot tell, and how
often it marks a change point, over many synthetic series of commits.

Each series is `--commits` entries, each a rounds folder of `--rounds` rounds whose per-round
log ratio new/base of the gated row is the commit's true step plus normal noise of spread
sigma (each round's node level is shared by both sides and cancels, as in interleaved
rounds). Scenarios: A/A (every step 0); the tolerance reached exactly (the steps add up to
+5%: the worst case of the gate's null hypothesis); and a drift of 2.5% a commit (+16% over
six). The rule is the tool's own: history_report() on HistoryEntry records, without files.

    python3 bench/history_drift.py [--series 2000] [--commits 6] [--rounds 5] [--seed 1]

Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from router_latency.history import (HistoryEntry, history_report, TrendSettings)  # noqa: E402
from router_latency.history import HistoryRow  # noqa: E402


def entry(commit: str, step: float, sigma: float, rounds: int, rng: random.Random) -> HistoryEntry:
    base, new = [], []
    for _ in range(rounds):
        level = 10.0 * math.exp(rng.gauss(0, 0.05))
        base.append(level)
        new.append(level * math.exp(step + rng.gauss(0, sigma)))
    return HistoryEntry(commit=commit, base_commit="", branch="main", date="", label="",
                        kind="rounds", source="", verdict="", tolerance_pct=5.0,
                        corpus_sha256="a" * 64, config={}, node="n", node_class="",
                        environment={}, rows=(HistoryRow("sequential", "p50_ms", True,
                                                         tuple(base), tuple(new)),))


def scenario(step: float, sigma: float, args: argparse.Namespace, rng: random.Random) -> dict:
    counts = {0: 0, 1: 0, 3: 0}
    change_points = covered = 0
    for _ in range(args.series):
        entries = [entry(f"c{i}", step, sigma, args.rounds, rng) for i in range(args.commits)]
        report = history_report("bench", entries, TrendSettings())
        counts[report.exit_code] += 1
        row = report.rows[0]
        change_points += any(p.change_point for p in row.points)
        truth = step * args.commits
        covered += row.drift is not None and row.drift.low <= truth <= row.drift.high
    n = args.series
    return {"fail": counts[1] / n, "pass": counts[0] / n, "inconclusive": counts[3] / n,
            "change_point": change_points / n, "coverage": covered / n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=2000)
    parser.add_argument("--commits", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.monotonic()
    print(f"{args.series} series of {args.commits} commits, {args.rounds} rounds each; "
          f"tolerance 5%; rates of exit 1 (fail), 0 (pass), 3 (inconclusive), of a series "
          f"with any change point, and of the drift's 95% interval holding the true drift")
    print(f"{'scenario':<34} {'sigma':>6} {'fail':>7} {'pass':>7} {'incon.':>7} "
          f"{'chg.pt':>7} {'cover':>7}")
    at_tolerance = math.log1p(0.05) / args.commits
    for name, step in (("A/A (no change)", 0.0),
                       ("drift exactly at the tolerance", at_tolerance),
                       ("+2.5% a commit", math.log1p(0.025))):
        for sigma in (0.01, 0.03):
            found = scenario(step, sigma, args, rng)
            print(f"{name:<34} {sigma:>6.2f} " + " ".join(
                f"{100 * found[k]:>6.1f}%" for k in ("fail", "pass", "inconclusive",
                                                      "change_point", "coverage")))
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
