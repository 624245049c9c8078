#!/usr/bin/env python3
"""The driver's peak memory: answers larger than the body limit, a pass of distinct bodies, and
a corpus of many tiny prompts.

Starts a loopback HTTP server in its own process (127.0.0.1, port 0) whose preview answers are
  length   10 MiB with a Content-Length (refused at the head: over the 8 MiB limit),
  chunked  10 MiB chunked in 64 KiB chunks, as a server flushing as it writes sends them,
  onechunk 10 MiB in a single chunk,
  distinct 6 KB bodies, a different one for every prompt, each with a decision;
(a GET, and the readiness check's "hello", get a small answer), runs `router_latency.py run`
once per case in a second process and prints that process's peak RSS (wait4's ru_maxrss).
The large answers go at concurrency 16 over 64 prompts; the distinct bodies at concurrency 16
over 1,000 and 5,000 prompts, and the difference is shown per 1,000 requests. The corpus case
(`--case corpus`) writes corpora of 100,000 and 1,000,000 prompts of a few characters
("p123456", 65 bytes a prompt in the file) and prints the peak RSS of `run --check` on each
(what reading the corpus takes; the tool alone, on a corpus of one prompt, beside it), and of
a whole pass at concurrency 16 over 100,000 and 200,000 of them (small answers).

    python3 bench/driver_memory.py [--tool PATH/TO/router_latency.py] [--case NAME ...]

--tool measures another copy of the driver (an older one, say) with the same servers. Not a
test: it prints figures and asserts nothing.
"""

import argparse
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from router_latency.corpus import corpus_bytes, CORPUS_SCHEMA

MIB = 1024 * 1024
SMALL = b'{"decision_result": {"decision_name": "ok"}}'


def answer(mode: str, prompt: str) -> list:
    """Return the pieces of the answer to one preview."""
    if mode in ("distinct", "small") or prompt == "hello":
        body = json.dumps({"decision_result": {"decision_name": "ok"},
                           "padding": (prompt + " ") * (6000 // (len(prompt) + 1))}).encode() \
            if mode == "distinct" else SMALL
        return [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)]
    if mode == "length":
        return [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (10 * MIB), BIG]
    size = 64 * 1024 if mode == "chunked" else 10 * MIB
    chunk = b"%x\r\n%s\r\n" % (size, b"x" * size)
    return [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            chunk * (10 * MIB // size), b"0\r\n\r\n"]


BIG = b"x" * (10 * MIB)


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    return
                length = 0
                while (header := self.rfile.readline(65537)) not in (b"\r\n", b""):
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":")[1])
                body = json.loads(self.rfile.read(length)) if length else {}
                prompt = body.get("messages", [{}])[0].get("content", "hello")
                for piece in answer(self.server.mode, prompt):
                    self.wfile.write(piece)
        except OSError:
            return  # the driver closed a connection whose answer was too large


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True


def serve(mode: str) -> None:
    server = Server(("127.0.0.1", 0), Handler)
    server.mode = mode
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


def peak_rss_mib(tool: str, url: str, corpus: Path, work: Path) -> tuple:
    """Run the driver once at concurrency 16; return (peak RSS MiB, its first pass summary)."""
    out = work / "run.json"
    if out.exists():
        out.unlink()
    process = subprocess.Popen([sys.executable, tool, "run", "--url", url, "--corpus",
                                str(corpus), "--out", str(out), "--label", "mem",
                                "--concurrency", "16", "--warmup", "0", "--gpu", "none",
                                "--quiet", "--max-errors", "1000000", "--timeout", "60"])
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{tool} run exited {os.waitstatus_to_exitcode(status)}")
    summary = json.loads(out.read_text())["passes"][0]["summary"]
    return usage.ru_maxrss / 1024, summary


def check_rss_mib(tool: str, corpus: Path, work: Path) -> float:
    """Return the peak RSS MiB of `run --check` on a corpus: the corpus read, nothing sent."""
    process = subprocess.Popen([sys.executable, tool, "run", "--check", "--url",
                                "http://127.0.0.1:9", "--corpus", str(corpus), "--out",
                                str(work / "checked.json"), "--label", "mem", "--quiet"])
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tool} run --check exited {os.waitstatus_to_exitcode(status)}")
    return usage.ru_maxrss / 1024


def tiny_corpus(work: Path, count: int) -> Path:
    """Write a corpus of `count` tiny prompts, in a process of its own: a child started by a
    process that held the million prompts would report that process's peak as its own (Linux
    counts the memory a fork copied in ru_maxrss)."""
    path = work / f"tiny-{count}.json"
    if not path.exists():
        subprocess.run([sys.executable, __file__, "--tiny", str(count), str(path)], check=True)
    return path


def write_tiny(count: int, path: str) -> None:
    Path(path).write_bytes(corpus_bytes({"schema": CORPUS_SCHEMA, "source": {}, "files": {},
                                         "prompts": [{"id": i, "text": f"p{i}", "source": "b"}
                                                     for i in range(count)]}))


def measure_corpus(tool: str, work: Path) -> None:
    """Print the peak RSS of reading corpora of tiny prompts, and of a pass over them."""
    alone = check_rss_mib(tool, tiny_corpus(work, 1), work)
    print(f"corpus         1 prompt:  run --check peak RSS {alone:7.1f} MiB (the tool alone)")
    for count in (100_000, 1_000_000):
        path = tiny_corpus(work, count)
        size = path.stat().st_size / MIB
        rss = check_rss_mib(tool, path, work)
        print(f"corpus {count:>9,} prompts ({size:.1f} MiB): run --check peak RSS {rss:7.1f} MiB"
              f", {rss / size:.1f} times the file, {(rss - alone) / size:.1f} times beyond the "
              f"tool alone ({(rss - alone) * MIB / count:,.0f} bytes a prompt)")
    server = subprocess.Popen([sys.executable, __file__, "--serve", "small"],
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        rows = [(count, *peak_rss_mib(tool, url, tiny_corpus(work, count), work))
                for count in (100_000, 200_000)]
    finally:
        server.terminate()
        server.wait()
    for count, rss, summary in rows:
        print(f"pass   {count:>9,} prompts, concurrency 16: peak RSS {rss:7.1f} MiB (ok "
              f"{summary['ok']})")
    per_prompt = (rows[1][1] - rows[0][1]) * MIB / (rows[1][0] - rows[0][0])
    print(f"pass   growth: {per_prompt:,.0f} bytes a prompt; 1,000,000 prompts about "
          f"{rows[0][1] + per_prompt * (1_000_000 - rows[0][0]) / MIB:,.0f} MiB")


def corpus_of(work: Path, count: int) -> Path:
    path = work / f"corpus-{count}.json"
    prompts = [{"id": i, "text": f"prompt {i}", "source": "bench"} for i in range(count)]
    path.write_bytes(corpus_bytes({"schema": CORPUS_SCHEMA, "source": {}, "files": {},
                                      "prompts": prompts}))
    return path


def measure(tool: str, mode: str, counts: list, work: Path) -> list:
    server = subprocess.Popen([sys.executable, __file__, "--serve", mode],
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        return [(count, *peak_rss_mib(tool, url, corpus_of(work, count), work))
                for count in counts]
    finally:
        server.terminate()
        server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", default=str(ROOT / "router_latency.py"))
    parser.add_argument("--case", action="append",
                        choices=("length", "chunked", "onechunk", "distinct", "corpus"))
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--tiny", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tiny:
        write_tiny(int(args.tiny[0]), args.tiny[1])
        return 0
    if args.serve:
        serve(args.serve)
        return 0
    work = Path(tempfile.mkdtemp(prefix="router-latency-memory-"))
    print(f"driver {args.tool}, Python {sys.version.split()[0]}, {socket.gethostname()}")
    for mode in args.case or ("length", "chunked", "onechunk", "distinct", "corpus"):
        if mode == "corpus":
            measure_corpus(args.tool, work)
            continue
        counts = [1000, 5000] if mode == "distinct" else [64]
        rows = measure(args.tool, mode, counts, work)
        for count, rss, summary in rows:
            print(f"{mode:<9} {count:>5} requests, concurrency 16: peak RSS {rss:7.1f} MiB  "
                  f"(ok {summary['ok']}, errors {summary['errors']})")
        if len(rows) == 2:
            per_1000 = (rows[1][1] - rows[0][1]) / ((rows[1][0] - rows[0][0]) / 1000)
            print(f"{mode:<9} growth: {per_1000:+.2f} MiB per 1,000 requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
