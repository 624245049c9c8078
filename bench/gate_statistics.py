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
  history     A/A series of 30 commits with a 2% cost of running second: the drift's coverage
  limits      why the split's targets conflict at 5 rounds: an estimator family, then the
              bounds no estimator or rule passes (between's mean, told apart, 'mostly')
  reports     a report after every commit: FAIL at some report of a series at the tolerance
  futility    --until-decided's futility stop: how often it stops early, and the error rates
  more        the one "more rounds" figure: on 5-round pilots left undecided, how often the
              printed number of further rounds decides
  replan      a design the tool does not have: plan from the pilot at its point value, then
              plan again from the run's own first rounds (an internal pilot)

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

from router_latency.gate import gate_rows, GateSettings, more_rounds, row_of  # noqa: E402
from router_latency.noise import (main_part, pass_parts, part_value, planned_spread,  # noqa: E402
                                  rounds_for, RowNoise)
from router_latency.requests import Request  # noqa: E402
from router_latency.variance import noise_parts  # noqa: E402

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


# (name, within, between, first sending's slowdown on both sides), 100 x log sd of the change
SPLIT_SCENARIOS = (("balanced", 4.55, 4.24, 0.0), ("within only", 4.55, 0.0, 0.0),
                   ("within-heavy", 4.55, 2.0, 0.0), ("between-heavy", 1.5, 8.0, 0.0),
                   ("warm-up trend", 2.41, 4.24, 0.06))
SENDINGS = 3


class Tally:
    """What the split printed over trials of one scenario."""

    def __init__(self) -> None:
        self.within, self.between, self.old_within, self.old_between = [], [], [], []
        self.not_apart = self.said = self.wrong = 0


def pilot_table(rng: random.Random, rounds: int, within: float, between: float,
                trend: float) -> tuple:
    """Return (paired table, the rounds' changes, each round's unpaired within variance)
    of one pilot at the sending level (split_trial's model)."""
    table, changes, old = {}, [], []
    per_side = within / 100 * math.sqrt(SENDINGS / 2)  # a sending's noise a side
    for n in range(rounds):
        effect = {side: rng.gauss(0, between / 100 / math.sqrt(2)) for side in "ab"}
        logs = {side: [effect[side] + (math.log1p(trend) if k == 0 else 0.0)
                       + rng.gauss(0, per_side) for k in range(SENDINGS)] for side in "ab"}
        for k in range(SENDINGS):
            table[(n, 0, k)] = logs["b"][k] - logs["a"][k]
        changes.append(statistics.fmean(logs["b"]) - statistics.fmean(logs["a"]))
        old.append(sum(statistics.variance(logs[s]) / SENDINGS for s in "ab"))
    return table, changes, old


def split_trial(rng: random.Random, rounds: int, within: float, between: float,
                trend: float, tally: Tally) -> None:
    """One pilot of `rounds` rounds at the sending level: each side's log statistic of a
    sending is its instance's effect, a first-sending trend and noise; the pass's is their
    mean. The new estimator pairs per sending; the old one (before this change) took each
    side's sendings apart and capped within at the spread."""
    table, changes, old = pilot_table(rng, rounds, within, between, trend)
    spread = statistics.stdev(changes)
    parts = noise_parts(table, top=spread ** 2)
    item = RowNoise("p", "mean_ms", parts, "sendings")
    tally.within.append(100 * parts.within.value)
    tally.between.append(100 * parts.rounds.value)
    old_within = min(math.sqrt(statistics.fmean(old)), spread)
    tally.old_within.append(100 * old_within)
    tally.old_between.append(100 * math.sqrt(max(0.0, spread ** 2 - old_within ** 2)))
    tally.not_apart += item.capped
    words = main_part(item)
    if words.startswith("mostly"):
        tally.said += 1
        tally.wrong += words.startswith("mostly between") != (between > within)


def halves_trial(rng: random.Random, rounds: int, between: float, prompts: int,
                 prompt_sd: float, request_sd: float) -> tuple:
    """One pilot of single-sending passes, prompts in corpus order, each prompt its own
    speed: return (the spread squared, the parts) of its p50, split in halves by prompt."""
    speeds = [rng.gauss(0, prompt_sd) for _ in range(prompts)]
    table, changes = {}, []
    for n in range(rounds):
        effect = {side: rng.gauss(0, between / 100 / math.sqrt(2)) for side in "ab"}
        halves, whole = {}, {}
        for side in "ab":
            clock, requests = 0.0, []
            for i in range(prompts):
                latency = 10 * math.exp(effect[side] + speeds[i] + rng.gauss(0, request_sd))
                requests.append(Request(i, clock, latency, 200, "d", None))
                clock += latency
            record = type("Pass", (), {"requests": requests})
            parts, split = pass_parts(record)
            halves[side] = [math.log(part_value(p, "p50_ms", split)) for p in parts]
            whole[side] = math.log(part_value(requests, "p50_ms"))
        for k in range(2):
            table[(n, 0, k)] = halves["b"][k] - halves["a"][k]
        changes.append(whole["b"] - whole["a"])
    spread = statistics.stdev(changes)
    return spread ** 2, noise_parts(table, top=spread ** 2)


def split_part(args) -> None:
    rng = random.Random(args.seed)
    rounds = 5
    print(f"noise split at {rounds} rounds, {SENDINGS} sendings a pass, {args.trials} pilots a "
          f"scenario (x 100 log sd; mean +- its standard error):")
    for name, within, between, trend in SPLIT_SCENARIOS:
        tally = Tally()
        for _ in range(args.trials):
            split_trial(rng, rounds, within, between, trend, tally)
        # "capped or not told apart at most 10% where the parts differ by 2x or more": where
        # both exist (held at 0 is the right answer for a between part of 0)
        apart = min(within, between) > 0 and max(within, between) >= 2 * min(within, between)
        print(f"  {name} (within {within:g}, between {between:g}"
              f"{f', first sending {trend:.0%} slower' if trend else ''}):")
        for label, values, truth in (("within", tally.within, within),
                                     ("between", tally.between, between)):
            bound = "0.5 points" if truth < 1 else "15%"
            print(f"    {label}: {mean_text(values)} (truth {truth:g}; target: within "
                  f"{bound}); before: "
                  f"{mean_text(tally.old_within if label == 'within' else tally.old_between)}")
        print(f"    between held at 0, printed 'not told apart': "
              f"{rate(tally.not_apart, args.trials)}"
              + (" (target <= 10%: the parts differ by 2x or more)" if apart else ""))
        if tally.said:
            print(f"    'mostly ...' printed in {rate(tally.said, args.trials)}, wrong in "
                  f"{rate(tally.wrong, tally.said)} of those (target <= 5%)")
        else:
            print("    'mostly ...' never printed")
    trials = max(1, args.trials // 4)
    found, spreads = [], []
    for _ in range(trials):
        spread2, parts = halves_trial(rng, rounds, 4.24, 64, 0.3, 0.1)
        spreads.append(spread2)
        found.append(parts)
    within_truth = 100 * math.sqrt(max(0.0, statistics.fmean(spreads) - 0.0424 ** 2))
    print(f"  one sending a pass, prompts in corpus order (64 prompts, each its own speed, sd "
          f"30%), p50, halves by prompt, {trials} pilots:")
    print(f"    within: {mean_text([100 * p.within.value for p in found])} (truth "
          f"{within_truth:.2f}, from the spreads' mean); between: "
          f"{mean_text([100 * p.rounds.value for p in found])} (truth 4.24); held at 0: "
          f"{rate(sum(p.rounds.value == 0 for p in found), trials)}")


def limits_part(args) -> None:
    """Why the split's targets cannot all be met at 5 rounds: the between part's only
    information is the spread over 5 rounds (4 df) against the within part (10 df). Over a
    family of estimators, between = k sqrt(max(0, spread^2 - c within^2)) (c = 1, k = 1: the
    tool's, which is REML's for this balanced design), the mean printed in the balanced case
    (target within 15% of 4.24: 3.60-4.88) against the within-only case's (target at most
    0.5), and the share held at 0 where within is 2.3x between (target at most 10%). And the
    'mostly ...' sentence in the balanced case at stricter F levels: where the parts are
    near equal, a wrong call is about as likely as a right one at any level."""
    from router_latency.variance import larger_part
    rng = random.Random(args.seed)
    draws = {}
    for name, within, between in (("balanced", 4.55, 4.24), ("within only", 4.55, 0.0),
                                  ("within-heavy", 4.55, 2.0)):
        found = []
        for _ in range(args.trials):
            table, changes, _ = pilot_table(rng, 5, within, between, 0.0)
            spread2 = statistics.variance(changes)
            parts = noise_parts(table, top=spread2)
            found.append((spread2, parts.within.value ** 2, parts.within.df))
        draws[name] = found
    print(f"the split's limits at 5 rounds, {args.trials} pilots a scenario (x 100 log sd): "
          f"between = k sqrt(max(0, spread^2 - c within^2)):")
    for c in (1.0, 1.5, 2.0, 3.0):
        for k in (1.0, 1.1, 1.2):
            means = {name: [100 * k * math.sqrt(max(0.0, t - c * v)) for t, v, _ in found]
                     for name, found in draws.items()}
            held = sum(t - c * v <= 0 for t, v, _ in draws["within-heavy"])
            print(f"  c {c:g}, k {k:g}: balanced {mean_text(means['balanced'])} (3.60-4.88), "
                  f"within only {mean_text(means['within only'])} (<= 0.5), within-heavy "
                  f"held at 0 {rate(held, args.trials)} (<= 10%)")
    print("  'mostly ...' in the balanced case (within 4.55 > between 4.24) by the F test's "
          "level a side:")
    for level in (0.025, 0.01, 0.001, 0.0001):
        import router_latency.variance as variance
        kept, variance.LARGER_LEVEL = variance.LARGER_LEVEL, level
        words = [larger_part(t, 4, v, df) for t, v, df in draws["balanced"]]
        variance.LARGER_LEVEL = kept
        said = sum(bool(w) for w in words)
        wrong = sum(w == "between" for w in words)
        print(f"    {level:g}: printed {rate(said, args.trials)}, wrong "
              f"{rate(wrong, said) if said else 'n/a'} of those (target <= 5%)")
    limits_of_any_rule()


def chi2_upper(df: float, x: float) -> float:
    """Return P(chi2_df > x): the regularized upper incomplete gamma, by its series."""
    if x <= 0:
        return 1.0
    a, half = df / 2, x / 2
    term = total = 1.0 / a
    for n in range(1, 10000):
        term *= half / (a + n)
        total += term
        if term < total * 1e-16:
            break
    return max(0.0, 1.0 - total * math.exp(a * math.log(half) - half - math.lgamma(a)))


def capped_mean(df: int, total: float, threshold: float, cap: float = 1.0) -> float:
    """Return E[cap sqrt(T) 1{T > threshold}] for T = total chi2_df / df: the mean of an
    estimate that prints cap x the spread where its square passes the threshold, else 0.
    E[sqrt(X) 1{X > x}] = sqrt(2) Gamma((df + 1) / 2) / Gamma(df / 2) P(chi2_{df+1} > x)."""
    moment = math.sqrt(2) * math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2))
    return cap * math.sqrt(total / df) * moment * chi2_upper(df + 1, threshold * df / total)


def limits_of_any_rule() -> None:
    """The bounds behind the split's unmet targets, for any estimator or rule, not a family.
    (1) Between's mean: within is 4.55 in both the balanced case and the one with no between
    part, so the within estimate has one law in both and the likelihood ratio of the data is
    a function of T, the spread's square (total chi2_df / df), increasing in it. Among
    estimates between 0 and cap x the spread (never a between part above the spread it is a
    part of, at cap 1), the largest balanced mean with a mean of at most 0.5 where between is
    0 prints cap x the spread above a threshold and 0 below (Neyman-Pearson, as a fractional
    knapsack: fill where the ratio is largest). (2) Told apart: an interval whose low end
    passes 0 in at most 5% of pilots where between is 0 is a test at 5%; the F test is the
    most powerful invariant one. (3) 'mostly ...': the balanced case and its mirror (within
    4.24, between 4.55) give the spread one law; only the within estimate's differs, their
    likelihood ratio at most (4.55 / 4.24)^10."""
    from router_latency.stats import f_cdf, f_ppf
    within, between = 4.55, 4.24
    print("  what no estimator or rule passes at 5 rounds (exact, from the chi-square and F "
          "laws):")
    for df, what in ((4, "the paired rounds' spread"),
                     (8, "both sides' instance means, were there no round effect")):
        for cap in (1.0, 1.5):
            low, high = 0.0, 100.0 * within ** 2
            for _ in range(100):
                mid = (low + high) / 2
                low, high = ((mid, high) if capped_mean(df, within ** 2, mid, cap) > 0.5
                             else (low, mid))
            best = capped_mean(df, within ** 2 + between ** 2, low, cap)
            print(f"    between's mean, {df} df ({what}), at most {cap:g} x the spread and at "
                  f"most 0.5 where between is 0: balanced at most {best:.2f} (target 3.60-4.88;"
                  f" it prints only above a spread of {math.sqrt(low):.2f})")
    heavy = 1 + 2.0 ** 2 / within ** 2  # between 2.0 beside within 4.55: the spread's factor
    for level in (0.05, 0.10):
        power = 1 - f_cdf(f_ppf(1 - level, 4, 10) / heavy, 4, 10)
        print(f"    between 2.0 beside within 4.55 told apart by the F test at {level:.0%} (the "
              f"most powerful invariant test): {power:.1%} of pilots, so 'not told apart' in "
              f"{1 - power:.1%} (target <= 10%)")
    mirror = 1 / 4.24 ** 2 - 1 / 4.55 ** 2
    ratio = (4.55 / 4.24) ** 10
    edge = 2 * ratio / 19 ** 2  # 5% wrong where printed is 1 in 19 right: twice the mean bound
    seen = math.log(ratio / edge) / (5 * mirror)  # the within estimate's square at that ratio
    print(f"    'mostly ...' wrong in at most 5% of the pilots where printed in both the "
          f"balanced case and its mirror: the likelihood ratio on the printed 'mostly within' "
          f"averages at most {ratio:.2f} / 19^2 = {ratio / 19 ** 2:.4f}, so it is printed at "
          f"most twice P(within estimate >= {math.sqrt(seen):.1f}, true 4.55) = "
          f"{2 * chi2_upper(10, 10 * seen / 4.55 ** 2):.1e} of pilots, 'mostly between' 1/19 "
          f"of that")


# (name, within, between) of each of 3 gated rows, 100 x log sd
PILOT_SCENARIOS = (("balanced", 4.55, 4.24), ("within only", 4.55, 0.0),
                   ("between-heavy", 1.5, 8.0), ("small", 1.0, 1.5))


def pilots_part(args) -> None:
    """Plans from 5-round pilots at the runs' requests per pass (scale 1): a plan keeps both
    its rates when its rounds are at least those the true noise needs (rounds_for, whose
    rates the 'plan' part checks by simulation)."""
    from router_latency.noise import PLAN_CONFIDENCE as confidence  # as --plan-confidence set
    from router_latency.stats import chi2_ppf
    settings = GateSettings()
    rng = random.Random(args.seed)
    print("why the median plan exceeds the truth's at 5 rounds: rounds grow with the variance, "
          "and a plan at c x the pilot's variance on df degrees of freedom reaches the truth's "
          "rounds in P(c chi2_df / df >= 1) of pilots; at 80% of pilots its median is "
          "median(chi2_df) / chi2_df's 20% point times the truth's, and at a median of 1.5x "
          "it reaches the truth in:")
    for df, what in ((4, "the between part, on the 5 rounds' 4 df"),
                     (10, "the within part, on 5 rounds x 2 sendings' df")):
        ratio = chi2_ppf(0.5, df) / chi2_ppf(0.2, df)
        c = 1.5 * df / chi2_ppf(0.5, df)
        low, high = 0.0, 1.0  # P(chi2_df >= df / c) by bisection on the quantile
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if chi2_ppf(mid, df) < df / c else (low, mid)
        print(f"  df {df} ({what}): median {ratio:.2f}x the truth's at 80% of pilots; at a "
              f"1.5x median, {1 - low:.1%} of pilots")
    print(f"plans from 5-round pilots, 1 or 3 gated rows alike (independent), at the runs' "
          f"requests per pass, {args.trials} pilots a scenario (planned at each part's "
          f"{confidence:.0%} upper bound):")
    for (name, within, between), count in [(c, k) for k in (1, 3) for c in PILOT_SCENARIOS]:
        truth = rounds_for([math.hypot(within, between) / 100] * count, settings)
        planned, point, kept = [], [], 0
        for _ in range(args.trials):
            spreads, points = [], []
            for _ in range(count):
                table, changes, _ = pilot_table(rng, 5, within, between, 0.0)
                spread = statistics.stdev(changes)
                row = type("PilotRow", (), {"spread": spread, "rounds": 5})
                found = RowNoise("p", "p50_ms", noise_parts(table, top=spread ** 2), "sendings")
                spreads.append(planned_spread(row, found, 1.0, "plan"))
                points.append(spread)
            rounds = rounds_for(spreads, settings) or 1001
            planned.append(rounds)
            point.append(rounds_for(points, settings) or 1001)
            kept += rounds >= truth
        print(f"  {count} row(s), {name} (within {within:g}, between {between:g}): the true "
              f"noise needs "
              f"{truth} rounds; plans keep both rates in {rate(kept, args.trials)} of pilots "
              f"(target >= 80%); median planned {statistics.median(planned):g} rounds, "
              f"{statistics.median(planned) / truth:.2f}x the truth's (target <= 1.5x); at the "
              f"point values: kept in {rate(sum(p >= truth for p in point), args.trials)}, "
              f"median {statistics.median(point) / truth:.2f}x")


# (name, spread of each gated row's change, its true change), 3 gated rows, the first changed
MORE_SCENARIOS = (("A/A, spread 3%", 0.03, 0.0), ("A/A, spread 6%", 0.06, 0.0),
                  ("+3%, spread 3%", 0.03, 0.03), ("+10%, spread 6%", 0.06, 0.10))


def more_part(args) -> None:
    """Simulated 5-round pilots through the gate: where undecided, run the printed number of
    further rounds and judge all of them."""
    settings = GateSettings()
    rng = random.Random(args.seed)
    rows_of = [("sequential", m) for m in GATED]
    print(f"'more rounds' on 5-round pilots, {len(rows_of)} gated rows, {args.trials} "
          f"pilots a scenario:")
    for name, spread, change in MORE_SCENARIOS:
        undecided = decided = past = 0
        figures = []

        def judged(values):
            rows = [row_of(p, m, [10.0] * len(values), [10.0 * math.exp(
                (-1 if m == "req_per_s" else 1) * v[k]) for v in values], settings)
                for k, (p, m) in enumerate(rows_of)]
            return gate_rows(rows, settings).outcome

        def draw():
            return [(change if k == 0 else 0.0) + rng.gauss(0, spread)
                    for k in range(len(rows_of))]
        for _ in range(args.trials):
            values = [draw() for _ in range(5)]
            outcome = judged(values)
            if outcome.status != "inconclusive":
                continue
            undecided += 1
            more = more_rounds(outcome)
            if more is None:
                past += 1
                continue
            figures.append(more)
            values += [draw() for _ in range(more)]
            decided += judged(values).status != "inconclusive"
        printed = undecided - past
        print(f"  {name}: undecided after 5 in {rate(undecided, args.trials)}; of those with a "
              f"figure ({printed}; past 1,000: {past}), the printed further rounds decided "
              f"{rate(decided, printed) if printed else 'n/a'} (target >= 70%); median "
              f"figure {statistics.median(figures) if figures else 'n/a'}")


# (name, spread of each gated row's change, true change of every gated row)
FUTILITY_SCENARIOS = (("A/A, spread 3%", 0.03, 0.0), ("+10%, spread 3%", 0.03, 0.10),
                      ("at the tolerance (+5%), spread 6%", 0.06, 0.05),
                      ("A/A, spread 10%", 0.10, 0.0))


def futility_part(args) -> None:
    """--until-decided --max-rounds 10 through the gate's looks (rounds --sequential 10 from
    round 3): how often a run stops for futility before its last look, and the error rates.
    The rounds' "more rounds" figure, which a look does not use, is left out (speed)."""
    import router_latency.gate as gate
    gate.rounds_to_go = lambda *_: None  # not needed at a look; 4 ms a row
    most = 10
    settings = GateSettings(sequential_max=most)
    rows_of = [("sequential", m) for m in GATED]
    print(f"--until-decided --max-rounds {most}, {len(rows_of)} independent gated rows, "
          f"{args.trials} runs a scenario; 'without': the same seed with no futility stop:")
    stop = gate.FUTILITY_PROBABILITY
    for (name, spread, change), bound in [(c, b) for c in FUTILITY_SCENARIOS for b in (stop, 0)]:
        gate.FUTILITY_PROBABILITY = bound
        rng = random.Random(sum(map(ord, name)) + args.seed)
        counts = {"pass": 0, "fail": 0, "inconclusive": 0}
        futile, early, took = 0, 0, []
        for _ in range(args.trials):
            values = []
            for n in range(1, most + 1):
                values.append([change + rng.gauss(0, spread) for _ in rows_of])
                if n < 3:
                    continue
                rows = [row_of(p, m, [10.0] * n, [10.0 * math.exp(
                    (-1 if m == "req_per_s" else 1) * v[k]) for v in values], settings)
                    for k, (p, m) in enumerate(rows_of)]
                outcome = gate_rows(rows, settings).outcome
                if outcome.status != "inconclusive" or outcome.futility or n == most:
                    break
            counts[outcome.status] += 1
            futile += bool(outcome.futility)
            early += n < most
            took.append(n)
        print(f"  {name}{'' if bound else ' (without)'}: PASS "
              f"{rate(counts['pass'], args.trials)}, FAIL "
              f"{rate(counts['fail'], args.trials)}, INCONCLUSIVE "
              f"{rate(counts['inconclusive'], args.trials)}; stopped for futility "
              f"{rate(futile, args.trials)}; before round {most}: {rate(early, args.trials)}; "
              f"mean rounds {mean_text(took, digits=1)}")
    print("  targets: A/A FAIL <= 5% (the design's 2.5% a side within Monte-Carlo error), "
          "+10% PASS <= 2.5%, an undecidable change stopped early in >= 60%")


def history_part(args) -> None:
    """A/A series of 30 commits, 5 rounds each started as run_rounds.sh starts them (base
    first in rounds 1, 3, 5), running second costing 2%: the drift's coverage and FAIL rate,
    with the step balanced over the start order (today) and the plain mean (before)."""
    from router_latency.history import HistoryEntry, history_report, HistoryRow, TrendSettings
    rng = random.Random(args.seed)
    commits, rounds, sigma, cost = 30, 5, 0.02, math.log(1.02)
    new_first = tuple(n % 2 == 0 for n in range(1, rounds + 1))  # r2, r4: new first
    series = max(1, args.trials // 4)
    print(f"history: {series} A/A series of {commits} commits, {rounds} rounds each (base "
          f"first in r1, r3, r5), round spread {sigma:.0%}, running second costs 2%:")
    for label, order in (("balanced over the start order", new_first), ("plain mean", ())):
        fails = covered = 0
        drifts = []
        for _ in range(series):
            entries = []
            for i in range(commits):
                base, new = [], []
                for first in new_first:
                    level = 10.0 * math.exp(rng.gauss(0, 0.05))
                    second = cost if not first else -cost  # the new side ran second: slower
                    base.append(level)
                    new.append(level * math.exp(second + rng.gauss(0, sigma)))
                entries.append(HistoryEntry(
                    commit=f"c{i}", base_commit="", branch="main", date="", label="",
                    kind="rounds", source="", verdict="", tolerance_pct=5.0,
                    corpus_sha256="a" * 64, config={}, node="n", node_class="", environment={},
                    rows=(HistoryRow("sequential", "p50_ms", True, tuple(base), tuple(new)),),
                    new_first=order))
            report = history_report("bench", entries, TrendSettings())
            fails += report.exit_code == 1
            drift = report.rows[0].drift
            covered += drift is not None and drift.low <= 0.0 <= drift.high
            drifts.append(100 * drift.mean if drift is not None else 0.0)
        print(f"  {label}: drift {mean_text(drifts)}% (truth 0), its interval covers 0 in "
              f"{rate(covered, series)} (target >= 93%), FAIL {rate(fails, series)} "
              f"(target <= 2.5%)")


def series_of(rng: random.Random, steps, sigma: float, rounds: int = 5) -> list:
    """Return a series' entries, each round's log ratio new/base its step plus normal noise
    (both sides share the round's level, which cancels)."""
    from router_latency.history import HistoryEntry, HistoryRow
    entries = []
    for i, step in enumerate(steps):
        base = [10.0 * math.exp(rng.gauss(0, 0.05)) for _ in range(rounds)]
        new = [b * math.exp(step + rng.gauss(0, sigma)) for b in base]
        entries.append(HistoryEntry(
            commit=f"c{i}", base_commit="", branch="main", date="", label="", kind="rounds",
            source="", verdict="", tolerance_pct=5.0, corpus_sha256="a" * 64, config={},
            node="n", node_class="", environment={},
            rows=(HistoryRow("sequential", "p50_ms", True, tuple(base), tuple(new)),)))
    return entries


def reports_part(args) -> None:
    """Reports after every commit (the documented workflow): how often a series whose drift
    is at most the tolerance at every report FAILs at some report, with each report's FAIL at
    its share of the series' 2.5% (history.report_level, today) and at 2.5% each (before);
    what that costs a drift of +2.5% a commit (FAIL at the last of 6 reports); and the A/A
    coverage of the drift's interval over 30 commits."""
    import router_latency.history as history
    spent = history.report_level
    rng = random.Random(args.seed)
    tolerance = math.log1p(0.05)
    series = args.trials
    print(f"history reported after every commit, 5 rounds a commit, {series} series a cell; "
          f"target: FAIL at some report <= 2.5% where the drift never passes the tolerance:")
    cells = (("drift reaching the tolerance at commit 6 (+0.82% a commit)", 6, 0.01,
              [tolerance / 6] * 6),
             ("drift reaching the tolerance at commit 6 (+0.82% a commit)", 6, 0.03,
              [tolerance / 6] * 6),
             ("drift at the tolerance from the first commit on", 30, 0.02,
              [tolerance] + [0.0] * 29),
             ("drift reaching the tolerance at commit 30", 30, 0.02, [tolerance / 30] * 30))
    for name, commits, sigma, steps in cells:
        for label, level in (("spent over the reports", spent),
                             ("2.5% each report (before)", lambda k: GATE_HALF)):
            history.report_level = level
            failed = 0
            for _ in range(series):
                entries = series_of(rng, steps, sigma)
                failed += any(history.history_report("b", entries[:k], history.TrendSettings())
                              .exit_code == 1 for k in range(1, commits + 1))
            print(f"  {name}, {commits} reports, round spread {sigma:.0%}, {label}: FAIL at "
                  f"some report {rate(failed, series)}")
    history.report_level = spent
    print("what it costs: +2.5% a commit, FAIL at the 6th report (drift +16%):")
    for sigma in (0.01, 0.03):
        for label, level in (("spent", spent), ("2.5% each (before)", lambda k: GATE_HALF)):
            history.report_level = level
            failed = sum(history.history_report("b", series_of(
                rng, [math.log1p(0.025)] * 6, sigma), history.TrendSettings()).exit_code == 1
                for _ in range(series))
            print(f"  round spread {sigma:.0%}, {label}: {rate(failed, series)}")
    history.report_level = spent
    covered = fails = 0
    for _ in range(series):
        report = history.history_report("b", series_of(rng, [0.0] * 30, 0.02),
                                        history.TrendSettings())
        drift = report.rows[0].drift
        covered += drift is not None and drift.low <= 0.0 <= drift.high
        fails += report.exit_code == 1
    print(f"A/A over 30 commits, round spread 2%: the drift's interval covers 0 in "
          f"{rate(covered, series)} (target >= 93%), FAIL {rate(fails, series)}")


GATE_HALF = 0.025  # the one-sided level of one report before the reports shared it


def replan_part(args) -> None:
    """An internal pilot (Wittes and Brittain 1990), which the tool does not have: the
    5-round A/A pilot plans N1 rounds at its point value (its spread, 4 df; --first-share of
    that, at least 3); the run's own
    first N1 rounds plan again, at the REPLAN_CONFIDENCE upper bound of their spread on N1 - 1
    df (the spread of the changes, which does not look at their mean); the run goes on to
    N = max(N1, N2) rounds and is judged once, as a fixed design. --rows gated rows alike
    (independent; a change on the first), each scenario of 'pilots'. Printed: the run's rates through the gate (A/A PASS, +10% FAIL;
    at +5%, the tolerance, FAIL and PASS: the design's 2.5% each, which a rounds count chosen
    on the same rounds may bend), the share of runs with N at least the true noise's rounds
    and N's median against them, and the share of pilots whose plan keeps both targets:
    its rates given its N1 (each N1 that pilots gave, --inner runs of it)."""
    from router_latency.gate import spread_bound
    settings = GateSettings()
    rng = random.Random(args.seed)
    confidence = args.replan_confidence
    inner = args.inner
    changes_of = {"A/A": 0.0, "+10%": math.log1p(0.10), "+5%": math.log1p(0.05)}

    count = args.rows
    metrics = [(p, m) for p in PASSES for m in GATED][:count]

    def status(values) -> str:  # values[k]: row k's log changes, worse positive
        rows = [row_of(p, m, [10.0] * len(values[k]), [10.0 * math.exp(
            (-1 if m == "req_per_s" else 1) * v) for v in values[k]], settings)
            for k, (p, m) in enumerate(metrics)]
        return gate_rows(rows, settings).outcome.status

    def run(n1: int, sigma: float, change: float) -> tuple:
        values = [[(change if k == 0 else 0.0) + rng.gauss(0, sigma) for _ in range(n1)]
                  for k in range(count)]
        again = rounds_for([spread_bound(statistics.stdev(v), n1 - 1, confidence)
                            for v in values], settings) or 1000
        n = max(n1, again)
        for k, row in enumerate(values):
            row += [(change if k == 0 else 0.0) + rng.gauss(0, sigma) for _ in range(n - n1)]
        return n, status(values)

    print(f"replan: 5-round pilots plan at the point value (N1: {args.first_share:g} of it), "
          f"the run's first N1 rounds plan "
          f"again at a {confidence:.0%} upper bound; {count} gated row(s), {args.trials} pilots a "
          f"scenario, {inner} runs for each N1 pilots gave:")
    for name, within, between in PILOT_SCENARIOS:
        sigma = math.hypot(within, between) / 100
        truth = rounds_for([sigma] * count, settings)
        firsts = []
        for _ in range(args.trials):
            seen = [statistics.stdev(pilot_table(rng, 5, within, between, 0.0)[1])
                    for _ in range(count)]
            firsts.append(max(3, math.ceil(args.first_share
                                           * (rounds_for(seen, settings) or 1000))))
        counts = {key: {"pass": 0, "fail": 0, "inconclusive": 0} for key in changes_of}
        took = []
        for n1 in firsts:  # one run of each pilot's plan per change
            for key, change in changes_of.items():
                n, verdict = run(n1, sigma, change)
                counts[key][verdict] += 1
                took.append(n)
        kept = 0
        given = {}
        for n1 in sorted(set(firsts)):
            passed = sum(run(n1, sigma, 0.0)[1] == "pass" for _ in range(inner))
            found = sum(run(n1, sigma, changes_of["+10%"])[1] == "fail" for _ in range(inner))
            given[n1] = (passed / inner, found / inner)
            kept += firsts.count(n1) * (passed / inner >= 0.9 and found / inner >= 0.8)
        worst = min(given.items(), key=lambda item: min(item[1][0] - 0.9, item[1][1] - 0.8))
        trials = args.trials
        print(f"  {name} (within {within:g}, between {between:g}): the true noise needs {truth} "
              f"rounds; A/A PASS {rate(counts['A/A']['pass'], trials)} (target >= 90%), +10% "
              f"FAIL {rate(counts['+10%']['fail'], trials)} (target >= 80%); at +5%: FAIL "
              f"{rate(counts['+5%']['fail'], trials)}, PASS {rate(counts['+5%']['pass'], trials)}"
              f" (2.5% each); N >= the truth's in {rate(sum(n >= truth for n in took), len(took))}"
              f", median N {statistics.median(took):g}, {statistics.median(took) / truth:.2f}x "
              f"the truth's (target <= 1.5x); pilots whose plan keeps both targets given its N1: "
              f"{kept / trials:.1%} (target >= 80%; the least: N1 {worst[0]}, PASS "
              f"{worst[1][0]:.1%}, FAIL {worst[1][1]:.1%} of {inner})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("plan", "split", "pilots", "more", "futility",
                                         "history", "reports", "limits", "replan"))
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--larger-level", type=float, default=None,
                        help="split: the one-sided level of the 'mostly ...' F test (a trial "
                             "of another rule; default variance.LARGER_LEVEL)")
    parser.add_argument("--plan-confidence", type=float, default=None,
                        help="pilots: plan at this upper bound (a trial of another trade-off; "
                             "default noise.PLAN_CONFIDENCE)")
    parser.add_argument("--replan-confidence", type=float, default=0.6,
                        help="replan: the upper bound the run's first rounds plan again at")
    parser.add_argument("--rows", type=int, default=1, choices=(1, 3),
                        help="replan: gated rows alike (independent)")
    parser.add_argument("--first-share", type=float, default=1.0,
                        help="replan: the share of the pilot's plan run before planning again")
    parser.add_argument("--inner", type=int, default=400,
                        help="replan: runs of each first stage N1 for its rates")
    args = parser.parse_args()
    if args.larger_level is not None:
        import router_latency.variance as variance
        variance.LARGER_LEVEL = args.larger_level
    if args.plan_confidence is not None:
        import router_latency.noise as noise
        noise.PLAN_CONFIDENCE = args.plan_confidence
    begun = time.perf_counter()
    {"plan": plan_part, "split": split_part, "pilots": pilots_part,
     "more": more_part, "futility": futility_part, "history": history_part,
     "reports": reports_part, "limits": limits_part, "replan": replan_part}[args.part](args)
    print(f"({args.trials} trials a cell, {time.perf_counter() - begun:.0f} s)")


if __name__ == "__main__":
    main()
