"""Shared fixtures and helpers: simulated routers on port 0, the CLI called in-process, corpus
and run files written by the tool's own writers, and what several test files use: the bad-file
table, two compared runs, a folder of three rounds, a scripted loopback server whose answers a
test writes byte by byte."""

import atexit
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
from hypothesis import settings

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

TOOL = ROOT / "router_latency.py"


def compiled_tool():
    """Return the tool byte-compiled once for this test session, in a folder of its own.
    `python router_latency.pyc ARGS` runs the same code as `python router_latency.py ARGS`
    (tracebacks name the .py), without compiling 11,000 lines again: 0.2 s of CPU in each of
    the suite's few hundred processes of the tool, run as a script (never cached). Tests
    of how a user starts the file (the README's commands, the module alone) use TOOL."""
    folder = tempfile.mkdtemp(prefix="router-latency-tool-")
    atexit.register(shutil.rmtree, folder, True)
    return Path(py_compile.compile(str(TOOL), cfile=str(Path(folder) / "router_latency.pyc"),
                                   dfile=str(TOOL), doraise=True))


TOOL_PYC = compiled_tool()

# run_rounds.sh looks at a started router, a run and a stopping side every 100 ms: a tenth of a
# second lost at each of some thirty waits of a three-round run, most of a test's wall time on a
# quiet machine. The tests' drivers look every 20 ms (processes started without an env of their
# own inherit it; the tests' env dicts name POLL_ENV)
POLL_ENV = {"RUN_ROUNDS_POLL_MS": "20"}
os.environ.update(POLL_ENV)

# A shell without job control starts a background job (`pytest &`, a CI step's `cmd &`) with
# SIGINT ignored, and every process it starts inherits that: a tool process interrupted by a
# test then never saw the SIGINT, or a driver could not trap it. The tests send SIGINT as a
# terminal would, so they run as from one.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# the property tests (hypothesis) of test_stats.py and test_corpus.py; no deadline, since
# a loaded machine is slow without the code being wrong
SETTINGS = settings(max_examples=150, deadline=None)


def pytest_collection_modifyitems(items):
    """Deal the tests that run real processes (marked `process`: seconds each, the rest
    milliseconds) out first, so that the workers end together on short tests instead of one
    finishing a long one alone at the end (xdist hands tests out in this order)."""
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
