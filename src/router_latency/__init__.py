"""Latency gate for semantic LLM routers.

Measures a router's /api/v1/routing/preview endpoint with a fixed prompt corpus, compares two
runs, and judges interleaved rounds of two configurations with paired Student-t intervals.

    router-latency corpus --repo ../semantic-router --out corpus.json
    router-latency run --url http://127.0.0.1:8801 --corpus corpus.json --out r1.json --label cpu
    router-latency compare r1-cpu.json r1-rocm.json
    router-latency rounds --dir results --base cpu --new rocm
    router-latency simulate --port 8801
    router-latency demo

Exit codes: 0 all good (rounds: every gated row shown within the tolerance); 1 the measured
result failed the gate (a row shown worse, decision change, failed requests); 2 the input or
the invocation was wrong; 3 inconclusive (a gated row decided neither way, too few usable
rounds, a failed base side, an undecided --sequential look); 130, 143 and 129 when a command
was interrupted by SIGINT, SIGTERM or SIGHUP (what a run measured is saved; no file is left
half-written).

Standard library only, Python 3.9 or newer. Developed as the package src/router_latency/,
whose modules stand in named layers read from the ground up, each importing only from lower
layers or from modules earlier in its own, and naming in __all__ what later modules use;
shipped as one file, router_latency.py, that tools/amalgamate.py joins from them in that
order:

  base facts and words:
    constants          what several modules use: paths, limits, exit codes
    errors             the one error type and the checks of values read from files
    words              how counts, figures and decisions are written
    report             the report model: tables, blocks, sections; outside text escaped once
  statistics:
    stats              t quantiles, intervals, percentiles, Holm and the false discoveries
    sequential         group-sequential boundaries: alpha spent per look, t criticals
    variance           a row's noise in one nested model: parts, intervals, df
  records and files:
    files              reading, JSON, atomic writes
    corpus             prompts from a router repo's E2E data, the corpus file
    gpu                GPU reading: the run file's readings, the tools' parsers, the series
    prometheus         the router's metrics: the text exposition, deltas, histograms
    cache              whether a result cache answered a run: by metrics, by timing
    versions           what router versions say differently: runtime names, /ready, sampling
    degraded           answers that skipped a signal: kept and counted
    requests           a pass's requests: each one's record, outcomes counted, the summary
    phases             slow phases within a pass: windows, which stand out, what they share
    captured           what a pass captured around it: probes, load, metrics, router CPU
    instance           which instance of a pool a run measured, and what could set it apart
    runfile            the run file's records: their writer and reader side by side
    stall              the head-and-body stall: bodies late behind their heads (Nagle)
    pools              a side's round on several instances read as one, paired in the round
    roundset           Rounds: interleaved rounds' run files per side, the sides, the used
    ladder             the ladder: when to stop climbing, plateau, knee, capacity, cost
  the wire and the pass:
    client             the HTTP/1.1 client: endpoints, request bytes, the response parser
    meaning            what an answer means: decision, error, signal times, sampled, degraded
    host               /proc, cgroup CPU, cpufreq, load: the host as the kernel shows it
    captures           before and after a pass: probes, the GPU tool, the scrape, router CPU
    telemetry          the sampler through a pass (GPU tool, CPU, load); energy; coincided
    answers            a pass's held answers: classified, scrubbed, read after the pass
    passloop           the pass loop: targets, schedules, one selector, one thread, records
    readiness          before measuring: the router's readiness, the floor, warm-up
    measuring          the run's plan, progress, passes and warnings, measure_run()
    simulator          a routing-preview server answering as the router does
  judging:
    gate               the gate's rule: rows' words, the family-wise test, the look, the outcome
    noise              the spread taken apart (within, between), a plan in node time, speed groups
    speeds             what separates the instances' speed groups (a GPU, cores, ...)
    judged             a judged row as every output writes it: its change, its JSON
    attribution        where the time goes: a pass's time by part
    runtime_load       the model runtime's load per pass: split stages, replicas, queue, drops
    compare            compare_runs(): two runs as one report object
    slower             which inputs, decisions and prompt lengths got slower
    environment        each round's surroundings, the start order, outlier rounds
    capacity           the ladders over rounds: capacity per side, the rows they derive
    outcomes           what requests came to: decisions agreeing, failed, degraded, sampled
    summary            one run's summary below its table: pass notes, GPU state, sampled GPUs
  the report and its sections:
    rounds             judge_rounds(): interleaved rounds as one report object
    record             judged rounds folders as a record's sections
    history            the store across commits, the trend, the drift and its gate
  renderers:
    render_text        the reports as aligned text tables
    render_markdown    the reports as Markdown for a pull request
    render_json        the reports as JSON
    render_junit       JUnit XML and CSV
    page               one HTML file with SVG plots from a rounds report
    history_render     the history report as text, Markdown, JSON and a page
  commands:
    formats            each command's output formats, one table per command
    console            what a command prints, on stdout and stderr, and the signals it hears
    command_options    the argument types and option blocks several commands share
    command_corpus     corpus: its parser and handler
    command_run        run: its parser, its argument types, its arguments mapped, its handler
    command_compare    compare: its parser and handler
    command_rounds     rounds: its parser, the --gate list, its handler, the job summary
    command_record     record: its parser, --section and its handler
    command_history    history: its parser, its argument types and its handler (add, report)
    command_simulate   simulate: its parser, its argument types and its handler
    command_demo       demo: the whole method on two simulated routers, its parser and handler
    cli                the parser built from the commands' registrations, main()
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List

from .constants import __version__

# the package's face, each name's module: imported when the name is first asked for (PEP 562),
# so that `python -m router_latency` and the console script install their interrupt handler
# (__main__.run) before the rest of the package loads, as the one file does at its top
_HOMES: Dict[str, str] = {
    "RouterLatencyError": "errors", "Interval": "stats", "t_quantile": "stats",
    "paired_interval": "stats", "ratio_interval": "stats", "percentile": "stats",
    "extract_prompts": "corpus", "build_corpus": "corpus", "pass_summary": "runfile",
    "load_run": "runfile", "dump_run": "runfile", "Target": "passloop",
    "LoadGuard": "measuring", "RunPlan": "measuring", "RunContext": "measuring",
    "plan_passes": "measuring", "measure_run": "measuring", "compare_runs": "compare",
    "judge_rounds": "rounds", "start_simulator": "simulator", "main": "cli",
    "console_main": "cli",
}

__all__ = [
    "RouterLatencyError", "Interval", "t_quantile", "paired_interval", "ratio_interval",
    "percentile", "extract_prompts", "build_corpus", "pass_summary", "load_run", "dump_run",
    "Target", "LoadGuard", "RunPlan", "RunContext", "plan_passes", "measure_run", "compare_runs",
    "judge_rounds", "start_simulator", "main",
]


def __getattr__(name: str) -> Any:
    """Return a name of the package's face, its module imported the first time."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> List[str]:
    return sorted({*globals(), *_HOMES})
