#!/usr/bin/env python3
"""Every kind of answer `simulate` gives, asked through the router's own client, vllm-sr
(`vllm-sr route preview --json`, cli/commands/route.py; install it with
`pip install '.[client-check]'`): which it accepts, and what it prints of the others.

    python3 bench/client_check.py [--vllm-sr PATH]

Each kind is its own simulated router (in this process, on 127.0.0.1 port 0) and one call of
the client. The client accepts an answer when it exits 0 and prints the JSON it parsed; an
error answer (4xx, 5xx) it reports as `Router management API returned HTTP <status>: <the
router's message>` and exits non-zero: read by it as the router's. Not a test: it prints a
line per kind and asserts nothing.
"""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from router_latency.simulator import (SignalModel, SignalTime, SimulatedAnswers,  # noqa: E402
                                      SkippedSignals, start_simulator)

KINDS = [  # (kind, simulator settings, the client's extra arguments)
    ("decided", {}, []),
    ("decided, traced", {}, ["--trace"]),
    ("no decision matched", {"answers": SimulatedAnswers(no_decision_share=1.0)}, []),
    ("signals timed (--signals)", {"signals": SignalModel((SignalTime("domain", 1.0),
                                                           SignalTime("pii", 1.0)))}, []),
    ("signal errors (degraded)", {"answers": SimulatedAnswers(
        signal_errors=SkippedSignals(1.0))}, []),
    ("sampled selection, seed 7", {"answers": SimulatedAnswers(sampled_share=1.0)},
     ["--sampling-seed", "7"]),
    ("sampled selection, no seed", {"answers": SimulatedAnswers(sampled_share=1.0)}, []),
    ("partial 503 (decision_error)", {"answers": SimulatedAnswers(partial_share=1.0)}, []),
    ("starting, older (200 without decision)", {"answers": SimulatedAnswers(startup_s=600)},
     []),
    ("starting, newer (503 CLASSIFIER_UNAVAILABLE)", {"answers": SimulatedAnswers(
        startup_s=600, phased_startup=True)}, []),
    ("cache hit (second sending)", {"answers": SimulatedAnswers(cache_entries=16)}, []),
    ("split stages", {"answers": SimulatedAnswers(split_share=1.0, runtime="vllm-srun")}, []),
    ("unknown routing model (400)", {}, ["--model", "no-such-model"]),
    ("overloaded (429)", {"max_concurrency": 1, "delay_ms": 0}, []),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    beside = Path(sys.executable).parent / "vllm-sr"  # in the same virtual environment
    parser.add_argument("--vllm-sr", default=shutil.which("vllm-sr")
                        or (str(beside) if beside.exists() else "vllm-sr"))
    args = parser.parse_args()
    version = subprocess.run([args.vllm_sr, "--version"], capture_output=True, text=True)
    print(f"client: {args.vllm_sr} {(version.stdout or version.stderr).strip()}")
    for kind, settings, extra in KINDS:
        router = start_simulator(**{"delay_ms": 0.0, **settings})
        try:
            if kind.startswith("overloaded"):
                router.in_flight = router.max_concurrency  # the one slot taken
            command = [args.vllm_sr, "route", "preview", "--endpoint", router.url, "--json",
                       "--prompt", "What is the derivative of x squared?", *extra]
            if kind.startswith("cache hit"):
                subprocess.run(command, capture_output=True, timeout=60)
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        finally:
            router.stop()
        if done.returncode == 0:
            answer = json.loads(done.stdout)
            provenance = answer.get("selection_provenance")
            print(f"{kind}: accepted (exit 0), {len(done.stdout)} bytes, fields "
                  f"{', '.join(list(answer)[:4])}, ...; decision "
                  f"{(answer.get('decision_result') or {}).get('decision_name')!r}"
                  + (f"; selection_provenance {json.dumps(provenance)}" if provenance else "")
                  + (f"; signal_errors {answer['signal_errors']}"
                     if answer.get("signal_errors") else ""))
        else:
            said = (done.stderr.strip().splitlines() or [""])[-1]
            print(f"{kind}: exit {done.returncode}: {said[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
