"""Shared fixtures and helpers: simulated routers on port 0, the CLI called in-process, corpus
and run files written by the tool's own writers, and what several test files use: the bad-file
table, two compared runs, a folder of three rounds, a scripted loopback server whose answers a
test writes byte by byte."""

import atexit
import importlib.util
import json
import math
import os
import py_compile
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))  # the package; the processes run the generated file

from router_latency.constants import PREVIEW_PATH
from router_latency.files import write_atomic
from router_latency.corpus import corpus_bytes, CORPUS_SCHEMA
from router_latency.runfile import Attempt, dump_run, HostSettings, PassRecord, RunFile, RunSettings
from router_latency.requests import pass_name, pass_summary, Request
from router_latency.client import accept_connections, stop_accepting
from router_latency.simulator import start_simulator
from router_latency.cli import main
from router_double import RouterDouble
import html.parser
import http.client
import random
import re
import socketserver
import stat
import subprocess
import unicodedata
from router_latency.cache import CACHE_MIN_PROMPTS
from router_latency.captured import RouterCpu
from router_latency.client import MAX_BODY_BYTES
from router_latency.meaning import WHOLE_JSON_BYTES
from router_latency.phases import phase_windows, PhaseWindow, Thresholds
from router_latency.requests import PassSummary
from router_latency.runfile import load_run

TOOL = ROOT / "router_latency.py"
# a routing preview's answer, as the router writes it
OK = b'{"decision_result": {"decision_name": "ok"}}'



# where the session's compiled tool is, for the processes that load this file after the first
SHARED_PYC = "ROUTER_LATENCY_TESTS_PYC"


def compiled_tool():
    """Return the tool byte-compiled once for this test session, in a folder of its own.
    `python router_latency.pyc ARGS` runs the same code as `python router_latency.py ARGS`
    (tracebacks name the .py), without compiling 11,000 lines again: 0.2 s of CPU in each of
    the suite's few hundred processes of the tool, run as a script (never cached). Tests
    of how a user starts the file (the README's commands, the module alone) use TOOL. The
    session compiles it once: xdist's controller loads this file before it starts the workers,
    which find the file in SHARED_PYC (their environment is its), made from TOOL as it is
    now (the source's mtime and size in the header, as an import checks them)."""
    shared, source = Path(os.environ.get(SHARED_PYC, "/nonexistent")), TOOL.stat()
    current = importlib.util.MAGIC_NUMBER + bytes(4) + b"".join(  # magic, flags, mtime, size
        (int(n) & 0xFFFFFFFF).to_bytes(4, "little") for n in (source.st_mtime, source.st_size))
    try:
        with open(shared, "rb") as compiled:
            if compiled.read(16) == current:
                return shared
    except OSError:
        pass
    folder = tempfile.mkdtemp(prefix="router-latency-tool-")
    atexit.register(shutil.rmtree, folder, True)
    compiled = Path(py_compile.compile(str(TOOL), cfile=str(Path(folder) / "router_latency.pyc"),
                                       dfile=str(TOOL), doraise=True))
    os.environ[SHARED_PYC] = str(compiled)
    return compiled


TOOL_PYC = compiled_tool()

# run_rounds.sh looks at a started router, a run and a stopping side every 100 ms: a tenth of a
# second lost at each of some thirty waits of a three-round run, most of a test's wall time on a
# quiet machine. The tests' drivers look every 20 ms (processes started without an env of their
# own inherit it; the tests' env dicts name POLL_ENV)
POLL_ENV = {"RUN_ROUNDS_POLL_MS": "20"}
os.environ.update(POLL_ENV)

# A shell without job control starts a background job (`pytest &`, a CI step's `cmd &`) with
# SIGINT ignored, `nohup` (as some CI runners start jobs) with SIGHUP ignored, a `trap '' TERM`
# with SIGTERM ignored, and every process it starts inherits that (an ignored signal stays
# ignored across exec, a blocked one blocked): a tool process a test interrupted then never
# saw the signal, or a driver could not trap it. The tests send these as a terminal, a closed
# SSH connection and a CI runner would, so they run with the default dispositions, unblocked,
# in this process and (inherited) in every child it starts. A parent that ignores SIGCHLD (to
# have its children reaped for it) passes that on too: the kernel then reaps every child the
# tests start, and each exit status reads 0 (subprocess's wait finds no child), so it is
# restored as well. SIGPIPE needs nothing here: Python ignores it in its own process and
# subprocess restores its default in every child (restore_signals); SIGUSR1 and SIGUSR2 are
# sent only to handlers a test installs itself. SIGKILL cannot be ignored.
SENT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
for _signum in SENT_SIGNALS + (signal.SIGCHLD,):
    if signal.getsignal(_signum) is signal.SIG_IGN:
        signal.signal(_signum, signal.default_int_handler if _signum == signal.SIGINT
                      else signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_UNBLOCK, SENT_SIGNALS)

# the property tests (hypothesis) of test_stats.py and test_corpus.py; no deadline, since
# a loaded machine is slow without the code being wrong
def __getattr__(name):
    """Return SETTINGS, the property tests' hypothesis settings (150 examples, no deadline),
    made on first use: xdist's controller loads this file too, and importing hypothesis was a
    quarter of a second of its start before any worker started."""
    if name != "SETTINGS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from hypothesis import settings
    globals()["SETTINGS"] = settings(max_examples=150, deadline=None)
    return globals()["SETTINGS"]


def pytest_collection_modifyitems(items):
    """Deal the tests that run real processes (marked `process`: seconds each, the rest
    milliseconds) out first, so that the workers end together on short tests instead of one
    finishing a long one alone at the end (xdist hands tests out in this order: with --dist
    worksteal, pyproject.toml, the first worker gets the first half, and a worker that runs
    out takes half of the rest of another's; with xdist's default chunks, the first worker's
    first chunk held every process test)."""
    items.sort(key=lambda item: item.get_closest_marker("process") is None)


class Result(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def no_step_summary(monkeypatch):
    """Keep `rounds` from appending to a real GitHub job summary while the tests run."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture
def cli(capsys):
    """Call main() with the given arguments; return exit code, stdout and stderr."""
    def call(*argv):
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return Result(code, out, err)
    return call


@pytest.fixture
def simulator():
    """Start simulated routers on 127.0.0.1, port 0; all stopped after the test."""
    routers = []

    def start(**options):
        router = start_simulator("127.0.0.1", 0, **options)
        routers.append(router)
        return router

    yield start
    for router in routers:
        router.stop()


@pytest.fixture
def quick_ready_poll(monkeypatch):
    """Look at a router that is not ready yet every 10 ms instead of every 250: for a test of
    what readiness decides, whose router starts up by count (answers or GETs), not by time."""
    import router_latency.readiness
    monkeypatch.setattr(router_latency.readiness, "READY_POLL_S", 0.01)


@pytest.fixture
def no_fsync(monkeypatch):
    """Let os.fsync return at once: for tests that write many files only to read them back
    (pools of run files), which the disk's flush makes wait (two fsyncs a written file, 0.4
    to 2.7 ms here with the disk's other traffic). The files are the same; what fsync is for
    is tested in test_measuring.py (a written file reaches the disk before it replaces ...)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def write_corpus(path, texts):
    """Write a corpus file of the given prompts through the tool's own encoder."""
    document = {"schema": CORPUS_SCHEMA, "source": {"repo": "test"}, "files": {},
                "prompts": [{"id": i, "text": t, "source": "test"} for i, t in enumerate(texts)]}
    Path(path).write_bytes(corpus_bytes(document))
    return str(path)


def make_run(path, *, label="x", sha="a" * 64, count=101, passes=None, decisions=None,
             complete=True, discarded=(), errors=None, started="2026-01-01T00:00:00Z",
             started_unix=None, environment=None, load=None, driver_cpu_s=None,
             router_cpu=None, windows=None, host_settings=None):
    """Write a valid run file with given figures, through the tool's own writer.

    passes: {concurrency: (p50, p95, p99, req_per_s)}: the records' latencies are chosen so
    that the summary the tool computes from them has these percentiles, so the file agrees
    with itself; decisions: the first prompts' decisions, the rest 'd'; errors: {kind: count},
    given to the last requests of each pass; environment, load, driver_cpu_s: recorded as is
    in every measured pass; router_cpu and windows: {concurrency: RouterCpu or PhaseWindows}.
    """
    passes = passes or {1: (10.0, 12.0, 13.0, 100.0)}
    decisions = list(decisions or []) + ["d"] * (count - len(decisions or []))
    records = []
    for concurrency, (p50, p95, p99, rps) in passes.items():
        name = pass_name(concurrency)
        if concurrency in discarded:
            attempt = Attempt(None, None, started, started_unix,
                                 {"start": 150.0, "end": 150.0}, None, {}, None, ())
            records.append(PassRecord(name, concurrency, True, False, attempt))
            continue
        requests = failed_last(decisions, (p50, p95, p99), errors)
        ok = sum(r.error is None for r in requests)
        summary = pass_summary(requests, round(ok / rps, 6))
        attempt = Attempt(None, None, started, started_unix, load or {}, driver_cpu_s,
                             environment or {}, summary, requests,
                             router_cpu=(router_cpu or {}).get(concurrency),
                             windows=tuple((windows or {}).get(concurrency, ())))
        records.append(PassRecord(name, concurrency, False, False, attempt))
    run = RunFile(label, complete, {"path": "c.json", "sha256": sha, "count": count},
                     tuple(records), started_utc=started, started_unix=started_unix,
                     settings=RunSettings(max_load=120.0), host_settings=HostSettings.from_json(host_settings or {}, "test"))
    write_atomic(str(path), dump_run(run))
    return str(path)


def latencies_for(count, p50, p95, p99):
    """Return count sorted latencies whose R7 p50, p95 and p99 are exactly those given
    (count of at least about 30: each percentile's two neighbouring ranks get its value)."""
    h50, h95 = (count - 1) * 0.50, (count - 1) * 0.95
    return [p50 if i <= math.ceil(h50) else p95 if i <= math.ceil(h95) else p99
            for i in range(count)]


def failed_last(decisions, figures, errors):
    """Return one request per decision, the last ones failed with the given error kinds."""
    kinds = [kind for kind, n in (errors or {}).items() for _ in range(n)]
    ok = len(decisions) - len(kinds)
    latencies = latencies_for(ok, *figures) if ok else []
    return tuple(Request(i, None, latencies[i], 200, d, None) if i < ok
                 else Request(i, None, figures[0], 500, None, kinds[i - ok])
                 for i, d in enumerate(decisions))


def two_runs(folder, sha="a" * 64, b_sha=None, **b_options):
    """Write a.json (cpu) and b.json (rocm), sequential and Conc 4 passes with known figures;
    B's last request timed out. b_options go to B's make_run."""
    a = make_run(folder / "a.json", label="cpu",
                 passes={1: (10, 20, 30, 100), 4: (12, 25, 40, 300)},
                 decisions=["x", "y", "z"], sha=sha)
    b_options["sha"] = b_sha or sha
    b = make_run(folder / "b.json", label="rocm",
                 passes={1: (4, 8, 9, 250), 4: (5, 9, 12, 700)},
                 decisions=["x", "y", "w"], errors={"timeout": 1}, **b_options)
    return a, b


# new p50 5, 6, 7 against base 10: differences -5, -4, -3 (mean -4, s 1, t(2) 4.302653);
# ln(new/base) of 0.5, 0.6, 0.7 gives the speedup interval [1.11, 2.56] worked by hand.
NEW = [(5, 20.5, 40, 99), (6, 21, 41, 101), (7, 20, 42, 100)]


def three_rounds(folder, *, differ_in_round=None, base=(10, 20, 30, 100), flagged=False,
                 sha="a" * 64, decisions=None):
    """Three rounds; cpu starts first in r1 and r3, gpu in r2. r2's cpu router had other cores.
    flagged: r2's gpu side also ran above the load limit and r3's gpu router restarted once,
    so that rounds leaves both rounds out. decisions: the first inputs' decisions on both
    sides (differ_in_round changes the new side's)."""
    first = decisions
    for number, figures in enumerate(NEW, 1):
        make_run(folder / f"r{number}-cpu.json", label="cpu", passes={1: base}, sha=sha,
                 decisions=first, started_unix=1000.0 * number,
                 environment={"router_cpus": "0-7" if number == 2 else "0-15"},
                 load={"start": 0.5, "end": 1.5, "min": 0.5, "max": 1.5}, driver_cpu_s=0.015)
        decisions = ["d", "d", "e"] if number == differ_in_round else first
        restarts = float(number == 3 and flagged)
        environment = {"router_cpus": "16-31",
                       "gpu": {"tool": "rocm-smi", "before": {"used_mib": {"card0": 1024.0}},
                               "after": {"used_mib": {"card0": 1100.0}}},
                       "metrics": {"deltas": {"router_restarts_total": restarts}}}
        make_run(folder / f"r{number}-gpu.json", label="gpu", passes={1: figures}, sha=sha,
                 decisions=decisions,
                 started_unix=1000.0 * number + (-300 if number == 2 else 300),
                 environment=environment, driver_cpu_s=0.015,
                 load={"start": 1.0, "end": 130.0 if number == 2 and flagged else 2.0})


def assert_one_line_error(result, *fragments):
    """Assert exit 2 and one error line on stderr, no traceback, holding every fragment."""
    assert result.code == 2, result
    assert result.err.startswith("router-latency: error: "), result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in result.err, (fragment, result.err)


# files no reader accepts: name -> (content, or None for no file, "<dir>" for a folder;
# what the error says)
BAD_FILES = {
    "missing": (None, "no such file"),
    "folder": ("<dir>", "is a folder, not a file"),
    "empty": (b"", "the file is empty"),
    "invalid": (b'{"schema": ', "invalid JSON at line 1 column 12"),
    "not_utf8": (b'{"a": "\xff\xfe"}', "not UTF-8"),
    "nan": (b'{"schema": NaN}', "NaN is not valid JSON"),
    "wrong_schema": (b'{"schema": "something/else"}', "schema is 'something/else'"),
    "no_schema": (b'{"prompts": []}', "no schema member: not a router-latency/"),
    "array": (b"[1, 2]", "expected a router-latency/"),
}


def bad_file(tmp_path, kind):
    """Create the BAD_FILES entry kind in tmp_path; return its path."""
    path = tmp_path / f"{kind}.json"
    content = BAD_FILES[kind][0]
    if content == "<dir>":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    return path


def hold_a_slot(router):
    """Send one preview on a raw socket and wait until the router counts it in flight; return
    the socket. The request sleeps the router's whole delay, holding its slot even after the
    socket closes, as a router's worker does after a client gave up."""
    sock = socket.create_connection(("127.0.0.1", int(router.url.rsplit(":", 1)[1])), timeout=5)
    body = b'{"model": "MoM", "messages": [{"role": "user", "content": "hold"}]}'
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                 % (PREVIEW_PATH.encode(), len(body), body))
    deadline = time.monotonic() + 10
    while router.in_flight < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert router.in_flight == 1
    return sock


def final_answer(body=b'{"decision_result": {"decision_name": "ok"}}', status=b"200 OK"):
    """Return a whole HTTP/1.1 answer with a Content-Length."""
    return b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


class ScriptedServer:
    """A loopback HTTP/1.1 server: each request's answer is the bytes that answer(prompt,
    number of the request on its connection) returns, sent as given; None closes the
    connection without answering. Counts the requests it read."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections: set = set()  # open ones, closed by close() if still open
        self.threads = [threading.Thread(target=accept_connections, args=(
            self.listener, self.start_serving, threading.Event()), daemon=True)]
        self.threads[0].start()

    def start_serving(self, connection):
        with self.lock:
            self.connections.add(connection)
            self.threads.append(threading.Thread(target=self.serve, args=(connection,),
                                                 daemon=True))
            self.threads[-1].start()

    def serve(self, connection):
        try:
            self.answer_requests(connection)
        except OSError:  # the client closed it (after a malformed answer, say), or close()
            pass
        finally:
            with self.lock:
                self.connections.discard(connection)

    def answer_requests(self, connection):
        with connection, connection.makefile("rb") as reader:
            for number in range(10_000):
                line = reader.readline(65537)
                if not line:
                    return
                length = 0
                while (header := reader.readline(65537)) not in (b"\r\n", b""):
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":")[1])
                body = json.loads(reader.read(length)) if length else {}
                with self.lock:
                    self.requests += 1
                prompt = body.get("messages", [{}])[0].get("content", "")
                pieces = self.answer(prompt, number)
                if pieces is None:
                    return
                for piece in pieces:  # separate writes, as net/http flushes a 103 at once
                    connection.sendall(piece)

    def close(self):
        """Stop accepting and end every connection's thread before the next test starts. A
        listener closed under a thread blocked in accept() stays listening on Linux (the call
        holds it), and a descriptor number freed while a thread is between calls on it is the
        next socket's: a later test's connection would reach this server's answers."""
        stop_accepting([self.listener], self.threads[:1])  # no connection is added after
        with self.lock:
            for connection in self.connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)  # its reader sees the end
                except OSError:
                    pass
        for thread in self.threads[1:]:
            thread.join(timeout=5)


@pytest.fixture
def scripted():
    servers = []

    def start(answer):
        servers.append(ScriptedServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def once_a_session(tmp_path_factory, name, make):
    """Return the folder `name` of this test session, made by make(folder) the first time a
    test asks: under xdist in the session's own folder, under a lock, so that the workers
    make it once between them (the pytest-xdist recipe). For set-ups that tests only read."""
    import fcntl
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a make that failed left
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def demo_kept(tmp_path_factory):
    """`demo --rounds 3 --keep FOLDER`, run once a session: (its Result, the folder). Two tests
    read what it printed and kept (test_cli, test_attribution); no test writes there."""
    def make(folder):
        result = run_main("demo", "--rounds", "3", "--keep", folder / "demo")
        (folder / "result.json").write_text(json.dumps(result._asdict()))

    folder = once_a_session(tmp_path_factory, "demo-kept", make)
    return Result(**json.loads((folder / "result.json").read_text())), folder / "demo"


def run_main(*argv):
    """Call main() as the cli fixture does, for a fixture wider than a test (no capsys):
    return its exit code, stdout and stderr."""
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return Result(code, out.getvalue(), err.getvalue())


def rounds(cli, folder, *extra):
    """Return `rounds` of a folder's cpu and gpu sides, in-process."""
    return cli("rounds", "--dir", folder, "--base", "cpu", "--new", "gpu", *extra)


@pytest.fixture
def double():
    servers = []

    def start(**options):
        servers.append(RouterDouble(**options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def sides(folder, number, base=(10, 20, 30, 100), new=(10, 20, 30, 100), **new_options):
    """Write round `number`: cpu with `base` figures, gpu with `new` (and new_options)."""
    make_run(folder / f"r{number}-cpu.json", label="cpu", passes={1: base},
             started_unix=10.0 * number)
    make_run(folder / f"r{number}-gpu.json", label="gpu", passes={1: new},
             started_unix=10.0 * number + (3 if number % 2 else -3), **new_options)


PASSES = {"sequential": 1, "c4": 4, "c16": 16}


FIGURES = {"p50_ms": 10.0, "p95_ms": 15.0, "p99_ms": 20.0, "mean_ms": 11.0, "req_per_s": 100.0}


def run_in_memory(label, number, factors, first):
    """Return a RunFile whose latency figures are FIGURES times factors[(pass, metric)]
    (req/s divided by it), started first in its round or not."""
    requests = tuple(Request(i, 0.0, 1.0, 200, "d", None) for i in range(3))
    passes = []
    for name, concurrency in PASSES.items():
        v = {m: FIGURES[m] / factors[(name, m)] if m == "req_per_s"
             else FIGURES[m] * factors[(name, m)] for m in FIGURES}
        summary = PassSummary(3, 3, {}, v["p50_ms"], v["p95_ms"], v["p99_ms"], v["mean_ms"],
                                 1.0, v["p99_ms"], v["req_per_s"], 1.0)
        passes.append(PassRecord(name, concurrency, False, False, Attempt(
            None, None, "", None, {}, None, {}, summary, requests)))
    return RunFile(label, True, {"path": "c.json", "sha256": "0" * 64, "count": 3},
                      tuple(passes), started_unix=2.0 * number + (0 if first else 1),
                      path=f"r{number}-{label}.json")


def rounds_in_memory(count, new_factor, *, base_factor=lambda n, p, m: 1.0):
    """Return {round: {side: RunFile}}: factors are functions of (round, pass, metric)."""
    runs = {}
    for n in range(1, count + 1):
        keys = [(p, m) for p in PASSES for m in FIGURES]
        runs[n] = {"base": run_in_memory("base", n, {k: base_factor(n, *k) for k in keys},
                                         n % 2 == 1),
                   "new": run_in_memory("new", n, {k: new_factor(n, *k) for k in keys},
                                        n % 2 == 0)}
    return runs


def with_hashes(path, *hashes):
    """Give every pass of a run file these x-vsr-config-hash values, through the tool's writer;
    return the run as read back."""
    run = load_run(path)
    passes = tuple(p._replace(attempt=p.attempt._replace(config_hashes=hashes))
                   for p in run.passes)
    write_atomic(path, dump_run(run._replace(passes=passes)))
    return load_run(path)


def hashed_rounds(folder, base_hashes, new_hashes):
    """Return {round: {side: RunFile}} of rounds whose sides answered with these hashes (a
    tuple per round: several values are a change within that run)."""
    return {n: {side: with_hashes(make_run(folder / f"r{n}-{side}.json", label=side), *values)
                for side, values in (("cpu", b), ("gpu", g))}
            for n, (b, g) in enumerate(zip(base_hashes, new_hashes), 1)}


def pass_of(concurrency, rps, p95, shed=0, discarded=False, connect=False):
    requests = tuple(Request(i, 0.0, p95, 429 if i < shed else 200, None if i < shed else "d",
                                "http_4xx" if i < shed else None) for i in range(40))
    if connect:  # the router went away: no answer at all
        requests = tuple(Request(i, 0.0, None, None, None, "connect") for i in range(40))
    summary = pass_summary(requests, (40 - shed) / rps)
    attempt = Attempt(None, None, "", None, {}, None, {}, None if discarded else summary,
                         () if discarded else requests)
    return PassRecord(pass_name(concurrency), concurrency, discarded, False, attempt)


# Real output of the GPU tools, as excerpts: whole keys, devices or columns left out, no value
# changed. rocm-smi prints one line of JSON, every value a string; a warning (wording from
# rocm_smi.py) may stand before it.
ROCM_WARNING = ("WARNING: AMD GPU device(s) is/are in a low-power state. Check power "
                "control/runtime_status\n\n")


# Radeon RX 7900 XTX, `rocm-smi --showtemp --showuse --showpower --showmeminfo vram --json`,
# pasted whole in github.com/henrygd/beszel/issues/414
ROCM_RX7900XTX = (
    '{"card0": {"Temperature (Sensor edge) (C)": "49.0", "Temperature (Sensor junction) (C)": '
    '"49.0", "Temperature (Sensor memory) (C)": "62.0", "Average Graphics Package Power (W)": '
    '"19.0", "GPU use (%)": "0", "VRAM Total Memory (B)": "25753026560", "VRAM Total Used '
    'Memory (B)": "794341376"}}\n')


# MI250, `rocm-smi -a --json` under ROCm 6: excerpt of the mock in github.com/wandb/wandb
# core/pkg/monitor/gpu_amd_test.go (PR 8493); the cap 'Max Graphics Package Power' is not power
ROCM_MI250 = (
    '{"card0": {"Temperature (Sensor edge) (C)": "43.0", "Temperature (Sensor junction) (C)": '
    '"44.0", "Temperature (Sensor memory) (C)": "53.0", "fclk clock speed:": "(400Mhz)", '
    '"mclk clock speed:": "(1600Mhz)", "sclk clock speed:": "(800Mhz)", "sclk clock level:": '
    '"1", "Max Graphics Package Power (W)": "560.0", "Average Graphics Package Power (W)": '
    '"91.0", "GPU use (%)": "0", "GFX Activity": "387664097"}, "system": {"Driver version": '
    '"6.2.4"}}')


# Not a capture: no real MI300X `amd-smi metric --json` was found. Keys as the amd-smi CLI
# source (6.1+) writes them; the values are those of GPU 0 in AMD's blog "Getting to Know Your
# GPU: A Deep Dive into AMD SMI" (`amd-smi metric` and `amd-smi monitor -putm` as text).
AMD_SMI_MI300X_SHAPED = """[{"gpu": 0,
  "usage": {"gfx_activity": {"value": 100, "unit": "%"}, "umc_activity": {"value": 0, "unit": "%"}},
  "power": {"socket_power": {"value": 234, "unit": "W"}, "gfx_voltage": "N/A"},
  "clock": {"gfx_0": {"clk": {"value": 2102, "unit": "MHz"}},
            "gfx_1": {"clk": {"value": 2101, "unit": "MHz"}},
            "gfx_2": {"clk": {"value": 2107, "unit": "MHz"}},
            "mem_0": {"clk": {"value": 1230, "unit": "MHz"}}},
  "temperature": {"edge": "N/A", "hotspot": {"value": 42, "unit": "C"},
                  "mem": {"value": 41, "unit": "C"}}}]
"""


# two GPUs, no index column, the graphics clock asked instead of the SM clock: pasted in
# github.com/aristocratos/bpytop/issues/26 (fan and memory.total columns left out)
NVIDIA_TWO = """name, memory.used [MiB], utilization.gpu [%], temperature.gpu, power.draw [W], \
clocks.current.graphics [MHz], clocks.current.memory [MHz]
GeForce GTX 1080 Ti, 2856 MiB, 36 %, 60, 106.56 W, 1936 MHz, 5508 MHz
GeForce GTX 1060 6GB, 4 MiB, 0 %, 49, 5.68 W, 139 MHz, 405 MHz
"""


PROMETHEUS_SAMPLE = r'''# HELP llm_model_routing_modifications_total Model routing changes.
# TYPE llm_model_routing_modifications_total counter
llm_model_routing_modifications_total{source_model="MoM",target_model="qwen3"} 12
# HELP process_restarts_total Restarts.
# TYPE process_restarts_total counter
process_restarts_total 2
classifier_errors_total{signal="pii",reason="say \"hi\", {x}"} 3 1712345678000
go_goroutines 41
request_duration_seconds_bucket{le="+Inf"} 7
request_duration_seconds_sum NaN
malformed line without value
'''


def state(temp=None, sensor=None, sclk=None, mclk=None, power=None, util=None, used=None):
    return {"temp_c": temp, "temp_sensor": sensor, "sclk_mhz": sclk, "mclk_mhz": mclk,
            "power_w": power, "util_pct": util, "used_mib": used}


def write_proc_stat(proc, ticks):
    """Write a /proc/stat of the given user ticks per CPU (nice 1, system 2, idle 500)."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{cpu} {user} 1 2 500 7 3 4 9 0 0" for cpu, user in sorted(ticks.items())]
    (proc / "stat").write_text("\n".join(lines + ["intr 12 0", "ctxt 99"]) + "\n")


def fake_docker(folder, output, code=0):
    script = folder / "docker"
    script.write_text(f"#!/bin/sh\necho '{output}'\n[ {code} = 0 ] || echo 'Error: No such "
                      f"object: x' >&2\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.json", ["hello"])


# A stand-in for router_latency.py (--tool) that runs the real tool as a script, except that
# it widens, to as long as the test needs, the moment that hung one run in fifty on a loaded
# machine: a signal landing while the main thread holds the lock of the event a handler sets.
# WIDEN=set: the first Event.set() after the first signal holds the event's lock until a
# second signal came (the driver's SIGTERM after Ctrl-C; WIDEN_SIGNAL, when given, sends it
# itself); WIDEN=wait: the first wait(timeout) in the main thread sends WIDEN_SIGNAL while it
# holds the lock (Ctrl-C during --wait-ready, SIGTERM to a simulator). A handler that set
# the event itself then waited on itself, forever.
WIDENED_TOOL = """
import os, runpy, signal, sys, threading, time
noted = []
real_signal = signal.signal
widen, sent = os.environ["WIDEN"], getattr(signal, os.environ.get("WIDEN_SIGNAL", "NSIG"))


def noting(signum, handler):
    if callable(handler) and handler is not signal.default_int_handler:
        inner = handler

        def handler(caught, frame):
            noted.append(caught)
            inner(caught, frame)
    return real_signal(signum, handler)


class Event(threading.Event):
    widened = []

    def set(self):
        if widen == "set" and noted and not Event.widened:
            Event.widened.append(self)
            with self._cond:
                if sent != signal.NSIG:
                    os.kill(os.getpid(), sent)
                for _ in range(500):  # the second signal's handler runs in these sleeps
                    if len(noted) > 1:
                        break
                    time.sleep(0.01)
        super().set()

    def wait(self, timeout=None):
        if widen == "wait" and timeout is not None and not Event.widened \\
                and threading.current_thread() is threading.main_thread():
            Event.widened.append(self)
            with self._cond:
                os.kill(os.getpid(), sent)
                time.sleep(0.2)
        return super().wait(timeout)


signal.signal, threading.Event = noting, Event
sys.argv = [{tool!r}] + sys.argv[1:]
runpy.run_path({tool!r}, run_name="__main__")
"""


def widened_tool(tmp_path):
    path = tmp_path / "widened.py"
    path.write_text(WIDENED_TOOL.format(tool=str(TOOL_PYC)))
    return path


def ended(process, timeout=30):
    """The exit code of a process that must end within the timeout (it is killed if not)."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return f"still running {timeout} s later (killed)"


NOT_UTF8 = os.fsdecode(b"\xff\xfe")  # bytes a UTF-8 path or argument cannot hold, as Python


def write(path, document):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")


@pytest.fixture
def repo(tmp_path):
    data = tmp_path / "repo" / "e2e" / "testcases" / "testdata"
    write(data / "b_cases.json", [
        {"description": "not a prompt", "query": "What is 2+2?"},
        {"question": "Explain DNS", "expected": {"prompt": "nested prompt"}},
        {"original_question": "What is X?", "similar_questions": ["Define X", 7, "What is X?"]},
    ])
    write(data / "a_cases.json", {"test_cases": [
        {"input": {"query": "What is 2+2?"}},
        {"messages": [{"role": "system", "content": "system text"},
                      {"role": "user", "content": "plain user text"},
                      {"role": "assistant", "content": "assistant text"},
                      {"role": "user", "content": [{"type": "text", "text": "part one"},
                                                   {"type": "image_url", "image_url": {}},
                                                   {"type": "text", "text": "part two"}]}]},
        {"query": ""},
        {"custom": "custom key text"},
    ]})
    write(data / "sub" / "c_cases.json", [{"prompt": "deep file"}])
    write(tmp_path / "repo" / "e2e" / "other" / "ignored.json", [{"query": "not testdata"}])
    (data / "notes.txt").write_text("query: not json data")
    return tmp_path / "repo"


MISSED = ("not a pass: it could have missed a slowdown of up to +37.3% (Sequential p50)")


def cpu_gpu_round(folder, number, new):
    """Write round `number`: cpu at (10, 20, 30, 100) ms/req/s, gpu at `new`."""
    make_run(folder / f"r{number}-cpu.json", label="cpu", passes={1: (10, 20, 30, 100)},
             started_unix=10.0 * number)
    make_run(folder / f"r{number}-gpu.json", label="gpu", passes={1: new},
             started_unix=10.0 * number + (3 if number % 2 else -3))


def undecided(folder):
    # p50 ratios 0.9, 1.15, 1.0: the worse end +37.3%, beyond the 5% tolerance
    for number, new_p50 in enumerate((9.0, 11.5, 10.0), 1):
        cpu_gpu_round(folder, number, (new_p50, 20, 30, 100))


BASE = (10.0, 20.0, 30.0, 100.0)  # p50, p95, p99 ms, req/s


def history_rounds_folder(folder, ratio, *, seed, rounds=5, noise=0.01, sha="a" * 64, start=0.0,
                  passes=(1,), scale=1.0, sides=("main", "merge")):
    """Write a rounds folder main/merge whose new side is `ratio` times slower than its base
    (each round's ratio off by a normal error of sd `noise`), as `rounds` reads it; the base
    side runs at `scale` times BASE's latencies."""
    folder.mkdir(parents=True)
    rng = random.Random(seed)
    for number in range(1, rounds + 1):
        level = scale * (1 + rng.gauss(0, 0.01))  # the node's level that round, both sides
        base = tuple(v * level for v in BASE[:3]) + (BASE[3] / level,)
        factor = ratio * math.exp(rng.gauss(0, noise))
        new = tuple(v * factor for v in base[:3]) + (base[3] / factor,)
        at = start + 100.0 * number
        for side, figures, when in ((sides[0], base, at), (sides[1], new, at + 50)):
            make_run(folder / f"r{number}-{side}.json", label=side, sha=sha,
                     passes={c: figures for c in passes}, started_unix=when,
                     started=f"2026-01-{1 + int(start // 10000):02d}T00:00:00Z")
    return folder


class FaultServer(socketserver.ThreadingTCPServer):
    """A loopback HTTP server whose answer each prompt picks: 'status:503', 'sleep:0.5',
    'notjson', 'nodecision', 'reset', 'short', 'chunked', 'http10', 'huge', 'redirect'.
    Any other prompt gets a normal preview answer with the decision 'ok'."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port=0):
        super().__init__(("127.0.0.1", port), FaultHandler)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.requests = 0
        self.authorizations = set()  # the Authorization headers received
        self.lock = threading.Lock()

    def handle_error(self, request, client_address):
        pass  # a client that went away mid-answer is what several faults are about

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class FaultHandler(socketserver.StreamRequestHandler):
    def handle(self):
        self.connection.settimeout(5)
        while True:
            try:
                head = self.read_head()
            except (OSError, ValueError):
                return
            if head is None:
                return
            method, path, headers = head
            body = self.rfile.read(int(headers.get("content-length", 0)))
            with self.server.lock:
                self.server.requests += 1
                self.server.authorizations.add(headers.get("authorization"))
            prompt = ""
            if method == "POST":
                try:
                    prompt = json.loads(body)["messages"][0]["content"]
                except (ValueError, KeyError, IndexError, TypeError):
                    prompt = ""
            if not self.answer(method, path, prompt):
                return

    def read_head(self):
        line = self.rfile.readline(65537)
        if not line:
            return None
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers = {}
        for _ in range(100):
            line = self.rfile.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return method, path, headers

    def send(self, status, body, extra=""):
        head = (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n{extra}\r\n")
        self.wfile.write(head.encode("latin-1") + body)

    def answer(self, method, path, prompt):
        """Answer one request; return False to close the connection."""
        ok = json.dumps({"decision_result": {"decision_name": "ok"}}).encode()
        if method == "GET":
            self.send(200 if path == "/health" else 404, b"{}")
            return True
        if path != PREVIEW_PATH:
            self.send(404, b'{"error": "not found"}')
            return True
        kind, _, arg = prompt.partition(":")
        if kind == "status":
            self.send(int(arg), b'{"error": "injected"}',
                      "Location: /elsewhere\r\n" if arg.startswith("3") else "")
        elif kind == "sleep":
            time.sleep(float(arg))
            try:
                self.send(200, ok)
            except OSError:
                return False
        elif kind == "notjson":
            self.send(200, b"<html>oops</html>")
        elif kind == "nodecision":
            self.send(200, b'{"selected_model": null}')
        elif kind == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return False
        elif kind == "short":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"decision")
            return False
        elif kind == "chunked":
            parts = [ok[:5], ok[5:]]
            data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
                b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
            self.wfile.write(data)
        elif kind == "http10":
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + ok)
            return False
        elif kind == "huge":
            self.send(200, b" " * (MAX_BODY_BYTES + 10))
        else:
            self.send(200, ok)
        return True


@pytest.fixture
def fault_server():
    server = FaultServer()
    server.thread.start()
    yield server
    server.shutdown()
    server.server_close()


NOISE_PROMPTS = 40


def noise_run(path, label, sendings, started_unix, ready_s=10.0):
    """Write a run file of one sequential pass whose sendings have these latencies (one list
    per sending, NOISE_PROMPTS each), sent back to back; its run took ready_s to answer."""
    requests, clock = [], 0.0
    for rep, latencies in enumerate(sendings):
        for i, latency in enumerate(latencies):
            requests.append(Request(i, round(clock, 4), round(latency, 4), 200, "d", None,
                                    rep=rep))
            clock += latency
    summary = pass_summary(requests, round(clock / 1000, 6))
    begun = started_unix + ready_s + 1.0  # ready, then a second of warm-up
    attempt = Attempt(None, None, "2026-01-01T00:00:00Z", begun, {}, None, {}, summary,
                      tuple(requests))
    run = RunFile(label, True, {"path": "c.json", "sha256": "a" * 64, "count": NOISE_PROMPTS},
                  (PassRecord("sequential", 1, False, False, attempt),),
                  started_utc="2026-01-01T00:00:00Z", started_unix=started_unix,
                  settings=RunSettings(concurrency=(1,), repeat=len(sendings), max_load=120.0),
                  ready_after_s=ready_s)
    write_atomic(str(path), dump_run(run))


def pair_folder(folder, speeds, jitter, sendings, seed=1, look_s=0.0):
    """Write an A/A pair: round n's instances run at speeds[n][side] ms, each request that
    times a uniform factor 1 +- jitter. Runs follow each other: a side's run takes its ready
    time, a second of warm-up, its pass, and a second's gap to the next; look_s more after
    each round (a sequential look)."""
    rng = random.Random(seed)
    clock = 1000.0
    for number, pair in enumerate(speeds, 1):
        for side, speed in zip("ab", pair):
            latencies = [[speed * (1 + rng.uniform(-jitter, jitter)) for _ in range(NOISE_PROMPTS)]
                         for _ in range(sendings)]
            noise_run(folder / f"r{number}-{side}.json", side, latencies, clock)
            clock += 10.0 + 1.0 + sum(map(sum, latencies)) / 1000 + 1.0
        clock += look_s
    return folder


def markdown_kind(line):
    """Return what GitHub makes of a line of our Markdown."""
    if not line:
        return "blank"
    if line.startswith("|"):
        return "table"
    if line.startswith(("- ", "  - ")):
        return "list"
    return "bold" if line.startswith("**") and line.count("**") >= 2 else "text"


def assert_renders_as_blocks(lines):
    """Assert that every line is a table row, a list item, bold or blank, that blocks of
    different kinds stand apart (GitHub would run them into one paragraph or table), and
    that each table row has as many cells as its header."""
    kinds = [markdown_kind(line) for line in lines]
    assert "text" not in kinds, [line for line in lines if markdown_kind(line) == "text"]
    for before, after in zip(kinds, kinds[1:]):
        assert before == after or "blank" in (before, after), (before, after)
    width = None
    for line, kind in zip(lines, kinds):
        cells = len(re.split(r"(?<!\\)\|", line)) if kind == "table" else None
        width = (width or cells) if cells else None
        assert cells == width, line
    assert_tables_as_github_reads_them("\n".join(lines) + "\n")


DELIMITER_ROW = re.compile(r"\|(\s*:?-+:?\s*\|)+")


class HtmlTables(html.parser.HTMLParser):
    """The tables of an HTML document: each a list of rows, each row a list of cell texts."""

    def __init__(self):
        super().__init__()
        self.tables, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self.cell).strip())
            self.cell = None


def html_tables(document):
    parser = HtmlTables()
    parser.feed(document)
    return parser.tables


def assert_tables_as_github_reads_them(markdown):
    """Parse the Markdown as GitHub does (cmark-gfm) and assert that every table the source
    starts is a table of its own, with the source's header, no row that is another table's
    header or delimiter, and every source row as wide as its header (GitHub would pad or cut
    it silently)."""
    import cmarkgfm  # test-only dependency: GitHub's own CommonMark+GFM parser
    lines, fenced = markdown.splitlines(), False
    for i, line in enumerate(lines):  # a table in a code block is text
        fenced ^= line.startswith("```")
        lines[i] = "" if fenced or line.startswith("```") else line
    starts = [i for i, line in enumerate(lines) if DELIMITER_ROW.fullmatch(line.strip())]
    tables = html_tables(cmarkgfm.github_flavored_markdown_to_html(markdown))
    assert len(tables) == len(starts), (len(tables), [lines[i - 1] for i in starts])
    for start, table in zip(starts, tables):
        header = [c.strip() for c in re.split(r"(?<!\\)\|", lines[start - 1].strip())[1:-1]]
        assert len(table[0]) == len(header), (table[0], header)
        end = start + 1
        while end < len(lines) and lines[end].startswith("|"):
            cells = re.split(r"(?<!\\)\|", lines[end].strip())[1:-1]
            assert len(cells) == len(header), (lines[end], header)
            end += 1
        assert len(table) == end - start  # the header and every row, nothing more
        for row in table[1:]:
            assert not DELIMITER_ROW.fullmatch("|" + "|".join(row) + "|"), row
            assert row != table[0], row


def windows_of(p95s, rate=100.0):
    return tuple(PhaseWindow(10 * i, 10, 0, 0.1 * i, 0.1, p95 / 2, p95, rate)
                 for i, p95 in enumerate(p95s))


def gpu_reading(temp, sclk, power, util, used):
    return {"used_mib": {"card0": used}, "devices": {"card0": {
        "temp_c": temp, "temp_sensor": "junction", "sclk_mhz": sclk, "mclk_mhz": 1600.0,
        "power_w": power, "util_pct": util, "used_mib": used}}}


def suspect_rounds(folder):
    """Three rounds of two passes with router CPU, foreign vCPUs, GPU state and time series:
    r2's gpu router shares its CPUs (1.4 vCPUs of others) on a powersave governor, and its
    Conc 4 pass has a slow phase (window 4: p95 40 against a median of 15)."""
    for number in (1, 2, 3):
        for side, cpu_ms in (("cpu", 3.0), ("gpu", 1.0 * number)):
            odd = side == "gpu" and number == 2
            make_run(
                folder / f"r{number}-{side}.json", label=side, started_unix=10.0 * number
                + 5 * (side == "gpu"), passes={1: (10, 20, 30, 100), 4: (12, 25, 40, 300)},
                router_cpu={c: RouterCpu(0.1, cpu_ms * c, "0-11", 1.0, 2.0,
                                            1.4 if odd else 0.25 + 0.05 * c) for c in (1, 4)},
                windows={1: windows_of([15, 16, 14, 15]),
                         4: windows_of([15, 15, 15, 40] if odd else [15, 15, 16, 15])},
                environment={"gpu": {"tool": "rocm-smi",
                                     "before": gpu_reading(40.0 + number, 800.0, 91.0, 0.0, 512.0),
                                     "after": gpu_reading(48.5, 2100.0, 300.0, 100.0, 520.0)}}
                if side == "gpu" else None,
                host_settings={"driver": {"cpus": "0-1", "governors": {
                    "powersave" if odd else "performance": "0-1"}, "boost": {}}})


def answer_with_head(head_lines, body=OK, status=b"200 OK"):
    return b"HTTP/1.1 %s\r\n%s\r\n\r\n%s" % (status, b"\r\n".join(head_lines), body)


HOSTILE = ["line\nbreak", "carriage\rreturn", "nul\x00byte", "esc\x1b[31mred", "c1\x85next",
           "sep\u2028line", "tab\there", "@octocat", "fixes #123", "del\x7fchar",
           "rtl\u202eevil", "alm\u061cmark", "isolate\u2067x", "tag\U000e0041hidden",
           "zero\u200bwidth", "bom\ufeffhere", "soft\u00adhyphen", "mongolian\u180evs"]


def shown_raw(text: str) -> list:
    """The characters of text a terminal would act on or hide, by Unicode category: controls,
    format characters (bidi marks, zero-width, tags), surrogates, line/paragraph separators."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


HASH = "c" * 64


def default_route_server(scripted, unmatched):
    """A router that matches no decision for the prompts in `unmatched`."""
    def answer(prompt, number):
        name = "" if prompt in unmatched else "math"
        body = json.dumps({"original_text": prompt, "decision_result": {
            "decision_name": name, "used_signals": {}, "matched_signals": {}},
            "config_hash": HASH}).encode()
        return [final_answer(body)]
    return scripted(answer)


def rounds_folder(folder, labels):
    """Three rounds of cpu and rocm; labels(number, side) names each run."""
    folder.mkdir(exist_ok=True)
    for number in (1, 2, 3):
        for side, p50 in (("cpu", 10.0), ("rocm", 5.0 + number)):
            make_run(folder / f"r{number}-{side}.json", label=labels(number, side),
                     passes={1: (p50, p50 * 2, p50 * 3, 1000 / p50)},
                     started_unix=1000.0 * number + 500 * (side == "rocm"))
    return folder


def plain_rounds(folder):
    """Three rounds of cpu and gpu, alike, with nothing but the default pass; return the
    folder (made here)."""
    folder.mkdir()
    for n in (1, 2, 3):
        make_run(folder / f"r{n}-cpu.json", label="cpu", started_unix=10.0 * n)
        make_run(folder / f"r{n}-gpu.json", label="gpu", started_unix=10.0 * n + 3)
    return folder


def exchange(url, method, path, body=b"", headers=None):
    """Return (status, headers with lower-case names, body) of one request."""
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body, headers or {})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


ASK = json.dumps({"model": "MoM", "messages": [{"role": "user", "content": "hello"}],
                  "preview_context": {"sampling_seed": 0}}).encode()


def mark_cached(path):
    document = json.loads(Path(path).read_text())
    document["result_cache"] = {"detected": True, "metrics": {"hits": 50.0, "lookups": 60.0},
                                "timing": None}
    Path(path).write_text(json.dumps(document))


def length_passes(lengths, slow=None, size=10):
    """Three passes (1, 4, 16 callers) of prompts whose latency is 2 ms + 1 ms per 100
    characters, sent in corpus order; slow = (pass index, window index, factor) multiplies
    one window's latencies, as a node that slowed down for a while."""
    passes = []
    for k in range(3):
        start, requests = 0.0, []
        for i, length in enumerate(lengths):
            latency = (2.0 + length / 100) * (1 + 0.3 * k)
            if slow and slow[0] == k and i // size == slow[1]:
                latency *= slow[2]
            requests.append(Request(i, round(start, 4), latency, 200, "d", None))
            start += latency
        requests = tuple(requests)
        attempt = Attempt(None, None, "", None, {}, None, {},
                             pass_summary(requests, start / 1000), requests,
                             windows=phase_windows(requests, size))
        passes.append(PassRecord(pass_name(4 ** k), 4 ** k, False, False, attempt))
    return passes


# the corpus's order: short prompts, then the boundary cases, long ones last
LENGTHS = [40 + (i * 37) % 200 for i in range(110)] + [2500, 54612, 9000, 3000, 5000, 2600,
                                                       8000, 4000, 2500, 7000]


THRESHOLDS = Thresholds(10, 2.0, 0.5, 1.0)


PROMPTS = [f"prompt number {i}" for i in range(12)]


# the sampled-selection runs send each prompt twice (--repeat 2) at no simulated delay: from
# CACHE_MIN_PROMPTS prompts sent twice on, timing judges a result cache, and the second
# sendings of a loaded machine's quieter moment answered in under half the first's time on
# one side: "not measured alike: cache". One prompt fewer, and no cache finding by construction
SAMPLED = PROMPTS[:CACHE_MIN_PROMPTS - 1]


N = len(SAMPLED)


def run_sampled(cli, router, tmp_path, name, prompts=SAMPLED):
    corpus = write_corpus(tmp_path / "corpus.json", prompts)
    out = tmp_path / f"{name}.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label",
                 name, "-c", "1", "--repeat", "2", "--warmup", "0", "--quiet")
    assert result.code == 0, result.err
    return out


def run_with(tmp_path, *, errors=None, complete=True, passes=None):
    return load_run(make_run(tmp_path / "r.json", errors=errors, complete=complete,
                                passes=passes))


def preview_answer(text="What is the derivative of x squared?", **changes):
    """An answer shaped as the router's preview answer, over WHOLE_JSON_BYTES long."""
    answer = {"original_text": text, "requested_model": "MoM",
              "decision_result": {"decision_name": "math", "used_signals": {"keywords": ["m"]}},
              "recommended_models": ["qwen3"], "selected_model": "qwen3",
              "routing_decision": "math",
              "metrics": {name: {"execution_time_ms": 1.25, "confidence": 0.5}
                          for name in ("keyword", "embedding", "domain", "fact_check", "pii",
                                       "language", "context", "complexity", "authz")},
              "config_hash": "0" * 64}
    answer.update(changes)
    body = json.dumps(answer, separators=(",", ":")).encode()
    assert len(body) > WHOLE_JSON_BYTES
    return body


def not_one_document():
    """Answers over WHOLE_JSON_BYTES whose decision reads well but which are not one JSON
    document past it: what Go's decoder refuses."""
    good = preview_answer()
    at = good.index(b',"metrics"')
    return {
        "two documents": good + b"\n" + good + b"\n",  # a handler that encodes twice
        "broken past the decision": good[:-1] + b',"x":tru}',
        "a brace too many": good + b"}",
        "a trailing comma": good[:-1] + b",}",
        "a missing comma": good[:at] + b' "y":1' + good[at:],
        "an unterminated string": good[:-1] + b',"x":"unterminated}',
        "a leading zero": good[:-1] + b',"x":01}',
        "a NUL after it": good + b"\x00",
        "a bracket left open": good[:-1] + b',"x":[1,2}',
        "a key without quotes": good[:-1] + b",x:1}",
        "a raw control in a string": good[:-1] + b',"x":"a\tb"}',
        "metrics broken inside": good.replace(b'"confidence":0.5}', b'"confidence":0.5', 1),
    }
