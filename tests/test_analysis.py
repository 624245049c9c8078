"""analysis: what compare and rounds judge from run files: decision agreement and
consistency, refusals of runs that do not belong together, verdicts with their tolerance,
rounds left out, the start order, exit codes."""

import json
import math
import random
import re
import statistics

import pytest
from hypothesis import given, strategies as st


from router_latency.roundset import Rounds
from router_latency.errors import Notice, RouterLatencyError
from router_latency.stats import mean_interval, t_test_p
from router_latency.files import write_atomic
from router_latency.runfile import Attempt, dump_run, load_run, PassRecord, RunFile, RunSettings
from router_latency.requests import pass_summary, PassSummary, Request
from router_latency.gate import GateSettings, row_of, ROW_WORDS
from router_latency.rounds import config_hash_findings, judge_rounds, time_windows
from router_latency.slower import input_slowdowns
from router_latency.environment import format_order, OrderAndOutliers
from conftest import NEW, SETTINGS, make_run, three_rounds, two_runs, write_corpus


def test_compare_fail_on_decision_change(tmp_path, cli):
    a, b = two_runs(tmp_path)
    assert cli("compare", a, b, "--fail-on-decision-change").code == 1
    assert cli("compare", a, a, "--fail-on-decision-change").code == 0
    # without the flag it passes, and its verdict says what it did not gate
    for args, last in (((), "verdict: PASS: "), (("--format", "markdown"), "**Verdict: PASS**")):
        result = cli("compare", a, b, *args)
        verdict = next(line for line in result.out.splitlines() if line.startswith(last))
        assert result.code == 0 and re.search(
            r"; decisions differ in \d+ inputs? \(not gated: --fail-on-decision-change fails "
            r"on them\)$", verdict), verdict
    assert "decisions differ" not in cli("compare", a, a).out.splitlines()[-1]


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
    run = load_run(b)
    sequential = run.passes[0]
    requests = list(sequential.requests)
    requests[1] = requests[1]._replace(decision="other")
    extra = sequential._replace(name="c4", concurrency=4,
                                attempt=sequential.attempt._replace(requests=tuple(requests)))
    write_atomic(b, dump_run(run._replace(passes=(sequential, extra))))
    out = cli("compare", a, b).out
    assert "B consistency: 1 inputs changed decision between passes (#1)" in out


def repeated_run(path, label, decisions):
    """Write a run of one sequential pass sending a 3-prompt corpus twice: decisions[rep][id],
    None for a failed request."""
    requests = tuple(Request(i, None, 1.0 + rep + i, None if d is None else 200, d,
                                "timeout" if d is None else None, rep=rep)
                     for rep, row in enumerate(decisions) for i, d in enumerate(row))
    attempt = Attempt(None, None, "", None, {}, None, {}, pass_summary(requests, 1.0),
                         requests)
    run = RunFile(label, True, {"path": "c.json", "sha256": "a" * 64, "count": 3},
                     (PassRecord("sequential", 1, False, False, attempt),),
                     settings=RunSettings(repeat=2))
    write_atomic(str(path), dump_run(run))
    return str(path)


def test_repeated_requests_agree_by_their_first_answer_and_must_agree_with_themselves(
        tmp_path, cli):
    # A: #1 answered y, then z (inconsistent); #2 failed first, then answered w
    a = repeated_run(tmp_path / "a.json", "a", [["x", "y", None], ["x", "z", "w"]])
    b = repeated_run(tmp_path / "b.json", "b", [["x", "y", "w"], ["x", "y", "w"]])
    assert '"rep": 1' in open(a).read() and '"rep": 0' not in open(a).read()
    out = cli("compare", a, b).out
    assert "decisions: 3/3 inputs agree (sequential pass)" in out
    assert "A consistency: 1 inputs changed decision between passes or repetitions (#1)" in out
    assert "B consistency: 0 inputs changed decision between passes or repetitions" in out
    first = load_run(a).passes[0]
    assert first.decisions == {0: "x", 1: "y", 2: "w"}
    assert first.decision_sets == {0: {"x"}, 1: {"y", "z"}, 2: {"w"}}
    never = repeated_run(tmp_path / "c.json", "c", [["x", "y", None], ["x", "y", None]])
    assert load_run(never).passes[0].decisions[2] is None  # never answered: never agrees


@pytest.mark.parametrize("settings,shown", [({"repeat": 3}, "sequential x3"),
                                            ({"duration_s": 30.0}, "sequential for 30 s")])
def test_rounds_refuses_runs_of_passes_of_another_length(tmp_path, cli, settings, shown):
    for number in (1, 2, 3):
        sides(tmp_path, number)
    path = str(tmp_path / "r2-gpu.json")
    run = load_run(path)
    write_atomic(path, dump_run(run._replace(settings=run.settings._replace(**settings))))
    refused = rounds(cli, tmp_path)
    assert refused.code == 2 and f"the runs were not measured alike: passes: r2-gpu.json " \
        f"{shown!r} (r1-cpu.json 'sequential')" in refused.err
    assert rounds(cli, tmp_path, "--allow-mismatch", "passes").code == 0


def test_compare_refuses_a_corpus_the_runs_did_not_use(tmp_path, cli):
    a, b = two_runs(tmp_path)
    corpus = write_corpus(tmp_path / "c.json", ["first", "second", "third"])
    result = cli("compare", a, b, "--corpus", corpus)
    assert result.code == 2 and result.out == ""
    assert "not the corpus of the runs" in result.err and str(corpus) in result.err
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert cli("compare", a, b, "--corpus", broken).code == 2


def rounds(cli, folder, *extra):
    return cli("rounds", "--dir", folder, "--base", "cpu", "--new", "gpu", *extra)


def sides(folder, number, base=(10, 20, 30, 100), new=(10, 20, 30, 100), **new_options):
    """Write round `number`: cpu with `base` figures, gpu with `new` (and new_options)."""
    make_run(folder / f"r{number}-cpu.json", label="cpu", passes={1: base},
             started_unix=10.0 * number)
    make_run(folder / f"r{number}-gpu.json", label="gpu", passes={1: new},
             started_unix=10.0 * number + (3 if number % 2 else -3), **new_options)


def test_rounds_passes_when_nothing_regressed(tmp_path, cli):
    for number in (1, 2, 3):
        sides(tmp_path, number, new=(5 + number * 0.1, 10 + number * 0.1, 15, 200 + number))
    result = rounds(cli, tmp_path)
    assert result.code == 0
    assert result.out.splitlines()[-1] == "verdict: PASS"


def test_an_undecided_row_is_inconclusive_and_says_how_many_rounds_would_decide_it(
        tmp_path, cli):
    # p50 ratios 0.9, 1.15, 1.0: mean +1.3%, the worse end far beyond the 5% tolerance
    for number, new_p50 in enumerate((9.0, 11.5, 10.0), 1):
        sides(tmp_path, number, new=(new_p50, 20, 30, 100))
    plain = rounds(cli, tmp_path)
    assert plain.code == 3
    lines = plain.out.splitlines()
    assert lines[-2] == "undecided: 42 more rounds would decide it (at the spread seen)"
    assert lines[-1] == lines[0] == (
        "verdict: INCONCLUSIVE: not a pass: it could have missed a slowdown of up to +37.3% "
        "(Sequential p50); Sequential p50 undecided: its worse end reaches +37.3% "
        "(tolerance 5%); about 42 more rounds would decide it at the spread seen")
    assert lines[1] == lines[-2]  # `rounds | head -2` shows the verdict and what decides it
    assert "Sequential  p50 ms*" in plain.out and " inconclusive" in lines[8]
    assert rounds(cli, tmp_path, "--format", "json").code == 3
    assert json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                          "--format", "json").out)["more_rounds"] == 42


def test_pass_unless_worse_keeps_the_old_rule_and_says_so_first(tmp_path, cli):
    for number, new_p50 in enumerate((9.0, 11.5, 10.0), 1):
        sides(tmp_path, number, new=(new_p50, 20, 30, 100))
    plain = rounds(cli, tmp_path, "--pass-unless-worse")
    assert plain.code == 0
    assert plain.out.splitlines()[2] == (
        "rule: --pass-unless-worse: PASS unless a gated row is shown worse than the "
        "tolerance; a PASS does not show that the rows lie within it")
    assert plain.out.splitlines()[-1] == plain.out.splitlines()[0] == (
        "verdict: PASS (--pass-unless-worse) (1 inconclusive gated rows; it could have missed "
        "a slowdown of up to +37.3% (Sequential p50))")
    assert ("warning: Sequential p50 inconclusive: could only detect more than 10x; "
            "about 76 rounds would be needed for 10%") in plain.out
    strict = rounds(cli, tmp_path, "--pass-unless-worse", "--strict")
    assert strict.code == 3
    assert strict.out.splitlines()[-1] == (
        "verdict: INCONCLUSIVE (--pass-unless-worse): not a pass: it could have missed a "
        "slowdown of up to +37.3% (Sequential p50); Sequential p50 inconclusive and could "
        "only detect more than 10x (--max-mde 10)")
    assert rounds(cli, tmp_path, "--pass-unless-worse", "--strict", "--max-mde", "2000").code == 0


def test_rounds_tolerance_moves_the_verdict(tmp_path, cli):
    for number, new_p50 in enumerate((10.7, 10.75, 10.8), 1):  # [+6.3 %, +8.7 %]
        sides(tmp_path, number, new=(new_p50, 20, 30, 100))
    result = rounds(cli, tmp_path)
    assert result.code == 1
    assert result.out.splitlines()[-1] == ("verdict: FAIL: Sequential p50 is worse than the "
                                           "tolerance")
    assert rounds(cli, tmp_path, "--tolerance", "10").code == 0


def test_rounds_leaves_out_rounds_with_a_discarded_pass(tmp_path, cli):
    three_rounds(tmp_path)
    make_run(tmp_path / "r4-cpu.json", label="cpu",
             passes={1: (10, 20, 30, 100), 4: (1, 1, 1, 1)}, discarded=(4,))
    make_run(tmp_path / "r4-gpu.json", label="gpu",
             passes={1: (1, 1, 1, 1), 4: (1, 1, 1, 1)})
    result = rounds(cli, tmp_path, "--allow-mismatch", "passes")
    assert result.out.splitlines()[3].startswith("rounds: 3 used (r1, r2, r3)")
    assert "left out: r4: r4-cpu.json: Conc 4 pass discarded (load above the limit)" in result.out
    assert "note: --allow-mismatch passes: r4-cpu.json 'sequential c4'" in result.out


def test_an_interrupted_new_side_fails_and_an_interrupted_base_is_inconclusive(tmp_path, cli):
    three_rounds(tmp_path)
    make_run(tmp_path / "r3-gpu.json", label="gpu", passes={1: NEW[2]}, complete=False)
    result = rounds(cli, tmp_path)
    assert "left out: r3: r3-gpu.json: incomplete run, interrupted (--allow-incomplete uses it)" \
        in result.out
    assert result.code == 1 and result.out.splitlines()[-1] == (
        "verdict: FAIL: the gpu side failed in r3 (incomplete run, interrupted "
        "(--allow-incomplete uses it))")
    assert "\n\nrounds: 3 used" in rounds(cli, tmp_path, "--allow-incomplete").out
    three_rounds(tmp_path)
    make_run(tmp_path / "r2-cpu.json", label="cpu", passes={1: (10, 20, 30, 100)},
             complete=False)
    base_failed = rounds(cli, tmp_path)
    assert base_failed.code == 3
    assert base_failed.out.splitlines()[-1].startswith(
        "verdict: INCONCLUSIVE: not a pass: it could have missed a slowdown of any size; the "
        "cpu side failed in r2 (incomplete run")


def test_a_crashed_new_side_fails_however_many_rounds_are_left(tmp_path, cli):
    for number in range(1, 6):
        crashed = {"errors": {"connect": 101}} if number <= 3 else {}
        sides(tmp_path, number, new=(5, 10, 15, 200), **crashed)
    result = rounds(cli, tmp_path)
    assert result.code == 1
    assert "the gpu side failed in r1 (Sequential pass had no successful request)" in result.out
    assert "gpu failed more requests than cpu in Sequential (r1 0/101, r2 0/101, r3 0/101)" \
        in result.out


def test_errors_of_the_new_side_beyond_the_base_fail_the_gate(tmp_path, cli):
    for number in (1, 2, 3):
        sides(tmp_path, number, new=(5, 10, 15, 200), errors={"timeout": 33})
    result = rounds(cli, tmp_path)
    assert result.code == 1
    assert "errors Sequential (cpu/gpu): r1 0/33, r2 0/33, r3 0/33" in result.out
    assert "gpu failed more requests than cpu in Sequential" in result.out.splitlines()[-1]


def test_rounds_inputs_are_checked_before_anything_is_judged(tmp_path, cli):
    for number in (1, 2, 3):
        sides(tmp_path, number)
    make_run(tmp_path / "r3-gpu.json", label="cpu", passes={1: (10, 20, 30, 100)})
    mislabelled = rounds(cli, tmp_path)
    assert mislabelled.code == 2 and mislabelled.err == (
        f"router-latency: error: the run's label is 'cpu', but the file name says side 'gpu' "
        f"of round 3: "
        f"a copied or renamed file? ({tmp_path / 'r3-gpu.json'}: label)\n")
    make_run(tmp_path / "r3-gpu.json", label="gpu", passes={1: (10, 20, 30, 100),
                                                              4: (10, 20, 30, 100)})
    different = rounds(cli, tmp_path)
    assert different.code == 2 and "the runs were not measured alike: passes: r3-gpu.json " \
        "'sequential c4' (r1-cpu.json 'sequential')" in different.err
    assert "--allow-mismatch FIELD accepts a difference on purpose" in different.err
    allowed = rounds(cli, tmp_path, "--allow-mismatch", "passes")
    assert allowed.code == 0 and "note: --allow-mismatch passes" in allowed.out


def test_rounds_error_rows_of_bad_folders(tmp_path, cli):
    sides(tmp_path, 1)
    single = rounds(cli, tmp_path)
    assert single.code == 2
    assert single.err == (f"router-latency: error: need at least 3 rounds, found 1 (r1): fewer "
                          f"cannot give an interval worth gating on ({tmp_path})\n")
    make_run(tmp_path / "r2-cpu.json", label="cpu")
    missing = rounds(cli, tmp_path)
    assert missing.code == 2 and missing.err == (
        f"router-latency: error: round 2 has no gpu side (r2-gpu.json) "
        f"({tmp_path / 'r2-cpu.json'})\n")
    make_run(tmp_path / "r2-gpu.json", label="gpu")
    make_run(tmp_path / "r02-gpu.json", label="gpu")
    duplicate = rounds(cli, tmp_path)
    assert duplicate.code == 2 and "round 2 of side gpu twice" in duplicate.err
    (tmp_path / "r02-gpu.json").unlink()
    sides(tmp_path, 3)
    make_run(tmp_path / "r2-gpu.json", label="gpu", sha="b" * 64)
    mismatch = rounds(cli, tmp_path)
    assert mismatch.code == 2 and "corpus: r2-gpu.json 'bbbbbbbbbbbb'" in mismatch.err


def test_decisions_are_compared_in_every_pass(tmp_path, cli):
    for number in (1, 2, 3):
        make_run(tmp_path / f"r{number}-cpu.json", label="cpu",
                 passes={1: (10, 20, 30, 100), 4: (10, 20, 30, 100)})
        make_run(tmp_path / f"r{number}-gpu.json", label="gpu",
                 passes={1: (10, 20, 30, 100), 4: (10, 20, 30, 100)})
    run = load_run(str(tmp_path / "r2-gpu.json"))
    sequential, c4 = run.passes
    changed = list(c4.requests)
    changed[7] = changed[7]._replace(decision="other")
    c4 = c4._replace(attempt=c4.attempt._replace(requests=tuple(changed)))
    write_atomic(str(tmp_path / "r2-gpu.json"), dump_run(run._replace(passes=(
        sequential, c4))))
    result = rounds(cli, tmp_path)
    assert "decisions r2: 100/101 agree in every pass; differ: #7 d -> other (Conc 4)" \
        in result.out
    assert result.code == 1


def test_rounds_agreement_counts_failed_requests_as_disagreeing(tmp_path, cli):
    for number in (1, 2, 3):
        sides(tmp_path, number, errors={"timeout": 1} if number == 2 else None)
    result = rounds(cli, tmp_path)
    assert "decisions r2: 100/101 agree in every pass; differ: #100 d -> (no decision)" \
        in result.out
    assert result.code == 1


def test_rounds_warns_when_the_start_order_is_unbalanced(tmp_path, cli):
    for number in (1, 2, 3):
        make_run(tmp_path / f"r{number}-cpu.json", label="cpu", started_unix=100.0 * number)
        make_run(tmp_path / f"r{number}-gpu.json", label="gpu",
                 started_unix=100.0 * number + 50)
    result = rounds(cli, tmp_path, "--format", "json")
    order = json.loads(result.out)["order"]
    assert order["base_first"] == [1, 2, 3] and order["new_first"] == []
    assert order["balanced"] is False
    text = rounds(cli, tmp_path).out
    assert "order: cpu first in r1, r2, r3; gpu first in none" in text
    assert "warning: start order unbalanced: rounds should alternate which side starts first" \
        in text


# The gate's statistics, on rounds built in memory: three passes with p50, p95, p99, mean and
# req/s each, so 9 gated rows by default.

PASSES = {"sequential": 1, "c4": 4, "c16": 16}
FIGURES = {"p50_ms": 10.0, "p95_ms": 15.0, "p99_ms": 20.0, "mean_ms": 11.0, "req_per_s": 100.0}


def run_in_memory(label, number, factors, first):
    """Return a RunFile whose latency figures are FIGURES times factors[(pass, metric)]
    (req/s divided by it), started first in its round or not."""
    requests = tuple(Request(i, 0.0, 1.0, 200, "d", None) for i in range(3))
    passes = []
    for name, concurrency in PASSES.items():
        v = {m: FIGURES[m] / factors[(name, m)] if m == "req_per_s"
             else FIGURES[m] * factors[(name, m)] for m in FIGURES}
        summary = PassSummary(3, 3, {}, v["p50_ms"], v["p95_ms"], v["p99_ms"], v["mean_ms"],
                                 1.0, v["p99_ms"], v["req_per_s"], 1.0)
        passes.append(PassRecord(name, concurrency, False, False, Attempt(
            None, None, "", None, {}, None, {}, summary, requests)))
    return RunFile(label, True, {"path": "c.json", "sha256": "0" * 64, "count": 3},
                      tuple(passes), started_unix=2.0 * number + (0 if first else 1),
                      path=f"r{number}-{label}.json")


def rounds_in_memory(count, new_factor, *, base_factor=lambda n, p, m: 1.0):
    """Return {round: {side: RunFile}}: factors are functions of (round, pass, metric)."""
    runs = {}
    for n in range(1, count + 1):
        keys = [(p, m) for p in PASSES for m in FIGURES]
        runs[n] = {"base": run_in_memory("base", n, {k: base_factor(n, *k) for k in keys},
                                         n % 2 == 1),
                   "new": run_in_memory("new", n, {k: new_factor(n, *k) for k in keys},
                                        n % 2 == 0)}
    return runs


def test_the_composite_test_catches_a_slowdown_no_single_row_shows():
    # +10% everywhere; each row's noise is a shift of one pattern (spread 4.2%), so that no
    # row alone is sure of it while their per-round mean, where the noise cancels, is
    pattern = (0.05, -0.05, 0.0325, -0.0325, 0.0)
    keys = [(p, m) for p in PASSES for m in FIGURES]
    noise = {(n, *key): math.exp(pattern[(n + k) % 5]) for n in range(1, 6)
             for k, key in enumerate(keys)}
    report = judge_rounds(rounds_in_memory(5, lambda n, p, m: 1.10 * noise[(n, p, m)]),
                             "base", "new")
    gated = [r for r in report.rows if r.gated]
    assert len(gated) == 9 and report.test.regressions == ()
    assert all(r.p_value > 0.025 for r in gated)
    assert report.test.composite_p < 0.025
    assert report.status == "fail" and report.reasons[0].startswith(
        "the 9 gated rows together are +10.0% [")
    assert 1 < report.test.effective_rows < 9  # shifted patterns: partly alike


def test_holm_names_the_row_that_moved_alone():
    rng = random.Random(3)
    noise = {(n, p, m): math.exp(rng.gauss(0, 0.01)) for n in range(1, 6) for p in PASSES
             for m in FIGURES}
    report = judge_rounds(rounds_in_memory(
        5, lambda n, p, m: (1.30 if (p, m) == ("c16", "p95_ms") else 1.0) * noise[(n, p, m)]),
        "base", "new")
    assert report.test.regressions == (("c16", "p95_ms"),)
    assert "Conc 16 p95 is worse than the tolerance" in report.reasons
    row = next(r for r in report.rows if (r.pass_name, r.metric) == ("c16", "p95_ms"))
    assert row.verdict == "worse" and 29 < row.change_pct < 31
    assert {r.verdict for r in report.rows if r.gated} <= set(ROW_WORDS)


@SETTINGS
@given(st.lists(st.tuples(st.floats(0.1, 1000), st.floats(0.1, 1000)), min_size=3,
                max_size=8))
def test_a_rows_point_always_lies_inside_its_interval(pairs):
    base, new = [b for b, _ in pairs], [n for _, n in pairs]
    for metric in ("p50_ms", "req_per_s"):
        row = row_of("sequential", metric, base, new, GateSettings())
        assert row.speedup_low <= row.speedup <= row.speedup_high
        assert row.log_ratio.low <= row.log_ratio.mean <= row.log_ratio.high


def test_an_outlier_round_is_described_and_its_noise_makes_the_verdict_inconclusive():
    # one slow base round (2x) in six hides a true 1.2x slowdown of every row: today's rule
    # passed it and printed a second verdict without the round; the three-way rule is
    # inconclusive, and the outlier is only described
    slower = lambda n, p, m: 1.2 * (1 + 0.002 * n)  # noqa: E731
    for hiccup_size, count in ((2.0, 6), (1.4, 5), (1.6, 7)):
        hiccup = lambda n, p, m: hiccup_size if n == 3 else 1.0  # noqa: E731
        report = judge_rounds(rounds_in_memory(count, slower, base_factor=hiccup),
                                 "base", "new")
        assert report.outliers == (3,)
        assert report.status == "inconclusive" and report.exit_code == 3
        assert not hasattr(report, "without_outliers")
        found = OrderAndOutliers(report.order_effect, list(report.outliers),
                                 report.outlier_changes)
        line = format_order(report.order, found, "base", "new")[-1]
        assert line.startswith("outlier rounds (median/MAD of the gated rows' mean; described "
                               "only, the verdict stands on every round): r3 ")
        assert "verdict would be" not in line
        assert "against the median +2" in line  # the true +20%, and a little drift


def test_an_order_effect_is_estimated_and_warned_about():
    # whichever side starts second is 10% slower; new starts first in even rounds
    second = lambda first: (lambda n, p, m: 1.10 if (n % 2 == 1) == first else 1.0)  # noqa
    report = judge_rounds(rounds_in_memory(6, second(True), base_factor=second(False)),
                             "base", "new")
    assert math.expm1(report.order_effect.estimate) == pytest.approx(0.10, abs=0.005)
    assert any(w.kind == "order_effect"
               and w.text.startswith("warning: order effect: the side started second ran +10.")
               for w in report.warnings)
    # the order, not the change: balanced rounds cancel it, never a FAIL; the noise it adds
    # leaves the rows undecided
    assert report.status == "inconclusive"


def test_plan_prints_what_the_rounds_could_detect(tmp_path, cli):
    for number, new_p50 in enumerate((9.0, 11.5, 10.0, 10.5), 1):
        sides(tmp_path, number, new=(new_p50, 20, 30, 100))
    result = rounds(cli, tmp_path, "--plan")
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].startswith("plan from 4 rounds (r1, r2, r3, r4); target: detect a 10% "
                               "slowdown beyond the 5% tolerance")
    assert lines[2].split() == ["pass", "metric", "spread", "detects", "at", "4", "rounds",
                                "for", "10%"]
    assert lines[3].split()[:4] == ["Sequential", "p50", "ms*", "10.2%"]


def test_a_group_sequential_look_stays_undecided_until_the_rows_are(tmp_path, cli):
    for number, new_p50 in enumerate((9.5, 10.6, 10.0), 1):
        sides(tmp_path, number, new=(new_p50, 20, 30, 100))
    look = rounds(cli, tmp_path, "--sequential", "10")
    assert look.code == 3
    assert look.out.splitlines()[-1].startswith(
        "verdict: INCONCLUSIVE (round 3 of at most 10): not a pass: it could have missed a "
        "slowdown of up to more than 10x slower (Sequential p50); Sequential p50 undecided: "
        "its worse end reaches more than 10x slower")
    for number in (1, 2, 3):
        sides(tmp_path, number, new=(5.0 + number / 100, 20, 30, 100))
    decided = rounds(cli, tmp_path, "--sequential", "10")
    assert decided.code == 0 and decided.out.splitlines()[-1] == \
        "verdict: PASS (round 3 of at most 10)"


@pytest.mark.parametrize("field,edit,shown", [
    ("warmup", lambda d: d["settings"].update(warmup=0), "r2-gpu.json 0"),
    ("timeout", lambda d: d["settings"].update(timeout_s=5), "r2-gpu.json 5"),
    ("model", lambda d: d.update(model="other"), "r2-gpu.json 'other'"),
    ("decision_paths", lambda d: d["settings"].update(decision_paths=["x"]),
     "r2-gpu.json 'x'"),
    ("tool", lambda d: d["tool"].update(version="9.0.0"), "r2-gpu.json '9'"),
])
def test_runs_measured_differently_are_refused_unless_allowed(tmp_path, cli, field, edit,
                                                              shown):
    for number in (1, 2, 3):
        sides(tmp_path, number)
    path = tmp_path / "r2-gpu.json"
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    refused = rounds(cli, tmp_path)
    assert refused.code == 2 and f"the runs were not measured alike: {field}: {shown}" \
        in refused.err
    allowed = rounds(cli, tmp_path, "--allow-mismatch", field)
    assert allowed.code == 0 and f"note: --allow-mismatch {field}: {shown}" in allowed.out


A, B, C = "a" * 64, "b" * 64, "c" * 64


def with_hashes(path, *hashes):
    """Give every pass of a run file these x-vsr-config-hash values, through the tool's writer;
    return the run as read back."""
    run = load_run(path)
    passes = tuple(p._replace(attempt=p.attempt._replace(config_hashes=hashes))
                   for p in run.passes)
    write_atomic(path, dump_run(run._replace(passes=passes)))
    return load_run(path)


def hashed_rounds(folder, base_hashes, new_hashes):
    """Return {round: {side: RunFile}} of rounds whose sides answered with these hashes (a
    tuple per round: several values are a change within that run)."""
    return {n: {side: with_hashes(make_run(folder / f"r{n}-{side}.json", label=side), *values)
                for side, values in (("cpu", b), ("gpu", g))}
            for n, (b, g) in enumerate(zip(base_hashes, new_hashes), 1)}


def test_config_hash_findings_names_each_side_and_warns_when_they_are_the_same(tmp_path):
    hashes, warnings = config_hash_findings(
        Rounds(hashed_rounds(tmp_path, [(A,), (A,)], [(B,), (B,)]), "cpu", "gpu"))
    assert hashes == {"cpu": (A,), "gpu": (B,)} and warnings == ()
    hashes, warnings = config_hash_findings(
        Rounds(hashed_rounds(tmp_path, [(A,), (A,)], [(A,), (A,)]), "cpu", "gpu"))
    assert hashes == {"cpu": (A,), "gpu": (A,)}
    assert warnings == (Notice("same_config", "WARNING: base cpu and new gpu answered with the "
                               "same configuration (x-vsr-config-hash aaaaaaaaaaaa): the gate "
                               "compares a configuration with itself; check which "
                               "configuration each side runs"),)


def test_config_hash_findings_without_hashes(tmp_path):
    assert config_hash_findings(Rounds(hashed_rounds(tmp_path, [(), ()], [(), (B,)]),
                                          "cpu", "gpu")) == ({"cpu": (), "gpu": (B,)}, ())


@pytest.mark.parametrize("base_hashes,where,listed", [
    ([(A,), (C,)], "r2-cpu.json", "aaaaaaaaaaaa in r1; cccccccccccc in r2"),  # between rounds
    ([(A,), (A, C)], "r2-cpu.json", "aaaaaaaaaaaa in r1, r2; cccccccccccc in r2"),  # within
])
def test_config_hash_findings_refuses_a_side_whose_configuration_changed(
        tmp_path, base_hashes, where, listed):
    runs = hashed_rounds(tmp_path, base_hashes, [(B,), (B,)])
    with pytest.raises(RouterLatencyError) as refused:
        config_hash_findings(Rounds(runs, "cpu", "gpu"))
    message = (f"side cpu answered with 2 configurations (x-vsr-config-hash {listed})")
    assert refused.value.args[0] == (f"{message}: its configuration changed between or within "
                                     f"rounds; --allow-config-change judges it anyway")
    assert refused.value.where == str(tmp_path / where)
    hashes, warnings = config_hash_findings(Rounds(runs, "cpu", "gpu"), allow_change=True)
    assert hashes["cpu"] == (A, C)
    assert warnings == (Notice("config_changed", f"warning: {message}"),)


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
    hashed_rounds(tmp_path, [(A,), (A,), (A,)], [(A,), (A,), (A,)])
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
    run = load_run(path)
    passes = []
    for item in run.passes:
        requests = edit(list(item.requests))
        summary = pass_summary(requests, item.summary.wall_s)
        passes.append(item._replace(attempt=item.attempt._replace(requests=tuple(requests),
                                                                  summary=summary)))
    write_atomic(path, dump_run(run._replace(passes=tuple(passes))))
    return path


def rejected_last(requests):
    requests[-1] = requests[-1]._replace(status=400, decision=None, code="INVALID_INPUT",
                                         outcome="expected_rejection")
    return requests


def test_expected_rejections_stay_out_of_decision_agreement(tmp_path, cli):
    # cpu rejects prompt 2 as its boundary case allows; gpu routes it: not a disagreement
    for number in (1, 2, 3):
        with_requests(make_run(tmp_path / f"r{number}-cpu.json", label="cpu"), rejected_last)
        make_run(tmp_path / f"r{number}-gpu.json", label="gpu")
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert result.code == 0
    assert "decisions r1: 100/100 agree in every pass" in result.out
    assert "expected rejections (cpu/gpu): r1 1/0, r2 1/0, r3 1/0" in result.out
    compared = cli("compare", tmp_path / "r1-cpu.json", tmp_path / "r1-gpu.json")
    assert "decisions: 100/100 inputs agree (sequential pass); 1 inputs measured on one side " \
        "only" in compared.out
    assert ["rejected", "1", "0", "-1"] in [line.split() for line in compared.out.splitlines()]


def test_rounds_counts_failures_by_code_and_explains_overload(tmp_path, cli):
    def overloaded_last(requests):
        requests[-1] = requests[-1]._replace(status=429, decision=None, error="http_4xx",
                                             code="OVERLOADED")
        return requests

    for number in (1, 2, 3):
        make_run(tmp_path / f"r{number}-cpu.json", label="cpu")
        with_requests(make_run(tmp_path / f"r{number}-gpu.json", label="gpu"), overloaded_last)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    lines = result.out.splitlines()
    start = lines.index("errors Sequential (cpu/gpu): r1 0/1, r2 0/1, r3 0/1")
    assert lines[start + 1:start + 5] == [
        "errors r1 gpu: http_4xx: OVERLOADED 1", "errors r2 gpu: http_4xx: OVERLOADED 1",
        "errors r3 gpu: http_4xx: OVERLOADED 1",
        "429 OVERLOADED: the router sheds previews beyond global.services.api.routing_preview."
        "max_concurrency (default 16) at once, and a preview holds its slot until its "
        "inference ends, even after a timeout: lower the concurrency or raise the setting"]
    outcomes = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                              "--format", "json").out)["outcomes"]
    assert outcomes[1]["error_codes"] == {"http_4xx": {"OVERLOADED": 1}}
    compared = cli("compare", tmp_path / "r1-cpu.json", tmp_path / "r1-gpu.json")
    assert "errors in Sequential: B http_4xx: OVERLOADED 1" in compared.out


def sequential_run(label, latencies, decisions):
    """Return a RunFile whose only pass is a sequential one with these latencies per input
    (None: the request timed out), sent 10 ms apart."""
    requests = tuple(Request(i, 10.0 * i, ms, 200, d, None) if ms is not None
                     else Request(i, 10.0 * i, None, None, None, "timeout")
                     for i, (ms, d) in enumerate(zip(latencies, decisions)))
    attempt = Attempt(None, None, "", None, {}, None, {}, None, requests)
    return RunFile(label, True, {"path": "c.json", "sha256": "0" * 64,
                                    "count": len(latencies)},
                      (PassRecord("sequential", 1, False, False, attempt),))


def test_inputs_called_slower_only_when_their_own_rounds_carry_it():
    # new/base per input and round: #0 2x every round (slower); #1 3x, 0.5x, 1.5x (median
    # 1.5x, but its spread carries nothing: noise); #2 unchanged; #3 1.2x in the two rounds
    # its base answered (slower); #4 1.5x in the one round its new side answered (noise)
    base = [[10.0, 10.0, 10.0, 10.0, 10.0], [10.0, 10.0, 10.0, None, 10.0],
            [10.0, 10.0, 10.0, 10.0, 10.0]]
    new = [[20.0, 30.0, 10.0, 12.0, None], [20.0, 5.0, 10.0, 12.0, None],
           [20.0, 15.0, 10.0, 12.0, 15.0]]
    decisions = ["a", "a", "b", "b", "b"]
    runs = {n: {"base": sequential_run("base", base[n - 1], decisions),
                "new": sequential_run("new", new[n - 1], decisions)} for n in (1, 2, 3)}
    texts = {0: "x" * 10, 1: "y" * 100, 2: "z" * 600, 3: "w" * 3000, 4: "v" * 20}
    found = input_slowdowns(Rounds(runs, "base", "new", (1, 2, 3)), 5.0, texts)
    assert [(s.key, s.call, s.rounds, s.slower_rounds) for s in found.inputs] == [
        (0, "slower", 3, 3), (1, "noise", 3, 2), (4, "noise", 1, 1), (3, "slower", 2, 2),
        (2, "", 3, 0)]
    ratios = {s.key: s.ratio for s in found.inputs}
    assert ratios == pytest.approx({0: 2.0, 1: 1.5, 2: 1.0, 3: 1.2, 4: 1.5})
    one = next(s for s in found.inputs if s.key == 1)
    logs = [math.log(3.0), math.log(0.5), math.log(1.5)]
    interval = mean_interval(logs)
    assert (one.low, one.high) == pytest.approx((math.exp(interval.low), math.exp(interval.high)))
    assert one.p_value == pytest.approx(t_test_p(logs, mu=math.log(1.05)))
    assert (one.text, one.length, one.decision) == ("y" * 100, 100, "a")
    assert next(s for s in found.inputs if s.key == 4).low is None
    # a group's value per round is the mean log ratio of its inputs
    a = next(s for s in found.decisions if s.key == "a")
    assert a.inputs == 2 and a.ratio == pytest.approx(math.exp(statistics.median(
        [(math.log(2) + math.log(3)) / 2, (math.log(2) + math.log(0.5)) / 2,
         (math.log(2) + math.log(1.5)) / 2])))
    assert [(s.key, s.inputs) for s in found.lengths] == [
        ("<= 32 chars", 2), ("33-128 chars", 1), ("513-2048 chars", 1), ("> 2048 chars", 1)]


def test_input_slowdowns_need_a_sequential_pass_on_both_sides():
    runs = rounds_in_memory(3, lambda n, p, m: 1.0)
    for sides in runs.values():
        sides["new"] = sides["new"]._replace(passes=sides["new"].passes[1:])
    assert input_slowdowns(Rounds(runs, "base", "new", (1, 2, 3)), 5.0) is None


def test_time_windows_hold_the_median_latency_of_each_stretch_of_send_time():
    requests = [Request(i, 10.0 * i, float(i + 1), 200, "d", None) for i in range(4)]
    assert time_windows(requests, 2) == [(0.0075, 1.5), (0.0225, 3.5)]
    assert time_windows([r._replace(start_ms=None) for r in requests], 2) == []
