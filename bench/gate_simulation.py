#!/usr/bin/env python3
"""How often the `rounds` gate fails when nothing changed, and how often it catches a slowdown.

Writes synthetic rounds of two sides (three passes, five metrics each), judges them with the
tool's own judge_rounds() and prints false-fail and detection rates per cell:

    sigma   per-round noise of each side, as a log-normal spread: 3, 5, 10, 15%
    n       rounds: 3, 5, 10
    noise   shared (a slow round is slow in every row) or independent (each row its own)
    change  A/A at tolerance 0 and 5%; +5, +10, +20, +30% on every row; +30% on one gated row
            (Conc 16 p95) alone

for the default settings and --strict, and the adaptive mode (a group-sequential look after
each round from 3 to 10) against a fixed 10 rounds. --cli also writes each trial's files and
runs `router-latency rounds` on them through main(), to show the in-memory judge and the
command line agree (slower: use fewer --trials).

    python3 bench/gate_simulation.py [--trials 1000] [--seed 1] [--cli] [--jobs 2]

Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import router_latency as rl  # noqa: E402

PASSES = {"sequential": 1, "c4": 4, "c16": 16}
BASE = {"p50_ms": 10.0, "p95_ms": 15.0, "p99_ms": 20.0, "mean_ms": 11.0, "req_per_s": 100.0}
SINGLE_ROW = ("c16", "p95_ms")
COUNT = 3  # prompts per pass: enough for decisions, irrelevant to the figures


def synthetic_run(label: str, number: int, values: dict, first: bool) -> rl.RunFile:
    """Return a run whose passes carry the given figures: {pass: {metric: value}}."""
    requests = tuple(rl.Request(i, 0.0, 1.0, 200, "d", None) for i in range(COUNT))
    passes = []
    for name, concurrency in PASSES.items():
        v = values[name]
        summary = rl.PassSummary(COUNT, COUNT, {}, v["p50_ms"], v["p95_ms"], v["p99_ms"],
                                 v["mean_ms"], 1.0, v["p99_ms"], v["req_per_s"], 1.0)
        attempt = rl.Attempt(None, None, "", None, {}, None, {}, summary, requests)
        passes.append(rl.PassRecord(name, concurrency, False, False, attempt))
    return rl.RunFile(label, True, {"path": "c.json", "sha256": "0" * 64, "count": COUNT},
                      tuple(passes), started_unix=2.0 * number + (0 if first else 1),
                      settings={"max_load": 120.0}, path=f"r{number}-{label}.json")


def side_values(rng: random.Random, sigma: float, shared: bool, slowdown: dict) -> dict:
    """Return one side's figures in one round: noise, times a slowdown per (pass, metric)."""
    common = rng.gauss(0, sigma)
    values = {}
    for name in PASSES:
        values[name] = {}
        for metric, base in BASE.items():
            noise = common if shared else rng.gauss(0, sigma)
            factor = math.exp(noise) * (1 + slowdown.get((name, metric), 0.0))
            # a slower router answers fewer requests a second
            values[name][metric] = base / factor if metric == "req_per_s" else base * factor
    return values


def slowdown_of(change: str) -> dict:
    if change.startswith("A/A"):
        return {}
    if change == "+30% one row":
        return {SINGLE_ROW: 0.30}
    size = float(change.strip("+% all")) / 100
    return {(p, m): size for p in PASSES for m in BASE}


def trial_runs(rng: random.Random, rounds: int, sigma: float, shared: bool,
               change: str) -> dict:
    slowdown = slowdown_of(change)
    runs = {}
    for number in range(1, rounds + 1):
        base_first = number % 2 == 1
        runs[number] = {
            "base": synthetic_run("base", number, side_values(rng, sigma, shared, {}), base_first),
            "new": synthetic_run("new", number, side_values(rng, sigma, shared, slowdown),
                                 not base_first)}
    return runs


def judged_status(runs: dict, settings: rl.GateSettings, cli: bool) -> str:
    if not cli:
        return rl.judge_rounds(runs, "base", "new", settings).status
    with tempfile.TemporaryDirectory() as folder:
        for number, sides in runs.items():
            for side, run in sides.items():
                rl.write_atomic(f"{folder}/r{number}-{side}.json", rl.dump_run(run))
        argv = ["rounds", "--dir", folder, "--base", "base", "--new", "new",
                "--tolerance", f"{settings.tolerance_pct:g}", "--format", "json"]
        argv += ["--strict"] if settings.strict else []
        code = rl.main(argv)
    return {rl.EXIT_OK: "pass", rl.EXIT_GATE: "fail", rl.EXIT_INCONCLUSIVE: "inconclusive"}[code]


def adaptive(rng: random.Random, sigma: float, shared: bool, change: str,
             settings: rl.GateSettings, max_rounds: int = 10) -> tuple:
    """Return (status, rounds used) of a group-sequential run: a look after each round."""
    runs = trial_runs(rng, max_rounds, sigma, shared, change)
    for rounds in range(rl.MIN_ROUNDS, max_rounds + 1):
        look = {n: runs[n] for n in range(1, rounds + 1)}
        report = rl.judge_rounds(look, "base", "new",
                                 settings._replace(sequential_max=max_rounds))
        if report.status != "inconclusive" or rounds == max_rounds:
            return report.status, rounds
    raise AssertionError("unreachable")


def cell(job: tuple) -> tuple:
    """Run one cell's trials; return its figures."""
    sigma, rounds, shared, change, trials, seed, cli = job
    rng = random.Random(f"{seed}-{sigma}-{rounds}-{shared}-{change}")
    tolerance = 0.0 if change == "A/A tol 0" else 5.0
    plain = rl.GateSettings(tolerance_pct=tolerance)
    strict = plain._replace(strict=True)
    counts = {"fail": 0, "strict_fail": 0, "strict_inconclusive": 0}
    for _ in range(trials):
        runs = trial_runs(rng, rounds, sigma, shared, change)
        counts["fail"] += judged_status(runs, plain, cli) == "fail"
        status = judged_status(runs, strict, cli)
        counts["strict_fail"] += status == "fail"
        counts["strict_inconclusive"] += status == "inconclusive"
    return job, {k: v / trials for k, v in counts.items()}


def adaptive_cell(job: tuple) -> tuple:
    sigma, shared, change, trials, seed = job
    rng = random.Random(f"adaptive-{seed}-{sigma}-{shared}-{change}")
    tolerance = 0.0 if change == "A/A tol 0" else 5.0
    settings = rl.GateSettings(tolerance_pct=tolerance)
    fails = used = fixed_fails = 0
    for _ in range(trials):
        status, rounds = adaptive(rng, sigma, shared, change, settings)
        fails += status == "fail"
        used += rounds
        fixed = trial_runs(rng, 10, sigma, shared, change)
        fixed_fails += rl.judge_rounds(fixed, "base", "new", settings).status == "fail"
    return job, {"fail": fails / trials, "mean_rounds": used / trials,
                 "fixed_fail": fixed_fails / trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cli", action="store_true", help="judge through files and main()")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-adaptive", action="store_true")
    args = parser.parse_args()
    changes = ["A/A tol 0", "A/A tol 5", "+5% all", "+10% all", "+20% all", "+30% all",
               "+30% one row"]
    jobs = [(sigma, rounds, shared, change, args.trials, args.seed, args.cli)
            for sigma in (0.03, 0.05, 0.10, 0.15) for rounds in (3, 5, 10)
            for shared in (True, False) for change in changes]
    started = time.monotonic()
    with multiprocessing.Pool(args.jobs) as pool:
        results = dict(pool.map(cell, jobs))
    se = math.sqrt(0.05 * 0.95 / args.trials)
    print(f"{args.trials} trials per cell, seed {args.seed}, "
          f"{'files through the CLI' if args.cli else 'judge_rounds in memory'}; "
          f"binomial se at 5%: {100 * se:.1f} points; default gate (p50, p95, req/s of 3 "
          f"passes: 9 rows), alpha 5%")
    print("fail rate with the default settings; in brackets with --strict: fail / inconclusive")
    header = f"{'sigma':>5} {'n':>3} {'noise':<11}" + "".join(f"{c:>19}" for c in changes)
    print(header)
    for sigma in (0.03, 0.05, 0.10, 0.15):
        for rounds in (3, 5, 10):
            for shared in (True, False):
                cells = []
                for change in changes:
                    r = results[(sigma, rounds, shared, change, args.trials, args.seed,
                                 args.cli)]
                    cells.append(f"{100 * r['fail']:5.1f} [{100 * r['strict_fail']:4.1f}/"
                                 f"{100 * r['strict_inconclusive']:4.1f}]")
                print(f"{100 * sigma:>4.0f}% {rounds:>3} "
                      f"{'shared' if shared else 'independent':<11}"
                      + "".join(f"{c:>19}" for c in cells))
    if not args.skip_adaptive:
        adaptive_jobs = [(sigma, shared, change, args.trials, args.seed)
                         for sigma in (0.05, 0.10) for shared in (True, False)
                         for change in ("A/A tol 0", "A/A tol 5", "+10% all", "+20% all",
                                        "+30% one row")]
        with multiprocessing.Pool(args.jobs) as pool:
            adaptive_results = dict(pool.map(adaptive_cell, adaptive_jobs))
        print()
        print("adaptive (--sequential 10: a look after each round from 3) against a fixed 10 "
              "rounds")
        print(f"{'sigma':>5} {'noise':<11} {'change':<13} {'fail':>6} {'mean rounds':>12} "
              f"{'fixed 10 fail':>14}")
        for job, r in adaptive_results.items():
            sigma, shared, change = job[:3]
            print(f"{100 * sigma:>4.0f}% {'shared' if shared else 'independent':<11} "
                  f"{change:<13} {100 * r['fail']:>5.1f}% {r['mean_rounds']:>12.2f} "
                  f"{100 * r['fixed_fail']:>13.1f}%")
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
