#!/usr/bin/env python3
"""How often the result-cache and slow-phase checks call something that is not there, and how
often they see what is, on simulated routers (router_latency.py simulate, in-process).

    python3 bench/router_answers.py [--runs 100] [--prompts 80] [--delay-ms 10]

cache    --runs runs of the simulator without a result cache (delay, jitter and a per-KB time,
         as a router whose latency grows with the prompt), then --runs/4 runs with one
         (--cache 4096): how many runs the timing test calls cached. The test: a cache when
         more than half of the prompts sent again answer in under half the time of their
         first sending (the passes after the first resend every prompt).
slow     --runs runs of a length-dependent simulator on a stable node (no stall) with the
         long prompts at the end of the corpus, as the default corpus's boundary cases are:
         how many runs any pass flags a slow phase in, and how many flag the last window (the
         long prompts', slow by content), by the pass's own windows (the check before) and by
         each window's prompts elsewhere (now); then --runs/4 runs with a stall (--stall), how
         many the check now flags. A flag elsewhere on a stable simulator is the machine
         itself slowing down (on a shared machine, other processes).

Each run is the method's: 20 warm-up requests, then passes at 1, 4 and 16 callers. Single
process, bounded by --runs; the load of the machine is printed, since a loaded machine makes
windows slow that a quiet one would not. Not a test: it prints figures and asserts nothing.
"""

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from router_latency.corpus import Corpus, corpus_bytes, CORPUS_SCHEMA, load_corpus
from router_latency.runfile import RunFile
from router_latency.phases import slow_windows, Thresholds
from router_latency.client import parse_endpoint
from router_latency.measuring import LoadGuard, measure_run, plan_passes, RunContext, RunPlan
from router_latency.passloop import Target
from router_latency.simulator import SimulatedAnswers, start_simulator


def corpus_file(folder: Path, prompts: int) -> Corpus:
    """Short prompts of 20 to 400 characters, then ten long ones (2,500 to 20,000) last."""
    texts = [f"prompt {i}: " + "word " * (4 + (i * 37) % 80) for i in range(prompts)]
    texts += ["long " * (n // 5) for n in (2500, 20000, 9000, 3000, 5000, 2600, 8000, 4000,
                                           2500, 7000)]
    document = {"schema": CORPUS_SCHEMA, "source": {"repo": "bench"}, "files": {},
                "prompts": [{"id": i, "text": t, "source": "bench"} for i, t in enumerate(texts)]}
    path = folder / "corpus.json"
    path.write_bytes(corpus_bytes(document))
    return load_corpus(str(path))


def one_run(corpus: Corpus, seed: int, answers: SimulatedAnswers, delay_ms: float,
            stall=None) -> RunFile:
    router = start_simulator(delay_ms=delay_ms, jitter_ms=delay_ms / 5, seed=seed,
                                answers=answers, stall=stall)
    try:
        return measure_run(RunContext(
            Target(parse_endpoint(router.url)),
            RunPlan(plan_passes((1, 4, 16)), warmup=20), guard=LoadGuard(max_load=1e9),
            thresholds=Thresholds(20, 2.0, 0.5, 1.0)), corpus, label="bench")
    finally:
        router.stop()


def slow_flags(run: RunFile) -> tuple:
    """Return (any window flagged by the pass's own windows, any by the prompts elsewhere,
    the last window, the long prompts', flagged by the first, by the second)."""
    alone = [slow_windows(p.attempt.windows, run.thresholds) for p in run.passes]
    now = [run.slow_windows(p) for p in run.passes]
    last = [len(p.attempt.windows) - 1 for p in run.passes]
    return (any(alone), any(now), any(n in found for n, found in zip(last, alone)),
            any(n in found for n, found in zip(last, now)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=80)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--per-kb-ms", type=float, default=4.0)
    args = parser.parse_args()
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        corpus = corpus_file(Path(work), args.prompts)
        started = time.monotonic()
        plain = SimulatedAnswers(per_kb_ms=args.per_kb_ms)
        cached = plain._replace(cache_entries=4096)
        false_cache = false_slow_before = false_slow_now = last_before = last_now = 0
        ratios = []
        for seed in range(args.runs):
            run = one_run(corpus, seed, plain, args.delay_ms)
            timing = run.cache_finding["timing"]
            ratios.append(timing["median_ratio"])
            false_cache += timing["detected"]
            before, now, last_alone, last_elsewhere = slow_flags(run)
            false_slow_before += before
            false_slow_now += now
            last_before += last_alone
            last_now += last_elsewhere
        seen_cache = seen_stall = 0
        cached_runs = max(args.runs // 4, 1)
        for seed in range(cached_runs):
            seen_cache += one_run(corpus, seed, cached, args.delay_ms).cache_finding["detected"]
            stalled = one_run(corpus, seed, plain, args.delay_ms, stall=(60, 15, 40.0))
            seen_stall += slow_flags(stalled)[1]
        took = time.monotonic() - started
    print(f"simulated router: {args.delay_ms:g} ms + up to {args.delay_ms / 5:g} ms jitter + "
          f"{args.per_kb_ms:g} ms per KB; corpus {len(corpus.prompts)} prompts, the 10 long "
          f"ones last; warm-up 20, passes 1, 4, 16; window 20 requests")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
          f"took {took:.0f} s")
    print(f"result cache, timing test, without a cache: {false_cache} of {args.runs} runs "
          f"called cached (false alarms); median ratio later/first over runs "
          f"{sorted(ratios)[len(ratios) // 2]:.2f}, lowest {min(ratios):.2f}")
    print(f"result cache, timing test, with --cache 4096: {seen_cache} of {cached_runs} runs "
          f"called cached")
    print(f"slow phase on a stable node, by the pass's own windows (before): "
          f"{false_slow_before} of {args.runs} runs flagged, {last_before} in the last window "
          f"(the long prompts')")
    print(f"slow phase on a stable node, by each window's prompts elsewhere (now): "
          f"{false_slow_now} of {args.runs} runs flagged, {last_now} in the last window "
          f"(the long prompts')")
    print(f"slow phase with a stall (15 of every 60 previews wait 40 ms more), now: "
          f"{seen_stall} of {cached_runs} runs flagged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
