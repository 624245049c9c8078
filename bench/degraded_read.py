#!/usr/bin/env python3
"""What reading degraded answers costs the driver per answer: the search of a 200's body for
signal_errors, applied_unknown_policies and decision_error (degraded_of) beside the decision's
own reading (classify), on the simulator's router-shaped answers of about 2.3 KB.

    python3 bench/degraded_read.py [--answers 5000] [--repeat 7]

plain      a plain answer: the byte searches only (reverse searches; a forward `in` shown for
           comparison), nothing decoded again
degraded   an answer with signal_errors and applied_unknown_policies: decoded whole once more
escaped    a plain answer whose prompt Go escaped (<, >, & as \\u003c...): the escape check

Best of --repeat timings of --answers calls each, in microseconds per answer; single thread,
bounded by the counts. Not a test: it prints figures and asserts nothing.
"""

import argparse
import json
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from router_latency.constants import DEFAULT_DECISION_PATHS
from router_latency.meaning import classify, degraded_of
from router_latency.simulator import simulated_answer, SkippedSignals, with_signal_errors


def body_of(answer: dict) -> bytes:
    return json.dumps(answer, separators=(",", ":")).encode() + b"\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    plain = simulated_answer("What is the derivative of x squared?", {}, "math", 3.0,
                             "ab" * 32, False)
    bodies = {"plain": body_of(plain),
              "degraded": body_of(with_signal_errors(dict(plain), SkippedSignals(1.0, 0.3))),
              "escaped": body_of(dict(plain, original_text="a <b> & c")).replace(
                  b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")}

    def best(call) -> float:
        return min(timeit.repeat(call, number=args.answers, repeat=args.repeat)) \
            / args.answers * 1e6

    marks = (b'"signal_errors"', b'"applied_unknown_policies"', b'"decision_error"')
    print(f"{'answer':<9} {'bytes':>6} {'classify us':>12} {'degraded_of us':>15} "
          f"{'share':>6} {'forward in us':>14}")
    for name, body in bodies.items():
        decide = best(lambda: classify(200, body, DEFAULT_DECISION_PATHS))
        read = best(lambda: degraded_of(body))
        forward = best(lambda: any(m in body for m in marks) or b"\\u00" in body)
        print(f"{name:<9} {len(body):>6} {decide:>12.2f} {read:>15.2f} "
              f"{read / decide:>6.0%} {forward:>14.2f}")


if __name__ == "__main__":
    main()
