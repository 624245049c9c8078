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


A, B, C = "a" * 64, "b" * 64, "c" * 64


def with_hashes(path, *hashes):
    """Give every pass of a run file these x-vsr-config-hash values, through the tool's writer;
    return the run as read back."""
    run = rl.load_run(path)
    passes = tuple(p._replace(attempt=p.attempt._replace(config_hashes=hashes))
                   for p in run.passes)
    rl.write_atomic(path, rl.dump_run(run._replace(passes=passes)))
    return rl.load_run(path)


def hashed_rounds(folder, base_hashes, new_hashes):
    """Return {round: {side: RunFile}} of rounds whose sides answered with these hashes (a
    tuple per round: several values are a change within that run)."""
    return {n: {side: with_hashes(make_run(folder / f"r{n}-{side}.json"), *values)
                for side, values in (("cpu", b), ("gpu", g))}
            for n, (b, g) in enumerate(zip(base_hashes, new_hashes), 1)}


def test_config_hash_findings_names_each_side_and_warns_when_they_are_the_same(tmp_path):
    hashes, warnings = rl.config_hash_findings(
        hashed_rounds(tmp_path, [(A,), (A,)], [(B,), (B,)]), "cpu", "gpu")
    assert hashes == {"cpu": (A,), "gpu": (B,)} and warnings == ()
    hashes, warnings = rl.config_hash_findings(
        hashed_rounds(tmp_path, [(A,), (A,)], [(A,), (A,)]), "cpu", "gpu")
    assert hashes == {"cpu": (A,), "gpu": (A,)}
    assert warnings == ("WARNING: base cpu and new gpu answered with the same configuration "
                        "(x-vsr-config-hash aaaaaaaaaaaa): the gate compares a configuration "
                        "with itself; check which configuration each side runs",)


def test_config_hash_findings_without_hashes(tmp_path):
    assert rl.config_hash_findings(hashed_rounds(tmp_path, [(), ()], [(), (B,)]), "cpu",
                                   "gpu") == ({"cpu": (), "gpu": (B,)}, ())


@pytest.mark.parametrize("base_hashes,where,listed", [
    ([(A,), (C,)], "r2-cpu.json", "aaaaaaaaaaaa in r1; cccccccccccc in r2"),  # between rounds
    ([(A,), (A, C)], "r2-cpu.json", "aaaaaaaaaaaa in r1, r2; cccccccccccc in r2"),  # within
])
def test_config_hash_findings_refuses_a_side_whose_configuration_changed(
        tmp_path, base_hashes, where, listed):
    runs = hashed_rounds(tmp_path, base_hashes, [(B,), (B,)])
    with pytest.raises(rl.RouterLatencyError) as refused:
        rl.config_hash_findings(runs, "cpu", "gpu")
    message = (f"side cpu answered with 2 configurations (x-vsr-config-hash {listed})")
    assert refused.value.args[0] == (f"{message}: its configuration changed between or within "
                                     f"rounds; --allow-config-change judges it anyway")
    assert refused.value.where == str(tmp_path / where)
    hashes, warnings = rl.config_hash_findings(runs, "cpu", "gpu", allow_change=True)
    assert hashes["cpu"] == (A, C) and warnings == (f"warning: {message}",)


def test_rounds_shows_both_configurations_and_refuses_a_change(tmp_path, cli):
    hashed_rounds(tmp_path, [(A,), (A,), (C,)], [(B,), (B,), (B,)])
    args = ["rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"]
    refused = cli(*args)
    assert refused.code == 2 and refused.out == ""
    assert refused.err == (
        "router-latency: error: side cpu answered with 2 configurations (x-vsr-config-hash "
        "aaaaaaaaaaaa in r1, r2; cccccccccccc in r3): its configuration changed between or "
        f"within rounds; --allow-config-change judges it anyway ({tmp_path / 'r3-cpu.json'})\n")
    allowed = cli(*args, "--allow-config-change")
    assert allowed.code == 0
    assert allowed.out.splitlines()[-3:] == [
        "configuration (x-vsr-config-hash): cpu aaaaaaaaaaaa, cccccccccccc; gpu bbbbbbbbbbbb",
        "warning: side cpu answered with 2 configurations (x-vsr-config-hash aaaaaaaaaaaa in "
        "r1, r2; cccccccccccc in r3)", "verdict: PASS"]
    report = json.loads(cli(*args, "--allow-config-change", "--format", "json").out)
    assert report["config_hashes"] == {"cpu": [A, C], "gpu": [B]}


def test_rounds_warns_loudly_when_both_sides_run_the_same_configuration(tmp_path, cli):
    hashed_rounds(tmp_path, [(A,), (A,)], [(A,), (A,)])
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "json")
    assert result.code == 0
    warning = ("WARNING: base cpu and new gpu answered with the same configuration "
               "(x-vsr-config-hash aaaaaaaaaaaa): the gate compares a configuration with "
               "itself; check which configuration each side runs")
    assert result.err == f"router-latency: {warning}\n"
    assert json.loads(result.out)["config_warnings"] == [warning]


def with_requests(path, edit):
    """Rewrite the requests of every pass of a run file with edit(list of Requests)."""
    run = rl.load_run(path)
    passes = []
    for item in run.passes:
        requests = edit(list(item.requests))
        summary = item.summary._replace(**rl.count_outcomes(requests))
        passes.append(item._replace(attempt=item.attempt._replace(requests=tuple(requests),
                                                                  summary=summary)))
    rl.write_atomic(path, rl.dump_run(run._replace(passes=tuple(passes))))
    return path


def rejected_last(requests):
    requests[-1] = requests[-1]._replace(status=400, decision=None, code="INVALID_INPUT",
                                         outcome="expected_rejection")
    return requests


def test_expected_rejections_stay_out_of_decision_agreement(tmp_path, cli):
    # cpu rejects prompt 2 as its boundary case allows; gpu routes it: not a disagreement
    for number in (1, 2):
        with_requests(make_run(tmp_path / f"r{number}-cpu.json"), rejected_last)
        make_run(tmp_path / f"r{number}-gpu.json")
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert result.code == 0
    assert "decisions r1: 2/2 agree" in result.out
    assert "expected rejections (cpu/gpu): r1 1/0, r2 1/0" in result.out
    compared = cli("compare", tmp_path / "r1-cpu.json", tmp_path / "r1-gpu.json")
    assert "decisions: 2/2 inputs agree (sequential pass); 1 inputs measured on one side only" \
        in compared.out
    assert "            rejected     1     0     -1" in compared.out


def test_rounds_counts_failures_by_code_and_explains_overload(tmp_path, cli):
    def overloaded_last(requests):
        requests[-1] = requests[-1]._replace(status=429, decision=None, error="http_4xx",
                                             code="OVERLOADED")
        return requests

    for number in (1, 2):
        make_run(tmp_path / f"r{number}-cpu.json")
        with_requests(make_run(tmp_path / f"r{number}-gpu.json"), overloaded_last)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    lines = result.out.splitlines()
    start = lines.index("errors (cpu/gpu): r1 0/1, r2 0/1")
    assert lines[start + 1:start + 4] == [
        "errors r1 gpu: http_4xx: OVERLOADED 1", "errors r2 gpu: http_4xx: OVERLOADED 1",
        "429 OVERLOADED: the router sheds previews beyond global.services.api.routing_preview."
        "max_concurrency (default 16) at once, and a preview holds its slot until its "
        "inference ends, even after a timeout: lower the concurrency or raise the setting"]
    outcomes = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                              "--format", "json").out)["outcomes"]
    assert outcomes[1]["error_codes"] == {"http_4xx": {"OVERLOADED": 1}}
    compared = cli("compare", tmp_path / "r1-cpu.json", tmp_path / "r1-gpu.json")
    assert "errors in Sequential: B http_4xx: OVERLOADED 1" in compared.out
