#!/usr/bin/env python3
"""Do pools of instances decide in less node time on a node shaped as the H200's?

The H200's A/A (../shared/data/h200/aa-gpu) had its noise between router instances: a pass's
p50 moved about 20% (log standard deviation) from instance to instance and about 5% within one
instance; a side's start-up to ready took 13.4 s and its pass about 6.2 s. This script plays
that node, every time scaled by one factor (--scale, printed), with two designs:

- one instance a round (run_rounds.sh as before), and
- a pool of --instances (8) a side a round, started together, measured one after another
  (run_rounds.sh --instances 8 --together): both sides' pools up at once, one start-up a
  round (--apart: one side's pool after the other's, a start-up each).

1. Judging. For each design the rounds are those at which a fixed design finds the change
   80% of the time on the true spread of its judged change (stats.rounds_needed, the gate's
   one-sided 2.5% test against the tolerance), and --series (200) simulated
   series of that many rounds are judged by the tool itself (rounds.judge_rounds on run files
   made in memory: each instance a speed drawn log-normal with sd --between, each request a
   log-normal time whose pass p50 moves --within within the instance, three sendings a pass):
   with a true --change (+15%) change, how often the gate FAILs (its power), and for an A/A
   pair how often it FAILs (its false-fail rate, at most the design's 2.5% one-sided within
   its Monte-Carlo error). The noise split the tool reads on the first series of each design
   is printed beside its truth.
2. Node time. Each design's node minutes from the cost model (NodeCost.round_s: start-up once
   per pool, warm-up and pass per instance, the step from one instance's run to the next), and
   with --e2e N, N end-to-end runs of run_rounds.sh per design on simulated routers (simulate
   --startup-s, --delay-ms, --instance-sd) at that scale: each run's stderr stamped (its
   checks, its rounds, its final judgement), the design's node time at its rounds from the
   measured time a round, and the cost the tool reads from the run files beside it.

Not a test: it prints figures and asserts nothing.

    python3 bench/pools.py [--series 200] [--instances 8] [--scale 1] [--e2e 0]
"""

from __future__ import annotations

import argparse
import math
import os
import py_compile
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from router_latency.corpus import CORPUS_SCHEMA, corpus_bytes  # noqa: E402
from router_latency.errors import RouterLatencyError  # noqa: E402
from router_latency.gate import GateSettings  # noqa: E402
from router_latency.noise import NodeCost  # noqa: E402
from router_latency.pools import pool_run  # noqa: E402
from router_latency.requests import pass_summary, Request  # noqa: E402
from router_latency.record import record_section  # noqa: E402
from router_latency.rounds import judge_rounds  # noqa: E402
from router_latency.runfile import Attempt, PassRecord, RunFile, RunSettings  # noqa: E402
from router_latency.stats import rounds_needed  # noqa: E402

LOAD_BEFORE = f"{os.getloadavg()[0]:.2f}"
STARTUP_S, PASS_S, OTHER_S, GAP_S = 13.4, 6.2, 0.3, 0.9  # the H200's, measured (aa-gpu)
PROMPTS, SENDINGS = 20, 3


def instance_run(rng: random.Random, label: str, number: int, speed: float, within: float,
                 started: float) -> RunFile:
    """Return one instance's run: three sendings of PROMPTS requests whose times are
    log-normal about 10 ms times `speed`, spread so that the pass p50 moves `within`."""
    count = PROMPTS * SENDINGS
    # the log sd of a median of n log-normal values is about 1.2533 sigma / sqrt(n)
    sigma = within * math.sqrt(count) / 1.2533
    requests, clock = [], 0.0
    for rep in range(SENDINGS):
        for prompt in range(PROMPTS):
            latency = round(10.0 * speed * math.exp(rng.gauss(0.0, sigma)), 4)
            requests.append(Request(prompt, round(clock, 3), latency, 200, "d", None, rep=rep))
            clock += latency
    summary = pass_summary(requests, round(clock / 1000, 6))
    attempt = Attempt(None, None, "", started, {}, None, {}, summary, tuple(requests))
    return RunFile(label, True, {"path": "c.json", "sha256": "0" * 64, "count": PROMPTS},
                   (PassRecord("sequential", 1, False, False, attempt),), started_unix=started,
                   settings=RunSettings(repeat=SENDINGS), path=f"r{number}-{label}.json")


def series(rng: random.Random, rounds: int, instances: int, change: float, between: float,
           within: float) -> dict:
    """Return {round: {side: RunFile}} of one simulated series."""
    runs = {}
    for number in range(1, rounds + 1):
        sides = {}
        for k, (side, factor) in enumerate((("a", 1.0), ("b", 1.0 + change))):
            made = [instance_run(rng, side, number, factor * math.exp(rng.gauss(0.0, between)),
                                 within, 1000.0 * number + 100 * k + i)
                    for i in range(instances)]
            sides[side] = made[0] if instances == 1 else pool_run(made)
        runs[number] = sides
    return runs


def planned_rounds(instances: int, args: argparse.Namespace) -> int:
    """Return the rounds at which a fixed design finds the change (FAIL) 80% of the time on
    the true spread of a pool of `instances`: the gate's one-sided 2.5% t test against the
    tolerance (stats.rounds_needed), the same power for every design."""
    spread = math.sqrt(2 * (args.between ** 2 + args.within ** 2) / instances)
    found = rounds_needed(spread, math.log1p(args.change) - math.log1p(args.tolerance / 100),
                          alpha=0.025, power=0.8, sided=1)
    return found if found is not None else 1000


def judged(instances: int, rounds: int, change: float, args: argparse.Namespace,
           seed: int) -> dict:
    """Return the outcomes of args.series series, and the noise split of the first."""
    rng = random.Random(seed)
    settings = GateSettings(tolerance_pct=args.tolerance, gate=("p50_ms", "req_per_s"))
    counts = {"pass": 0, "fail": 0, "inconclusive": 0}
    split = None
    for i in range(args.series):
        report = judge_rounds(series(rng, rounds, instances, change, args.between,
                                     args.within), "a", "b", settings)
        counts[report.status] += 1
        if split is None and report.noise is not None:
            row = next(r for r in report.rows if r.metric == "p50_ms")
            item = report.noise.of(row)
            if item is not None:
                split = (100 * row.spread, item.within_pct, item.between_pct)
    return {"counts": counts, "split": split}


def model_cost(args: argparse.Namespace) -> NodeCost:
    """Return the H200's cost of a side's run at this scale (aa-gpu's medians), with the
    step from one instance's run to the next in a pool at the tool's usual INSTANCE_S."""
    return NodeCost(STARTUP_S * args.scale, OTHER_S * args.scale, GAP_S * args.scale,
                    PASS_S * args.scale, PROMPTS * SENDINGS, SENDINGS, look_s=0.0)


def model_minutes(instances: int, rounds: int, args: argparse.Namespace) -> float:
    """Return the cost model's node minutes (NodeCost.round_s, no look: a fixed design)."""
    together = instances > 1 and not args.apart
    return rounds * model_cost(args).round_s(1, instances, together=together) / 60


class Timed(NamedTuple):
    """One end-to-end run of run_rounds.sh: its wall time and where it went."""
    wall_s: float
    before_s: float  # from its start to its first round's start: the checks
    rounds_s: float  # from its first round's start to its last instance's line
    after_s: float  # the rest: the last stop and the final judgement
    cost: Optional[NodeCost]  # what the tool reads from its run files (rounds --plan's cost)


def e2e(instances: int, rounds: int, args: argparse.Namespace) -> List[Timed]:
    """Run args.e2e end-to-end run_rounds.sh runs of this design; return their times."""
    times = []
    # the simulated routers start from a compiled copy of the tool (compiling the 1 MB file
    # took 0.7-1.3 s a start on the loaded 2-core machine: a cost of the stand-in, not of
    # the node it plays), as run_rounds.sh starts its own runs
    compiled = Path(tempfile.mkdtemp()) / "router_latency.pyc"
    py_compile.compile(str(ROOT / "router_latency.py"), cfile=str(compiled), doraise=True)
    tool = shlex.quote(str(compiled))
    delay_ms = 1000 * PASS_S * args.scale / (PROMPTS * SENDINGS)
    for run in range(args.e2e):
        with tempfile.TemporaryDirectory() as work:
            folder = Path(work)
            (folder / "corpus.json").write_bytes(corpus_bytes({
                "schema": CORPUS_SCHEMA, "source": {"repo": "bench"}, "files": {},
                "prompts": [{"id": i, "text": f"prompt {i}", "source": "bench"}
                            for i in range(PROMPTS)]}))
            # one instance a round: no INSTANCE, one URL file a side
            mark, each = ("%i", "$INSTANCE") if instances > 1 else ("1", "1")
            start = {side: (f"exec {shlex.quote(sys.executable)} {tool} simulate --port 0 "
                            f"--serial --delay-ms {delay_ms:.3f} --instance-sd "
                            f"{100 * args.between:g} --seed {run} --startup-s "
                            f"{STARTUP_S * args.scale:.3f} --url-file "
                            f"{folder}/{side}-{each}.url")
                     for side in ("a", "b")}
            command = ["bash", str(ROOT / "rounds" / "run_rounds.sh"), "--rounds", str(rounds),
                       "--dir", str(folder / "results"), "--corpus",
                       str(folder / "corpus.json"), "--base", "a", "--base-start", start["a"],
                       "--base-url-file", f"{folder}/a-{mark}.url", "--new", "b",
                       "--new-start", start["b"], "--new-url-file", f"{folder}/b-{mark}.url",
                       "--tolerance", str(args.tolerance)]
            if instances > 1:
                command += ["--instances", str(instances)]
                if not args.apart:
                    command.append("--together")
            command += ["--", "-c", "1", "--warmup", "0", "--repeat", str(SENDINGS)]
            times.append(timed_run(command, rounds, folder / "results"))
    shutil.rmtree(compiled.parent)
    return times


def timed_run(command: List[str], rounds: int, results: Path) -> Timed:
    """Run one end-to-end command, stamping each line it prints on stderr."""
    began = time.monotonic()
    stamped = []
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, "PYTHON": sys.executable}) as done:
        assert done.stderr is not None
        for line in done.stderr:
            stamped.append((time.monotonic() - began, line.rstrip("\n")))
    wall = time.monotonic() - began
    if done.returncode not in (0, 1, 3):  # a verdict, or no run to time
        print(f"  end-to-end run failed ({done.returncode}): {stamped[-1:]}")
    first = next((t for t, line in stamped if line.startswith("run_rounds.sh: round 1/")), 0.0)
    last = max((t for t, line in stamped if re.match(rf"run_rounds.sh: round {rounds}/\d+ "
                                                      r"\S+: p50", line)), default=wall)
    cost = None
    try:
        found = record_section("e2e", str(results), "a", "b").report
        cost = found.noise.cost if found.noise is not None else None
    except RouterLatencyError as error:
        print(f"  cannot judge the end-to-end run's files: {error}")
    return Timed(wall, first, last - first, wall - last, cost)


def e2e_lines(instances: int, rounds: int, planned: int, times: List[Timed],
              args: argparse.Namespace) -> Tuple[List[str], float]:
    """Return the lines of an arm's end-to-end runs and its node minutes at `planned` rounds:
    the checks and the final judgement once, each round as measured."""
    per_round = statistics.median(t.rounds_s for t in times) / rounds
    once = statistics.median(t.before_s + t.after_s for t in times)
    minutes = (once + planned * per_round) / 60
    lines = [f"  end to end, {len(times)} runs of {rounds} rounds (walls "
             f"{', '.join(f'{t.wall_s:.0f}' for t in times)} s): {per_round:.1f} s a round "
             f"(the model: {60 * model_minutes(instances, 1, args):.1f} s), {once:.1f} s "
             f"once (the checks before, the final judgement after); at {planned} rounds "
             f"{minutes:.2f} node minutes"]
    costs = [t.cost for t in times if t.cost is not None]
    if costs:
        def median(field: str) -> float:
            return statistics.median(getattr(c, field) for c in costs)
        together = instances > 1 and not args.apart
        read = costs[0]._replace(**{f: median(f) for f in (
            "ready_s", "other_s", "gap_s", "passes_s", "instance_s")}, look_s=0.0)
        lines.append(f"  read from its run files (rounds --plan's cost, medians): start-up to "
                     f"ready {read.ready_s:.2f} s, warm-up and the rest {read.other_s:.2f} s, "
                     f"passes {read.passes_s:.2f} s, between pools {read.gap_s:.2f} s, from one "
                     f"instance's run to the next {read.instance_s:.2f} s"
                     f"{' (none)' if instances == 1 else ''}: a round "
                     f"{read.round_s(1, instances, together=together):.1f} s")
    return lines, minutes


def judged_arm(instances: int, rounds: int, true_spread: float,
           args: argparse.Namespace) -> None:
    """Print an arm's judging: its power, its A/A false-fail rate, the noise split."""
    found = judged(instances, rounds, args.change, args, 1)
    null = judged(instances, rounds, 0.0, args, 2)
    power = found["counts"]["fail"] / args.series
    false = null["counts"]["fail"] / args.series
    print(f"{instances} instance(s) a round, {rounds} rounds: +{100 * args.change:g}% FAIL "
          f"{power:.1%} (+-{math.sqrt(power * (1 - power) / args.series):.1%}), A/A FAIL "
          f"{false:.1%} (+-{math.sqrt(max(false, 1 / args.series) / args.series):.1%}); "
          f"outcomes {found['counts']} / A/A {null['counts']}")
    if found["split"]:
        spread, within, between = found["split"]
        print(f"  noise of the change, p50 (first series): spread {spread:.1f}% = within "
              f"{within:.1f}% and between {between:.1f}%; truth: spread {true_spread:.1f}% "
              f"= within {100 * args.within * math.sqrt(2 / instances):.1f}% and between "
              f"{100 * args.between * math.sqrt(2 / instances):.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="every time of the node times this")
    parser.add_argument("--between", type=float, default=0.20)
    parser.add_argument("--within", type=float, default=0.05)
    parser.add_argument("--change", type=float, default=0.15)
    parser.add_argument("--tolerance", type=float, default=5.0)
    parser.add_argument("--e2e", type=int, default=0, help="end-to-end runs per design")
    parser.add_argument("--e2e-rounds", type=int, default=0,
                        help="rounds of each end-to-end run (default: the design's), its "
                             "time per round then beside the model's")
    parser.add_argument("--apart", action="store_true",
                        help="the pool arm with one side's pool after the other's (not "
                             "--together)")
    args = parser.parse_args()
    print(f"node: start-up {STARTUP_S * args.scale:.2f} s, pass {PASS_S * args.scale:.2f} s "
          f"(scale {args.scale:g}); between instances {100 * args.between:g}%, within "
          f"{100 * args.within:g}%; change +{100 * args.change:g}%, tolerance "
          f"{args.tolerance:g}%; {args.series} series per arm")
    node = {}
    for instances in (1, args.instances):
        rounds = planned_rounds(instances, args)
        true_spread = 100 * math.sqrt(2 * (args.between ** 2 + args.within ** 2) / instances)
        minutes = model_minutes(instances, rounds, args)
        how = ("" if instances == 1 else " apart" if args.apart else
               " (--together: both sides' pools up at once)")
        if args.series == 0:
            print(f"{instances} instance(s) a round{how}, {rounds} rounds: node time (model) "
                  f"{minutes:.1f} minutes")
        else:
            judged_arm(instances, rounds, true_spread, args)
            print(f"  node time (model){how}: {minutes:.1f} minutes")
        node[instances] = (minutes, None)
        if args.e2e:
            timed = args.e2e_rounds or rounds
            lines, measured = e2e_lines(instances, timed, rounds, e2e(instances, timed, args),
                                        args)
            print("\n".join(lines))
            node[instances] = (minutes, measured)
    (single, single_e2e), (pool, pool_e2e) = node[1], node[args.instances]
    print(f"a pool of {args.instances} against one instance a round, in node time: the model "
          f"{pool / single:.2f}" + (f", end to end {pool_e2e / single_e2e:.2f}"
                                   if pool_e2e and single_e2e else "")
          + f" (scale {args.scale:g}; load average before {LOAD_BEFORE}, after "
            f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")

if __name__ == "__main__":
    main()
