#!/usr/bin/env python3
"""The driver's own cost: router_latency.py run against wrk on the same loopback endpoints.

Starts three targets on 127.0.0.1:
  null   nginx (Debian nginx-light) answering every preview with `return 200` and a fixed
         decision JSON: what is left is the client's and the loopback's cost;
  sim2   router_latency.py simulate with a fixed 2 ms delay;
  go2    bench/go_router: Go's net/http waiting 2 ms and answering ~2.7 KB of JSON shaped like
         the router's preview answer (metrics per signal), which Go sends chunked: the real
         answer's shape and framing (skipped without go, or with --no-go).
Then, interleaved over --reps repetitions, measures each target with wrk (a C load generator,
POST with a Lua body, percentiles from its HdrHistogram), with hey (Go's net/http client) and
with `router_latency.py run` at concurrency 1, 4 and 16, and ends with one 100,000-request run
for the driver's peak RSS.

    python3 bench/driver_overhead.py [--reps 3] [--skip-rss]
    python3 bench/driver_overhead.py --signals [--reps N] [--loop-pairs 100]
        [--pass-requests 1000]

--signals measures only what recording the router's per-signal times costs: nginx answers
every preview as the router does (20 signals under metrics, 3 of them evaluated, and a
request id that changes every answer), and the driver runs alternately with and without
--no-signals (--reps pairs); it prints the driver's CPU time during the passes (the run file's
driver_cpu_s) and p50 per request of each, and the growth with its 95% t interval over the
pairs; then the pass loop alone in this process (--loop-pairs rounds of three arms: without
the times, with them held as run holds them, with them read as each answer comes), and what
reading the times of the answers held during a pass costs after it (per answer). Passes are
short (--pass-requests, 20 to 80 ms each in the loop) because a shared machine's speed drifts
over seconds (passes of 4,000 requests here took 15 or 23 us an answer, by the minute): a
pair of short passes sees one speed, so its ratio is the cost's, where long ones mix speeds.

Like the published method, the load generators run on other cores than the server: on a
machine of N >= 2 cores the targets are pinned to the last core and wrk and the driver to the
others (--no-pin shares all cores). Prints medians over the repetitions: p50 and p99 of each, the driver's overhead (its p50 minus
wrk's), the highest req/s at concurrency 16, the driver's CPU seconds per 1,000 requests, how late
open-loop sends leave their schedule at 100, 1,000 and 5,000 requests per second, and the peak
RSS. Installs nginx-light and wrk with apt-get when they are missing (as root). Not a
test: it prints figures and asserts nothing.
"""

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "router_latency.py"
sys.path.insert(0, str(ROOT / "src"))

from router_latency.constants import __version__, PREVIEW_PATH
from router_latency.stats import percentile, ratio_interval
from router_latency.corpus import corpus_bytes, CORPUS_SCHEMA
from router_latency.meaning import SignalTable
from router_latency.client import parse_endpoint
from router_latency.passloop import encode_prompts, PassLoop, PassPlan, Target
from router_latency.report import render_table

PROMPT = "What is the derivative of x squared?"
BODY = json.dumps({"model": "MoM", "messages": [{"role": "user", "content": PROMPT}]})
DECISION = '{"decision_result":{"decision_name":"math"},"selected_model":"qwen3"}'
LEVELS = (1, 4, 16)
WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = %s
wrk.headers["Content-Type"] = "application/json"
wrk.headers["User-Agent"] = %s
wrk.headers["Accept"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRKJSON {\\"p50_us\\":%%d,\\"p99_us\\":%%d,\\"requests\\":%%d,\\"duration_us\\":%%d,\\"errors\\":%%d}\\n",
    latency:percentile(50), latency:percentile(99), summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""
NGINX_CONF = """
worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {work};
  server {{
    listen 127.0.0.1:{port};
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    location / {{
      default_type application/json;
      return 200 '{decision}';
    }}
  }}
}}
"""


CPUS = sorted(os.sched_getaffinity(0))
SERVER_CPUS = {CPUS[-1]} if len(CPUS) >= 2 else set(CPUS)
CLIENT_CPUS = set(CPUS[:-1]) if len(CPUS) >= 2 else set(CPUS)


def share_all_cores() -> None:
    """--no-pin: the targets and the clients share every core, as a router and its client
    share a node's."""
    SERVER_CPUS.update(CPUS)
    CLIENT_CPUS.update(CPUS)


def pinned(cpus: set):
    """Return a preexec_fn that pins the child process to cpus."""
    return lambda: os.sched_setaffinity(0, cpus)


def ensure_tools() -> None:
    missing = [name for name in ("nginx", "wrk") if not shutil.which(name)]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"needs {' and '.join(missing)}: apt-get install nginx-light wrk")
    print(f"installing {', '.join(missing)} with apt-get ...", flush=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "nginx-light", "wrk"], check=True,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                   stdout=subprocess.DEVNULL)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


def start_nginx(work: Path) -> tuple:
    port = free_port()
    conf = work / "nginx.conf"
    conf.write_text(NGINX_CONF.format(work=work, port=port, decision=DECISION))
    process = subprocess.Popen(["nginx", "-p", str(work), "-c", str(conf), "-e",
                                str(work / "nginx-error.log")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, preexec_fn=pinned(SERVER_CPUS))
    wait_for_port(port)
    return process, f"http://127.0.0.1:{port}"


def start_simulator(work: Path) -> tuple:
    url_file = work / "sim.url"
    process = subprocess.Popen([sys.executable, str(TOOL), "simulate", "--port", "0",
                                "--delay-ms", "2", "--url-file", str(url_file)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=pinned(SERVER_CPUS))
    deadline = time.monotonic() + 10
    while not url_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return process, url_file.read_text().strip()


GO_ROUTER = ROOT / "bench" / "go_router"


def start_go_router(work: Path, *, small: bool = False, delay_ms: float = 2) -> tuple:
    """Build bench/go_router (Go's net/http answering like the router's preview: ~2.7 KB of
    JSON with metrics per signal, sent chunked; --small: ~130 bytes with a Content-Length) and
    start it on the server cores; return (process, base URL)."""
    if not shutil.which("go"):
        raise SystemExit("needs go (apt-get install golang-go) for the Go router target")
    binary = work / "go-router"
    if not binary.exists():
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=GO_ROUTER, check=True,
                       env={**os.environ, "GOFLAGS": "-mod=mod", "GO111MODULE": "on"})
    url_file = work / f"go-router-{'small' if small else 'preview'}.url"
    process = subprocess.Popen([str(binary), "--port", "0", "--url-file", str(url_file),
                                "--delay", f"{delay_ms:g}ms"] + (["--small"] if small else []),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=pinned(SERVER_CPUS))
    deadline = time.monotonic() + 10
    while not (url_file.exists() and url_file.read_text().strip()) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    return process, url_file.read_text().strip()


def hey(url: str, body_file: Path, concurrency: int, seconds: float) -> dict:
    """Measure with hey (Go's net/http client, one goroutine per connection); return p50, p99
    and req/s as wrk() does."""
    done = subprocess.run(["hey", "-z", f"{seconds:g}s", "-c", str(concurrency), "-m", "POST",
                           "-T", "application/json", "-D", str(body_file),
                           url + PREVIEW_PATH], capture_output=True, text=True,
                          timeout=seconds + 30, preexec_fn=pinned(CLIENT_CPUS))
    figures: dict = {"errors": 0}
    for line in done.stdout.splitlines():
        words = line.split()
        if line.strip().startswith("Requests/sec:"):
            figures["req_per_s"] = float(words[1])
        elif len(words) >= 4 and words[0] in ("50%", "99%") and words[1] == "in":
            figures[f"p{words[0][:-1]}_ms"] = float(words[2]) * 1000
        elif line.strip().startswith("[") and "responses" in line and not words[0][1:-1] == "200":
            figures["errors"] += int(words[1])
    if "req_per_s" not in figures:
        raise SystemExit(f"hey printed no figures: {done.stdout[-500:]} {done.stderr[-500:]}")
    return figures


def write_corpus(path: Path, count: int) -> None:
    prompts = [{"id": i, "text": PROMPT, "source": "bench"} for i in range(count)]
    path.write_bytes(corpus_bytes({"schema": CORPUS_SCHEMA, "source": {}, "files": {},
                                      "prompts": prompts}))


def wrk(url: str, script: Path, concurrency: int, seconds: float) -> dict:
    threads = min(len(CLIENT_CPUS), concurrency)
    done = subprocess.run(["wrk", "-t", str(threads), "-c", str(concurrency), "-d",
                           f"{seconds:g}s", "-s", str(script), url + PREVIEW_PATH],
                          capture_output=True, text=True, timeout=seconds + 30,
                          preexec_fn=pinned(CLIENT_CPUS))
    line = next(l for l in done.stdout.splitlines() if l.startswith("WRKJSON "))
    figures = json.loads(line[len("WRKJSON "):])
    return {"p50_ms": figures["p50_us"] / 1000, "p99_ms": figures["p99_us"] / 1000,
            "req_per_s": figures["requests"] / (figures["duration_us"] / 1e6),
            "errors": figures["errors"]}


def driver(url: str, corpus: Path, out: Path, levels=LEVELS) -> tuple:
    """Run the driver once; return (run document, peak RSS in MiB of that process)."""
    if out.exists():
        out.unlink()
    process = subprocess.Popen([sys.executable, str(TOOL), "run", "--url", url, "--corpus",
                                str(corpus), "--out", str(out), "--label", "bench",
                                "--concurrency", ",".join(map(str, levels)), "--warmup", "200",
                                "--quiet", "--gpu", "none"], preexec_fn=pinned(CLIENT_CPUS))
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 1):
        raise SystemExit(f"router_latency.py run exited {process.returncode}")
    return json.loads(out.read_text()), usage.ru_maxrss / 1024


# What the router answers (its EvalResponse): every signal it knows under metrics, 0 for those
# it did not evaluate; $request_id makes each answer's bytes differ, as a router's times do.
ROUTER_SIGNALS = ("keyword", "embedding", "domain", "fact_check", "user_feedback", "reask",
                  "preference", "language", "context", "structure", "complexity", "modality",
                  "authz", "jailbreak", "pii", "kb", "conversation", "event", "metadata",
                  "classifier")
ROUTER_ANSWER = json.dumps({
    "original_text": PROMPT, "requested_model": "MoM",
    "decision_result": {"decision_name": "math", "algorithm": "priority",
                        "used_signals": {"domains": ["math"]},
                        "matched_signals": {"domains": ["math"]}, "unmatched_signals": {}},
    "recommended_models": ["qwen3"], "selected_model": "qwen3",
    "selection_status": "selected", "routing_decision": "math",
    "metrics": {name: {"execution_time_ms": {"domain": 3.21, "pii": 5.07,
                                             "jailbreak": 2.11}.get(name, 0),
                       "confidence": 0.9 if name in ("domain", "pii", "jailbreak") else 0}
                for name in ROUTER_SIGNALS},
    "signal_confidences": {"domain:math": 0.91}, "config_hash": "REQUEST_ID"},
    separators=(",", ":")).replace("REQUEST_ID", "$request_id")


def start_router_nginx(work: Path) -> tuple:
    """Start nginx answering every preview with ROUTER_ANSWER; return (process, url)."""
    port = free_port()
    conf = work / "nginx-router.conf"
    conf.write_text(NGINX_CONF.replace("{decision}", ROUTER_ANSWER.replace("{", "{{").replace(
        "}", "}}")).format(work=work, port=port))
    process = subprocess.Popen(["nginx", "-p", str(work), "-c", str(conf), "-e",
                                str(work / "nginx-error.log")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, preexec_fn=pinned(SERVER_CPUS))
    wait_for_port(port)
    return process, f"http://127.0.0.1:{port}"


def growth(pairs: list) -> tuple:
    """Return the growth in percent of `with` over `without`, with its 95% t interval, from
    pairs alternated in time: ratio_interval's geometric mean of the per-pair ratios
    (what both arms of a pair share, the machine's state then, cancels)."""
    found = ratio_interval([without for without, _ in pairs], [with_ for _, with_ in pairs])
    return tuple(100 * (x - 1) for x in (found.mean, found.low, found.high))


def growth_text(pairs: list) -> str:
    mean, low, high = growth(pairs)
    return f"{mean:+.1f}% [{low:+.1f}%, {high:+.1f}%]"


def signal_cost(reps: int, loop_pairs: int, requests: int) -> int:
    """Print what recording the per-signal times costs the driver per request: whole runs as
    a user runs them (with and without --no-signals, alternated, `reps` pairs), then the pass
    loop alone in this process (`loop_pairs` pairs, three arms), each growth with its 95% t
    interval over the pairs."""
    ensure_tools()
    work = Path(tempfile.mkdtemp(prefix="router-latency-signals-"))
    write_corpus(work / "c.json", requests)
    nginx, url = start_router_nginx(work)
    figures: dict = {}
    try:
        for rep in range(reps):
            pair: dict = {}
            for mode in (("with", "without") if rep % 2 == 0 else ("without", "with")):
                out = work / "run.json"
                if out.exists():
                    out.unlink()
                subprocess.run([sys.executable, str(TOOL), "run", "--url", url, "--corpus",
                                str(work / "c.json"), "--out", str(out), "--label", mode,
                                "--concurrency", "1,16", "--warmup", "200", "--quiet",
                                "--gpu", "none", *(() if mode == "with" else ("--no-signals",))],
                               preexec_fn=pinned(CLIENT_CPUS), check=True)
                document = json.loads(out.read_text())
                assert (mode == "with") == bool(document.get("signals")), document.get("signals")
                for item in document["passes"]:
                    n = item["summary"]["requests"]
                    pair[(mode, item["concurrency"])] = (1e6 * item["driver_cpu_s"] / n,
                                                         item["summary"]["p50_ms"])
            for level in (1, 16):
                figures.setdefault(level, []).append((pair[("without", level)],
                                                      pair[("with", level)]))
        in_process = pass_loop_cost(url, loop_pairs, requests)
    finally:
        nginx.terminate()
        nginx.wait(10)
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, CPython "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}; the router's answer "
          f"({len(ROUTER_ANSWER)} bytes, {len(ROUTER_SIGNALS)} signals, 3 evaluated); growth: "
          f"geometric mean of the per-pair ratios, 95% t interval")
    print(f"whole runs (`run`, {requests:,} requests a pass, driver_cpu_s: the passes, not the "
          f"reading after them), {reps} pairs with and without --no-signals, alternated:")
    rows = []
    for level in (1, 16):
        pairs = figures[level]
        cpu = [(a[0], b[0]) for a, b in pairs]
        p50_without, p50_with = (statistics.median(x[k][1] for x in pairs) for k in (0, 1))
        rows.append([str(level), f"{statistics.median(c for c, _ in cpu):.1f}",
                     f"{statistics.median(c for _, c in cpu):.1f}", growth_text(cpu),
                     f"{p50_without:.4f}", f"{p50_with:.4f}",
                     f"{1000 * (p50_with - p50_without):+.1f}"])
    for line in render_table(["conc", "cpu us/req without", "with", "growth [95% CI]",
                                 "p50 ms without", "with", "p50 change us"], rows,
                                right=[True]):
        print(f"  {line}")
    print(f"the pass loop alone in this process, {requests:,} requests a pass, thread CPU "
          f"per answer while it ran, {loop_pairs} rounds of the three arms in rotated order:")
    rows = []
    for level in (1, 16):
        found = in_process[level]
        without = [x[0] for x in found["without"]]
        row = [str(level), f"{statistics.median(without):.2f}"]
        for arm in ("with", "at once"):
            cpu = [x[0] for x in found[arm]]
            row += [f"{statistics.median(cpu):.2f}", growth_text(list(zip(without, cpu)))]
        row.append(f"{statistics.median(x[1] for x in found['with']):.1f}")
        rows.append(row)
    for line in render_table(["conc", "without us", "held (run's way)", "growth [95% CI]",
                                 "read at once", "growth [95% CI]", "reading after, us"], rows,
                                right=[True]):
        print(f"  {line}")
    print("  (held: the times read after the pass; at once: HOLD_BYTES 0, read as each answer "
          "comes; reading after: us per answer of the held answers' reading, not in the pass)")
    shutil.rmtree(work, ignore_errors=True)
    return 0


def pass_loop_cost(url: str, pairs: int, requests: int) -> dict:
    """Return {level: {arm: [(thread CPU us per answer while the pass ran, us per answer of
    reading the held answers' times after it)]}} of passes of `requests` run by the pass loop
    in this process at concurrency 1 and 16: without a signal table, with one (the answers
    held, as run does), and with one reading every answer at once (HOLD_BYTES 0); the arms
    in an order rotated each round. The per-answer path alone, without the start-up, warm-up
    and file of a run."""
    arms = ("without", "with", "at once")
    found: dict = {level: {arm: [] for arm in arms} for level in (1, 16)}
    # on the client cores, as the runs are: a loop that meets nginx on its core is slowed by
    # whichever of them the scheduler put there
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, CLIENT_CPUS)
    try:
        for rep in range(pairs):
            for level in (1, 16):
                for arm in arms[rep % 3:] + arms[:rep % 3]:
                    target = Target(parse_endpoint(url),
                                       signals=None if arm == "without" else SignalTable())
                    payloads = encode_prompts(target, [PROMPT] * requests)
                    loop = PassLoop(target, payloads, threading.Event(), PassPlan("x", level))
                    if arm == "at once":
                        loop.answers.HOLD_BYTES = 0
                    started = time.thread_time()
                    results = loop.run()
                    settled = loop.answers.settle_cpu_s
                    found[level][arm].append(
                        (1e6 * (time.thread_time() - started - settled) / len(results),
                         1e6 * settled / len(results)))
    finally:
        os.sched_setaffinity(0, mask)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--signals", action="store_true",
                        help="only the cost of recording per-signal times (see above)")
    parser.add_argument("--loop-pairs", type=int, default=100,
                        help="--signals: rounds of the pass loop's three arms in this process")
    parser.add_argument("--pass-requests", type=int, default=1000,
                        help="--signals: requests a pass, of the runs and of the loop (a pass "
                             "longer than the hold reads the rest as they come)")
    parser.add_argument("--skip-rss", action="store_true", help="skip the 100,000-request run")
    parser.add_argument("--no-pin", action="store_true", help="let everything share all cores")
    parser.add_argument("--no-go", action="store_true", help="skip the Go router target")
    args = parser.parse_args()
    if args.no_pin:
        share_all_cores()
    if args.signals:
        return signal_cost(args.reps, args.loop_pairs, args.pass_requests)
    ensure_tools()
    work = Path(tempfile.mkdtemp(prefix="router-latency-bench-"))
    script = work / "post.lua"
    # the same request bytes as the driver's: body, and headers but for their order
    script.write_text(WRK_SCRIPT % (json.dumps(BODY), json.dumps(f"router-latency/{__version__}")))
    corpora = {"null": (work / "null.json", 4000), "sim2": (work / "sim2.json", 1000),
               "go2": (work / "go2.json", 2000)}
    body_file = work / "body.json"
    body_file.write_text(BODY)
    for path, count in corpora.values():
        write_corpus(path, count)
    nginx, null_url = start_nginx(work)
    simulator, sim_url = start_simulator(work)
    targets = {"null": null_url, "sim2": sim_url}
    go_router = None
    if not args.no_go and shutil.which("go") and shutil.which("hey"):
        go_router, targets["go2"] = start_go_router(work)
    tools = ("wrk", "hey", "driver")
    results = {(t, c, tool): [] for t in targets for c in LEVELS for tool in tools}
    cpu = {(t, c): [] for t in targets for c in LEVELS}
    started = time.monotonic()
    try:
        for rep in range(args.reps):
            for target, url in targets.items():
                wrk(url, script, 16, 1)  # warm the target
                for level in LEVELS:
                    results[(target, level, "wrk")].append(wrk(url, script, level, 2))
                    if shutil.which("hey"):
                        results[(target, level, "hey")].append(hey(url, body_file, level, 2))
                document, _ = driver(url, corpora[target][0], work / "run.json")
                for item in document["passes"]:
                    summary = item["summary"]
                    results[(target, item["concurrency"], "driver")].append(summary)
                    cpu[(target, item["concurrency"])].append(
                        1000 * item["driver_cpu_s"] / summary["requests"])
            print(f"repetition {rep + 1}/{args.reps} done ({time.monotonic() - started:.0f} s)",
                  flush=True)
        open_loop = []
        for rate in (100, 1000, 5000):
            out, corpus = work / "rate.json", work / f"rate-{rate}.json"
            write_corpus(corpus, min(4000, rate * 3))  # about 3 seconds a rate
            if out.exists():
                out.unlink()
            subprocess.run([sys.executable, str(TOOL), "run", "--url", null_url, "--corpus",
                            str(corpus), "--out", str(out), "--label", "rate",
                            "--rate", str(rate), "--arrival", "poisson", "--quiet", "--gpu",
                            "none", "--warmup", "200"], preexec_fn=pinned(CLIENT_CPUS),
                           check=False)
            item = json.loads(out.read_text())["passes"][0]
            behind = sorted(r["behind_ms"] for r in item["requests"])
            open_loop.append((rate, percentile(behind, 50), item["summary"]["behind_p99_ms"],
                              item["summary"]["p50_ms"], item["summary"]["service_p50_ms"]))
        peak = None
        if not args.skip_rss:
            write_corpus(work / "100k.json", 100_000)
            _, peak = driver(null_url, work / "100k.json", work / "run-100k.json", levels=(16,))
    finally:
        nginx.terminate()
        simulator.terminate()
        if go_router is not None:
            go_router.terminate()
            go_router.wait(10)
        nginx.wait(10)
        simulator.wait(10)

    def median(key, field):
        return statistics.median(r[field] for r in results[key])

    def hey_cell(key, field, digits):
        return f"{median(key, field):{digits}}" if results[key] else "-"

    print()
    print(f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} cores, "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"{args.reps} repetitions, medians; latency in ms; targets on cores "
          f"{sorted(SERVER_CPUS)}, wrk and driver on {sorted(CLIENT_CPUS)}")
    rows = []
    for target in targets:
        for level in LEVELS:
            w, d, h = (target, level, "wrk"), (target, level, "driver"), (target, level, "hey")
            rows.append([target, str(level), f"{median(w, 'p50_ms'):.3f}",
                         f"{median(d, 'p50_ms'):.3f}",
                         f"{median(d, 'p50_ms') - median(w, 'p50_ms'):+.3f}",
                         f"{100 * (median(d, 'p50_ms') / median(w, 'p50_ms') - 1):+.1f}%",
                         f"{median(w, 'p99_ms'):.3f}", f"{median(d, 'p99_ms'):.3f}",
                         f"{median(w, 'req_per_s'):,.0f}", hey_cell(h, 'req_per_s', ',.0f'),
                         f"{median(d, 'req_per_s'):,.0f}", hey_cell(h, 'p50_ms', '.1f'),
                         f"{statistics.median(cpu[(target, level)]):.3f}"])
    for line in render_table(["target", "conc", "wrk p50", "driver p50", "overhead",
                                 "", "wrk p99", "driver p99", "wrk req/s", "hey req/s",
                                 "driver req/s", "hey p50", "driver cpu s/1k"], rows,
                                right=[False]):
        print(line)
    print()
    print("open loop on null, poisson arrivals (ms): how late sends left their schedule")
    for line in render_table(["rate/s", "behind p50", "behind p99", "latency p50",
                                 "service p50"],
                                [[f"{rate:,}", f"{b50:.4f}", f"{b99:.4f}", f"{l50:.4f}",
                                  f"{s50:.4f}"] for rate, b50, b99, l50, s50 in open_loop]):
        print(line)
    if peak is not None:
        print(f"driver peak RSS, 100,000 requests at concurrency 16 on null: {peak:.0f} MiB")
    print(f"took {time.monotonic() - started:.0f} s")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
