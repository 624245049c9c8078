"""Measuring a run: its plan (the passes, the load guard, their checks), the progress line,
each pass measured with its captures and telemetry and warned of, and measure_run(), which
waits for the router (readiness.py), measures the floor and warms up, then runs the passes
(passloop.py) and returns the run file."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple, TYPE_CHECKING, TypedDict

from .constants import EXPECTED_HASH_HEADER, NamedTuple, ROUTER_MAX_CONCURRENCY
from .errors import RouterLatencyError
from .words import plural, scrubbed
from .corpus import Corpus
from .cache import result_cache_finding
from .runfile import Attempt, Captures, Ladder, PassRecord, RunFile, RunSettings
from .phases import phase_windows, slow_phase, Thresholds
from .requests import pass_name, pass_summary, pass_title, Request
from .ladder import ladder_stop
from .captures import (capture_snapshot, CaptureSettings, environment_record, read_cpu_use,
                       router_cpu_use, router_cpus, utc_now)
from .gpu import gpu_tool
from .host import cpu_affinity, driver_cpu_seconds, host_settings, host_warnings, LoadSampler
from .telemetry import coincided_text, PassSampler, sampling
from .passloop import (config_hashes_of, encode_prompts, MAX_PASS_REQUESTS, met_expectations,
                       PassLoop, PassPlan, pass_schedule, records_of, Target)
from .stall import stall_text
from .readiness import measure_floor, router_told, wait_until_ready, warm_up, warn_of_warm_up

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "check_plan", "LoadGuard", "measure_run", "plan_passes", "Progress", "RunContext",
    "RunPlan", "say_nothing", "settings_record",
]


PERCENTILE_METHOD = ("linear interpolation between closest ranks "
                     "(Hyndman-Fan R7, numpy's default)")
LATENCY_DEFINITION = ("client side, perf_counter_ns from just before the request is sent "
                      "(open loop: from its scheduled time) to the wake-up of the event loop "
                      "that completed the response, on a connection opened before the pass")
DRIVER_BUSY = 0.8  # warn when the driver's CPU time exceeds this share of one core
# below a pass of this many seconds, thread start-up dominates the share: no warning
DRIVER_BUSY_MIN_S = 1.0


class LoadGuard(NamedTuple):
    """The published method's load guard: a pass above max_load is discarded and retried."""
    max_load: float = 120.0
    retries: int = 2
    pause: float = 30.0  # seconds before a retry
    loadavg_file: Optional[str] = None  # read the load here instead of the system's


class RunPlan(NamedTuple):
    """What one run measures: the warm-up, then each pass over the whole corpus (several
    times with repeat, cycled for a time with duration)."""
    passes: Tuple[PassPlan, ...]
    warmup: int = 20
    wait_ready: Optional[float] = None  # seconds to wait for a starting router
    max_errors: int = 0  # failed requests the run allows before it fails
    # the previews the router admits at once (its routing_preview.max_concurrency): a pass
    # with more callers is warned about, since the router sheds the rest with 429 OVERLOADED
    router_max_concurrency: int = ROUTER_MAX_CONCURRENCY
    ladder: Optional[Ladder] = None  # climb the passes in order while the load pays


def plan_passes(concurrency: Sequence[int] = (1, 4, 16), rates: Sequence[float] = (), *,
                model: PassPlan = PassPlan("", 64)) -> Tuple[PassPlan, ...]:
    """Return the passes of a run: the closed-loop levels, then the open-loop rates.

    `model` holds what the passes share (its name and rate are not read): the length of
    every pass (repeat, duration) and the open loop's connections, arrival and seed.
    """
    return tuple([PassPlan(pass_name(c), c, repeat=model.repeat, duration=model.duration)
                  for c in concurrency]
                 + [model._replace(name=pass_name(model.connections, r), rate=r) for r in rates])


def check_plan(plan: RunPlan, prompts: int) -> None:
    """Raise unless every pass of the plan is one the driver can hold in memory."""
    for item in plan.passes:
        if item.repeat < 1 or (item.duration is not None and not item.duration > 0):
            raise RouterLatencyError("expected repeat >= 1 and a duration > 0",
                                     pass_title(item.name))
        if item.repeat > 1 and item.duration is not None:
            raise RouterLatencyError("give a repeat count or a duration, not both",
                                     pass_title(item.name))
        wanted: float
        if item.duration is None:
            wanted = prompts * item.repeat
        else:
            wanted = item.rate * item.duration if item.rate is not None else 0
        if wanted > MAX_PASS_REQUESTS:
            raise RouterLatencyError(
                f"a pass of {wanted:,.0f} requests; at most {MAX_PASS_REQUESTS:,} are kept "
                f"in memory", "--duration" if item.duration else "--repeat")


def clock_text(seconds: float) -> str:
    """Return a time span as m:ss, or h:mm:ss from an hour on."""
    hours, rest = divmod(max(0, math.ceil(seconds)), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def progress_text(title: str, done: int, total: Optional[int], elapsed: float, *,
                  duration: Optional[float] = None, finished: bool = False) -> str:
    """Return the progress line of a pass: requests done (of how many), their rate, and the
    time left; once finished, the time it took."""
    rate = done / elapsed if elapsed > 0 else 0.0
    count = f"{done:,}" if total is None else f"{done:,}/{total:,}"
    if finished:
        left = f"took {elapsed:.1f} s"
    elif duration is not None:
        left = f"ETA {clock_text(duration - elapsed)}"
    elif done and total is not None:
        left = f"ETA {clock_text((total - done) / rate)}"
    else:
        left = "ETA -:--"
    return f"{title}: {count} requests, {rate:,.0f} req/s, {left}"


class Progress:
    """A progress line on stderr, redrawn twice a second while a pass runs: which pass of how
    many, requests done, their rate and the time left."""

    def __init__(self, enabled: bool, stream=None, clock: Callable[[], float] = time.monotonic,
                 interval: float = 0.5):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.clock = clock
        self.interval = interval  # seconds between redraws
        self.stop = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.width = 0  # of the line drawn last, which a shorter one must cover

    def start(self, title: str, total: Optional[int], done: Callable[[], int],
              duration: Optional[float] = None) -> None:
        """Draw the pass's line until end(); total None: as many as `duration` allows."""
        if not self.enabled:
            return
        self.stop.clear()
        started = self.clock()

        def redraw() -> None:
            while True:
                finished = self.stop.wait(self.interval)
                try:
                    self.draw(progress_text(title, done(), total, self.clock() - started,
                                            duration=duration, finished=finished), finished)
                except OSError:  # a terminal gone: the pass goes on without a progress line
                    return
                if finished:
                    return

        self.thread = threading.Thread(target=redraw, daemon=True)
        self.thread.start()

    def draw(self, text: str, finished: bool) -> None:
        """Write the line over the previous one; a finished line ends with a newline."""
        self.stream.write("\r" + text.ljust(self.width) + ("\n" if finished else ""))
        self.stream.flush()
        self.width = 0 if finished else len(text)

    def note(self, text: str) -> None:
        """Draw a line between passes (waiting for a starting router), kept until the
        next line covers it: on a terminal only, as the passes' lines."""
        if self.enabled:
            self.draw(text, False)

    def end(self) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()
            self.thread = None


def say_nothing(message: str) -> None:
    """Say nothing: a run's default notify."""


class RunOptions(TypedDict, total=False):
    """What a RunContext is given by name: its stop flag and progress line (each context its
    own unless given one), where its warnings go, and the corpus's requests, encoded once
    before any timing, and what each prompt accepts (see met_expectations), by prompt id
    (measure_run sets both from its corpus)."""
    stop: threading.Event
    progress: Progress
    notify: Callable[[str], None]  # a warning for the user, one line
    payloads: Sequence[bytes]
    expects: Sequence[Sequence[str]]


class RunContext:
    """What every step of measuring a run shares, from measure_run down to measure_pass:
    where and how requests go, what the run measures, its load guard, its captures and
    probes, the thresholds that judge an attempt, the flag that interrupts it, its progress
    line and where its warnings go (RunOptions). A class rather than a NamedTuple: each
    context gets its own stop flag and progress line unless given one (and no dataclass:
    importing dataclasses costs 8 ms of every start of the tool).

    Setting `stop` (a signal handler does) ends the pass under way within about 2 s, and a
    probe, scrape, connect, readiness wait or load pause within STOP_POLL_S.
    """
    __slots__ = ("target", "plan", "guard", "capture", "thresholds", "stop", "progress",
                 "notify", "payloads", "expects")

    def __init__(self, target: Target, plan: RunPlan, guard: LoadGuard = LoadGuard(),
                 capture: CaptureSettings = CaptureSettings(),
                 thresholds: Thresholds = Thresholds(), **options: Unpack[RunOptions]) -> None:
        self.target, self.plan, self.guard = target, plan, guard
        self.capture, self.thresholds = capture, thresholds
        stop, progress = options.get("stop"), options.get("progress")
        self.stop = threading.Event() if stop is None else stop
        self.progress = Progress(enabled=False) if progress is None else progress
        self.notify = options.get("notify", say_nothing)
        self.payloads = options.get("payloads", ())
        self.expects = options.get("expects", ())

    def with_prompts(self, payloads: Sequence[bytes],
                     expects: Sequence[Sequence[str]]) -> RunContext:
        """Return the context with the corpus's requests and expectations (measure_run's)."""
        return RunContext(self.target, self.plan, self.guard, self.capture, self.thresholds,
                          stop=self.stop, progress=self.progress, notify=self.notify,
                          payloads=payloads, expects=expects)


class MeasuredPass(NamedTuple):
    """What one pass measured (measure_pass)."""
    requests: List[Request]  # in send order
    wall_s: float  # from the first request sent to the last answer
    config_hashes: Tuple[str, ...]  # x-vsr-config-hash values its answers carried, first seen
    settle_cpu_s: float  # CPU seconds of reading the per-signal times after it (settle)


def measure_pass(context: RunContext, plan: PassPlan, title: str,
                 schedule: Optional[Sequence[int]] = None) -> MeasuredPass:
    """Send one pass of the context's payloads: the corpus `repeat` times, or cycled for
    `duration` seconds (open loop: on `schedule`); return what it measured: its Requests,
    wall seconds, the x-vsr-config-hash values its answers carried, in the order first seen,
    the CPU seconds of reading the per-signal times after it (AnswerBook.settle)."""
    target, payloads, stop, progress = \
        context.target, context.payloads, context.stop, context.progress
    loop = PassLoop(target, payloads, stop, plan, schedule)
    progress.start(title, None if plan.rate is None and plan.duration else loop.total,
                   lambda: len(loop.answers.results), plan.duration)
    try:
        results = loop.run()
    finally:
        progress.end()
    requests, wall_s = records_of(results, open_loop=schedule is not None, count=len(payloads))
    return MeasuredPass(requests=requests, wall_s=wall_s, config_hashes=config_hashes_of(results),
                        settle_cpu_s=loop.answers.settle_cpu_s)


def measure_attempt(context: RunContext, plan: PassPlan, title: str = "") -> Attempt:
    """Measure one attempt at a pass with what surrounds it: the captures before and after,
    the load, the driver's and the router's CPU use; its requests judged by what their
    prompts expect (see met_expectations)."""
    capture, stop = context.capture, context.stop
    schedule = pass_schedule(plan, len(context.payloads))
    before = capture_snapshot(capture, stop)
    started_utc, started_unix = utc_now(), time.time()
    sampler = LoadSampler(context.guard.loadavg_file).start()
    cpus = capture.router_cpu_list or before["router_cpus"]
    # the pass's sampler, started (and its GPU tool's first sample come) before the CPU
    # readings around the pass, so that they do not count its start
    telemetry = PassSampler(capture, cpus, capture.sample_ms, context.guard.loadavg_file) \
        if sampling(capture, cpus) else None
    measured = None
    try:
        if telemetry is not None:
            telemetry.start()
        cpu_before = driver_cpu_seconds()
        router_before = read_cpu_use(capture, cpus)  # right around the pass, not the captures
        if telemetry is not None:
            telemetry.origin()
        measured = measure_pass(context, plan, title or pass_title(plan.name), schedule)
        router_after = read_cpu_use(capture, cpus)
        cpu_after = driver_cpu_seconds()
    finally:
        # energy per routed request: fully computed answers, not failures, 429s or degraded
        sampled = None if telemetry is None else telemetry.stop(
            sum(r.routed for r in measured.requests) if measured else 0,
            measured.wall_s if measured else 0.0)
    requests, wall_s, hashes, settle_cpu_s = measured
    # what the driver spent while its requests were in flight and on their records; not the
    # reading of the per-signal times after the pass, when nothing is measured
    driver_cpu_s = cpu_after - cpu_before - settle_cpu_s
    load = sampler.stop()
    after = capture_snapshot(capture, stop)
    requests = met_expectations(requests, context.expects)
    environment = environment_record(capture, before, after)
    if sampled is not None:
        environment["telemetry"] = sampled
    return Attempt(plan.rate, plan.arrival if plan.rate else None, started_utc,
                   round(started_unix, 3), load, round(driver_cpu_s, 3),
                   environment, pass_summary(requests, wall_s),
                   tuple(requests), hashes,
                   router_cpu_use(router_before, router_after, cpus, len(requests)))


def overload_warning(plan: PassPlan, limit: int) -> Optional[str]:
    """Return the warning for a pass that can have more requests in flight than the router
    admits at once, or None."""
    if plan.connections <= limit:
        return None
    callers = (f"up to {plural(plan.connections, 'connection')}" if plan.rate is not None
               else plural(plan.connections, "caller"))
    return (f"{pass_title(plan.name)}: {callers} but the router admits {limit} previews at once "
            f"(global.services.api.routing_preview.max_concurrency, declared with "
            f"--router-max-concurrency); it sheds the rest at once with 429 OVERLOADED")


def attempt_warnings(attempt: Attempt, plan: PassPlan) -> list:
    """Return what the user must hear about one attempt: a driver behind or too busy."""
    warnings = []
    title, summary = pass_title(plan.name), attempt.measured
    behind = summary.behind_p99_ms
    if behind is not None and behind > 1.0:
        warnings.append(f"{title}: the driver fell behind its schedule by {behind:.1f} ms at "
                        f"p99 (its {plural(plan.connections, 'connection')} busy, or the driver "
                        f"too slow); latencies count from the schedule, as a user waiting would "
                        f"see them")
    wall_s, cpu_s = summary.wall_s, attempt.driver_cpu_s
    if wall_s >= DRIVER_BUSY_MIN_S and cpu_s is not None and cpu_s / wall_s > DRIVER_BUSY:
        warnings.append(f"{title}: the driver kept a core {100 * cpu_s / wall_s:.0f}% busy; the "
                        f"driver, not the router, may be the limit")
    if plan.duration is not None and plan.rate is None and summary.requests >= MAX_PASS_REQUESTS:
        warnings.append(f"{title}: stopped at {MAX_PASS_REQUESTS:,} requests, before the "
                        f"{plan.duration:g} s were up: the most a pass keeps in memory")
    return warnings


def suspect_warnings(attempt: Attempt, title: str, thresholds: Thresholds) -> list:
    """Return what makes an attempt suspect: other processes on the router's CPUs (its slow
    phases are judged once the run is measured: slow_phase_warnings)."""
    warnings = []
    router_cpu = attempt.router_cpu
    foreign = router_cpu.foreign_vcpus if router_cpu else None
    if router_cpu and foreign is not None and foreign > thresholds.max_foreign_cpus:
        warnings.append(f"{title}: other processes used {foreign:.2f} vCPUs of the router's "
                        f"CPUs {router_cpu.cpus} (--max-foreign-cpus "
                        f"{thresholds.max_foreign_cpus:g})")
    return warnings


def slow_phase_warnings(passes: Sequence[PassRecord], thresholds: Thresholds) -> list:
    """Return the slow phases of a run's passes, once every pass is measured: each window is
    judged against what its prompts take in the other passes (content_slow_windows)."""
    warnings = []
    for item in passes:
        phase = None if item.discarded else slow_phase(item, passes, thresholds)
        if phase and phase.windows:
            warnings.append(f"{pass_title(item.name)}: slow phase in "
                            f"{plural(len(phase.windows), 'window')} of "
                            f"{len(item.attempt.windows)}: "
                            f"{phase.evidence(item.attempt.windows)}"
                            + neighbour_words(item.attempt, phase.windows))
    return warnings


def neighbour_words(attempt: Attempt, slow: Sequence[int]) -> str:
    """Return what coincided with a pass's slow phase, after a semicolon: the other GPUs,
    the foreign CPU on the router's cores, the load (coincided_text); '' when unsampled."""
    words = coincided_text(attempt, slow)
    return f"; {words}" if words else ""


def run_passes(context: RunContext) -> list:
    """Measure every pass of the context's plan with its load guard (a ladder's until it
    stops climbing); return their PassRecords."""
    plan, stop, notify = context.plan, context.stop, context.notify
    passes = []
    for position, item in enumerate(plan.passes, 1):
        if stop.is_set():
            break
        warning = overload_warning(item, plan.router_max_concurrency)
        if warning:
            notify(warning)
        title = f"{pass_title(item.name)}, {'step' if plan.ladder else 'pass'} {position} " \
                f"of {'at most ' if plan.ladder else ''}{len(plan.passes)}"
        passes.append(guarded_pass(context, item, title))
        why = ladder_stop(passes, plan.ladder) if plan.ladder and not stop.is_set() else None
        if why:
            notify(f"ladder: stopped climbing after {pass_title(item.name)}: {why}")
            break
    return passes


def guarded_pass(context: RunContext, item: PassPlan, title: str) -> PassRecord:
    """Measure one pass, again after a pause while the load is above the limit; return its
    PassRecord. It is interrupted when the stop flag left some of its requests unmeasured, or
    cut the pause before another attempt: a pass whose requests all came back before a
    signal is not."""
    guard, stop, notify, thresholds = \
        context.guard, context.stop, context.notify, context.thresholds
    payloads = context.payloads
    attempts: list = []
    cut = False
    for number in range(guard.retries + 1):
        attempt = measure_attempt(context, item,
                                  title + (f", attempt {number + 1}" if number else ""))
        attempt = attempt._replace(
            windows=phase_windows(attempt.requests, thresholds.window_requests))
        for warning in attempt_warnings(attempt, item) + suspect_warnings(
                attempt, pass_title(item.name), thresholds):
            notify(warning)
        # a timed pass ends on its clock, so only the stop flag says it was cut short
        interrupted = stop.is_set() if item.duration else \
            len(attempt.requests) < len(payloads) * item.repeat
        loads = [x for x in (attempt.load["start"], attempt.load["end"]) if x is not None]
        if interrupted or not loads or max(loads) <= guard.max_load:
            return PassRecord(item.name, item.connections, False, interrupted, attempt,
                              tuple(attempts))
        attempts.append(attempt)
        notify(f"{pass_title(item.name)}: load {max(loads):.1f} above {guard.max_load:g}, "
               f"timings discarded (attempt {number + 1} of {guard.retries + 1})")
        if number < guard.retries and stop.wait(guard.pause):
            cut = True
            break
    # never under the limit: the last attempt's surroundings, no statistics
    return PassRecord(item.name, item.connections, True, cut,
                      attempts[-1]._replace(summary=None, requests=(), windows=()),
                      tuple(attempts))


def settings_record(target: Target, plan: RunPlan, guard: LoadGuard,
                    thresholds: Thresholds = Thresholds()) -> RunSettings:
    """Return the run file's record of how the run was asked to measure."""
    closed = [p.connections for p in plan.passes if p.rate is None]
    open_loop = [p for p in plan.passes if p.rate is not None]
    model = open_loop[0] if open_loop else PassPlan("", 64)
    length = plan.passes[0] if plan.passes else PassPlan("", 1)
    return RunSettings(
        plan.warmup, tuple(closed), tuple(p.rate for p in open_loop if p.rate is not None),
        length.repeat,
        length.duration, model.arrival, model.seed, model.connections, target.timeout,
        tuple(target.decision_paths), guard.max_load, guard.retries, guard.pause,
        plan.max_errors, plan.wait_ready, plan.router_max_concurrency, target.sampling_seed,
        next((value for name, value in target.headers if name == EXPECTED_HASH_HEADER), None),
        PERCENTILE_METHOD, LATENCY_DEFINITION, thresholds, plan.ladder)


def measure_run(context: RunContext, corpus: Corpus, *, label: str) -> Optional[RunFile]:
    """Measure a run of the corpus in the context: the driver's floor, readiness, warm-up,
    then every pass; return the run file, or None when the context's `stop` was set before a
    pass began (during the warm-up, say).

    A run whose `stop` is set during its passes (see RunContext) is returned with
    complete=False and the passes measured so far.
    """
    import platform
    import socket
    target, plan, guard, capture = context.target, context.plan, context.guard, context.capture
    stop, notify, thresholds = context.stop, context.notify, context.thresholds
    check_plan(plan, len(corpus.prompts))
    started, started_unix = utc_now(), round(time.time(), 3)
    host = host_settings(cpu_affinity(), capture.router_cpu_list or router_cpus(capture),
                         proc_root=capture.proc_root, sys_root=capture.sys_root)
    for warning in host_warnings(host):
        notify(f"warning: {warning}")
    floor = measure_floor(target)
    ready_after = wait_until_ready(target, encode_prompts(target, ["hello"])[0],
                                   plan.wait_ready, stop, show=context.progress.note)
    if context.progress.enabled and context.progress.width:  # the waiting line, ended
        context.progress.draw(f"router ready after {ready_after or 0:.1f} s", True)
    if stop.is_set():
        return None
    payloads = encode_prompts(target, [p.text for p in corpus.prompts])
    expects = [p.expect for p in corpus.prompts]
    warmup = warm_up(target, payloads, plan.warmup, stop, expects)
    if stop.is_set():
        return None
    warn_of_warm_up(target, payloads[0], warmup, stop, notify)
    passes = run_passes(context.with_prompts(tuple(payloads), tuple(expects)))
    run = RunFile(
        label=label, complete=not stop.is_set() and (len(passes) == len(plan.passes)
                                                     or plan.ladder is not None),
        corpus={"path": corpus.path, "sha256": corpus.sha256, "count": len(corpus.prompts)},
        passes=tuple(passes), started_utc=started, started_unix=started_unix,
        ended_utc=utc_now(), url=scrubbed(target.endpoint.shown, capture.secrets),
        model=target.model,
        header_names=tuple(name for name, _ in target.headers), insecure=target.insecure,
        python=platform.python_version(), host=socket.gethostname(),
        driver={"pid": os.getpid(), "cpu_affinity": cpu_affinity()},
        router={"pid": capture.router_pid, **({"session": capture.router_session}
                                               if capture.router_session else {}),
                "cgroup": capture.router_cgroup,
                "container": capture.router_container, "cpus": capture.router_cpu_list,
                "told": router_told(target, capture.router_pid, capture.proc_root, stop)},
        captures=Captures(
            tuple(name for name, _ in capture.probes),
            gpu_tool(capture.gpu).name if capture.gpu else None, tuple(capture.gpu_indexes),
            tuple(capture.histograms),
            scrubbed(capture.metrics.shown, capture.secrets)  # ?key=TOKEN
            if capture.metrics else None, tuple(p.pattern for p in capture.metric_patterns)),
        settings=settings_record(target, plan, guard, thresholds), ready_after_s=ready_after,
        floor=floor, warmup=warmup, host_settings=host, signal_names=target.signal_names)
    return finished_run(run, thresholds, notify)


def finished_run(run: RunFile, thresholds: Thresholds,
                 notify: Callable[[str], None]) -> RunFile:
    """Return a measured run with its result cache finding; say what the whole run shows:
    slow phases, judged against the other passes, and a configuration that changed."""
    for warning in slow_phase_warnings(run.passes, thresholds):
        notify(warning)
    if stall_text(run.passes):
        notify(f"warning: {stall_text(run.passes)}")
    if len(run.config_hashes) > 1:
        notify(f"warning: the router's configuration changed during the run "
               f"(x-vsr-config-hash {' then '.join(h[:12] for h in run.config_hashes)}): a "
               f"reload in the middle of the measurement; its passes mix configurations")
    return run._replace(result_cache=result_cache_finding(run.passes))
