#!/usr/bin/env python3
"""Two builds of router_latency.py, alternated in one run with wrk and hey: did a change slow
the driver down, and how far is it from a C and a Go client?

Starts the targets pinned to the last core (--no-pin: all share every core): `null`, nginx
answering a fixed small decision (what is left is the client's cost), and `go`,
bench/go_router: Go's net/http waiting 2 ms and answering ~2.7 KB of JSON shaped like the
router's preview answer (metrics per signal), which Go sends chunked. Then, over --reps
repetitions, measures on each target, in an order that alternates (ABAB, then BABA, the load
generators between them): each build's `run` at concurrency 1 (--seq-requests prompts) and at
concurrency 16 (--c16-requests), and wrk and hey at concurrency 1 and 16 for --seconds each,
all pinned to the other cores. Prints, per target, the median [range] over repetitions of the
sequential p50, the concurrency-16 req/s and p50, the driver's CPU seconds per 1,000 requests
(from the run file), and the ratios the targets are stated in: each build's concurrency-16
req/s over wrk's and hey's (median of the per-repetition ratios) and its sequential p50 minus
wrk's. hey prints its percentiles to 0.1 ms, wrk to 1 us.

    python3 bench/compare_builds.py OLD.py NEW.py [--reps 4] [--targets null,go] [--no-signals]
        [--no-pin]
    python3 bench/compare_builds.py router_latency.py bare --no-signals --reps 3

An old build is `git show REV:router_latency.py > /tmp/REV.py`. A build named `bare` is the
floor of a CPython loop of this shape (bench/driver_instructions.py's bare_pass, the same
request bytes as `run`'s body, timed in its own process on the client cores: req/s over its
pass, p50 of its per-request times, CPU by os.times): can any such loop reach a target where
this tool does not? --no-signals runs every build's `run` without the per-signal times. Uses bench/driver_overhead.py's
set-up (nginx-light, wrk; hey and go for the go target). The machine's load (os.getloadavg)
is printed before and after: on a shared machine the figures are only as good as it is quiet.
Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import driver_overhead as bench  # noqa: E402

SIGNALS_OFF: list = []  # ["--no-signals"] with --no-signals


def timed_bare(url: str, requests: int, level: int) -> None:
    """Print the figures of one timed bare_pass (run in a child process by measure)."""
    import driver_instructions
    payload = bench.encode_prompts(bench.Target(bench.parse_endpoint(url)),
                                   [bench.PROMPT])[0]  # run's
    driver_instructions.bare_pass(url, 200, level, payload)  # warm-up, as run's --warmup 200
    cpu, started = os.times(), time.perf_counter()
    results = driver_instructions.bare_pass(url, requests, level, payload)
    wall, cpu_after = time.perf_counter() - started, os.times()
    bad = sum(status != b"200" for _, _, status in results)
    if bad:
        raise SystemExit(f"bare pass: {bad} answers not 200")
    latencies = sorted((end - start) / 1e6 for start, end, _ in results)
    print(json.dumps({"p50_ms": statistics.median(latencies), "req_per_s": requests / wall,
                      "cpu_per_1000": 1000 * (cpu_after.user + cpu_after.system - cpu.user
                                              - cpu.system) / requests}))


def measure(tool: str, url: str, corpus: Path, out: Path, level: int) -> dict:
    """Return the figures of one pass of a build against url."""
    if tool == "bare":
        requests = len(json.loads(corpus.read_text())["prompts"])
        done = subprocess.run([sys.executable, __file__, "--bare-pass", url, str(requests),
                               str(level)], check=True, capture_output=True, text=True,
                              preexec_fn=bench.pinned(bench.CLIENT_CPUS))
        return json.loads(done.stdout)
    if out.exists():
        out.unlink()
    subprocess.run([sys.executable, tool, "run", "--url", url, "--corpus", str(corpus),
                    "--out", str(out), "--label", "x", "--concurrency", str(level), "--quiet",
                    "--force", "--gpu", "none", "--warmup", "200", *SIGNALS_OFF],
                   check=True, preexec_fn=bench.pinned(bench.CLIENT_CPUS))
    item = json.loads(out.read_text())["passes"][0]
    summary = item["summary"]
    return {"p50_ms": summary["p50_ms"], "req_per_s": summary["req_per_s"],
            "cpu_per_1000": 1000 * item["driver_cpu_s"] / summary["requests"]}


def one_repetition(rep: int, builds: dict, url: str, work: Path, args) -> dict:
    """Measure every build and client once on one target; return {(who, level): figures}."""
    order = list(builds) if rep % 2 == 0 else list(reversed(builds))
    clients = ["wrk", "hey"]
    sequence = [order[0], clients[rep % 2], order[1], clients[1 - rep % 2]]
    figures = {}
    for who in sequence:
        for level in (1, 16):
            if who in builds:
                figures[(who, level)] = measure(builds[who], url, work / f"c{level}.json",
                                                work / "run.json", level)
            elif who == "wrk":
                figures[(who, level)] = bench.wrk(url, work / "post.lua", level, args.seconds)
            else:
                figures[(who, level)] = bench.hey(url, work / "body.json", level, args.seconds)
    return figures


def cell(values: list, digits: str = ".4g") -> str:
    return (f"{statistics.median(values):{digits}} "
            f"[{min(values):{digits}}, {max(values):{digits}}]")


def report(target: str, runs: list, builds: dict) -> None:
    """Print one target's medians [range] and the stated ratios."""
    print(f"\n{target}: medians [range] over {len(runs)} repetitions")
    rows = [("sequential p50 ms", 1, "p50_ms", ".4f"), ("conc 16 p50 ms", 16, "p50_ms", ".3f"),
            ("conc 16 req/s", 16, "req_per_s", ",.0f")]
    for who in list(builds) + ["wrk", "hey"]:
        parts = [f"{title} {cell([r[(who, level)][key] for r in runs], digits)}"
                 for title, level, key, digits in rows]
        if who in builds:
            parts.append(f"CPU s/1k "
                         f"{cell([r[(who, 16)]['cpu_per_1000'] for r in runs], '.4f')}")
        print(f"  {who:<5} " + "; ".join(parts))
    for who in builds:
        ratios = {client: [r[(who, 16)]["req_per_s"] / r[(client, 16)]["req_per_s"]
                           for r in runs] for client in ("wrk", "hey")}
        overhead = [r[(who, 1)]["p50_ms"] - r[("wrk", 1)]["p50_ms"] for r in runs]
        print(f"  {who}: conc 16 req/s {cell(ratios['wrk'], '.3f')}x wrk, "
              f"{cell(ratios['hey'], '.3f')}x hey; sequential p50 over wrk "
              f"{cell(overhead, '+.4f')} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--targets", default="null,go")
    parser.add_argument("--seq-requests", type=int, default=1000)
    parser.add_argument("--c16-requests", type=int, default=12000)
    parser.add_argument("--seconds", type=float, default=2.0, help="of each wrk and hey run")
    parser.add_argument("--no-signals", action="store_true",
                        help="run every build without recording the per-signal times")
    parser.add_argument("--no-pin", action="store_true",
                        help="targets and clients share all cores, as a router and its "
                             "client share a node's (a cheaper client leaves the router more)")
    args = parser.parse_args()
    bench.ensure_tools()
    if args.no_pin:
        bench.share_all_cores()
    if args.no_signals:
        SIGNALS_OFF.append("--no-signals")
    builds = {"old": args.old, "new": args.new}
    print(f"old: {args.old}; new: {args.new}"
          f"{'; run --no-signals' if args.no_signals else ''}")
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; targets on core "
          f"{sorted(bench.SERVER_CPUS)}, clients on {sorted(bench.CLIENT_CPUS)}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        bench.write_corpus(work / "c1.json", args.seq_requests)
        bench.write_corpus(work / "c16.json", args.c16_requests)
        (work / "post.lua").write_text(bench.WRK_SCRIPT % (
            json.dumps(bench.BODY), json.dumps(f"router-latency/{bench.__version__}")))
        (work / "body.json").write_text(bench.BODY)
        for target in args.targets.split(","):
            server, url = (bench.start_nginx(work) if target == "null"
                           else bench.start_go_router(work))
            try:
                bench.wrk(url, work / "post.lua", 16, 1)  # warm the target
                runs = [one_repetition(rep, builds, url, work, args) for rep in range(args.reps)]
            finally:
                server.terminate()
                server.wait(10)
            report(target, runs, builds)
    print(f"\nload after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--bare-pass"]:
        timed_bare(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
