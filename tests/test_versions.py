"""Tests of versions.py: what router versions say differently: runtime names, /ready,
sampling."""

import json
import re
from pathlib import Path

import pytest

from router_latency import versions
from router_latency.constants import CACHE_ADVICE
from router_latency.versions import RUNTIME_NAMES, ready_words, runtime_name_warning


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
    body = json.dumps({"status": "starting", "ready": False, "phase": "downloading_models",
                       "pending_models": ["a", "b", "c", "d", "e", "f"], "ready_models": 2,
                       "total_models": 8}).encode()
    assert ready_words(body) == ("phase downloading_models; 2 of 8 models ready; pending: a, b, "
                                 "c, d and 2 more")
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


def _runtime_table():
    """Return the rows of docs/gpu-node.md's "Which names a router reads" table: builds (the
    first column without its note), binary, command variable, result cache, metrics prefix."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "gpu-node.md").read_text()
    section = text[text.index("### Which names a router reads"):]
    rows = []
    for line in section.splitlines():
        cells = [c.strip().replace("`", "") for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and "#" in cells[0]:
            builds = re.sub(r"\s*\(.*\)$", "", cells[0])
            rows.append((builds, cells[1], cells[2], cells[3], cells[4].rstrip("*")))
        elif rows:
            break
    return rows


def test_runtime_names_are_the_docs_table():
    rows = _runtime_table()
    assert len(rows) == 2
    assert {name: tuple(entry) for name, entry in RUNTIME_NAMES.items()} == {
        binary: (builds, prefix, (command, cache))
        for builds, binary, command, cache, prefix in rows}
    # the comment above RUNTIME_NAMES says each name with its builds, and what came before
    source = Path(versions.__file__).read_text()
    comment = " ".join(line.lstrip("# ") for line in source.splitlines()
                       if line.startswith("#"))
    for builds, binary, command, _, prefix in rows:
        sentence = re.search(rf"{re.escape(builds)}[^;]*?start `([\w-]+)`", comment)
        assert sentence and sentence.group(1) == binary, (builds, binary)
    first = min(re.findall(r"#(\d+)", " ".join(row[0] for row in rows)))
    assert f"before #{first} had no built-in runtime" in comment


def test_the_cache_advice_names_each_variable_with_its_builds():
    # "VLLM_SR_RUNTIME_RESULT_CACHE=0 on newer routers" had the builds backwards
    said = dict(re.findall(r"([A-Z_]+)=0 \(([^)]*)\)", CACHE_ADVICE))
    rows = _runtime_table()
    assert set(said) == {cache for _, _, _, cache, _ in rows}
    for builds, _, _, cache, _ in rows:
        assert builds in said[cache], (cache, said[cache])
    newest = max(rows, key=lambda row: row[0].startswith("from"))
    assert "newest" in said[newest[3]]
