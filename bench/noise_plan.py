#!/usr/bin/env python3
"""Does `rounds --plan` plan well where the noise is within the pass?

A simulated A/A pair whose noise is mostly within one instance: both sides `simulate
--serial --delay-ms 5 --jitter-ms 5` (a uniform 5-10 ms per request, a fresh seed per
start; no more jitter than delay, or a prompt sent again in under half its first time reads
as a result cache; milliseconds, not fractions of one, so that the scheduling of a loaded
machine moves them little), a small corpus (--prompts 32) sent once per pass: few requests,
much jitter. The script

1. runs a pilot, `run_rounds.sh --rounds 5 -- -c 1 -n 1`, and prints `rounds --plan` on it:
   each gated row's spread taken apart (within, between) and the plan (rounds, requests per
   pass, node minutes);
2. runs the plan once as a fixed design, `run_rounds.sh --rounds N --requests-per-pass M`,
   and prints the plan's node minutes beside what it took: the script's wall time, from its
   start to its verdict (with its checks before the first round and the verdict after the
   last, which the plan does not count), and the span the run files record, from the first
   run's start to the last run's end;
3. runs --runs A/A pairs through `run_rounds.sh --until-decided --max-rounds N
   --requests-per-pass M --budget-minutes K` (K: the plan's minutes times --budget-factor),
   --parallel at a time (1: two at once on 2 cores each take twice the node time the plan
   costed, and the budget stops them), and prints how many ended PASS, FAIL and
   INCONCLUSIVE, the rounds each took, and its time.

The gate's tolerance is --tolerance (10% by default) and its rows --gate (p50 and req/s by
default): on a shared 2-core machine the tail of a few-ms latency, its p95, moves with the
machine's scheduling from round to round, and on a loaded one no plan of a few minutes
decides it; --gate p50,p95,req/s judges it too. Routers take their ports from the system
(--port 0 --url-file). Not a test: it prints figures and asserts nothing;
on a loaded machine they are only as good as it is quiet (the load is printed).

    python3 bench/noise_plan.py [--runs 10] [--parallel 1] [--pilot-rounds 5] [--gate LIST]

About 5 minutes at a 1-minute load of 4 on 2 cores (a pilot of 20 s, a plan of about a minute,
ten A/A runs of about 40 s).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from router_latency.corpus import corpus_bytes, CORPUS_SCHEMA  # noqa: E402

TOOL = ROOT / "router_latency.py"
DRIVER = ROOT / "rounds" / "run_rounds.sh"


def side_args(folder: Path, role: str, args: argparse.Namespace) -> list:
    """Return run_rounds.sh's options for one side: a simulator on a port of its own."""
    url_file = folder / f"{role}.url"
    start = (f"exec {sys.executable} {TOOL} simulate --port 0 --url-file {url_file} "
             f"--delay-ms {args.delay_ms} --jitter-ms {args.jitter_ms} --serial "
             f"--seed $RANDOM$RANDOM")
    return [f"--{role}", "a" if role == "base" else "b", f"--{role}-start", start,
            f"--{role}-url-file", str(url_file)]


def drive(folder: Path, args: argparse.Namespace, options: list, run_options: list) -> tuple:
    """Run run_rounds.sh on a fresh folder; return (exit code, seconds, rounds run)."""
    folder.mkdir(parents=True)
    command = ([str(DRIVER), "--dir", str(folder / "rounds"), "--corpus", str(args.corpus),
                "--tolerance", f"{args.tolerance:g}", "--gate", args.gate, "--tool", str(TOOL)]
               + side_args(folder, "base", args) + side_args(folder, "new", args) + options
               + ["--", "-c", "1", "--warmup", "5"] + run_options)
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                            env={**os.environ, "PYTHON": sys.executable})
    took = time.monotonic() - started
    if result.returncode not in (0, 1, 3):
        print(f"run_rounds.sh exited {result.returncode}: {result.stderr[-600:]}")
    rounds = len(list((folder / "rounds").glob("r*-a.json")))
    return result.returncode, took, rounds, rounds_span(folder / "rounds")


def rounds_span(folder: Path) -> float:
    """Return the seconds from the first run's start to the last run's end, by the run files
    (each run starts just after its router's start command; the script's checks before the
    first round and its verdict after the last are outside)."""
    starts, ends = [], []
    for path in folder.glob("r*-*.json"):
        run = json.loads(path.read_text())
        starts.append(run["started_unix"])
        ends += [p["started_unix"] + p["summary"]["wall_s"] for p in run["passes"]]
    return max(ends) - min(starts) if starts else 0.0


def judged(folder: Path, args: argparse.Namespace, *extra: str) -> str:
    """Return `rounds` on a folder of run files."""
    return subprocess.run([sys.executable, str(TOOL), "rounds", "--dir", str(folder), "--base",
                           "a", "--new", "b", "--tolerance", f"{args.tolerance:g}", "--gate",
                           args.gate, *extra],
                          capture_output=True, text=True, timeout=300).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="A/A runs of the plan")
    parser.add_argument("--parallel", type=int, default=1, help="A/A runs at a time")
    parser.add_argument("--pilot-rounds", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--jitter-ms", type=float, default=5.0)
    parser.add_argument("--tolerance", type=float, default=10.0)
    parser.add_argument("--gate", default="p50,req/s", help="the gated rows (rounds --gate)")
    parser.add_argument("--budget-factor", type=float, default=1.3,
                        help="the A/A runs' budget: the plan's minutes times this (the plan's "
                             "minutes are an estimate, within 25% of the run's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="noise-plan-") as top_name:
        top = Path(top_name)
        args.corpus = top / "corpus.json"
        args.corpus.write_bytes(corpus_bytes({
            "schema": CORPUS_SCHEMA, "source": {"repo": "bench"}, "files": {},
            "prompts": [{"id": i, "text": f"prompt {i}", "source": "bench"}
                        for i in range(args.prompts)]}))
        print(f"load before: {os.getloadavg()[0]:.2f}; pair: simulate --serial --delay-ms "
              f"{args.delay_ms:g} --jitter-ms {args.jitter_ms:g}, {args.prompts} prompts, "
              f"tolerance {args.tolerance:g}%, gated: {args.gate}")
        _, took, _, _ = drive(top / "pilot", args, ["--rounds", str(args.pilot_rounds)],
                              ["-n", "1"])
        print(f"\n1. pilot: {args.pilot_rounds} rounds of {args.prompts} requests a pass "
              f"({took:.0f} s); rounds --plan:")
        print(judged(top / "pilot" / "rounds", args, "--plan"))
        plan = json.loads(judged(top / "pilot" / "rounds", args, "--format", "json"))["plan"]
        if plan["rounds"] is None:
            sys.exit("no plan within 1,000 rounds")
        rounds, requests, minutes = plan["rounds"], plan["requests_per_pass"], plan["node_minutes"]
        code, took, ran, span = drive(top / "fixed", args, [
            "--rounds", str(rounds), "--requests-per-pass", str(requests)], [])
        print(f"2. the plan run once: {rounds} rounds of {requests} requests a pass: planned "
              f"{minutes:.2f} node minutes; took {took / 60:.2f} minutes from the script's "
              f"start to its verdict (ratio {took / 60 / minutes:.2f}), {span / 60:.2f} from "
              f"the first run's start to the last run's end (ratio {span / 60 / minutes:.2f}; "
              f"the plan also counts the last router's stop); exit {code}")
        budget = minutes * args.budget_factor
        most = min(max(rounds, 3), 40)  # rounds --sequential looks at 40 rounds at most
        options = ["--until-decided", "--min-rounds", "3", "--max-rounds", str(most),
                   "--requests-per-pass", str(requests), "--budget-minutes", f"{budget:.3f}"]
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(lambda i: drive(top / f"aa{i}", args, options, []),
                                    range(args.runs)))
        words = {0: "PASS", 1: "FAIL", 2: "ERROR", 3: "INCONCLUSIVE"}
        counts = {word: sum(words[c] == word for c, *_ in results) for word in words.values()}
        print(f"\n3. {args.runs} A/A runs of the plan, --until-decided --max-rounds "
              f"{most} --requests-per-pass {requests} --budget-minutes {budget:.2f} "
              f"({args.parallel} at a time): "
              + ", ".join(f"{word} {n}" for word, n in counts.items())
              + f"; PASS rate {counts['PASS'] / args.runs:.0%}")
        print("   each: " + ", ".join(f"{words[c]} after {n} rounds in {t:.0f} s"
                                      for c, t, n, _ in results))
        times = sorted(t for _, t, _, _ in results)
        print(f"   time per run (script): median {times[len(times) // 2]:.0f} s, most "
              f"{times[-1]:.0f} s; budget {budget * 60:.0f} s of node time")
        print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
