#!/usr/bin/env python3
"""Under load: 100,000 requests at concurrency 64 against `simulate`; every one accounted for.

Starts `router_latency.py simulate` (no delay) in its own process on 127.0.0.1, port 0, writes a
corpus of distinct prompts, runs `router_latency.py run --concurrency 64` over it in a second
process, and prints requests accounted for, errors, duration and the driver's peak RSS.

    python3 bench/load_100k.py [--requests 100000] [--concurrency 64]

Not a test: it prints figures, it asserts nothing about speed.
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "router_latency.py"
sys.path.insert(0, str(ROOT / "src"))

from router_latency.corpus import corpus_bytes, CORPUS_SCHEMA


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="router-latency-load-"))
    corpus = work / "corpus.json"
    prompts = [{"id": i, "text": f"load prompt {i}: what is {i} + {i}?", "source": "bench"}
               for i in range(args.requests)]
    corpus.write_bytes(corpus_bytes({"schema": CORPUS_SCHEMA, "source": {},
                                        "files": {}, "prompts": prompts}))
    url_file = work / "url"
    # the simulator sheds previews beyond --max-concurrency, as the router does: admit them all
    server = subprocess.Popen([sys.executable, str(TOOL), "simulate", "--port", "0",
                               "--delay-ms", "0", "--max-concurrency", str(args.concurrency),
                               "--url-file", str(url_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not url_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        url = url_file.read_text().strip()
        out = work / "run.json"
        started = time.monotonic()
        driver = subprocess.run([sys.executable, str(TOOL), "run", "--url", url, "--corpus",
                                 str(corpus), "--out", str(out), "--label", "load",
                                 "--concurrency", str(args.concurrency), "--warmup", "0",
                                 "--timeout", "30", "--quiet"], timeout=900)
        duration = time.monotonic() - started
        # the server is still running, so the children's peak is the driver's alone
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    finally:
        server.terminate()
        server.wait(10)
    document = json.loads(out.read_text())
    summary = document["passes"][0]["summary"]
    accounted = summary["ok"] + sum(summary["errors"].values())
    print(f"requests sent        {summary['requests']:,} of {args.requests:,}")
    print(f"accounted for        {accounted:,} (ok {summary['ok']:,} + errors "
          f"{sum(summary['errors'].values()):,}) {'OK' if accounted == args.requests else 'LOST'}")
    print(f"errors by kind       {summary['errors'] or 'none'}")
    print(f"driver exit code     {driver.returncode}")
    print(f"duration             {duration:.1f} s (pass wall {summary['wall_s']:.1f} s, "
          f"{summary['req_per_s']:,.0f} req/s)")
    print(f"latency p50/p99      {summary['p50_ms']} / {summary['p99_ms']} ms")
    print(f"driver peak RSS      {peak_kib / 1024:.0f} MiB")
    print(f"run file             {out.stat().st_size / 2**20:.1f} MiB at {out}")
    return 0 if accounted == args.requests else 1


if __name__ == "__main__":
    sys.exit(main())
