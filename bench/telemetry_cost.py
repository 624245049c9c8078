#!/usr/bin/env python3
"""What sampling through a pass costs the driver (run --sample-ms, telemetry.py).

1. The sampler's CPU on the driver's cores, per second of pass: a PassSampler in this process
   for --seconds, reading the router's CPU time (--router-pid of a simulator), the CPUs' busy
   time and the load every --sample-ms, and the stand-in nvidia-smi of the tests (a Python
   loop, tests/data/nvidia-smi/standin.py) as the looping GPU tool: this process's CPU (the
   sampling thread) and its children's (the tool; the real nvidia-smi's own cost is not this).
2. The driver's latency with it on: interleaved pairs of `run` (sequential and concurrency 4
   passes) against one simulator with --sample-ms 0 and 250, --router-pid and --gpu nvidia
   (--gpu none: no GPU tool, the router's CPU and the load only);
   the median over pairs of the p50 and mean ratios (on / off).

    python3 bench/telemetry_cost.py [--seconds 20] [--pairs 8] [--prompts 300] [--gpu none]

Not a test: it prints figures and asserts nothing.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from router_latency.captures import CaptureSettings  # noqa: E402
from router_latency.simulator import start_simulator  # noqa: E402
from router_latency.telemetry import PassSampler  # noqa: E402
from conftest import write_corpus  # noqa: E402


def standin_path(folder: Path) -> None:
    script = folder / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\n"
                      + (ROOT / "tests" / "data" / "nvidia-smi" / "standin.py").read_text())
    script.chmod(0o755)
    os.environ["PATH"] = f"{folder}:{os.environ['PATH']}"


def sampler_cost(seconds: float, sample_ms: float, pid: int) -> None:
    capture = CaptureSettings(gpu="nvidia", router_pid=pid, sample_ms=sample_ms)
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    sampler = PassSampler(capture, "0-%d" % (os.cpu_count() - 1), sample_ms).start()
    time.sleep(seconds)
    record = sampler.stop(1000, seconds)
    wall = time.monotonic() - started
    own2 = resource.getrusage(resource.RUSAGE_SELF)
    kids2 = resource.getrusage(resource.RUSAGE_CHILDREN)
    mine = (own2.ru_utime + own2.ru_stime - own.ru_utime - own.ru_stime) / wall
    tool = (kids2.ru_utime + kids2.ru_stime - kids.ru_utime - kids.ru_stime) / wall
    samples = len(record["cpu"]["t_s"])
    size = len(json.dumps(record))
    print(f"sampler every {sample_ms:g} ms for {wall:.1f} s: {samples} CPU samples, "
          f"{len(record['gpus'].get('gpu0', {}).get('t_s', []))} GPU samples per GPU; "
          f"driver thread {1000 * mine:.2f} ms CPU per second of pass; stand-in tool "
          f"{1000 * tool:.1f} ms per second; record {size / 1000:.1f} kB "
          f"({size / wall / 1000:.2f} kB per second of pass)")


def run_once(url: str, corpus: str, out: Path, sample_ms: str, pid: int, gpu: str) -> dict:
    subprocess.run([sys.executable, str(ROOT / "router_latency.py"), "run", "--url", url,
                    "--corpus", corpus, "--out", str(out), "--label", "x", "--warmup", "20",
                    "--concurrency", "1,4", "--gpu", gpu, "--router-pid", str(pid),
                    "--sample-ms", sample_ms, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    document = json.loads(out.read_text())
    out.unlink()
    return {p["name"]: p["summary"] for p in document["passes"]}


def overhead(pairs: int, prompts: int, folder: Path, gpu: str) -> None:
    router = start_simulator("127.0.0.1", 0, delay_ms=2.0)
    try:
        corpus = write_corpus(folder / "corpus.json", [f"prompt {i}" for i in range(prompts)])
        ratios: dict = {}
        for pair in range(pairs):
            arms = ("0", "250") if pair % 2 == 0 else ("250", "0")
            got = {arm: run_once(router.url, corpus, folder / "run.json", arm, os.getpid(), gpu)
                   for arm in arms}
            for name in got["0"]:
                for key in ("p50_ms", "mean_ms"):
                    ratios.setdefault((name, key), []).append(
                        got["250"][name][key] / got["0"][name][key])
        for (name, key), values in sorted(ratios.items()):
            print(f"--gpu {gpu}: {name} {key}: on/off median {statistics.median(values):.4f} "
                  f"(pairs {', '.join(f'{v:.3f}' for v in values)})")
    finally:
        router.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--sample-ms", type=float, default=250.0)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=300)
    parser.add_argument("--gpu", choices=("nvidia", "none"), default="nvidia",
                        help="none: the router's CPU and the load only, no GPU tool")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        standin_path(Path(folder))
        router = start_simulator("127.0.0.1", 0, delay_ms=2.0)
        try:
            sampler_cost(args.seconds, args.sample_ms, os.getpid())
        finally:
            router.stop()
        overhead(args.pairs, args.prompts, Path(folder), args.gpu)


if __name__ == "__main__":
    main()
