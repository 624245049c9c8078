"""Rules live in analysis, renderers only render: run's exit rule, the overload count, the
spread of a row, and the record's sentences, each computed once and printed by a renderer."""

import math
import signal

import pytest

from router_latency.constants import PREVIEW_PATH, ROUTER_MAX_CONCURRENCY
from router_latency.stats import sample_spread
from router_latency.runfile import load_run, RunSettings
from router_latency.gate import GateSettings
from router_latency.rounds import (find_round_files, judge_rounds, not_found_only, Overload,
                                   run_outcome, run_overload)
from router_latency.cache import cache_sentence
from router_latency.record import (agreement_sentence, cached_runs, failed_sentence,
                                   faults_sentence, range_sentences, record_section,
                                   record_sentences, side_ranges, surroundings_sentences)
from router_latency.render_text import format_plan, overload_note
from router_latency.command_run import run_warnings
from conftest import make_run, three_rounds


def run_with(tmp_path, *, errors=None, complete=True, passes=None):
    return load_run(make_run(tmp_path / "r.json", errors=errors, complete=complete,
                                passes=passes))


@pytest.mark.parametrize("errors, max_errors, expected", [
    (None, 0, (0, "")),
    ({"timeout": 2}, 2, (0, "")),
    ({"timeout": 2}, 1, (1, "2 requests failed (--max-errors 1)")),
    ({"timeout": 1, "http_5xx": 2}, 0, (1, "3 requests failed (--max-errors 0)")),
])
def test_run_fails_when_more_requests_failed_than_max_errors(tmp_path, errors, max_errors,
                                                             expected):
    assert run_outcome(run_with(tmp_path, errors=errors), max_errors) == expected


def test_run_counts_the_failures_of_every_measured_pass_and_no_discarded_one(tmp_path):
    run = run_with(tmp_path, errors={"timeout": 1},
                   passes={1: (10, 12, 13, 100), 4: (11, 13, 14, 300)})
    assert run_outcome(run, 1) == (1, "2 requests failed (--max-errors 1)")
    kept = run._replace(passes=(run.passes[0], run.passes[1]._replace(discarded=True)))
    assert run_outcome(kept, 1) == (0, "")


@pytest.mark.parametrize("signum, code", [(None, 130), (signal.SIGINT, 130),
                                          (signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                          (int(signal.SIGTERM), 143)])
def test_an_interrupted_run_exits_with_its_signals_code_whatever_failed(tmp_path, signum,
                                                                        code):
    run = run_with(tmp_path, errors={"timeout": 5}, complete=False)
    assert run_outcome(run, 0, signum) == (code, "")


def overloaded(run, count):
    item = run.passes[0]
    requests = tuple(r._replace(status=429, decision=None, error="http_4xx", code="OVERLOADED")
                     if i < count else r for i, r in enumerate(item.requests))
    attempt = item.attempt._replace(requests=requests)
    return run._replace(passes=(item._replace(attempt=attempt),) + run.passes[1:])


@pytest.mark.parametrize("shed, settings, expected", [
    (0, {"router_max_concurrency": 4, "timeout_s": 5.0}, None),
    (1, {"router_max_concurrency": 4, "timeout_s": 5.0}, Overload(1, 4, 5.0)),
    (3, {}, Overload(3, ROUTER_MAX_CONCURRENCY, None)),
    (2, {"router_max_concurrency": 1, "timeout_s": 10.0}, Overload(2, 1, 10.0)),
])
def test_the_overload_is_counted_in_analysis_and_read_with_its_settings(tmp_path, shed,
                                                                        settings, expected):
    run = overloaded(run_with(tmp_path), shed)._replace(settings=RunSettings(**settings))
    assert run_overload(run) == expected
    lines = overload_note(run_overload(run))
    assert len(lines) == (0 if expected is None else 2)
    if expected is not None:
        assert lines[0].startswith(f"{shed} request{'s' if shed > 1 else ''} answered 429 "
                                   f"OVERLOADED")
        assert f"declared {expected.declared_limit} with --router-max-concurrency" in lines[0]
        assert ("s here)" in lines[1]) == (expected.timeout_s is not None)


@pytest.mark.parametrize("base", [(10, 20, 30, 100), (11, 19, 35, 90), (10, 20, 30, 101)])
def test_each_row_carries_the_spread_the_plan_prints(tmp_path, base):
    three_rounds(tmp_path, base=base)
    files = find_round_files(str(tmp_path), "cpu", "gpu")
    runs = {n: {s: load_run(p) for s, p in sides.items()} for n, sides in files.items()}
    report = judge_rounds(runs, "cpu", "gpu", GateSettings())
    for row in report.rows:
        logs = [math.log(n / b) for b, n in zip(row.base_values, row.new_values)]
        assert row.spread == sample_spread(logs)
    # the plan prints the field: a row given another spread prints it
    # (100 x the log standard deviation, as the noise lines take it apart)
    changed = report._replace(rows=tuple(r._replace(spread=0.5) for r in report.rows))
    table = [line.split() for line in format_plan(changed)[3:3 + len(report.rows)]]
    assert all("50.0%" in cells for cells in table)


def record_of(tmp_path, **options):
    three_rounds(tmp_path, **options)
    return record_section("s", str(tmp_path), "cpu", "gpu", GateSettings())


@pytest.mark.parametrize("flagged", [False, True])
def test_the_records_sentences_are_one_function_per_kind(tmp_path, flagged):
    section = record_of(tmp_path, flagged=flagged)
    report = section.report
    ranges = {side: side_ranges(section, side) for side in ("cpu", "gpu")}
    sentences = record_sentences(section)
    ranged = range_sentences(report, ranges)
    assert len(ranged) == (0 if flagged else 2)  # flagged: too few rounds for any row
    assert sentences == ranged + [agreement_sentence(report), failed_sentence(report),
                                  faults_sentence(report)] \
        + surroundings_sentences(report, ranges) + [cache_sentence(cached_runs(section))]
    assert sentences[0 if flagged else 1].startswith(
        "101/101 inputs agreed" if flagged else "Sequential p95 per round: cpu 20.0 ms, gpu ")
    surroundings = dict(s.split(": ", 1) for s in surroundings_sentences(report, ranges))
    assert surroundings["GPU memory"].startswith("gpu ") and "MiB" in surroundings["GPU memory"]
    assert surroundings["other processes on the router's CPUs"] == "not captured"
    assert failed_sentence(report) == "failed requests: none"
    assert cache_sentence(cached_runs(section)).startswith("result caches: none detected")


def test_each_sentence_says_what_its_data_holds(tmp_path):
    section = record_of(tmp_path)
    report = section.report
    errors = tuple(e._replace(counts=tuple((n, 2, 3) for n, _, _ in e.counts))
                   for e in report.errors)
    assert failed_sentence(report._replace(errors=errors)) == \
        f"failed requests: cpu {2 * len(report.used) * len(errors)}, " \
        f"gpu {3 * len(report.used) * len(errors)}"
    faulted = tuple(row._replace(faults=2.0) if row.round == report.used[0] else row
                    for row in report.environment)
    assert faults_sentence(report._replace(environment=faulted)).startswith(
        f"restarts and device faults: r{report.used[0]} ")
    # none seen is said only where the series were read: else not captured, or in how many
    rows = report.environment
    for faults, said in (([None] * len(rows), "not captured"), ([0.0] * len(rows), "none"),
                         ([0.0] + [None] * (len(rows) - 1),
                          f"none in the 1 of {len(rows)} runs that captured them")):
        read = tuple(row._replace(faults=f) for row, f in zip(rows, faults))
        assert faults_sentence(report._replace(environment=read)) == \
            f"restarts and device faults: {said}"
    disagree = tuple(a._replace(agree=a.total - 1) if a.round == report.used[-1] else a
                     for a in report.agreement)
    assert agreement_sentence(report._replace(agreement=disagree)) == \
        f"decisions agreed in {len(report.used) - 1} of {len(report.used)} rounds; " \
        f"r{report.used[-1]}: {disagree[-1].agree}/{disagree[-1].total}"


def answered(run, statuses):
    item = run.passes[0]
    requests = tuple(r._replace(status=statuses[i % len(statuses)],
                                error=None if 200 <= statuses[i % len(statuses)] < 300
                                else "http_4xx")
                     for i, r in enumerate(item.requests))
    return run._replace(passes=(item._replace(attempt=item.attempt._replace(
        requests=requests)),))


@pytest.mark.parametrize("statuses, expected", [
    ((404,), 101), ((404, 400), 51), ((404, 200), 0), ((200,), 0), ((400,), 0)])
def test_a_wrong_path_is_counted_only_where_nothing_was_routed(tmp_path, statuses, expected):
    run = answered(run_with(tmp_path), statuses)
    assert not_found_only(run) == expected
    said = [line for line in run_warnings(run) if "404 Not Found" in line]
    assert said == ([f"{expected} requests answered 404 Not Found at {run.url}: is the path "
                     f"right? (a URL without a path gets {PREVIEW_PATH})"]
                    if expected else [])
