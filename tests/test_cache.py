"""Tests of cache.py: whether a result cache answered a run, by the router's metrics and by
timing; its words, its warnings, the rounds report's section of them and the record's
sentence."""

import pytest

from router_latency.constants import CACHE_ADVICE
from router_latency.errors import Notice, RouterLatencyError
from router_latency.report import BANNER, Lines
from router_latency.requests import pass_name, pass_summary, Request
from router_latency.runfile import Attempt, PassRecord
from router_latency.cache import (cache_section, cache_sentence, cache_text, cache_warnings,
                                  checked_cache, result_cache_finding, timing_cache_test)


def passes_of(*latencies_per_pass, errors=()):
    """PassRecords whose request i has latencies_per_pass[k][i] in pass k."""
    records = []
    for k, latencies in enumerate(latencies_per_pass):
        requests = tuple(Request(i, float(i), value, 200, "d", "timeout" if i in errors
                                    else None) for i, value in enumerate(latencies))
        attempt = Attempt(None, None, "", None, {}, None, {}, pass_summary(requests, 1.0),
                             requests)
        records.append(PassRecord(pass_name(4 ** k), 4 ** k, False, False, attempt))
    return records


@pytest.mark.parametrize("first, later, detected", [
    ([20.0] * 30, [1.0] * 30, True),  # every prompt a hit
    ([20.0] * 30, [1.0] * 16 + [25.0] * 14, True),  # 16 of 30: more than half
    ([20.0] * 30, [1.0] * 15 + [25.0] * 15, False),  # exactly half: not most
    ([20.0] * 30, [30.0] * 30, False),  # later passes slower: more callers at once
    ([20.0] * 30, [11.0] * 30, False),  # faster, but not under half
    ([float(5 + i) for i in range(30)], [float(5 + i) for i in range(30)], False),
])
def test_the_timing_test_calls_a_cache_when_most_prompts_answer_in_under_half(first, later,
                                                                              detected):
    found = timing_cache_test(passes_of(first, later))
    assert found["detected"] is detected and found["compared"] == 30


def test_the_timing_test_needs_prompts_sent_twice():
    assert timing_cache_test(passes_of([20.0] * 30)) is None  # one pass, no repeat
    assert timing_cache_test(passes_of([20.0] * 9, [1.0] * 9)) is None  # too few
    # failed answers are not compared
    assert timing_cache_test(passes_of([20.0] * 12, [1.0] * 12, errors=(0, 1, 2))) is None


@pytest.mark.parametrize("deltas, hits", [
    ({'vsr_model_runtime_result_cache_total{deployment="domain",result="hit"}': 40.0,
      'vsr_model_runtime_result_cache_total{deployment="domain",result="miss"}': 10.0}, 40.0),
    ({'vllm_srun_result_cache_total{model="pii",outcome="hit"}': 3.0}, 3.0),
    ({'vsr_model_runtime_result_cache_total{deployment="domain",result="miss"}': 50.0}, 0.0),
])
def test_the_routers_cache_counters_are_read(deltas, hits):
    records = passes_of([20.0] * 3)
    records = [r._replace(attempt=r.attempt._replace(environment={"metrics": {"deltas": deltas}}))
               for r in records]
    found = result_cache_finding(records)
    assert found["metrics"]["hits"] == hits and found["detected"] is (hits > 0)


def passes_answered(*passes):
    """PassRecords of 30 requests each, pass k's every answer (ms, degraded members)."""
    records = []
    for k, (ms, degraded) in enumerate(passes):
        requests = tuple(Request(i, float(i), ms, 200, "d", None, degraded=degraded)
                         for i in range(30))
        attempt = Attempt(None, None, "", None, {}, None, {}, pass_summary(requests, 1.0),
                          requests)
        records.append(PassRecord(pass_name(4 ** k), 4 ** k, False, False, attempt))
    return records


def test_answers_faster_for_a_skipped_signal_are_not_a_caches_hits():
    # every prompt answered in 20 ms, then again in 1 ms: a cache, unless those skipped a signal
    skipped = (("signal_errors", "classifier:intent", "timeout"),)
    assert timing_cache_test(passes_answered((20.0, ()), (1.0, ())))["detected"] is True
    assert timing_cache_test(passes_answered((20.0, ()), (1.0, skipped))) is None


def test_no_counter_and_no_repeat_is_no_finding_either_way():
    assert result_cache_finding(passes_of([20.0] * 30)) == \
        {"detected": False, "metrics": None, "timing": None}


def test_hits_and_lookups_add_up_over_passes_and_both_caches_and_other_series_are_not_read():
    records = passes_of([20.0] * 3, [20.0] * 3)
    deltas = ({'vllm_sr_runtime_result_cache_total{result="hit"}': 2.0,
               'vllm_sr_runtime_result_cache_total{result="miss"}': 5.0,
               'router_restarts_total': 9.0},
              {'vllm_srun_result_cache_total{outcome="hit"}': 1.0,
               'vllm_srun_result_cache_total_other{outcome="hit"}': 100.0})
    records = [r._replace(attempt=r.attempt._replace(environment={"metrics": {"deltas": d}}))
               for r, d in zip(records, deltas)]
    assert result_cache_finding(records)["metrics"] == {"hits": 3.0, "lookups": 8.0}


def test_a_discarded_pass_is_not_compared():
    records = passes_of([20.0] * 30, [1.0] * 30)
    records[1] = records[1]._replace(discarded=True)
    assert timing_cache_test(records) is None


TIMED = {"compared": 30, "faster": 28, "median_ratio": 0.05, "detected": True}


@pytest.mark.parametrize("finding, text", [
    ({"detected": True, "metrics": {"hits": 1200.0, "lookups": 1500.0}, "timing": TIMED},
     "a result cache answered: seen by the router's metrics (1,200 hits of 1,500 lookups "
     "during the passes) and by timing (28 of 30 prompts sent again answered in under half "
     "the time of their first sending)"),
    ({"detected": True, "metrics": {"hits": 0.0, "lookups": 30.0}, "timing": TIMED},
     "a result cache answered: seen by timing (28 of 30 prompts sent again answered in under "
     "half the time of their first sending)"),
    ({"detected": False, "metrics": {"hits": 0.0, "lookups": 30.0},
      "timing": {**TIMED, "faster": 2, "detected": False}},
     "no result cache detected (metrics: 0 hits; timing: 2 of 30 prompts faster when sent "
     "again)"),
    ({"detected": False, "metrics": None, "timing": None},
     "no result cache detected (metrics not scraped; timing: too few prompts sent twice to "
     "judge)"),
])
def test_a_finding_in_words_says_how_it_was_seen_or_what_was_looked_at(finding, text):
    assert cache_text(finding) == text


def test_a_run_files_finding_is_read_back_checked():
    finding = {"detected": True, "metrics": None, "timing": TIMED}
    assert checked_cache(finding, "r1.json: result_cache") is finding
    assert checked_cache({}, "r1.json: result_cache") == {}  # an old file: nothing said


@pytest.mark.parametrize("raw, where, message", [
    ([], "f: result_cache", "expected an object with detected: true or false"),
    ({"detected": "yes"}, "f: result_cache", "expected an object with detected: true or false"),
    ({"detected": True, "timing": 3}, "f: result_cache.timing", "expected an object or null"),
    ({"detected": False, "metrics": []}, "f: result_cache.metrics", "expected an object or null"),
])
def test_a_finding_of_the_wrong_shape_is_refused_naming_the_field(raw, where, message):
    with pytest.raises(RouterLatencyError) as raised:
        checked_cache(raw, "f: result_cache")
    assert str(raised.value) == f"{message} ({where})"


CACHED = {"detected": True, "metrics": {"hits": 5.0, "lookups": 9.0}, "timing": None}
NONE = {"detected": False, "metrics": None, "timing": None}


def test_a_cache_on_one_side_warns_of_its_runs_and_that_the_comparison_measures_it():
    warnings = cache_warnings([("gpu r1", CACHED), ("cpu r1", NONE), ("gpu r2", CACHED),
                               ("cpu r2", NONE)])
    assert warnings == [
        Notice("result_cache", f"warning: gpu r1, gpu r2: {cache_text(CACHED)}; the figures "
                               f"measure cache hits, not the router's work: {CACHE_ADVICE}"),
        Notice("result_cache", "warning: a result cache answered gpu but not cpu: the "
                               "comparison measures the cache, not the change")]


def test_a_cache_on_both_sides_warns_of_each_and_none_is_no_warning():
    warnings = cache_warnings([("A", CACHED), ("B", CACHED)])
    assert [w.text.split(":")[1] for w in warnings] == [" A", " B"]
    assert cache_warnings([("A", NONE), ("B", NONE)]) == []


def test_the_section_carries_the_warnings_and_shows_them_in_the_pages_banner():
    warnings = cache_warnings([("A", CACHED), ("B", NONE)])
    section = cache_section(warnings)
    assert section.key == "result_caches" and section.notices == tuple(warnings)
    (panel,) = section.page
    assert panel.place == BANNER and panel.items == (Lines(tuple(w.text for w in warnings)),)
    assert cache_section([]).notices == ()


def test_the_records_sentence_names_the_runs_a_cache_answered_or_says_none_did():
    assert cache_sentence([]) == "result caches: none detected (by timing, and by the " \
                                 "router's metrics where they were scraped)"
    assert cache_sentence(["gpu r1", "gpu r3"]) == "**a result cache answered gpu r1, gpu r3**: " \
                                                    "those figures measure cache hits, not " \
                                                    "the router's work"
