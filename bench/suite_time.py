#!/usr/bin/env python3
"""Where the test suite's time goes: each test's wall time, its own CPU and its children's.

    python3 bench/suite_time.py [--top N] [-- PYTEST ARGS]   # default: the README's pytest -q

Runs pytest (this Python, the repository's tests) with this file as a plugin: each worker
records, per test, the wall time of its set-up, call and tear-down, the CPU its process spent
(its own threads: in-process routers and the tool's pass) and the CPU of the children it
waited for (the tool and run_rounds.sh as processes, mypy). Then it prints the session's wall
time and CPU, the CPU floor (all CPU over the workers: no schedule of the suite on that many
cores ends sooner), each worker's sum, the files by wall time and the slowest tests. A test's
wall time beyond its CPU is waiting: a timeout, a measured duration, a poll, or the other
worker holding the cores. Figures only: nothing here passes or fails.

Before and after the session it times a fixed loop of pure Python (the CPU it takes, median
and range of 7): on a shared virtual machine the same work takes more CPU at some times than
at others (seen here: one loop 80 to 134 ms within a minute), and so does the suite (the same
tree 67 to 89 s within an hour), so figures taken at different times compare only beside
the loop's.
"""

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_rows = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # the plugin's half: one row a test
    """Time one test's protocol (pytest calls this hook wrapper around it)."""
    started, clock = os.times(), time.monotonic()
    yield
    ended, wall = os.times(), time.monotonic() - clock
    _rows.append((item.nodeid, wall, ended.user + ended.system - started.user - started.system,
                   ended.children_user + ended.children_system
                   - started.children_user - started.children_system))



def pytest_sessionfinish(session):
    """Write this worker's rows where the bench reads them."""
    folder = os.environ.get("SUITE_TIME_DIR")
    if folder and _rows:  # an xdist controller runs no test
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder, f"rows-{worker}.json").write_text(json.dumps(_rows))


def reference_loop(samples=7):
    """Return the CPU milliseconds of a fixed pure-Python loop: (median, lowest, highest)."""
    taken = []
    for _ in range(samples):
        started, total = time.process_time(), 0
        for number in range(3_000_000):
            total += number
        taken.append((time.process_time() - started) * 1000)
    taken.sort()
    return taken[len(taken) // 2], taken[0], taken[-1]


def report(folder, wall, cpu, top):
    """Print the figures of one session from its workers' rows."""
    workers = {path.stem[5:]: json.loads(path.read_text())
               for path in sorted(Path(folder).glob("rows-*.json"))}
    rows = [row for kept in workers.values() for row in kept]
    count = max(len(workers), 1)
    print(f"session: {wall:.1f} s wall, {cpu:.1f} s CPU (pytest and every process it started), "
          f"{len(rows)} tests on {count} worker(s); CPU floor {cpu / count:.1f} s")
    for name, kept in workers.items():
        print(f"  worker {name}: {len(kept)} tests, {sum(r[1] for r in kept):.1f} s of test "
              f"wall time")
    files = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for nodeid, test_wall, own, children in rows:
        entry = files[nodeid.split("::")[0]]
        entry[0] += test_wall
        entry[1] += own
        entry[2] += children
        entry[3] += 1
    print(f"\n{'file':<44} {'wall s':>7} {'own CPU':>8} {'children':>9} {'tests':>6}")
    print(f"{'(all)':<44} {sum(e[0] for e in files.values()):7.1f} "
          f"{sum(e[1] for e in files.values()):8.1f} {sum(e[2] for e in files.values()):9.1f} "
          f"{len(rows):6d}")
    for name, entry in sorted(files.items(), key=lambda item: -item[1][0])[:top]:
        print(f"{name:<44} {entry[0]:7.1f} {entry[1]:8.1f} {entry[2]:9.1f} {entry[3]:6d}")
    print(f"\n{'wall s':>7} {'own CPU':>8} {'children':>9}  slowest tests")
    for nodeid, test_wall, own, children in sorted(rows, key=lambda row: -row[1])[:top]:
        print(f"{test_wall:7.2f} {own:8.2f} {children:9.2f}  {nodeid}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="files and tests listed (25)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (-q)")
    args = parser.parse_args()
    loops = [reference_loop()]
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "SUITE_TIME_DIR": folder,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "bench"),
                                                           os.environ.get("PYTHONPATH")]))}
        before, clock = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        code = subprocess.run([sys.executable, "-m", "pytest", "-p", "suite_time",
                               *(args.pytest_args or ["-q"])], cwd=ROOT, env=env).returncode
        after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - clock
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        loops.append(reference_loop())
        print(f"\npytest exited {code}")
        print("reference loop (CPU ms, median and range of 7): " + "; ".join(
            f"{when} {median:.0f} ({low:.0f}-{high:.0f})"
            for when, (median, low, high) in zip(("before", "after"), loops)))
        report(folder, wall, cpu, args.top)
    return code


if __name__ == "__main__":
    sys.exit(main())
