"""Faults from the router and from the disk: every request accounted, no measurement lost."""

import json
import os
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import router_latency as rl
from conftest import write_corpus

DATA = Path(__file__).resolve().parent / "data"
OK_BODY = json.dumps({"decision_result": {"decision_name": "ok"}}).encode()


class RestartingRouter:
    """A loopback router that, on the prompt 'die', resets every connection as a crashed and
    restarted router process would, its port staying open (as a container's published port
    does); on 'die forever' it also closes the port."""

    def __init__(self):
        self.lock = threading.Lock()
        self.connections = set()
        self.stopped = threading.Event()
        self.listener = self.listen(0)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.accept_loop, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def listen(self, port):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        listener.settimeout(0.05)
        return listener

    def accept_loop(self):
        deadline = time.monotonic() + 60
        while not self.stopped.is_set() and time.monotonic() < deadline:
            listener = self.listener
            if listener is None:
                time.sleep(0.01)
                continue
            try:
                connection, _ = listener.accept()
            except OSError:
                continue
            with self.lock:
                self.connections.add(connection)
            threading.Thread(target=self.serve, args=(connection,), daemon=True).start()

    def serve(self, connection):
        try:
            connection.settimeout(5)  # may already be closed by a 'die' on another thread
            reader = connection.makefile("rb")
            while True:
                line = reader.readline()
                if not line:
                    return
                length = 0
                while True:
                    header = reader.readline()
                    if header in (b"\r\n", b""):
                        break
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":")[1])
                body = reader.read(length)
                prompt = json.loads(body)["messages"][0]["content"] if length else ""
                if prompt.startswith("die"):
                    self.die(forever=prompt == "die forever")
                    return
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                                   % (len(OK_BODY), OK_BODY))
        except (OSError, ValueError):
            return

    def die(self, forever):
        with self.lock:
            if forever:  # the port first, so that no reconnect slips in before it closes
                listener, self.listener = self.listener, None
                listener.shutdown(socket.SHUT_RDWR)  # closes the port even while accept() waits
                listener.close()
            for connection in self.connections:
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      b"\x01\x00\x00\x00\x00\x00\x00\x00")
                try:
                    connection.close()
                except OSError:
                    pass
            self.connections.clear()

    def stop(self):
        self.stopped.set()
        self.thread.join(2)
        if self.listener is not None:
            self.listener.close()


@pytest.fixture
def restarting_router():
    routers = []

    def start(**options):
        routers.append(RestartingRouter(**options))
        return routers[-1]

    yield start
    for router in routers:
        router.stop()


def test_router_restarting_mid_pass_later_requests_succeed_on_new_connections(
        restarting_router, tmp_path, cli):
    router = restarting_router()
    texts = [f"prompt {i}" for i in range(10)] + ["die"] + [f"later {i}" for i in range(30)]
    corpus = write_corpus(tmp_path / "corpus.json", texts)
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1,4", "--warmup", "0")
    assert result.code == 1 and "Traceback" not in result.err
    for item in json.loads(out.read_text())["passes"]:
        by_text = {texts[r["id"]]: r for r in item["requests"]}
        summary = item["summary"]
        assert summary["requests"] == len(texts)
        assert summary["ok"] + sum(summary["errors"].values()) == len(texts)
        assert by_text["die"]["error"] == "reset"
        # the dying request, and at most one on each other worker's dead connection
        assert summary["errors"]["reset"] <= item["concurrency"]
        assert set(summary["errors"]) == {"reset"}
        # after the restart every worker reconnected: the last prompts all succeeded
        assert all(by_text[f"later {i}"]["error"] is None for i in range(20, 30))
    assert "errors in Sequential: reset 1" in result.out


def test_router_dying_for_good_fails_the_rest_of_the_pass_but_keeps_the_file(
        restarting_router, tmp_path, cli):
    router = restarting_router()
    texts = ["one", "two", "die forever", "three", "four"]
    corpus = write_corpus(tmp_path / "corpus.json", texts)
    out = tmp_path / "run.json"
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--warmup", "0")
    assert result.code == 1
    item = json.loads(out.read_text())["passes"][0]
    assert [r["error"] for r in item["requests"]] == [None, None, "reset", "connect", "connect"]
    assert item["summary"]["errors"] == {"connect": 2, "reset": 1}
    assert "errors in Sequential: connect 2, reset 1" in result.out


def test_wrong_path_says_which_url_was_used(fault_server, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["hello"])
    url = fault_server.url + "/api/v1/route/preview"
    result = cli("run", "--url", url, "--corpus", corpus, "--out", tmp_path / "run.json",
                 "--label", "x", "--concurrency", "1", "--warmup", "0")
    assert result.code == 1
    assert (f"router-latency: 1 requests answered 404 Not Found at {url}: is the path right? "
            f"(a URL without a path gets /api/v1/routing/preview)") in result.err


class TLSRouter(ThreadingHTTPServer):
    daemon_threads = True


class TLSHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(OK_BODY)))
        self.end_headers()
        self.wfile.write(OK_BODY)


@pytest.fixture
def tls_router():
    server = TLSRouter(("127.0.0.1", 0), TLSHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(DATA / "localhost.crt", DATA / "localhost.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_https_certificates_are_verified_by_default(tls_router, tmp_path, cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["hello"])
    out = tmp_path / "run.json"
    result = cli("run", "--url", tls_router, "--corpus", corpus, "--out", out, "--label", "x")
    assert result.code == 2 and not out.exists()
    assert "TLS failed: self-signed certificate" in result.err or \
        "TLS failed: self signed certificate" in result.err
    assert "--insecure skips the certificate check" in result.err


def test_insecure_is_recorded_and_rounds_says_so(tls_router, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(DATA / "localhost.crt"))
    corpus = write_corpus(tmp_path / "corpus.json", ["hello", "world"])
    for number in (1, 2):
        for side in ("cpu", "gpu"):
            out = tmp_path / f"r{number}-{side}.json"
            extra = ["--insecure"] if side == "gpu" else []
            assert cli("run", "--url", tls_router, "--corpus", corpus, "--out", out, "--label",
                       side, "--concurrency", "1", "--warmup", "0", "--quiet", *extra).code == 0
    assert json.loads((tmp_path / "r1-gpu.json").read_text())["insecure"] is True
    assert json.loads((tmp_path / "r1-cpu.json").read_text())["insecure"] is False
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert ("warning: TLS certificates were not verified (--insecure) in r1-gpu.json, "
            "r2-gpu.json") in result.out


def test_https_run_with_a_trusted_certificate(tls_router, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(DATA / "localhost.crt"))
    corpus = write_corpus(tmp_path / "corpus.json", ["hello"])
    out = tmp_path / "run.json"
    assert cli("run", "--url", tls_router, "--corpus", corpus, "--out", out, "--label", "x",
               "--concurrency", "1", "--quiet").code == 0
    assert json.loads(out.read_text())["passes"][0]["summary"]["ok"] == 1


def test_a_full_disk_leaves_the_previous_file_and_rescues_the_measurements(
        simulator, tmp_path, cli, monkeypatch):
    router = simulator(delay_ms=0)
    corpus = write_corpus(tmp_path / "corpus.json", ["hello"])
    out = tmp_path / "run.json"
    out.write_text("previous run")
    rescue_dir = tmp_path / "rescue"
    rescue_dir.mkdir()
    monkeypatch.setattr(rl.tempfile, "tempdir", str(rescue_dir))
    real_fsync = os.fsync

    def full_disk(fd):
        if os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")) == str(tmp_path):
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(rl.os, "fsync", full_disk)
    result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out, "--label", "x",
                 "--concurrency", "1", "--force")
    assert result.code == 2
    assert out.read_text() == "previous run"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.json")] == []
    rescued = list(rescue_dir.glob("router-latency-run-*.json"))
    assert len(rescued) == 1
    assert json.loads(rescued[0].read_text())["passes"][0]["summary"]["ok"] == 1
    assert result.err.splitlines()[-1] == (
        f"router-latency: error: cannot write: No space left on device; any previous file is "
        f"untouched ({out}); the measurements were saved to {rescued[0]}")


def test_write_atomic_on_a_read_only_folder(tmp_path, monkeypatch):
    target = tmp_path / "file.json"
    target.write_text("old")

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(rl.tempfile, "mkstemp", read_only)
    with pytest.raises(rl.RouterLatencyError, match="cannot write: Read-only file system"):
        rl.write_atomic(str(target), b"new")
    assert target.read_text() == "old"
