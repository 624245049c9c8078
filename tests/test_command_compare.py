"""Tests of command_compare.py: compare: its parser and handler."""

import hashlib
import json
import re
import textwrap
from pathlib import Path

import pytest

from router_latency.files import MAX_INPUT_BYTES, write_atomic
from router_latency.corpus import MAX_CORPUS_BYTES
from router_latency.requests import pass_summary, Request
from router_latency.runfile import Attempt, dump_run, load_run, PassRecord, RunFile, RunSettings
from router_latency.simulator import SimulatedAnswers
from conftest import (assert_one_line_error, assert_renders_as_blocks, default_route_server,
                      make_run, mark_cached, N, run_sampled, suspect_rounds, two_runs, write_corpus)

# its files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


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


def test_compare_refuses_a_corpus_the_runs_did_not_use(tmp_path, cli):
    a, b = two_runs(tmp_path)
    corpus = write_corpus(tmp_path / "c.json", ["first", "second", "third"])
    result = cli("compare", a, b, "--corpus", corpus)
    assert result.code == 2 and result.out == ""
    assert "not the corpus of the runs" in result.err and str(corpus) in result.err
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert cli("compare", a, b, "--corpus", broken).code == 2


A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_compare_table_and_differing_inputs(tmp_path, cli):
    corpus = write_corpus(tmp_path / "c.json", ["first", "second", "third prompt " * 10]
                          + [f"prompt {i}" for i in range(3, 101)])
    sha = hashlib.sha256(open(corpus, "rb").read()).hexdigest()
    a, b = two_runs(tmp_path, sha=sha)
    result = cli("compare", a, b, "--corpus", corpus)
    assert result.code == 0 and result.err == ""
    assert result.out == textwrap.dedent(f"""\
        A: {a} (cpu)
        B: {b} (rocm)
        corpus: {sha[:12]} (101 prompts)

        pass        metric     A     B  B - A  change, + slower
        Sequential  p50 ms  10.0  4.00  -6.00            -60.0%
                    p95 ms  20.0  8.00  -12.0            -60.0%
                    p99 ms  30.0  9.00  -21.0            -70.0%
                    req/s    100   250   +150            -60.0%
                    errors     0     1     +1
        Conc 4      p50 ms  12.0  5.00  -7.00            -58.3%
                    p95 ms  25.0  9.00  -16.0            -64.0%
                    p99 ms  40.0  12.0  -28.0            -70.0%
                    req/s    300   700   +400            -57.1%
                    errors     0     1     +1
        errors in Sequential: B timeout 1
        errors in Conc 4: B timeout 1

        decisions: 99/101 inputs agree (sequential pass)
          #2 "third prompt third prompt third prompt third prompt third pr": z -> w
          #100 "prompt 100": d -> (no decision)
        A consistency: 0 inputs changed decision between passes
        B consistency: 0 inputs changed decision between passes
        verdict: PASS: one run each, no interval (rounds judges with intervals); decisions diff\
er in 2 inputs (not gated: --fail-on-decision-change fails on them)
        """)


def test_compare_markdown_and_json(tmp_path, cli):
    a, b = two_runs(tmp_path)
    result = cli("compare", a, b, "--format", "markdown", "--fail-on-decision-change")
    assert result.code == 1 and result.err == ""
    lines = result.out.splitlines()
    assert lines[:5] == [
        "**Verdict: FAIL**: rocm against cpu, one run each, no interval (rounds judges with "
        "intervals)", "", "- decisions differ in 2 inputs (sequential pass, "
        "--fail-on-decision-change)", "", "| pass | metric | A | B | B - A | change, + slower |"]
    assert "  - \\#&#8203;2: z -\\> w" in lines
    assert_renders_as_blocks(lines)
    passed = cli("compare", a, b, "--format", "json")
    report = json.loads(passed.out)
    assert passed.code == 0 == report["exit_code"]
    assert (report["schema"], report["status"], report["reasons"]) == (
        "router-latency/compare/1", "pass", [])
    sequential = report["passes"][0]
    assert sequential["pass"] == "sequential" and sequential["errors"] == {"a": 0, "b": 1}
    assert sequential["metrics"]["p50_ms"] == {"a": 10.0, "b": 4.0, "diff": -6.0, "ratio": 0.4}
    assert report["decisions"] == {
        "pass": "sequential", "compared": 101, "agree": 99, "unmeasured": 0,
        "changes": [{"id": 2, "a": "z", "b": "w", "text": None},
                    {"id": 100, "a": "d", "b": None, "text": None}]}
    assert report["consistency"] == {"A": [], "B": []}
    failed = json.loads(cli("compare", a, b, "--format", "json",
                            "--fail-on-decision-change").out)
    assert (failed["status"], failed["exit_code"]) == ("fail", 1)
    assert failed["reasons"] == [
        "decisions differ in 2 inputs (sequential pass, --fail-on-decision-change)"]


def test_compare_shows_router_cpu_and_slow_phases(tmp_path, cli):
    suspect_rounds(tmp_path)
    result = cli("compare", tmp_path / "r2-cpu.json", tmp_path / "r2-gpu.json")
    assert result.code == 0
    table = result.out.split("\n\n")[1]
    assert table == textwrap.dedent("""\
        pass        metric                 A     B   B - A  change, + slower
        Sequential  p50 ms              10.0  10.0   0.000             +0.0%
                    p95 ms              20.0  20.0   0.000             +0.0%
                    p99 ms              30.0  30.0   0.000             +0.0%
                    req/s                100   100   0.000             +0.0%
                    errors                 0     0       0
                    router cpu ms/req   3.00  2.00   -1.00
                    foreign vCPUs      0.300  1.40   +1.10
        Conc 4      p50 ms              12.0  12.0   0.000             +0.0%
                    p95 ms              25.0  25.0   0.000             +0.0%
                    p99 ms              40.0  40.0   0.000             +0.0%
                    req/s                300   300   0.000             +0.0%
                    errors                 0     0       0
                    router cpu ms/req   12.0  8.00   -4.00
                    foreign vCPUs      0.450  1.40  +0.950
        slow phase: B Conc 4 (window 4 of 4)""")


HASH_A, HASH_B = "a" * 64, "b" * 64


def nested(levels):
    return "[" * levels + "]" * levels


def deep_run_file(path):
    make_run(path)
    text = path.read_text()
    path.write_text(text.replace('"settings": {', f'"deep": {nested(990)}, "settings": {{', 1))
    return path


@pytest.mark.parametrize("command", ["compare", "rounds-corpus", "run-corpus", "repo", "boundary"])
def test_deeply_nested_files_are_one_line_naming_the_file(tmp_path, cli, command):
    if command == "compare":
        bad = deep_run_file(tmp_path / "deep.json")
        result = cli("compare", bad, bad)
    elif command in ("run-corpus", "rounds-corpus"):
        bad = tmp_path / "deep.json"
        bad.write_text('{"schema": "router-latency/corpus/1", "prompts": ' + nested(990) + "}")
        result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", bad, "--out",
                     tmp_path / "r.json", "--label", "x", "--check")
    elif command == "repo":
        bad = tmp_path / "repo" / "e2e" / "testdata" / "deep.json"
        bad.parent.mkdir(parents=True)
        bad.write_text('{"query": "q", "more": ' + nested(990) + "}")
        result = cli("corpus", "--repo", tmp_path / "repo", "--out", tmp_path / "c.json")
    else:
        bad = tmp_path / "cases.json"
        bad.write_text('{"cases": ' + nested(990) + "}")
        (tmp_path / "repo" / "e2e" / "testdata").mkdir(parents=True)
        (tmp_path / "repo" / "e2e" / "testdata" / "a.json").write_text('{"query": "q"}')
        result = cli("corpus", "--repo", tmp_path / "repo", "--out", tmp_path / "c.json",
                     "--boundary", bad)
    assert_one_line_error(result, "nested deeper", str(bad))


@pytest.mark.parametrize("edit,field,words", [
    (lambda d: d["passes"][0]["requests"][0].update(latency_ms=1e308),
     "passes[0].requests[0].latency_ms", "at most 86,400,000 ms (a day)"),
    (lambda d: d["passes"][0]["requests"][0].update(latency_ms=86_400_001),
     "passes[0].requests[0].latency_ms", "a day"),
    (lambda d: d["passes"][0]["summary"].update(p99_ms=1e300),
     "passes[0].summary.p99_ms", "a day"),
    (lambda d: d["passes"][0]["summary"].update(requests=2 ** 60),
     "passes[0].summary.requests", "up to 2^53"),
    (lambda d: d["passes"][0]["environment"].update(metrics={"deltas": {"x_total": 1e300}}),
     "passes[0].environment.metrics.deltas.x_total", "2^53"),
    (lambda d: d["passes"][0]["environment"].update(metrics={"deltas": {"x_total": -1e300}}),
     "passes[0].environment.metrics.deltas.x_total", "2^53"),
    (lambda d: d["passes"][0]["environment"].update(
        gpu={"before": {"used_mib": {"card0": 1e300}}}),
     "passes[0].environment.gpu.before.used_mib.card0", "2^53"),
    (lambda d: d["passes"][0].update(driver_cpu_s=1e300), "passes[0].driver_cpu_s", "2^53"),
])
def test_numbers_too_large_to_sum_are_refused_by_range(tmp_path, cli, edit, field, words):
    path = Path(make_run(tmp_path / "big.json"))
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    assert_one_line_error(cli("compare", path, path), words, f"big.json: {field}")


@pytest.mark.parametrize("old,new,key", [
    ('"complete": true', '"complete": false, "complete": true', "complete"),
    ('"label": "x"', '"label": "x", "label": "y"', "label"),
    ('"latency_ms": 10.0', '"latency_ms": 10.0, "latency_ms": 99.0', "latency_ms"),
])
def test_a_key_twice_in_one_object_is_refused_naming_it(tmp_path, cli, old, new, key):
    path = Path(make_run(tmp_path / "twice.json"))
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    assert_one_line_error(cli("compare", path, path), f"the key '{key}' appears twice",
                          str(path))


def test_an_input_above_its_size_is_refused_before_reading(tmp_path, cli):
    corpus = tmp_path / "huge.json"
    with open(corpus, "wb") as handle:  # sparse: no disk and no memory used
        handle.truncate(MAX_CORPUS_BYTES + 1)
    result = cli("run", "--url", "http://127.0.0.1:9", "--corpus", corpus, "--out",
                 tmp_path / "r.json", "--label", "x", "--check")
    assert_one_line_error(result, "larger than the 256 MiB this tool reads", str(corpus))
    run = tmp_path / "huge-run.json"
    with open(run, "wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)
    assert_one_line_error(cli("compare", run, run), "larger than the 512 MiB", str(run))


def test_a_decision_matched_on_one_side_and_none_on_the_other_is_a_change(scripted, tmp_path,
                                                                           cli):
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b", "c"])
    for label, unmatched in (("cpu", set()), ("rocm", {"b"})):
        router = default_route_server(scripted, unmatched)
        assert cli("run", "--url", router.url, "--corpus", corpus, "--out",
                   tmp_path / f"{label}.json", "--label", label, "-c", "1", "--warmup", "0",
                   "--quiet").code == 0
    result = cli("compare", tmp_path / "cpu.json", tmp_path / "rocm.json",
                 "--fail-on-decision-change")
    assert result.code == 1
    assert "decisions: 2/3 inputs agree (sequential pass)\n  #1: math -> (none)\n" in result.out


def test_the_records_run_and_compare_forms_work_as_written(scripted, tmp_path, cli):
    router = default_route_server(scripted, set())
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    for label in ("legacy-r1", "runtime-r1"):
        out = tmp_path / f"{label.split('-')[0]}.json"
        result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out,
                     "--label", label, "--warmup", "20", "--concurrency", "1", "4", "16",
                     "--quiet")
        assert result.code == 0, result.err
        assert [p["name"] for p in json.loads(out.read_text())["passes"]] == [
            "sequential", "c4", "c16"]
    named = cli("compare", "--base", tmp_path / "legacy.json", "--new",
                tmp_path / "runtime.json", "--corpus", corpus)
    plain = cli("compare", tmp_path / "legacy.json", tmp_path / "runtime.json",
                "--corpus", corpus)
    assert named.code == plain.code == 0 and named.err == ""
    assert named.out.splitlines()[:3] == plain.out.splitlines()[:3]


@pytest.mark.parametrize("argv", [["a.json"], ["--base", "a.json"], ["a.json", "--new", "b.json"],
                                  ["a.json", "b.json", "--base", "c.json"], []])
def test_compare_needs_two_runs_in_one_form(tmp_path, cli, argv):
    result = cli("compare", *argv)
    assert_one_line_error(result, "give two run files: A B, or --base A --new B")


def test_compare_says_which_side_a_cache_answered(tmp_path, cli):
    a = make_run(tmp_path / "a.json", label="cpu")
    b = make_run(tmp_path / "b.json", label="rocm")
    mark_cached(b)
    result = cli("compare", a, b)
    assert "warning: B: a result cache answered" in result.out
    assert "warning: a result cache answered B but not A" in result.out


def test_the_delayed_ack_run_of_the_issue_flags_no_slow_phase(cli):
    # the issue's reproduction, measured here: Python's http.server without TCP_NODELAY,
    # 162 short prompts, passes 1, 4, 16
    path = Path(__file__).parent / "data" / "delayed_ack_run.json"
    run = load_run(str(path))
    assert [p.name for p in run.passes] == ["sequential", "c4", "c16"]
    assert all(run.slow_windows(item) == () for item in run.passes)
    result = cli("compare", path, path)
    assert result.code == 0 and "slow phase" not in result.out


def test_two_sides_identical_but_for_sampled_selections_agree_in_full(simulator, tmp_path,
                                                                      cli):
    answers = SimulatedAnswers(no_decision_share=0.0, sampled_share=1.0)
    a = run_sampled(cli, simulator(delay_ms=0, answers=answers), tmp_path, "a")
    b = run_sampled(cli, simulator(delay_ms=0, answers=answers), tmp_path, "b")
    decisions = [r["decision"] for r in json.loads(a.read_text())["passes"][0]["requests"]]
    assert all("|~model-" in d for d in decisions)
    assert len(set(decisions)) > len({d.split("|")[0] for d in decisions})  # models vary
    result = cli("compare", "--base", a, "--new", b, "--fail-on-decision-change")
    assert result.code == 0, result.out
    assert f"decisions: {N}/{N} inputs agree (sequential pass)" in result.out
    assert f"A sampled selections: {N} inputs got a model the router sampled or chose by its " \
           "state (model-a, model-b, model-c); not counted as changed decisions" in result.out
    assert "consistency: 0 inputs changed decision" in result.out
    report = json.loads(cli("compare", "--base", a, "--new", b, "--format", "json").out)
    assert report["decisions"]["sampled"]["b"] == {"inputs": N,
                                                   "models": ["model-a", "model-b", "model-c"]}
