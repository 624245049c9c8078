"""Tests of versions.py: what router versions say differently: runtime names, /ready,
sampling."""

import json

import pytest

from router_latency.versions import ready_words, runtime_name_warning


@pytest.mark.parametrize("series, environ, warned", [
    (["vllm_srun_queue_duration_seconds_count"], {"VLLM_SR_RUNTIME_COMMAND": "x"}, True),
    (["vllm_srun_queue_duration_seconds_count"], {"VLLM_SRUN_COMMAND": "x"}, False),
    (["vllm_srun_queue_duration_seconds_count"], {}, False),
    (["llm_signal_extraction_latency_seconds_count"], {"VLLM_SRUN_COMMAND": "x"}, False),
    # both names set: whichever the router reads is set
    (["vllm_sr_runtime_queue_duration_seconds_count"],
     {"VLLM_SRUN_COMMAND": "x", "VLLM_SR_RUNTIME_COMMAND": "y"}, False),
])
def test_the_runtime_name_warning(series, environ, warned):
    assert (runtime_name_warning(series, environ) is not None) is warned


def test_ready_words_say_the_phase_and_the_pending_models():
    body = json.dumps({"status": "starting", "ready": False, "phase": "loading_models",
                       "pending_models": ["a", "b", "c", "d", "e", "f"], "ready_models": 2,
                       "total_models": 8}).encode()
    assert ready_words(body) == ("phase loading_models; 2 of 8 models ready; pending: a, b, c, "
                                 "d and 2 more")
    assert ready_words(b'{"status":"starting","ready":false}') == ""
    assert ready_words(b"not json") == "" and ready_words(None) == ""


def test_ready_words_read_what_a_router_may_send_wrong_without_failing():
    # a pending_models that is no list ended --wait-ready with a TypeError; a string was
    # listed letter by letter; a bidi control reached the terminal
    assert ready_words(b'{"phase": "loading", "pending_models": 3}') == "phase loading"
    assert ready_words(b'{"phase": "loading", "pending_models": "abc"}') == "phase loading"
    assert ready_words('{"phase": "lo\u202ead"}'.encode()) == "phase lo\\u202ead"


@pytest.mark.parametrize("body", [b"[" * 5000 + b"]" * 5000, b'{"phase":' * 3000])
def test_a_ready_body_nested_past_the_reader_says_nothing(body):
    assert ready_words(body) == ""  # a RecursionError, a traceback, on main
