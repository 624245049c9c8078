#!/usr/bin/env python3
"""The driver's cost per request in instructions: one pass over a replayed stream of answers.

Counts with `valgrind --tool=callgrind` (instructions, the same on every run whatever else the
machine does) what one pass of a build of router_latency.py costs per request: the pass loop
with its parser and classification, and the records made of its results (measure_pass). A
replay server, another process that valgrind does not trace, answers each request of a
connection with the next answer of a recorded stream of real-shaped answers:

  cl100   about 100 bytes with a Content-Length (a small answer, as nginx's null target sends)
  cl3k    the router's preview answer, about 2.7 KB, with a Content-Length
  ch100   the small answer, chunked
  ch3k    the preview answer chunked as Go's net/http sends a body over 2 KB: one chunk and the
          last chunk, head and body in one write
  null    nginx's fixed answer of bench/driver_overhead.py's null target, the same every time
  router  the answer of bench/driver_overhead.py --signals (1.4 KB, 20 signals listed, 3 of
          them evaluated, with a Content-Length as nginx sends it), its times and request id
          different in every answer

Every answer of the first four differs from every other (original_text, the per-signal
execution_time_ms and confidence, as the router's do), so no cache keyed by the body can hit. Each count is the
difference of two passes, of --requests N1,N2 requests, divided by N2 - N1: what starting
Python, importing the module and opening the connections cost drops out.

    python3 bench/driver_instructions.py [BUILD.py ...] [--streams cl100,ch3k]
        [--concurrency 1,16] [--requests 100,600] [--signals] [--no-settle]
        [--profile | --annotate]

A build is a router_latency.py file (default: this checkout's; `git show REV:router_latency.py
> /tmp/REV.py` for another), or `bare`: the floor, a bare CPython epoll send/recv loop that
only frames the answers (bare_pass). --profile prints where the time of one pass of a build goes by
function (cProfile, calls and own time per request), per stream; --annotate the instructions
per request by C function of the interpreter (callgrind_annotate). Not a test: it prints figures
and asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import importlib.util
import itertools
import json
import os
import pstats
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STREAMS = ("cl100", "cl3k", "ch100", "ch3k", "null", "router")
CONFIG_HASH = "3f0c2d9a7b1e4c5d6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6"
SIGNALS = ("keyword", "embedding", "domain", "fact_check", "user_feedback", "reask",
           "preference", "language", "context", "structure", "complexity", "modality", "authz",
           "jailbreak", "safety", "pii", "kb", "conversation", "event", "metadata", "classifier",
           "input_modality")  # the router's SignalMetricsCollection, in its order
CONFIDENCES = ("keyword:math_keywords", "keyword:code_keywords", "embedding:math_topics",
               "embedding:code_topics", "domain:math", "domain:physics",
               "domain:computer_science", "domain:other", "language:en", "complexity:low",
               "complexity:high", "structure:many_questions", "preference:concise",
               "modality:text", "jailbreak:default", "pii:default")


def number(value: float):
    """A figure as Go's encoding/json writes it: 1 for 1.0."""
    return int(value) if value == int(value) else value


def preview_body(text: str, n: int) -> bytes:
    """The router's preview answer byte for byte as bench/go_router sends its n-th (from 1):
    the fields in the router's order, per-signal times and confidences that differ per
    request, a trailing newline."""
    answer = {
        "original_text": text, "requested_model": "MoM",
        "decision_result": {
            "decision_name": "math", "algorithm": "priority", "plugins": ["semantic-cache"],
            "used_signals": {"keywords": ["math_keywords"], "embeddings": ["math_topics"],
                             "domains": ["math"], "languages": ["en"], "complexity": ["low"]},
            "matched_signals": {"keywords": ["math_keywords"], "domains": ["math"],
                                "languages": ["en"]},
            "unmatched_signals": {"embeddings": ["math_topics"], "complexity": ["low"]}},
        "recommended_models": ["qwen3", "llama-3.1-8b"], "selected_model": "qwen3",
        "selection_status": "selected", "selection_method": "static",
        "selection_reason": "decision math prefers qwen3", "routing_decision": "math",
        "metrics": {name: {"execution_time_ms": number((n * 7919 + i * 104729) % 40000 / 1000),
                           "confidence": number((n * 31 + i * 17) % 10000 / 10000)}
                    for i, name in enumerate(SIGNALS)},
        "signal_confidences": dict(sorted(
            (name, number((n * 13 + i * 7) % 10000 / 10000)) for i, name in enumerate(CONFIDENCES))),
        "signal_values": {"structure:many_questions": n % 5},
        "signal_errors": {"fact_check:default": "classifier not loaded"},
        "config_hash": CONFIG_HASH}
    return json.dumps(answer, separators=(",", ":")).encode() + b"\n"


def router_body(n: int) -> bytes:
    """bench/driver_overhead.py's router answer, its three times and request id made n's."""
    from driver_overhead import ROUTER_ANSWER  # noqa: E402 - beside this script
    times = {"3.21": f"{3 + n % 997 / 1000:g}", "5.07": f"{5 + n % 991 / 1000:g}",
             "2.11": f"{2 + n % 983 / 1000:g}"}
    body = ROUTER_ANSWER.replace("$request_id", f"{n:032x}")  # as nginx's $request_id
    for old, new in times.items():
        body = body.replace(f'"execution_time_ms":{old}', f'"execution_time_ms":{new}')
    return body.encode()


def small_body(text: str, n: int) -> bytes:
    return json.dumps({"original_text": f"{text} #{n}", "decision_result": {
        "decision_name": "math"}, "selected_model": "qwen3"}, separators=(",", ":")).encode()


def answer_bytes(stream: str, n: int) -> bytes:
    """Answer n of a stream: the head as Go's net/http (or nginx) writes it, then the body."""
    if stream == "null":
        body = b'{"decision_result":{"decision_name":"math"},"selected_model":"qwen3"}'
        return (b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Tue, 01 Dec 2026 20:04:41 GMT"
                b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: "
                b"keep-alive\r\n\r\n" % len(body) + body)
    text = f"What is the derivative of x squared, case {n}?"
    if stream == "router":
        body = router_body(n)
        return (b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nContent-Type: application/json"
                b"\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n" % len(body) + body)
    body = small_body(text, n) if stream.endswith("100") else preview_body(text, n + 1)
    head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Vsr-Config-Hash: "
            f"{CONFIG_HASH}\r\nDate: Tue, 01 Dec 2026 20:04:41 GMT\r\n").encode()
    if stream.startswith("cl"):
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    return head + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(body) + body + \
        b"\r\n0\r\n\r\n"


def serve(stream: str) -> None:
    """Replay server: print the port, then answer every request with the stream's next
    answer (numbered across connections), until stdin closes."""
    numbers = itertools.count()
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)

    def connection(sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = b""
        with sock:
            while True:
                data = sock.recv(65536)
                if not data:
                    return
                buffer += data
                while (end := buffer.find(b"\r\n\r\n")) >= 0:
                    length = 0
                    for line in buffer[:end].split(b"\r\n"):
                        if line[:15].lower() == b"content-length:":
                            length = int(line[15:])
                    if len(buffer) < end + 4 + length:
                        break
                    buffer = buffer[end + 4 + length:]
                    sock.sendall(answer_bytes(stream, next(numbers)))

    def accept() -> None:
        while True:
            sock, _ = listener.accept()
            threading.Thread(target=connection, args=(sock,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    sys.stdin.read()


def load_build(path: str):
    spec = importlib.util.spec_from_file_location("router_latency_build", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def one_pass(module, url: str, requests: int, concurrency: int, encoded: int = 0) -> list:
    """Run measure_pass of a build once; return its request records. `encoded` requests are
    encoded before the pass (the driver does it before it measures), whatever the pass's
    length, so that their cost drops out of a difference of two passes."""
    endpoint = module.parse_endpoint(url)
    stop = threading.Event()
    texts = [f"What is the derivative of x squared, case {i}?"
             for i in range(max(requests, encoded))]
    if hasattr(module, "Target"):  # from the architecture change on
        # --signals: the per-signal times recorded, as `run` does by default (issue 20)
        recorded = ({"signals": module.SignalTable()}
                    if os.environ.get("RL_BENCH_SIGNALS") and hasattr(module, "SignalTable")
                    else {})
        target = module.Target(endpoint, **recorded)
        payloads = module.encode_prompts(target, texts)[:requests]
        plan = module.PassPlan("x", concurrency)
        if hasattr(module, "RunContext"):  # the measuring chain takes one context (issue 19)
            context = module.RunContext(target, module.RunPlan((plan,)), stop=stop,
                                        payloads=payloads)
            return module.measure_pass(context, plan, "x")[0]
        return module.measure_pass(target, payloads, plan, stop, module.Progress(False),
                                   "x")[0]
    settings = module.RunSettings(  # d10d1bf and before
        endpoint, (), "MoM", 30.0, 0, (concurrency,), module.DEFAULT_DECISION_PATHS, 1e9, 0,
        0.0, None, False, None)
    payloads = module.encode_prompts(settings, texts)[:requests]
    return module.measure_pass(settings, payloads, concurrency, stop, module.Progress(False),
                               "x")[0]


def bare_pass(url: str, requests: int, concurrency: int, payload: bytes = b"") -> list:
    """The floor of a Python pass loop: `concurrency` connections on select.epoll, a request
    sent, its answer read until a Content-Length or the last chunk says it is whole, two clock
    reads and a tuple per request. No parsing of the head beyond that, no checks, no
    classification: what any CPython driver of this shape pays before doing its job. `payload`:
    the request's bytes (default: a POST of `{}` to /api/v1/eval)."""
    host, port = url.split("//")[1].split(":")
    payload = payload or (b"POST /api/v1/eval HTTP/1.1\r\nHost: %s\r\nContent-Type: "
                          b"application/json\r\nContent-Length: 2\r\n\r\n{}" % host.encode())
    poller, by_fd, results, sent = select.epoll(), {}, [], 0
    perf = time.perf_counter_ns
    for _ in range(concurrency):
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        poller.register(sock.fileno(), select.EPOLLIN)
        by_fd[sock.fileno()] = [sock, b"", 0]
    for state in list(by_fd.values())[:requests]:
        state[2] = perf()
        state[0].send(payload)
        sent += 1
    while len(results) < requests:
        for fd, _ in poller.poll(1.0):
            now = perf()
            state = by_fd[fd]
            buffer = state[1] + state[0].recv(262144)
            end = buffer.find(b"\r\n\r\n")
            head = buffer[:end].lower()
            at = head.find(b"content-length:")
            whole = (len(buffer) >= end + 4 + int(head[at + 15:head.find(b"\r\n", at)]))\
                if at >= 0 else buffer.endswith(b"\r\n0\r\n\r\n")
            if end < 0 or not whole:
                state[1] = buffer
                continue
            results.append((state[2], now, buffer[9:12]))
            state[1] = b""
            if sent < requests:
                state[2] = perf()
                state[0].send(payload)
                sent += 1
    return results


def inner(build: str, url: str, requests: int, concurrency: int, encoded: int) -> None:
    if build == "bare":
        bare_pass(url, requests, concurrency)
        return
    module = load_build(build)
    if os.environ.get("RL_BENCH_NO_SETTLE"):  # the rest of the held answers left unread
        if hasattr(module, "AnswerBook"):  # the pass loop's answers apart (issue 30)
            module.AnswerBook.settle = lambda self: None
        elif hasattr(module.PassLoop, "_settle"):
            module.PassLoop._settle = lambda self: None
    records = one_pass(module, url, requests, concurrency, encoded)
    failed = [r for r in records if (r["error"] if isinstance(r, dict) else r.error)]
    if len(records) != requests or failed:
        sys.exit(f"{build}: {len(records)} records, {len(failed)} failed")


class Replay:
    """The replay server of one stream, in its own process."""

    def __init__(self, stream: str):
        self.process = subprocess.Popen([sys.executable, __file__, "--serve", stream],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        self.url = f"http://127.0.0.1:{self.process.stdout.readline().strip()}"

    def close(self) -> None:
        self.process.stdin.close()
        self.process.kill()
        self.process.wait(10)


def instructions(build: str, url: str, requests: tuple, concurrency: int, work: Path,
                 out_name: str = "callgrind.out") -> int:
    """Return the instructions callgrind counted for one pass of `requests` requests."""
    out = work / out_name
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    sys.executable, __file__, "--inner", build, url, str(requests[0]),
                    str(concurrency), str(requests[1])], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONHASHSEED": "0"})
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"no total in {out}")


def by_function(path: Path) -> collections.Counter:
    """Return the instructions of a callgrind output by function, their own (exclusive)."""
    listing = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100",
                              str(path)], capture_output=True, text=True, check=True).stdout
    counts: collections.Counter = collections.Counter()
    for line in listing.splitlines():
        match = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*?)(?: \[.*\])?$", line)
        if match and "PROGRAM TOTALS" not in line:
            counts[match.group(2).rsplit(":", 1)[-1]] += int(match.group(1).replace(",", ""))
    return counts


def annotate(build: str, streams: list, level: int, low: int, high: int, work: Path) -> None:
    """Print where the instructions of a request go: the C functions of the interpreter and
    its modules, the difference of the two passes per request (callgrind_annotate)."""
    for stream in streams:
        replay = Replay(stream)
        try:
            for n in (low, high):
                instructions(build, replay.url, (n, high), level, work, f"annotate-{n}.out")
        finally:
            replay.close()
        before, after = (by_function(work / f"annotate-{n}.out") for n in (low, high))
        change = {name: (after[name] - before[name]) / (high - low)
                  for name in set(before) | set(after)}
        print(f"\n{Path(build).name}, {stream}, concurrency {level}: {sum(change.values()):,.0f} "
              f"instructions per request, by function (own)")
        for name, count in sorted(change.items(), key=lambda item: -abs(item[1]))[:25]:
            print(f"  {count:9,.0f}  {name}")


def profile(build: str, streams: list, concurrency: int, requests: int) -> None:
    module = load_build(build)
    for stream in streams:
        replay = Replay(stream)
        try:
            one_pass(module, replay.url, 50, concurrency)  # connections, first calls
            profiler = cProfile.Profile()
            profiler.enable()
            one_pass(module, replay.url, requests, concurrency)
            profiler.disable()
        finally:
            replay.close()
        stats = pstats.Stats(profiler)
        rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:18]
        print(f"\n{stream}, concurrency {concurrency}, {requests} requests: own time and calls "
              f"per request, by function")
        for (file, line, name), (_, calls, own, _, _) in rows:
            where = f"{Path(file).name}:{line}" if line else file
            print(f"  {1e6 * own / requests:7.2f} us  {calls / requests:6.2f}  {name} ({where})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("builds", nargs="*", default=[str(ROOT / "router_latency.py")])
    parser.add_argument("--streams", default=",".join(STREAMS))
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--requests", default="100,600", help="N1,N2: two pass lengths")
    parser.add_argument("--profile", action="store_true",
                        help="profile the builds with cProfile instead of counting")
    parser.add_argument("--signals", action="store_true",
                        help="record the per-signal times, as run does unless --no-signals")
    parser.add_argument("--no-settle", action="store_true",
                        help="leave the rest of the answers held during the pass unread (their "
                             "times, the one-JSON check, degraded members, sampled selections:"
                             " what the pass costs while its requests are in flight; the "
                             "difference to a count without it is their reading)")
    parser.add_argument("--annotate", action="store_true",
                        help="print the instructions per request by C function instead")
    args = parser.parse_args()
    if args.signals:
        os.environ["RL_BENCH_SIGNALS"] = "1"  # read by the measured process
    if args.no_settle:
        os.environ["RL_BENCH_NO_SETTLE"] = "1"
    streams = [s for s in args.streams.split(",") if s]
    levels = [int(c) for c in args.concurrency.split(",")]
    low, high = (int(n) for n in args.requests.split(","))
    if args.profile:
        for build in args.builds:
            print(f"== {build}")
            for level in levels:
                profile(build, streams, level, high)
        return 0
    if not shutil.which("valgrind"):
        sys.exit("needs valgrind (apt-get install valgrind)")
    if args.annotate:
        with tempfile.TemporaryDirectory() as folder:
            for build in args.builds:
                for level in levels:
                    annotate(build, streams, level, low, high, Path(folder))
        return 0
    names = [Path(b).name for b in args.builds]
    print(f"instructions per request (callgrind), passes of {high} minus {low} requests, "
          f"{sys.implementation.name} {sys.version.split()[0]}")
    print(f"{'stream':<7} {'conc':>4}  " + "  ".join(f"{n:>18}" for n in names))
    with tempfile.TemporaryDirectory() as folder:
        for stream in streams:
            replay = Replay(stream)
            try:
                for level in levels:
                    cells = []
                    for build in args.builds:
                        counts = [instructions(build, replay.url, (n, high), level,
                                               Path(folder))
                                  for n in (low, high)]
                        cells.append(f"{(counts[1] - counts[0]) / (high - low):>18,.0f}")
                    print(f"{stream:<7} {level:>4}  " + "  ".join(cells), flush=True)
            finally:
                replay.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ["--inner"]:
        inner(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        sys.exit(main())
