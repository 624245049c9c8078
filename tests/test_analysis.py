"""analysis: what compare and rounds judge from run files: decision agreement and
consistency, refusals of runs that do not belong together, verdicts with their tolerance,
rounds left out, the start order, exit codes."""

import json

import pytest

import router_latency as rl
from conftest import NEW, make_run, three_rounds, two_runs, write_corpus


def test_compare_fail_on_decision_change(tmp_path, cli):
    a, b = two_runs(tmp_path)
    assert cli("compare", a, b, "--fail-on-decision-change").code == 1
    assert cli("compare", a, a, "--fail-on-decision-change").code == 0


def test_compare_refuses_different_corpora_unless_allowed(tmp_path, cli):
    a, b = two_runs(tmp_path, b_sha="b" * 64)
    refused = cli("compare", a, b)
    assert refused.code == 2 and refused.out == ""
    assert refused.err == (f"router-latency: error: the runs used different corpora "
                           f"(aaaaaaaaaaaa and bbbbbbbbbbbb); --allow-corpus-mismatch compares "
                           f"them anyway ({b})\n")
    allowed = cli("compare", a, b, "--allow-corpus-mismatch")
    assert allowed.code == 0
    assert "warning: different corpora: A aaaaaaaaaaaa, B bbbbbbbbbbbb" in allowed.out


def test_compare_refuses_incomplete_runs_unless_allowed(tmp_path, cli):
    a, b = two_runs(tmp_path, complete=False)
    refused = cli("compare", a, b)
    assert refused.code == 2 and "incomplete run" in refused.err
    assert cli("compare", a, b, "--allow-incomplete").code == 0


def test_compare_reports_a_runs_own_inconsistency(tmp_path, cli):
    a = make_run(tmp_path / "a.json", passes={1: (1, 1, 1, 1)}, decisions=["x", "y", "z"])
    b = make_run(tmp_path / "b.json", passes={1: (1, 1, 1, 1)}, decisions=["x", "y", "z"])
    run = rl.load_run(b)
    sequential = run.passes[0]
    requests = list(sequential.requests)
    requests[1] = requests[1]._replace(decision="other")
    extra = sequential._replace(name="c4", concurrency=4,
                                attempt=sequential.attempt._replace(requests=tuple(requests)))
    rl.write_atomic(b, rl.dump_run(run._replace(passes=(sequential, extra))))
    out = cli("compare", a, b).out
    assert "B consistency: 1 inputs changed decision between passes (#1)" in out


def test_compare_refuses_a_corpus_the_runs_did_not_use(tmp_path, cli):
    a, b = two_runs(tmp_path)
    corpus = write_corpus(tmp_path / "c.json", ["first", "second", "third"])
    result = cli("compare", a, b, "--corpus", corpus)
    assert result.code == 2 and result.out == ""
    assert "not the corpus of the runs" in result.err and str(corpus) in result.err
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert cli("compare", a, b, "--corpus", broken).code == 2


def test_rounds_passes_when_nothing_regressed(tmp_path, cli):
    for number in (1, 2, 3):
        make_run(tmp_path / f"r{number}-cpu.json", passes={1: (10, 20, 30, 100)})
        make_run(tmp_path / f"r{number}-gpu.json",
                 passes={1: (5 + number * 0.1, 10 + number * 0.1, 15, 200 + number)})
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert result.code == 0
    assert result.out.splitlines()[-1] == "verdict: PASS"


def test_rounds_strict_fails_on_inconclusive_rows(tmp_path, cli):
    for number, new_p50 in enumerate((9.0, 11.5, 10.0), 1):
        make_run(tmp_path / f"r{number}-cpu.json", passes={1: (10, 20, 30, 100)})
        make_run(tmp_path / f"r{number}-gpu.json", passes={1: (new_p50, 20, 30, 100)})
    args = ["rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"]
    plain = cli(*args)
    assert plain.code == 0 and plain.out.splitlines()[-1] == "verdict: PASS (1 inconclusive rows)"
    assert cli(*args, "--strict").code == 3


def test_rounds_tolerance_moves_the_verdict(tmp_path, cli):
    for number, new_p50 in enumerate((10.7, 10.75, 10.8), 1):  # [+6.3 %, +8.7 %]
        make_run(tmp_path / f"r{number}-cpu.json", passes={1: (10, 20, 30, 100)})
        make_run(tmp_path / f"r{number}-gpu.json", passes={1: (new_p50, 20, 30, 100)})
    args = ["rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"]
    assert cli(*args).code == 1
    assert cli(*args, "--tolerance", "10").code == 0


@pytest.mark.parametrize("metric,low,high,expected", [
    ("p50_ms", 0.6, 0.8, "regression"),     # beyond +5 % of 10
    ("p50_ms", 0.1, 0.4, "same"),           # worse, but within tolerance
    ("p50_ms", -0.4, -0.1, "better"),       # wholly better, even if small
    ("p50_ms", -0.8, 0.6, "inconclusive"),
    ("req_per_s", -0.8, -0.6, "regression"),  # fewer req/s is worse
    ("req_per_s", 0.6, 0.8, "better"),
])
def test_verdict_of(metric, low, high, expected):
    diff = rl.Interval((low + high) / 2, low, high, 3)
    assert rl.verdict_of(metric, diff, 10.0, 5.0) == expected


def test_rounds_leaves_out_rounds_with_a_discarded_pass(tmp_path, cli):
    three_rounds(tmp_path)
    make_run(tmp_path / "r4-cpu.json", passes={1: (10, 20, 30, 100), 4: (1, 1, 1, 1)},
             discarded=(4,))
    make_run(tmp_path / "r4-gpu.json", passes={1: (1, 1, 1, 1)})
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert result.out.splitlines()[0].startswith("rounds: 3 used (r1, r2, r3)")
    assert "left out: r4: r4-cpu.json: Conc 4 pass discarded (load above the limit)" in result.out


def test_rounds_refuses_incomplete_runs_unless_allowed(tmp_path, cli):
    three_rounds(tmp_path)
    make_run(tmp_path / "r3-gpu.json", passes={1: NEW[2]}, complete=False)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert "left out: r3: r3-gpu.json: incomplete run (--allow-incomplete uses it)" in result.out
    allowed = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                  "--allow-incomplete")
    assert allowed.out.startswith("rounds: 3 used")


def test_rounds_error_rows_of_bad_folders(tmp_path, cli):
    make_run(tmp_path / "r1-cpu.json")
    make_run(tmp_path / "r1-gpu.json")
    single = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert single.code == 2
    assert single.err == \
        f"router-latency: error: need at least 2 usable rounds, have 1 ({tmp_path})\n"
    make_run(tmp_path / "r2-cpu.json")
    missing = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert missing.code == 2 and missing.err == (
        f"router-latency: error: round 2 has no gpu side (r2-gpu.json) "
        f"({tmp_path / 'r2-cpu.json'})\n")
    make_run(tmp_path / "r2-gpu.json")
    make_run(tmp_path / "r02-gpu.json")
    duplicate = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert duplicate.code == 2 and "round 2 of side gpu twice" in duplicate.err
    (tmp_path / "r02-gpu.json").unlink()
    make_run(tmp_path / "r2-gpu.json", sha="b" * 64)
    mismatch = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert mismatch.code == 2 and "files of different corpora" in mismatch.err
    assert "r2-gpu.json" in mismatch.err


def test_rounds_agreement_counts_failed_requests_as_disagreeing(tmp_path, cli):
    for number in (1, 2):
        make_run(tmp_path / f"r{number}-cpu.json")
        make_run(tmp_path / f"r{number}-gpu.json", errors={"timeout": 1} if number == 2 else None)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert "decisions r2: 2/3 agree; differ: #2 d -> (no decision)" in result.out
    assert result.code == 1


def test_rounds_warns_when_the_start_order_is_unbalanced(tmp_path, cli):
    for number in (1, 2, 3):
        make_run(tmp_path / f"r{number}-cpu.json", started_unix=100.0 * number)
        make_run(tmp_path / f"r{number}-gpu.json", started_unix=100.0 * number + 50)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "json")
    order = json.loads(result.out)["order"]
    assert order["base_first"] == [1, 2, 3] and order["new_first"] == []
    assert order["balanced"] is False
    text = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu").out
    assert "order: cpu first in r1, r2, r3; gpu first in none" in text
    assert "warning: start order unbalanced: rounds should alternate which side starts first" \
        in text
