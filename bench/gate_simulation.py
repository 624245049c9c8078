#!/usr/bin/env python3
"""How often the `rounds` gate says PASS, FAIL and INCONCLUSIVE, with nothing changed and with
a true slowdown of every row at the tolerance and at twice it.

Synthetic rounds of two sides, three passes of five metrics each (the default gate: p50, p95
and req/s of every pass, 9 gated rows). Each side's value of a row in a round is its base
figure times exp(noise), noise normal with spread sigma, either shared by every row of that
side and round (a slow round is slow everywhere) or independent per row. The new side's
latencies are multiplied by 1 + change (req/s divided by it).

The rule is the tool's own: the per-round values go through row_of() and gate_rows(), the
functions judge_rounds() uses, without files (fast). --cli also writes every trial's round
files with the tool's writer (dump_run of records whose percentiles are the values) and runs
`router-latency rounds` on them through main(), and counts where the two disagree.

    python3 bench/gate_simulation.py [--trials 400] [--seed 1] [--cli 20] [--budget-s 1500]
        [--detects 1000] [--recipe 400]

--detects also prints the realized power at the printed "detects" figure beside the 80% it
states, and --recipe what the recommended CI recipe makes of each verdict (a passing check, a
failing one, or a neutral one that says what it could have missed).

Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from router_latency.constants import EXIT_GATE, EXIT_INCONCLUSIVE, EXIT_OK, MIN_ROUNDS
from router_latency.stats import power_shift, t_ppf
from router_latency.files import write_atomic
from router_latency.runfile import Attempt, dump_run, load_run, PassRecord, RunFile, RunSettings
from router_latency.requests import pass_summary, Request
from router_latency.gate import gate_rows, GateSettings, missed_pct, row_of
from router_latency.cli import main as tool_main

PASSES = {"sequential": 1, "c4": 4, "c16": 16}
BASE = {"p50_ms": 10.0, "p95_ms": 15.0, "p99_ms": 20.0, "mean_ms": 11.0, "req_per_s": 100.0}
SIGMAS = (0.01, 0.02, 0.05, 0.10)
ROUNDS = (3, 5, 10)
CHANGES = (0.0, 1.0, 2.0)  # in tolerances: A/A, +tolerance, +2x tolerance
OUTCOMES = ("pass", "fail", "inconclusive")


def round_values(rng: random.Random, sigma: float, shared: bool, change: float,
                 only: tuple = ()) -> dict:
    """Return {(pass, metric): (base value, new value)} of one round; only: the one row the
    change applies to (default every row)."""
    common = {side: rng.gauss(0, sigma) for side in ("base", "new")}
    values = {}
    for name in PASSES:
        for metric, figure in BASE.items():
            pair = []
            moved = change if not only or (name, metric) == only else 0.0
            for side in ("base", "new"):
                noise = common[side] if shared else rng.gauss(0, sigma)
                factor = math.exp(noise) * (1 + moved if side == "new" else 1.0)
                pair.append(figure / factor if metric == "req_per_s" else figure * factor)
            values[(name, metric)] = tuple(pair)
    return values


def judgement(rounds: list, settings: GateSettings):
    """Return the gate's judgement of these rounds, through row_of() and gate_rows()."""
    rows = [row_of(name, metric, [r[(name, metric)][0] for r in rounds],
                      [r[(name, metric)][1] for r in rounds], settings)
            for name in PASSES for metric in BASE]
    return gate_rows(rows, settings)


def judged(rounds: list, settings: GateSettings) -> str:
    """Return the gate's status for these rounds."""
    return judgement(rounds, settings).outcome.status


def fixed_cell(rng, cell: tuple, trials: int, settings) -> dict:
    """Return the outcome counts of trials of a fixed design; cell: (sigma, n, shared,
    change)."""
    sigma, n, shared, change = cell
    counts = dict.fromkeys(OUTCOMES, 0)
    for _ in range(trials):
        rounds = [round_values(rng, sigma, shared, change) for _ in range(n)]
        counts[judged(rounds, settings)] += 1
    return counts


MAX_ROUNDS = 10  # the sequential plan: --sequential 10, --until-decided --max-rounds 10


def sequential_cell(rng, cell: tuple, trials: int, settings) -> tuple:
    """Return (outcome counts, total rounds used): a look after each round from 3 on, stopped
    at the first decided look, as rounds --sequential and run_rounds.sh --until-decided do;
    cell: (sigma, shared, change)."""
    sigma, shared, change = cell
    max_rounds = MAX_ROUNDS
    counts, used = dict.fromkeys(OUTCOMES, 0), 0
    plan = settings._replace(sequential_max=max_rounds)
    for _ in range(trials):
        rounds = [round_values(rng, sigma, shared, change) for _ in range(MIN_ROUNDS - 1)]
        for n in range(MIN_ROUNDS, max_rounds + 1):
            rounds.append(round_values(rng, sigma, shared, change))
            status = judged(rounds, plan)
            if status != "inconclusive":
                break
        counts[status] += 1
        used += n
    return counts, used


def detects_table(args, settings) -> None:
    """Print, for one row (Conc 16 p95), the realized power at the "detects" figure each run
    prints, beside the 80% it states: the figure from each run's own rounds (A/A, independent
    noise), its power the gate's true FAIL rate when only that row slows by it, read off a
    power curve simulated through the gate at the same noise. Also the figure the tool
    printed before (the spread seen, no upper bound), for comparison."""
    print()
    print(f"\"detects\" on Conc 16 p95: {args.detects} runs per cell for the printed figures, "
          f"the power curve from {args.detects // 2} trials at each of {len(CURVE)} slowdowns; "
          f"target: power >= 80% at the printed figure in >= 80% of runs")
    print()
    print("| σ per side | n | true 80% point | printed (median) | realized power (median) | "
          "runs with >= 80% | runs under 50% | before: runs with >= 80% | before: median |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for sigma in (0.02, 0.05):
        for n in ROUNDS:
            detects_cell(args, settings, sigma, n)


CURVE = (0.5, 0.7, 0.85, 1.0, 1.15, 1.35, 1.6, 2.0, 3.0, 5.0)  # times the analytic excess
KEY = ("c16", "p95_ms")


def detects_cell(args, settings, sigma: float, n: int) -> None:
    """Print one row of the detects table."""
    gated = sum(1 for _ in PASSES) * 3  # the default gate: p50, p95 and req/s of every pass
    tolerance, df = math.log1p(settings.tolerance_pct / 100), n - 1
    holm_first = -t_ppf(settings.alpha / 2 / gated, df)
    excess = power_shift(holm_first, df) * sigma * math.sqrt(2) / math.sqrt(n)
    rng = random.Random(f"detects-{args.seed}-{sigma}-{n}")
    curve = []  # (log slowdown, FAIL rate) through the gate, only that row slowing
    for factor in CURVE:
        shift = tolerance + factor * excess
        fails = sum(judged([round_values(rng, sigma, False, math.expm1(shift), KEY)
                            for _ in range(n)], settings) == "fail"
                    for _ in range(args.detects // 2))
        curve.append((shift, fails / (args.detects // 2)))
    for i in range(1, len(curve)):  # a power curve rises: smooth the simulation's noise
        curve[i] = (curve[i][0], max(curve[i][1], curve[i - 1][1]))
    printed, before = [], []
    for _ in range(args.detects):
        report = judgement([round_values(rng, sigma, False, 0.0) for _ in range(n)], settings)
        row = next(r for r in report.rows if (r.pass_name, r.metric) == KEY)
        figure = math.inf if row.detectable_pct is None else math.log1p(row.detectable_pct / 100)
        printed.append(figure)
        before.append(tolerance + power_shift(holm_first, df) * row.spread / math.sqrt(n))
    powers = [power_at(curve, x) for x in printed]
    old = [power_at(curve, x) for x in before]
    crossing = power_inverse(curve, 0.8)
    print(f"| {100 * sigma:g}% | {n} | +{100 * math.expm1(crossing):.1f}% | "
          f"+{100 * math.expm1(sorted(printed)[len(printed) // 2]):.1f}% | "
          f"{100 * sorted(powers)[len(powers) // 2]:.1f}% | "
          f"{share(sum(p >= 0.8 for p in powers), len(powers))} | "
          f"{share(sum(p < 0.5 for p in powers), len(powers))} | "
          f"{share(sum(p >= 0.8 for p in old), len(old))} | "
          f"{100 * sorted(old)[len(old) // 2]:.1f}% |", flush=True)


def power_at(curve: list, shift: float) -> float:
    """Return the FAIL rate at a log slowdown, linear between the curve's points, its ends
    beyond them (the last point's power is a lower bound of the power past it)."""
    if shift <= curve[0][0]:
        return curve[0][1]
    for (x0, p0), (x1, p1) in zip(curve, curve[1:]):
        if shift <= x1:
            return p0 + (p1 - p0) * (shift - x0) / (x1 - x0)
    return curve[-1][1]


def power_inverse(curve: list, power: float) -> float:
    """Return the log slowdown at which the curve reaches a power, linear between points."""
    for (x0, p0), (x1, p1) in zip(curve, curve[1:]):
        if p1 >= power:
            return x1 if p1 == p0 or p0 >= power else x0 + (x1 - x0) * (power - p0) / (p1 - p0)
    return curve[-1][0]


# --- the CI recipe: a passing check, a failing one, or a neutral one ---

RECIPE_CHANGE = 0.10  # the true slowdown of every row the recipe must not pass


def recipe_table(args, settings) -> None:
    """Print what the recommended CI recipe makes of the gate's verdicts: exit 0 a passing
    check, 1 a failing one, 3 a neutral one whose summary says the largest slowdown it could
    have missed; and what the old recipe (3 a green step with a warning) passed."""
    print()
    print(f"the CI recipe, {args.recipe} trials per cell: A/A and a true +"
          f"{100 * RECIPE_CHANGE:g}% on every row; fixed 5 rounds and --until-decided "
          f"--max-rounds {MAX_ROUNDS} (--sequential {MAX_ROUNDS}); neutral: exit 3, its summary "
          f"saying what it could have missed; covers: the share of neutral results whose "
          f"stated figure reaches the true change")
    print()
    print("| σ per side | noise | design | change | passing check | failing check | neutral | "
          "missed, median | covers | old recipe green |")
    print("|---:|:---|:---|:---|---:|---:|---:|---:|---:|---:|")
    for sigma in (0.05, 0.10):
        for shared in (True, False):
            for design in ("fixed 5", f"up to {MAX_ROUNDS}"):
                for change in (0.0, RECIPE_CHANGE):
                    rng = random.Random(f"recipe-{args.seed}-{sigma}-{shared}-{design}-{change}")
                    recipe_cell(args, settings, rng, (sigma, shared, design, change))


def recipe_cell(args, settings, rng, cell: tuple) -> None:
    """Print one row of the recipe table; cell: (sigma, shared, design, change)."""
    sigma, shared, design, change = cell
    counts, missed = dict.fromkeys(OUTCOMES, 0), []
    for _ in range(args.recipe):
        if design == "fixed 5":
            outcome = judgement([round_values(rng, sigma, shared, change) for _ in range(5)],
                                settings).outcome
        else:
            outcome = sequential_outcome(rng, settings, sigma, shared, change)
        counts[outcome.status] += 1
        if outcome.status == "inconclusive":
            missed.append(missed_pct(outcome))
    neutral = len(missed)
    median = sorted(missed)[neutral // 2] if missed else None
    print(f"| {100 * sigma:g}% | {'shared' if shared else 'independent'} | {design} | "
          f"{'A/A' if not change else f'+{100 * change:g}%'} | "
          f"{share(counts['pass'], args.recipe)} | {share(counts['fail'], args.recipe)} | "
          f"{share(neutral, args.recipe)} | "
          + ("-" if median is None else "no bound" if not math.isfinite(median)
             else f"+{median:.1f}%")
          + f" | {share(sum(m >= 100 * change for m in missed), neutral) if neutral else '-'} | "
          f"{share(counts['pass'] + neutral, args.recipe)} |", flush=True)


def sequential_outcome(rng, settings, sigma: float, shared: bool, change: float):
    """Return the outcome of the first decided look of a --sequential MAX_ROUNDS plan, or its
    last look's."""
    plan = settings._replace(sequential_max=MAX_ROUNDS)
    rounds = [round_values(rng, sigma, shared, change) for _ in range(MIN_ROUNDS - 1)]
    for _ in range(MIN_ROUNDS, MAX_ROUNDS + 1):
        rounds.append(round_values(rng, sigma, shared, change))
        outcome = judgement(rounds, plan).outcome
        if outcome.status != "inconclusive":
            break
    return outcome


# --- the command line on files made by the tool's writer ---

def latencies_for(count: int, p50: float, p95: float, p99: float) -> list:
    """Return count sorted latencies whose R7 p50, p95 and p99 are exactly those given."""
    h50, h95 = (count - 1) * 0.50, (count - 1) * 0.95
    return [p50 if i <= math.ceil(h50) else p95 if i <= math.ceil(h95) else p99
            for i in range(count)]


def written_run(path: str, label: str, started: float, values: dict) -> None:
    """Write a run file whose passes have these p50, p95, p99 and req/s (its mean follows
    from the records), through the tool's own summary and writer."""
    count, passes = 101, []
    for name, concurrency in PASSES.items():
        v = {m: values[(name, m)] for m in BASE}
        latencies = latencies_for(count, v["p50_ms"], v["p95_ms"], v["p99_ms"])
        requests = tuple(Request(i, None, latencies[i], 200, "d", None) for i in range(count))
        summary = pass_summary(requests, count / v["req_per_s"])
        attempt = Attempt(None, None, "", started, {}, None, {}, summary, requests)
        passes.append(PassRecord(name, concurrency, False, False, attempt))
    run = RunFile(label, True, {"path": "c.json", "sha256": "0" * 64, "count": count},
                     tuple(passes), started_unix=started, settings=RunSettings(max_load=120.0))
    write_atomic(path, dump_run(run))


def cli_agrees(rounds: list, settings: GateSettings) -> tuple:
    """Write the rounds as files, judge them with `rounds` through main() and with the fast
    path on the values the files hold; return (CLI status, fast status)."""
    with tempfile.TemporaryDirectory() as folder:
        for number, values in enumerate(rounds, 1):
            order = ("base", "new") if number % 2 else ("new", "base")
            for slot, side in enumerate(order):
                written_run(f"{folder}/r{number}-{side}.json", side, 100.0 * number + 10 * slot,
                            {k: v[0 if side == "base" else 1] for k, v in values.items()})
        stored = []
        for number in range(1, len(rounds) + 1):
            runs = [load_run(f"{folder}/r{number}-{s}.json") for s in ("base", "new")]
            stored.append({(p, m): tuple(getattr(r.pass_named(p).summary, m) for r in runs)
                           for p in PASSES for m in BASE})
        argv = ["rounds", "--dir", folder, "--base", "base", "--new", "new", "--tolerance",
                f"{settings.tolerance_pct:g}", "--format", "json"]
        with contextlib.redirect_stdout(io.StringIO()):
            code = tool_main(argv)
    names = {EXIT_OK: "pass", EXIT_GATE: "fail", EXIT_INCONCLUSIVE: "inconclusive"}
    return names.get(code, f"exit {code}"), judged(stored, settings)


# --- the table ---

def share(count: int, trials: int) -> str:
    return f"{100 * count / trials:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400, help="trials per fixed cell")
    parser.add_argument("--sequential-trials", type=int, default=200,
                        help="trials per --sequential 10 cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cli", type=int, default=0, metavar="TRIALS",
                        help="also judge this many trials per noise model through files and "
                             "main(), and count disagreements")
    parser.add_argument("--budget-s", type=float, default=1800.0,
                        help="stop starting new cells after this many seconds")
    parser.add_argument("--skip", action="append", default=[], choices=("fixed", "sequential"),
                        help="leave out a table")
    parser.add_argument("--detects", type=int, default=0, metavar="TRIALS",
                        help="also check the 'detects' figure: this many runs per cell")
    parser.add_argument("--recipe", type=int, default=0, metavar="TRIALS",
                        help="also count what the CI recipe makes of each verdict")
    args = parser.parse_args()
    settings = GateSettings()  # tolerance 5%, the default gate
    started = time.process_time()
    wall = time.monotonic()
    print(f"{args.trials} trials per fixed cell, {args.sequential_trials} per sequential cell, "
          f"seed {args.seed}; tolerance {settings.tolerance_pct:g}%, the default gate (9 "
          f"rows); shares in percent; binomial standard error sqrt(p (1 - p) / trials): "
          f"{100 * math.sqrt(0.025 * 0.975 / args.trials):.2f} points at 2.5%, "
          f"{100 * math.sqrt(0.05 * 0.95 / args.trials):.2f} at 5%")
    if "fixed" not in args.skip:
        fixed_table(args, settings, wall)
    if "sequential" not in args.skip:
        sequential_table(args, settings, wall)
    if args.cli:
        cli_table(args, settings)
    if args.detects:
        detects_table(args, settings)
    if args.recipe:
        recipe_table(args, settings)
    print(f"(cost: {time.process_time() - started:.0f} s of CPU, "
          f"{time.monotonic() - wall:.0f} s of wall time, one process)")


def fixed_table(args, settings, wall) -> None:
    tolerance = settings.tolerance_pct / 100
    print()
    print("| σ per side | noise | n | A/A PASS | A/A FAIL | A/A INC | +tol PASS | +tol FAIL | "
          "+2×tol FAIL | +2×tol PASS |")
    print("|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for sigma in SIGMAS:
        for shared in (True, False):
            for n in ROUNDS:
                if time.monotonic() - wall > args.budget_s:
                    print(f"(budget of {args.budget_s:g} s spent: stopped here)")
                    return
                rng = random.Random(f"{args.seed}-{sigma}-{shared}-{n}")
                cells = [fixed_cell(rng, (sigma, n, shared, c * tolerance), args.trials,
                                    settings) for c in CHANGES]
                t = args.trials
                print(f"| {100 * sigma:g}% | {'shared' if shared else 'independent'} | {n} | "
                      f"{share(cells[0]['pass'], t)} | {share(cells[0]['fail'], t)} | "
                      f"{share(cells[0]['inconclusive'], t)} | {share(cells[1]['pass'], t)} | "
                      f"{share(cells[1]['fail'], t)} | {share(cells[2]['fail'], t)} | "
                      f"{share(cells[2]['pass'], t)} |", flush=True)


def sequential_table(args, settings, wall) -> None:
    tolerance = settings.tolerance_pct / 100
    print()
    print("--sequential 10 (a look after each round from 3, stopped at the first decided look; "
          "run_rounds.sh --until-decided --max-rounds 10 runs the same plan):")
    print()
    print("| σ per side | noise | change | PASS | FAIL | INCONCLUSIVE | mean rounds |")
    print("|---:|:---|:---|---:|---:|---:|---:|")
    for sigma in SIGMAS:
        for shared in (True, False):
            for change, title in zip(CHANGES, ("A/A", "+tol", "+2×tol")):
                if time.monotonic() - wall > args.budget_s:
                    print(f"(budget of {args.budget_s:g} s spent: stopped here)")
                    return
                rng = random.Random(f"seq-{args.seed}-{sigma}-{shared}-{change}")
                t = args.sequential_trials
                counts, used = sequential_cell(rng, (sigma, shared, change * tolerance), t,
                                               settings)
                print(f"| {100 * sigma:g}% | {'shared' if shared else 'independent'} | {title} "
                      f"| {share(counts['pass'], t)} | {share(counts['fail'], t)} | "
                      f"{share(counts['inconclusive'], t)} | {used / t:.2f} |", flush=True)


def cli_table(args, settings) -> None:
    tolerance = settings.tolerance_pct / 100
    print()
    for shared in (True, False):
        rng = random.Random(f"cli-{args.seed}-{shared}")
        agree, seen = 0, {}
        for trial in range(args.cli):
            change = CHANGES[trial % len(CHANGES)] * tolerance
            rounds = [round_values(rng, 0.02, shared, change) for _ in range(5)]
            cli, fast = cli_agrees(rounds, settings)
            agree += cli == fast
            seen[cli] = seen.get(cli, 0) + 1
        print(f"--cli, σ 2%, n 5, {'shared' if shared else 'independent'} noise, changes 0, "
              f"+tol, +2×tol in turn: {agree}/{args.cli} trials agree; CLI outcomes "
              + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())))


if __name__ == "__main__":
    main()
