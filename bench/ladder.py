#!/usr/bin/env python3
"""The ladder against simulated routers of known capacity, and what its wall time is spent on.

Starts `router_latency.py simulate` in its own process (127.0.0.1, port 0) once per case,
  serial     --serial --delay-ms 10: one at a time, a plateau at 100 req/s from 1 caller,
  workers4   --workers 4 --delay-ms 10: a plateau at 400 req/s from 4 callers,
  open4      --workers 4 --delay-ms 10, an open-loop ladder of Poisson rates 100 ... 420/s,
runs `router_latency.py run --ladder --slo-p95-ms 50 --cost-per-hour 2.50/GPU` against it
in a second process, prints the run's own table and sentences, then the wall time of the run
process beside the sum of its steps' wall times, what came before the steps (the driver's
floor, the readiness check and the warm-up), and the longest gap between two steps.

    python3 bench/ladder.py [--case NAME ...] [--duration 2s] [--corpus FILE]

Not a test: it prints figures and asserts nothing. It uses the machine's cores as they are:
run it on a quiet machine for figures to quote.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "router_latency.py"
sys.path.insert(0, str(ROOT / "src"))

from router_latency.corpus import corpus_bytes, CORPUS_SCHEMA
from router_latency.runfile import load_run
from router_latency.ladder import step_gaps

CASES = {
    "serial": (["--serial", "--delay-ms", "10"], []),
    "workers4": (["--workers", "4", "--delay-ms", "10"], []),
    "open4": (["--workers", "4", "--delay-ms", "10"],
              ["--rate", "100,200,300,350,380,420", "--arrival", "poisson",
               "--connections", "16"]),
}


def write_corpus(path: Path, count: int) -> str:
    document = {"schema": CORPUS_SCHEMA, "source": {"repo": "bench"}, "files": {},
                "prompts": [{"id": i, "text": f"bench question {i} about routing",
                             "source": "bench"} for i in range(count)]}
    path.write_bytes(corpus_bytes(document))
    return str(path)


def start_simulator(options: list, folder: Path) -> tuple:
    url_file = folder / "url"
    url_file.unlink(missing_ok=True)
    process = subprocess.Popen([sys.executable, str(TOOL), "simulate", "--port", "0",
                                "--url-file", str(url_file), *options],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):  # up to 10 s
        if url_file.exists() and url_file.read_text().strip():
            return process, url_file.read_text().strip()
        time.sleep(0.1)
    process.kill()
    raise SystemExit("the simulator did not start")


def run_case(name: str, corpus: str, duration: str, folder: Path) -> None:
    simulator_options, run_options = CASES[name]
    process, url = start_simulator(simulator_options, folder)
    out = folder / f"{name}.json"
    try:
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, str(TOOL), "run", "--url", url, "--corpus", corpus, "--out",
             str(out), "--label", name, "--ladder", "--slo-p95-ms", "50", "--duration",
             duration, "--cost-per-hour", "2.50/GPU", "--force", *run_options],
            capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(10)
    print(f"== {name}: simulate {' '.join(simulator_options)}")
    print(result.stdout.rstrip())
    if result.returncode:
        print(f"(run exited {result.returncode}: {result.stderr.strip()})")
    run = load_run(str(out))
    steps = sum(p.summary.wall_s for p in run.passes if not p.discarded)
    first = min(p.attempt.started_unix for p in run.passes)
    before = first - run.started_unix
    gaps = step_gaps(run)
    print(f"wall: the run process {wall:.2f} s; its {len(run.passes)} steps {steps:.2f} s; "
          f"before the first step (floor, readiness, warm-up) {before:.2f} s; between steps "
          f"{sum(gaps):.3f} s in all, at most {max(gaps, default=0):.3f} s; the rest (start-up, "
          f"writing the file) {wall - steps - before - sum(gaps):.2f} s")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--duration", default="2s", help="each step's length")
    parser.add_argument("--corpus", help="corpus file (default: 40 generated prompts)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        corpus = args.corpus or write_corpus(folder / "corpus.json", 40)
        for name in args.case or list(CASES):
            run_case(name, corpus, args.duration, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
