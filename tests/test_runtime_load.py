"""Tests of runtime_load.py: the model runtime's load per pass, and where it explains a
change."""

import json

import pytest

from router_latency.runtime_load import runtime_load_section
from conftest import make_run, plain_rounds, rounds

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")

LATER = 'vsr_model_runtime_stage_decision_calls_total{deployment="d",round="later"}'
FIRST = 'vsr_model_runtime_stage_decision_calls_total{deployment="d",round="first"}'


def load_environment(later, dropped=0.0):
    return {"metrics": {"deltas": {FIRST: 101.0, LATER: later,
                                   "vllm_srun_deadline_dropped_questions_total": dropped},
                        "histograms": {},
                        "gauges": {'vsr_model_runtime_replica_ready{deployment="d",'
                                   'replica="0"}': 1.0, "vllm_srun_queue_depth": 3.0}}}


def load_rounds(folder, later_new, p50_new):
    folder.mkdir(exist_ok=True)
    for n in (1, 2, 3):
        make_run(folder / f"r{n}-cpu.json", label="cpu", passes={1: (10, 20, 30, 100)},
                 started_unix=10.0 * n, environment=load_environment(0.0))
        make_run(folder / f"r{n}-gpu.json", label="gpu",
                 passes={1: (p50_new + n * 0.1, 20, 30, 100)},
                 started_unix=10.0 * n + 3, environment=load_environment(later_new))
    return folder


def test_a_new_side_that_splits_stages_is_named_beside_its_slower_rows(tmp_path, cli):
    folder = load_rounds(tmp_path / "split", later_new=101.0, p50_new=13.0)
    result = rounds(cli, folder)
    assert result.code in (1, 3), result.err
    line = next(line for line in result.out.splitlines() if "split request stages" in line)
    assert line.startswith("gpu split request stages in Sequential: 1 later decisions calls "
                           "per request (cpu 0), an admission limit sending a stage's "
                           "questions apart, beside its slower rows: p50 ")
    assert "later calls/req" in result.out
    document = json.loads(rounds(cli, folder, "--format", "json").out)
    assert document["runtime_load"]["sequential"]["gpu"]["later_per_request"] == 1.0
    assert document["runtime_load"]["sequential"]["cpu"]["queue_depth"] == 3.0
    assert document["runtime_load_explains"] == [line]


def test_a_split_stage_that_explains_nothing_is_not_named(tmp_path, cli):
    # the new side split its stages but is not slower: the table, no explanation
    folder = load_rounds(tmp_path / "fast", later_new=101.0, p50_new=9.0)
    result = rounds(cli, folder)
    assert "split request stages" not in result.out and "later calls/req" in result.out


def test_dropped_questions_beside_a_slower_side_are_named(tmp_path, cli):
    folder = tmp_path / "dropped"
    folder.mkdir()
    for n in (1, 2, 3):
        make_run(folder / f"r{n}-cpu.json", label="cpu", passes={1: (10, 20, 30, 100)},
                 started_unix=10.0 * n, environment=load_environment(0.0))
        make_run(folder / f"r{n}-gpu.json", label="gpu", passes={1: (13 + n * 0.1, 20, 30, 100)},
                 started_unix=10.0 * n + 3, environment=load_environment(0.0, dropped=7.0))
    result = rounds(cli, folder)
    assert "gpu's runtime dropped 7 questions at their deadline in Sequential (cpu 0; median " \
           "over the rounds), beside its slower rows: p50 " in result.out


def test_runs_without_the_runtimes_load_have_no_section(tmp_path, cli):
    result = rounds(cli, plain_rounds(tmp_path / "plain"))
    assert "runtime" not in result.out
    assert runtime_load_section.__name__  # imported from its module
