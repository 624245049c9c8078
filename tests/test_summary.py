"""Tests of summary.py: what one run's summary says below its per-pass table, as sections."""

from router_latency.captured import RouterCpu
from router_latency.requests import pass_summary, Request
from router_latency.runfile import Attempt, PassRecord
from router_latency.summary import run_summary
from conftest import length_passes, LENGTHS, THRESHOLDS

SKIPPED = (("signal_errors", "classifier:intent", "timeout"),)
UNKNOWN = 'vsr_model_runtime_unknown_answers_total{reason="empty"}'


def noted_pass():
    """Conc 4: six plain answers, two failed (one with the router's code), three malformed
    (two for one reason), a degraded one, two expected rejections and a surprise."""
    requests = tuple(Request(i, float(i), 10.0, 200, "math", None) for i in range(6)) + (
        Request(6, 6.0, 30.0, 502, None, "http_5xx", code="UPSTREAM"),
        Request(7, 7.0, 30.0, 502, None, "http_5xx"),
        Request(8, 8.0, 5.0, 200, None, "malformed", reason="not one JSON document"),
        Request(9, 9.0, 5.0, 200, None, "malformed", reason="not one JSON document"),
        Request(10, 10.0, 5.0, 200, None, "malformed", reason="no decision"),
        Request(11, 11.0, 2.0, 403, None, None, code="JAILBREAK", outcome="expected_rejection"),
        Request(12, 12.0, 4.0, 403, None, None, outcome="expected_rejection"),
        Request(13, 13.0, 9.0, 200, "code\x1b", None, outcome="unexpected_routing"),
        Request(14, 14.0, 8.0, 200, "math", None, degraded=SKIPPED),
    )
    attempt = Attempt(None, None, "", None, {}, None, {"metrics": {"deltas": {UNKNOWN: 3.0}}},
                      pass_summary(requests, 1.0), requests,
                      router_cpu=RouterCpu(notes=("no /proc/stat",)))
    return PassRecord("c4", 4, False, False, attempt)


def test_a_passs_notes_say_what_failed_what_was_odd_and_what_was_expected():
    notes, gpu_state, sampled = run_summary([noted_pass()])
    assert notes.key == "pass_notes" and not notes.apart
    assert list(notes.blocks) == [
        "errors in Conc 4: http_5xx: UPSTREAM 1, http_5xx 1, malformed 3",
        "malformed answers in Conc 4: not one JSON document (2) and 1 other reason",
        "degraded in Conc 4: 1 answer skipped a signal or a decision (classifier:intent "
        "timeout 1); left out of the percentiles",
        "unknown answers in Conc 4 (the router's vsr_model_runtime_unknown_answers_total): "
        "empty 3",
        "router cpu in Conc 4: no /proc/stat",
        # p50 of 2 and 4 ms; a code, or the status where the router gave none
        "expected rejections in Conc 4: 2 (HTTP 403 1, JAILBREAK 1), p50 3.00 ms; not in the "
        "figures above",
        "surprise in Conc 4: 1 prompt expected a rejection and got routed: #13 code\\u001b",
    ]
    # no GPU read or sampled: their sections stand empty, in their order
    assert (gpu_state.key, gpu_state.blocks) == ("gpu_state", ())
    assert (sampled.key, sampled.blocks) == ("gpu_sampled", ())


def test_a_window_that_slowed_down_is_named_with_its_evidence_and_a_steady_run_says_nothing():
    assert run_summary(length_passes(LENGTHS), THRESHOLDS)[0].blocks == ()
    slowed = length_passes(LENGTHS, (1, 3, 4.0))  # Conc 4's 4th window 4x slower
    (line,) = run_summary(slowed, THRESHOLDS)[0].blocks
    assert line.startswith("slow phase in Conc 4: window 4 of 12 (from 0.1 s): p95 4.00x what "
                           "its prompts take elsewhere in the run")
    # a discarded pass has no timings to judge
    slowed[1] = slowed[1]._replace(discarded=True)
    assert run_summary(slowed, THRESHOLDS)[0].blocks == ()
