#!/usr/bin/env python3
"""Two builds of router_latency.py, alternated in one run: did a change slow the driver down?

Starts nginx (a null target: a fixed preview answer) pinned to the last core, then measures
each build in turn, ABAB..., over --reps repetitions: `run --concurrency 1,16` of a 2,000-prompt
corpus against it, pinned to the other cores. Prints, per build, the median over repetitions
of the sequential p50, the concurrency-16 p50 and req/s, and the driver's CPU seconds per
1,000 requests (from the run file), with each build's range.

    python3 bench/compare_builds.py OLD.py NEW.py [--reps 5]

Uses bench/driver_overhead.py's nginx set-up (installs nginx-light with apt-get when missing).
Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import driver_overhead as bench  # noqa: E402


def measure(tool: str, url: str, corpus: Path, out: Path) -> dict:
    """Return the figures of one run of a build against url."""
    subprocess.run([sys.executable, tool, "run", "--url", url, "--corpus", str(corpus),
                    "--out", str(out), "--label", "x", "--concurrency", "1,16", "--quiet",
                    "--force", "--gpu", "none", "--warmup", "200"],
                   check=True, preexec_fn=bench.pinned(bench.CLIENT_CPUS))
    document = json.loads(out.read_text())
    passes = {p["name"]: p for p in document["passes"]}
    requests = sum(p["summary"]["requests"] for p in passes.values())
    cpu = sum(p["driver_cpu_s"] for p in passes.values())
    return {"seq_p50": passes["sequential"]["summary"]["p50_ms"],
            "c16_p50": passes["c16"]["summary"]["p50_ms"],
            "c16_rps": passes["c16"]["summary"]["req_per_s"],
            "cpu_per_1000": 1000 * cpu / requests}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    bench.ensure_tools()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        corpus = work / "corpus.json"
        bench.write_corpus(corpus, 2000)
        nginx, url = bench.start_nginx(work)
        figures: dict = {"old": [], "new": []}
        try:
            for rep in range(args.reps):
                order = ("old", "new") if rep % 2 == 0 else ("new", "old")
                for build in order:
                    tool = args.old if build == "old" else args.new
                    figures[build].append(measure(tool, url, corpus, work / "run.json"))
        finally:
            nginx.terminate()
            nginx.wait(10)
    print(f"{args.reps} repetitions alternated (ABAB, then BABA); null target (nginx) on core "
          f"{sorted(bench.SERVER_CPUS)}, driver on {sorted(bench.CLIENT_CPUS)}; medians [range]")
    for key, title in (("seq_p50", "sequential p50 ms"), ("c16_p50", "conc 16 p50 ms"),
                       ("c16_rps", "conc 16 req/s"), ("cpu_per_1000", "driver CPU s / 1,000")):
        cells = []
        for build in ("old", "new"):
            values = [f[key] for f in figures[build]]
            cells.append(f"{build} {statistics.median(values):.4g} "
                         f"[{min(values):.4g}, {max(values):.4g}]")
        print(f"{title:<22} " + "   ".join(cells))


if __name__ == "__main__":
    main()
