"""Shared fixtures: real loopback servers on port 0, the CLI called in-process, run files."""

import json
import socket
import socketserver
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import router_latency as rl  # noqa: E402

TOOL = ROOT / "router_latency.py"

# the property tests (hypothesis) of test_stats.py and test_corpus.py; no deadline, since
# a loaded machine is slow without the code being wrong
SETTINGS = settings(max_examples=150, deadline=None)


class Result(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Call main() with the given arguments; return exit code, stdout and stderr."""
    def call(*argv):
        code = rl.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return Result(code, out, err)
    return call


@pytest.fixture
def simulator():
    """Start simulated routers on 127.0.0.1, port 0; all stopped after the test."""
    routers = []

    def start(**options):
        router = rl.start_simulator("127.0.0.1", 0, **options)
        routers.append(router)
        return router

    yield start
    for router in routers:
        router.stop()


def write_corpus(path, texts):
    """Write a corpus file of the given prompts through the tool's own encoder."""
    document = {"schema": rl.CORPUS_SCHEMA, "source": {"repo": "test"}, "files": {},
                "prompts": [{"id": i, "text": t, "source": "test"} for i, t in enumerate(texts)]}
    Path(path).write_bytes(rl.corpus_bytes(document))
    return str(path)


def make_run(path, *, label="x", sha="a" * 64, count=3, passes=None, decisions=None,
             complete=True, discarded=(), errors=None, started="2026-01-01T00:00:00Z",
             started_unix=None, environment=None, load=None, driver_cpu_s=None):
    """Write a valid run file with given summary figures, through the tool's own writer.

    passes: {concurrency: (p50, p95, p99, req_per_s)}; decisions: list per prompt id;
    errors: {kind: count}, given to the last requests of each pass; environment, load,
    driver_cpu_s: recorded as is in every measured pass. The figures are taken as given, not
    computed from the requests; the counts follow from the requests.
    """
    passes = passes or {1: (10.0, 12.0, 13.0, 100.0)}
    decisions = decisions or ["d"] * count
    records = []
    for concurrency, (p50, p95, p99, rps) in passes.items():
        name = rl.pass_name(concurrency)
        if concurrency in discarded:
            attempt = rl.Attempt(None, None, started, started_unix,
                                 {"start": 150.0, "end": 150.0}, None, {}, None, ())
            records.append(rl.PassRecord(name, concurrency, True, False, attempt))
            continue
        attempt = rl.Attempt(None, None, started, started_unix, load or {}, driver_cpu_s,
                             environment or {}, None, failed_last(decisions, p50, errors))
        summary = rl.PassSummary(**rl.count_outcomes(attempt.requests), p50_ms=p50,
                                 p95_ms=p95, p99_ms=p99, mean_ms=p50, min_ms=p50, max_ms=p99,
                                 req_per_s=rps, wall_s=count / rps)
        records.append(rl.PassRecord(name, concurrency, False, False,
                                     attempt._replace(summary=summary)))
    run = rl.RunFile(label, complete, {"path": "c.json", "sha256": sha, "count": count},
                     tuple(records), started_utc=started, started_unix=started_unix,
                     settings={"max_load": 120.0})
    rl.write_atomic(str(path), rl.dump_run(run))
    return str(path)


def failed_last(decisions, latency_ms, errors):
    """Return one request per decision, the last ones failed with the given error kinds."""
    kinds = [kind for kind, n in (errors or {}).items() for _ in range(n)]
    ok = len(decisions) - len(kinds)
    return tuple(rl.Request(i, None, latency_ms, 200, d, None) if i < ok
                 else rl.Request(i, None, latency_ms, 500, None, kinds[i - ok])
                 for i, d in enumerate(decisions))


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
        if path != rl.PREVIEW_PATH:
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
            self.send(200, b" " * (rl.MAX_BODY_BYTES + 10))
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
