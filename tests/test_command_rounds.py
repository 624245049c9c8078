"""Tests of command_rounds.py: rounds: its parser, the --gate list, its handler, the job
summary."""

import errno
import hashlib
import html
import json
import math
import os
import re
import socket
import stat
import textwrap
import threading
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import html5lib
import pytest
from junitparser import Failure, JUnitXml, Skipped

from router_latency.files import write_atomic
from router_latency.gpu import GPU_RANGED
from router_latency.requests import pass_summary
from router_latency.runfile import dump_run, Floor, load_run
from router_latency.roundset import Rounds
from router_latency.simulator import SimulatedAnswers
from router_latency.gate import DETECTS_CONFIDENCE, GateSettings
from router_latency.environment import environment_rows
from router_latency.rounds import judge_rounds
from router_latency.stats import t_ppf
from conftest import (assert_one_line_error, assert_renders_as_blocks, cpu_gpu_round, hashed_rounds,
                      HOSTILE, make_run, mark_cached, MISSED, N, NEW, rounds, rounds_folder,
                      SAMPLED, shown_raw, sides, suspect_rounds, three_rounds, undecided,
                      write_corpus)

# its run files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


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
    # one "more rounds" figure: the undecided line, --plan and the JSON say the same
    more = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                          "--format", "json").out)["more_rounds"]
    assert lines[-2] == (f"undecided: about {more} more rounds would decide it 80% of the time, "
                         f"over the change and spread these rounds support (not their point "
                         f"values)")
    planned = rounds(cli, tmp_path, "--plan").out.splitlines()
    assert f"more rounds: about {more} more rounds would decide it 80% of the time" in \
        "\n".join(planned)
    # and the verdict's headline, which gave the rounds at the spread seen (42) before
    assert lines[-1] == lines[0] == (
        f"verdict: INCONCLUSIVE: not a pass: it could have missed a slowdown of up to +37.3% "
        f"(Sequential p50); 1 gated row undecided, about {more} more rounds would decide it")
    assert lines[1] == lines[-2]  # `rounds | head -2` shows the verdict and what decides it
    assert "Sequential  p50 ms*" in plain.out and " inconclusive" in lines[8]
    assert rounds(cli, tmp_path, "--format", "json").code == 3


def test_the_verdict_is_a_headline_and_its_reasons_the_lines_below(tmp_path, cli):
    # three gated rows undecided: before, the first line held every reason in full (an A/A
    # pair's was 733 characters); now the verdict, the row it could have missed most in and
    # the rounds that would decide, each reason on a line of its own below
    for number, factor in enumerate((0.9, 1.15, 1.0), 1):
        sides(tmp_path, number, new=(10 * factor, 20 * factor, 30, 100 / factor))
    plain = rounds(cli, tmp_path)
    lines = plain.out.splitlines()
    assert plain.code == 3 and lines[0] == lines[-1] and len(lines[0]) <= 200
    assert re.fullmatch(r"verdict: INCONCLUSIVE: not a pass: it could have missed a slowdown "
                        r"of up to \+\d+\.\d% \(Sequential [a-z0-9/]+\); 3 gated rows "
                        r"undecided, about \d+ more rounds would decide them", lines[0])
    reasons = json.loads(rounds(cli, tmp_path, "--format", "json").out)["reasons"]
    assert len(reasons) == 3 and lines[1:4] == [f"  {reason}" for reason in reasons]


def test_pass_unless_worse_keeps_the_old_rule_and_says_so_first(tmp_path, cli):
    for number, new_p50 in enumerate((9.0, 11.5, 10.0), 1):
        sides(tmp_path, number, new=(new_p50, 20, 30, 100))
    plain = rounds(cli, tmp_path, "--pass-unless-worse")
    assert plain.code == 0
    assert plain.out.splitlines()[2] == (
        "rule: --pass-unless-worse: PASS unless a gated row is shown worse than the "
        "tolerance; a PASS does not show that the rows lie within it")
    assert plain.out.splitlines()[-1] == plain.out.splitlines()[0] == (
        "verdict: PASS (--pass-unless-worse) (1 inconclusive gated row; it could have missed "
        "a slowdown of up to +37.3% (Sequential p50))")
    assert re.search(r"warning: Sequential p50 inconclusive: could only detect more than 10x; "
                     r"about \d+ rounds would be needed for 10%", plain.out)
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
        "slowdown of more than 10x (Sequential p50); 1 gated row undecided")
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


def outputs(cli, folder, *extra):
    """Return the text, JSON, JUnit (parsed) and page (text) of one rounds judgement."""
    text = rounds(cli, folder, "--junit", folder / "junit.xml", "--html", folder / "page.html",
                  *extra)
    document = json.loads(rounds(cli, folder, "--format", "json", *extra).out)
    junit = ElementTree.parse(folder / "junit.xml").getroot()
    page = html.unescape(re.sub(r"<[^>]+>", " ", (folder / "page.html").read_text()))
    return text, document, junit, page


def page_without_axes(folder):
    """Return the page's text without its plots' axis marks (a scale, not a figure)."""
    marked = re.sub(r'<text [^>]*y="(88|\d+)" text-anchor="(start|middle|end)">[+-]?[\d.]+%'
                    r'</text>', "", (folder / "page.html").read_text())
    return html.unescape(re.sub(r"<[^>]+>", " ", marked))


def junit_case(junit, name):
    return next(c for c in junit.iter("testcase") if c.get("name") == name)


def test_an_undecided_gate_is_not_a_pass_and_says_what_it_could_have_missed(
        tmp_path, cli, monkeypatch):
    undecided(tmp_path)
    summary = tmp_path / "summary.md"
    summary.write_text("")  # the runner creates it
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    text, document, junit, page = outputs(cli, tmp_path)
    assert text.code == 3
    lines = text.out.splitlines()
    assert lines[0] == lines[-1] and lines[0].startswith(f"verdict: INCONCLUSIVE: {MISSED}; ")
    # the job summary's first line: the largest slowdown the run could have missed
    assert summary.read_text().splitlines()[0] == (
        f"**Verdict: INCONCLUSIVE**: {MISSED}; gpu against cpu, 3 rounds used")
    assert document["status"] == "inconclusive"
    assert document["could_miss"]["pct"] == document["rows"][0]["judged_interval_pct"][1]
    assert round(document["could_miss"]["pct"], 1) == 37.3
    assert document["could_miss"]["text"] == MISSED.removeprefix("not a pass: ")
    verdict = junit_case(junit, "verdict")
    assert verdict.find("skipped").get("message").startswith(
        f"verdict: INCONCLUSIVE: {MISSED}; ")
    assert f"INCONCLUSIVE {MISSED};" in " ".join(page.split())


def test_a_decided_pass_claims_nothing_missed(tmp_path, cli):
    for number in (1, 2, 3):
        cpu_gpu_round(tmp_path, number, (10 + number / 100, 20, 30, 100))
    text, document, junit, page = outputs(cli, tmp_path)
    assert text.code == 0 and text.out.splitlines()[0] == "verdict: PASS"
    assert document["could_miss"] is None
    assert "could have missed" not in text.out + page + ElementTree.tostring(
        junit, encoding="unicode")


def test_a_row_that_may_be_far_faster_reads_no_worse_never_same(tmp_path, cli):
    # the row, -36.1% [-60.2%, +2.8%], read "same": its worse end lies inside the
    # tolerance, its better end 60% faster; shown no worse, not shown the same
    for number, e in enumerate((0.5, -0.5, 0.25, -0.25, 0.0), 1):
        cpu_gpu_round(tmp_path, number, (10 * math.exp(math.log(1 - 0.361) + e), 20, 30, 100))
    text, document, junit, page = outputs(cli, tmp_path)
    markdown = rounds(cli, tmp_path, "--format", "markdown").out
    assert text.code == 0
    row = next(line for line in text.out.splitlines() if line.startswith("Sequential  p50"))
    assert re.search(r"-36\.1% \[-60\.\d%, \+4\.\d%\] .* no worse$", row)
    assert re.search(r"\| -36\.1% \[-60\.\d%, \+4\.\d%\] \| [^|]+ \| [^|]+ \| no worse \|",
                     markdown)
    assert document["rows"][0]["verdict"] == "no worse"
    assert junit_case(junit, "Sequential p50").find("system-out").text.startswith("no worse: ")
    assert re.search(r"p50 ms\* 10\.0 6\.39 .{0,40}? -36\.1% \[-60\.\d%, \+4\.\d%\] 1/5 "
                     r"\S+ \S+ no worse", " ".join(page.split()))
    assert not any(line.endswith(" same") for line in text.out.splitlines()
                   if "-60." in line)


def holm_rounds(folder):
    # Sequential p95 +12% over 5 rounds: its own 95% interval lies wholly beyond the 5%
    # tolerance, but Holm at 2.5% / 3 gated rows does not reject it; the rest unchanged
    for number, e in enumerate((0.06, -0.06, 0.03, -0.03, 0.0), 1):
        cpu_gpu_round(folder, number, (10, 20 * 1.12 * math.exp(e), 30, 100))


def test_a_row_held_back_by_holm_says_so(tmp_path, cli):
    holm_rounds(tmp_path)
    text, document, junit, page = outputs(cli, tmp_path)
    markdown = rounds(cli, tmp_path, "--format", "markdown").out
    assert text.code == 3
    row = next(line for line in text.out.splitlines() if line.lstrip().startswith("p95 ms*"))
    low = float(re.search(r"\+12\.0% \[\+(\d+\.\d)%, ", row).group(1))
    assert low > 5 and row.endswith(" inconclusive (Holm)")
    assert "(Holm): the interval lies beyond the tolerance, but Holm's correction for the 3 " \
           "gated rows does not show it worse" in text.out
    assert "| inconclusive (Holm) |" in markdown
    p95 = document["rows"][1]
    assert (p95["verdict"], p95["word"], p95["held_by_holm"]) == (
        "inconclusive", "inconclusive (Holm)", True)
    assert [r["held_by_holm"] for r in document["rows"]].count(True) == 1
    assert junit_case(junit, "Sequential p95").find("skipped").get("message").startswith(
        "inconclusive (Holm): change +12.0% [")
    assert "inconclusive (Holm)" in page


def test_the_p_says_what_it_tests(tmp_path, cli):
    holm_rounds(tmp_path)
    text, document, junit, _ = outputs(cli, tmp_path)
    together = next(line for line in text.out.splitlines()
                    if line.startswith("gated rows together: "))
    assert re.search(r"one-sided p [0-9.]+ of worse than the 5% tolerance \(not of any "
                     r"change\)", together)
    assert "of worse than the tolerance 5% (not of any change" in junit_case(
        junit, "gated rows together").find("system-out").text
    assert document["gate_test"]["p_tests"] == "worse than the tolerance"


def test_a_sequential_look_shows_the_interval_it_judges(tmp_path, cli):
    for number, e in enumerate((0.02, -0.03, 0.01, 0.03, -0.02), 1):
        cpu_gpu_round(tmp_path, number, (10 * math.exp(e), 20, 30, 100))
    text, document, _, page = outputs(cli, tmp_path, "--sequential", "10")
    lines = text.out.splitlines()
    assert "change [CI judged]" in next(line for line in lines if line.startswith("pass "))
    assert "at this look a gated row's interval is the look's (its boundary)" in text.out
    row = next(line for line in lines if line.startswith("Sequential  p50"))
    shown = re.search(r"([+-]\d+\.\d)% \[([+-]\d+\.\d)%, ([+-]\d+\.\d)%\]", row)
    p50 = document["rows"][0]
    # the table's interval is the judged one, wider than the plain 95% one, and its worse end
    # is the one the verdict names
    assert float(shown.group(3)) == round(p50["judged_interval_pct"][1], 1)
    assert p50["judged_interval_pct"][1] > 100 * math.expm1(p50["log_ratio"]["high"])
    if text.code == 3:
        assert f"a slowdown of up to {shown.group(3)}% (Sequential p50)" in lines[0]
        assert document["reasons"][0].startswith(
            f"Sequential p50 undecided: its worse end reaches {shown.group(3)}%")
    assert f"{shown.group(1)}% [{shown.group(2)}%, {shown.group(3)}%]" in page


def test_figures_past_sense_are_written_as_bounds(tmp_path, cli):
    # a first look, 3 rounds of at most 10: its boundary makes the intervals enormous
    for number, new_p50 in enumerate((9.5, 10.6, 10.0), 1):
        cpu_gpu_round(tmp_path, number, (new_p50, 20, 30, 100))
    text, document, junit, page = outputs(cli, tmp_path, "--sequential", "10")
    markdown = rounds(cli, tmp_path, "--format", "markdown", "--sequential", "10").out
    beyond = re.compile(r"\d{4,}(\.\d+)?%|\d,\d{3}(\.\d+)?%")
    page = page_without_axes(tmp_path)
    for shown in (text.out, markdown, ElementTree.tostring(junit, encoding="unicode"), page,
                  document["verdict"], *(r["change_text"] for r in document["rows"])):
        assert beyond.search(shown) is None
    row = next(line for line in text.out.splitlines() if line.startswith("Sequential  p50"))
    assert "more than 10x slower]" in row
    assert "its worse end reaches more than 10x slower" in document["reasons"][0]
    # "up to" a bound read "up to more than 10x slower"
    assert "a slowdown of more than 10x (Sequential p50)" in text.out.splitlines()[0]
    assert "a slowdown of more than 10x (Sequential p50)" in markdown.splitlines()[0]
    assert all("up to more than" not in shown for shown in (text.out, markdown, page))
    assert re.search(r"Sequential p50: inconclusive +[+-]\d+\.\d% \[[^]]*more than 10x slower\]",
                     " ".join(page.split()))


def test_detects_states_the_bound_it_is_made_from(tmp_path, cli):
    holm_rounds(tmp_path)
    text = rounds(cli, tmp_path).out
    assert (f"detects: the slowdown of that row alone the gate finds 80% of the time, at the "
            f"{100 * DETECTS_CONFIDENCE:g}% upper bound of its spread (so it holds in about "
            f"{100 * DETECTS_CONFIDENCE:g}% of runs)") in text


def test_rounds_table_reads_like_the_published_record(tmp_path, cli):
    three_rounds(tmp_path, differ_in_round=2)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--per-round")
    assert result.err == ""
    assert result.out == textwrap.dedent("""\
        verdict: FAIL: decisions differ in r2 (1 input)

        rounds: 3 used (r1, r2, r3); base cpu, new gpu; corpus aaaaaaaaaaaa (101 prompts)
        change: gpu against cpu in time per request (for req/s, its inverse), + slower, - faster; t\
he geometric mean of the per-round ratios with a 95% Student t interval on their logs, df 2; slower\
 in: the rounds in which gpu was slower; gpu - cpu: mean paired difference; medians over rounds, de\
scriptive; tolerance 5%; detects: the slowdown of that row alone the gate finds 80% of the time, at\
 the 90% upper bound of its spread (so it holds in about 90% of runs)
        gate (*): p50, p95, req/s of every pass, 3 rows worth 2.0 independent; worse: one-sided tes\
ts at 2.5% each on their per-round mean and by Holm across them (family-wise 5%); within: each row'\
s worse end inside the tolerance (one-sided 2.5%)

        pass        metric    cpu   gpu     gpu - cpu [95% CI]          change [95% CI]  slower in \
       detects  verdict
        Sequential  p50 ms*  10.0  6.00   -4.00 [-6.48, -1.52]   -40.6% [-60.9%, -9.7%]        0/3 \
 more than 10x  better
                    p95 ms*  20.0  20.5  +0.500 [-0.742, 1.74]     +2.5% [-3.5%, +8.9%]        2/3 \
        >= 65%  inconclusive
                    p99 ms   30.0  41.0     +11.0 [8.52, 13.5]  +36.6% [+28.6%, +45.2%]        3/3 \
        >= 36%  worse
                    mean ms  15.4  14.4  -1.25 [-2.45, -0.052]    -8.1% [-15.7%, +0.0%]        0/3 \
        >= 51%  no worse
                    req/s*    100   100    0.000 [-2.48, 2.48]     +0.0% [-2.5%, +2.5%]        1/3 \
        >= 26%  same

        gated rows together: -15.2% [-25.3%, -3.8%] per round, one-sided p 0.991 of worse than the \
5% tolerance (not of any change); every gated row slowing together: detects >= 80%

        pass        metric   r1 cpu / gpu  r2 cpu / gpu  r3 cpu / gpu
        Sequential  p50 ms    10.0 / 5.00   10.0 / 6.00   10.0 / 7.00
                    p95 ms    20.0 / 20.5   20.0 / 21.0   20.0 / 20.0
                    p99 ms    30.0 / 40.0   30.0 / 41.0   30.0 / 42.0
                    mean ms   15.4 / 13.6   15.4 / 14.4   15.4 / 14.5
                    req/s      100 / 99.0     100 / 101     100 / 100

        decisions r1: 101/101 agree in every pass
        decisions r2: 100/101 agree in every pass; differ: #2 d -> e (Sequential)
        decisions r3: 101/101 agree in every pass
        errors Sequential (cpu/gpu): r1 0/0, r2 0/0, r3 0/0

        slower inputs: 5 of 101 (Sequential pass; change in latency of each input, gpu against cpu:\
 median over 3 rounds, 95% t interval of the geometric mean; called slower when its own rounds carr\
y it beyond the 5% tolerance, false discovery rate 5% over the inputs and again over the groups (on\
e input may be noise among many and its group of one slower); a call is a one-sided test, so it may\
 stand where the interval reaches inside the tolerance; noise: beyond the tolerance but not carried\
)

        input          change [95% CI]  slower in  call    decision
        #96    +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #97    +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #98    +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #99    +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #100   +36.7% [+28.6%, +45.2%]        3/3  slower  d
        #51       +2.5% [-3.5%, +8.9%]        2/3  -       d
        #52       +2.5% [-3.5%, +8.9%]        2/3  -       d
        #53       +2.5% [-3.5%, +8.9%]        2/3  -       d
        #54       +2.5% [-3.5%, +8.9%]        2/3  -       d
        #55       +2.5% [-3.5%, +8.9%]        2/3  -       d

        group       inputs         change [95% CI]  slower in  call
        decision d     101  -19.8% [-35.6%, -3.3%]        0/3  -

        round  side        load  router cpus      gpu MiB  restarts/faults  discarded   driver cpu \
 flags
        r1     cpu   0.500-1.50  0-15                 n/a              n/a          0  0.01 s (2%) \
 -
        r1     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (2%) \
 -
        r2     cpu   0.500-1.50  0-7                  n/a              n/a          0  0.01 s (2%) \
 cpuset differs (usually 0-15)
        r2     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (2%) \
 -
        r3     cpu   0.500-1.50  0-15                 n/a              n/a          0  0.01 s (2%) \
 -
        r3     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (2%) \
 -

        order: cpu first in r1, r3; gpu first in r2; balanced
        mean p50 gpu - cpu when cpu / gpu started first: Sequential -4.00 / -4.00
        order effect (crossover, gated rows): running second costs -0.6% [-42.8%, +72.9%]
        verdict: FAIL: decisions differ in r2 (1 input)
        """)
    assert result.code == 1


def test_rounds_markdown_leads_with_the_verdict_then_the_table_then_lists(tmp_path, cli):
    three_rounds(tmp_path, differ_in_round=2)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "markdown", "--per-round")
    assert result.code == 1 and result.err == ""
    lines = result.out.splitlines()
    assert lines[:4] == ["**Verdict: FAIL**: gpu against cpu, 3 rounds used", "",
                         "- decisions differ in r2 (1 input)", ""]
    assert lines[4] == "| pass | metric | cpu | gpu | gpu - cpu [95% CI] | change [95% CI] " \
                       "| slower in | detects | verdict |"
    assert lines[6] == "| Sequential | p50 ms* | 10.0 | 6.00 | -4.00 [-6.48, -1.52] | " \
                       "-40.6% [-60.9%, -9.7%] | 0/3 | more than 10x | better |"
    assert ("- decisions r2: 100/101 agree in every pass; differ: \\#&#8203;2 d -\\> e "
            "(Sequential)") in lines
    for caption in ("**Called slower, then the largest noise**", "**Each round**",
                    "**Environment**"):
        assert caption in lines
    assert "| #&#8203;96 | +36.7% [+28.6%, +45.2%] | 3/3 | slower | d |" in lines
    assert_renders_as_blocks(lines)


def test_markdown_escapes_what_github_would_read_as_markup(tmp_path, cli):
    texts = [f"prompt {i}" for i in range(101)]
    texts[96] = "a | b *bold* <img src=x> [link](y) #1"
    corpus = write_corpus(tmp_path / "c.json", texts)
    sha = hashlib.sha256(open(corpus, "rb").read()).hexdigest()
    three_rounds(tmp_path, differ_in_round=2, sha=sha, decisions=["x|y"] * 3)
    lines = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                "markdown", "--corpus", corpus).out.splitlines()
    row = next(line for line in lines if line.startswith("| #&#8203;96 "))
    assert row == ("| #&#8203;96 | +36.7% [+28.6%, +45.2%] | 3/3 | slower | d | 37 | "
                   "\"a \\| b \\*bold\\* "
                   "\\<img src=x\\> \\[link\\](y) \\#&#8203;1\" |")
    assert "| decision x\\|y | 3 | -40.0% [-60.9%, -9.7%] | 0/3 | - |" in lines
    assert_renders_as_blocks(lines)


def test_rounds_json_carries_rows_and_agreement(tmp_path, cli):
    three_rounds(tmp_path, differ_in_round=2)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "json")
    report = json.loads(result.out)
    assert report["schema"] == "router-latency/rounds/1"
    row = report["rows"][0]
    assert (row["pass"], row["metric"], row["verdict"], row["gated"]) == (
        "sequential", "p50_ms", "better", True)
    assert row["diff"]["mean"] == pytest.approx(-4.0)
    assert row["speedup"] == pytest.approx(1 / (0.5 * 0.6 * 0.7) ** (1 / 3))
    assert row["diff"]["df"] == 2 and row["base_values"] == [10, 10, 10]
    assert [r["verdict"] for r in report["rows"]] == ["better", "inconclusive", "worse",
                                                      "no worse", "same"]
    assert report["agreement"][1]["differ"] == [
        {"id": 2, "pass": "sequential", "base": "d", "new": "e"}]
    assert report["status"] == "fail"
    assert report["reasons"] == ["decisions differ in r2 (1 input)"]
    assert report["exit_code"] == result.code == 1
    text = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu").out
    for warning in report["warnings"]:
        assert warning in text


def test_rounds_json_carries_the_environment(tmp_path, cli):
    three_rounds(tmp_path, flagged=True)
    report = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json").out)
    rows = {(r["round"], r["side"]): r for r in report["environment"]}
    assert rows[(2, "cpu")]["flags"] == ["cpuset differs (usually 0-15)"]
    assert rows[(3, "gpu")]["faults"] == 1.0
    assert rows[(1, "gpu")]["gpu_mib_min"] == 1024.0 and rows[(1, "gpu")]["gpu_mib_max"] == 1100.0
    assert rows[(2, "gpu")]["above_load_limit"] is True
    assert report["order"]["first"] == {"r1": "cpu", "r2": "gpu", "r3": "cpu"}
    assert [item["round"] for item in report["left_out"]] == [2, 3]
    assert report["status"] == "inconclusive" and report["exit_code"] == 3


def test_an_environment_row_is_a_record_written_as_the_json_report_always_held_it(tmp_path,
                                                                                   cli):
    suspect_rounds(tmp_path)
    runs = {n: {s: load_run(str(tmp_path / f"r{n}-{s}.json")) for s in ("cpu", "gpu")}
            for n in (1, 2, 3)}
    rows = environment_rows(Rounds(runs, "cpu", "gpu"))
    assert [(r.round, r.side) for r in rows] == [(n, s) for n in (1, 2, 3) for s in ("cpu", "gpu")]
    odd = rows[3]  # r2 gpu: its driver's CPUs run powersave, its router's foreign vCPUs 1.4
    assert odd.flags == ("foreign cpus above 1", "slow phase: Conc 4", "governor powersave")
    assert odd.gpu_range("temp_c") == (42.0, 48.5) and rows[2].gpu_range("temp_c") == (None, None)
    assert odd.governors == ("powersave",) and odd.slow_passes == ("c4",)
    keys = list(odd.to_json())
    assert keys[:13] == ["round", "side", "load_min", "load_max", "router_cpus", "gpu_mib_min",
                         "gpu_mib_max", "faults", "discarded_attempts", "driver_cpu_s",
                         "driver_cpu_pct", "above_load_limit", "max_load"]
    assert keys[13:] == ["router_cpu_ms_min", "router_cpu_ms_max", "foreign_vcpus_max",
                         "max_foreign_cpus", "above_foreign_limit",
                         *(f"gpu_{f.key}_{end}" for f in GPU_RANGED for end in ("min", "max")),
                         "slow_passes", "governors", "flags"]
    document = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                              "--format", "json").out)
    assert document["environment"] == [json.loads(json.dumps(r.to_json())) for r in rows]
    assert document["environment"][3]["gpu_sclk_mhz_max"] == 2100.0


def test_rounds_environment_shows_router_cpu_gpu_state_and_slow_phases(tmp_path, cli):
    suspect_rounds(tmp_path)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    lines = result.out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("round  side")))
    assert "\n".join(lines[start:start + 17]) + "\n" == textwrap.dedent("""\
        round  side  gpu MiB  discarded  flags
        r1     cpu       n/a          0  -
        r1     gpu   512-520          0  -
        r2     cpu       n/a          0  -
        r2     gpu   512-520          0  foreign cpus above 1, slow phase: Conc 4, governor powersave
        r3     cpu       n/a          0  -
        r3     gpu   512-520          0  -

        round  side  router cpu ms/req  foreign vCPUs (max)  gpu temp C   sclk MHz  mclk MHz  \
 gpu W  gpu use %  slow phases
        r1     cpu           3.00-12.0                0.450         n/a        n/a       n/a  \
   n/a        n/a  -
        r1     gpu           1.00-4.00                0.450     41-48.5  800-2,100     1,600  \
91-300      0-100  -
        r2     cpu           3.00-12.0                0.450         n/a        n/a       n/a  \
   n/a        n/a  -
        r2     gpu           2.00-8.00                 1.40     42-48.5  800-2,100     1,600  \
91-300      0-100  Conc 4
        r3     cpu           3.00-12.0                0.450         n/a        n/a       n/a  \
   n/a        n/a  -
        r3     gpu           3.00-12.0                0.450     43-48.5  800-2,100     1,600  \
91-300      0-100  -

        not recorded in any run: load, router cpus, restarts/faults, driver cpu
        """)
    report = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json").out)
    row = report["environment"][3]
    assert (row["router_cpu_ms_min"], row["router_cpu_ms_max"]) == (2.0, 8.0)
    assert row["foreign_vcpus_max"] == 1.4 and row["above_foreign_limit"] is True
    assert (row["gpu_temp_c_min"], row["gpu_temp_c_max"]) == (42.0, 48.5)
    assert row["slow_passes"] == ["c4"] and row["governors"] == ["powersave"]


def regressed_rounds(folder):
    """Three rounds in which gpu's p95 is 50% slower every round, r2 changes a decision whose
    name holds a control character and markup, and gpu times out once in r3."""
    for number, p95 in enumerate((30.0, 30.5, 31.0), 1):
        make_run(folder / f"r{number}-cpu.json", label="cpu", passes={1: (10, 20, 30, 100)},
                 decisions=["d\x01<&>"], started_unix=1000.0 * number)
        make_run(folder / f"r{number}-gpu.json", label="gpu", passes={1: (10, p95, 40, 100)},
                 decisions=["e" if number == 2 else "d\x01<&>"],
                 errors={"timeout": 1} if number == 3 else None,
                 started_unix=1000.0 * number + (-300 if number == 2 else 300))


def junit_cases(path):
    suites = list(JUnitXml.fromfile(str(path)))
    assert len(suites) == 1
    return {case.name: case for case in suites[0]}, suites[0]


def test_junit_has_a_test_per_gated_row_and_round_and_fails_on_the_regression(tmp_path, cli):
    regressed_rounds(tmp_path)
    out = tmp_path / "out" / "junit.xml"
    out.parent.mkdir()
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--junit", out)
    assert result.code == 1 and result.err == ""
    cases, suite = junit_cases(out)
    assert list(cases) == ["Sequential p50", "Sequential p95", "Sequential req/s",
                           "gated rows together", "r1 decisions", "r2 decisions",
                           "r3 decisions", "Sequential errors", "verdict"]
    # the regression, the gated rows together, r2's changed decision, r3's timeout (a failed
    # request has no decision), the errors and the verdict
    assert (suite.tests, suite.failures, suite.skipped) == (9, 6, 0)
    assert cases["Sequential p50"].is_passed and cases["Sequential req/s"].is_passed
    regression = cases["Sequential p95"].result[0]
    assert isinstance(regression, Failure) and regression.type == "regression"
    # ln(30/20), ln(30.5/20), ln(31/20): mean 0.42190, s 0.016395, t(2) 4.302653
    assert regression.message == ("worse: change +52.5% [+46.4%, +58.8%], + is slower "
                                  "(new - base +10.5 [9.26, 11.7]; t interval over 3 rounds, the "
                                  "one its word judges); tolerance 5%")
    decisions = cases["r2 decisions"].result[0]
    assert isinstance(decisions, Failure)
    assert decisions.message == "100/101 inputs agree in every pass"
    assert decisions.text == "#0 d\\u0001<&> -> e (Sequential)"
    assert cases["r1 decisions"].is_passed and cases["r3 decisions"].is_failure
    assert cases["Sequential req/s"].system_out.startswith(
        "same: change +0.0% [+0.0%, +0.0%], + is slower")
    errors = cases["Sequential errors"].result[0]
    assert errors.message == "failed requests cpu/gpu: r1 0/0, r2 0/0, r3 0/1"
    verdict = cases["verdict"].result[0]
    report = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json").out)
    assert verdict.text.splitlines() == report["reasons"] and verdict.message.startswith(
        "verdict: FAIL: ")


def test_junit_skips_an_inconclusive_row_with_the_reason(tmp_path, cli):
    three_rounds(tmp_path)
    out = tmp_path / "junit.xml"
    rows = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                          "--format", "json").out)["rows"]
    more = next(r for r in rows if (r["pass"], r["metric"]) == ("sequential", "p95_ms"))[
        "more_rounds"]
    assert cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--junit",
               out).code == 3
    cases, suite = junit_cases(out)
    skipped = cases["Sequential p95"].result[0]
    assert isinstance(skipped, Skipped)
    assert skipped.message.startswith("inconclusive: change +2.5% [-3.5%, +8.9%]")
    assert skipped.message.endswith(
        "tolerance 5%; Sequential p95 undecided: its worse end reaches +8.9% (tolerance 5%); "
        f"about {more} more rounds would decide it")
    assert (suite.tests, suite.failures, suite.skipped) == (9, 0, 2)
    assert isinstance(cases["verdict"].result[0], Skipped)


def page_of(tmp_path, cli, *options):
    page = tmp_path / "report.html"
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--html", page,
                 *options)
    text = page.read_text(encoding="utf-8")
    # well-formed as XML (polyglot markup) and without a parse error as HTML5
    root = ElementTree.fromstring(text.split("\n", 1)[1])
    html5lib.HTMLParser(strict=True).parse(text)
    return result, text, root


def test_report_page_is_well_formed_self_contained_and_leads_with_the_verdict(tmp_path, cli):
    texts = [f"prompt {i}" for i in range(101)]
    texts[96] = "<script>alert(1)</script> & \x01 done"
    corpus = write_corpus(tmp_path / "c.json", texts)
    sha = hashlib.sha256(open(corpus, "rb").read()).hexdigest()
    three_rounds(tmp_path, differ_in_round=2, sha=sha)
    result, text, root = page_of(tmp_path, cli, "--corpus", corpus)
    assert result.code == 1
    ns = {"h": "http://www.w3.org/1999/xhtml", "s": "http://www.w3.org/2000/svg"}
    body = root.find("h:body", ns)
    assert body[0].tag == "{http://www.w3.org/1999/xhtml}header"
    assert body[0].find("h:h1", ns).text == "FAIL"
    assert [li.text for li in body[0].iter("{http://www.w3.org/1999/xhtml}li")] == [
        "decisions differ in r2 (1 input)"]
    svgs = list(root.iter("{http://www.w3.org/2000/svg}svg"))
    forests = [s for s in svgs if s.find("s:rect", ns) is not None]
    assert [s.get("aria-label") for s in forests] == ["Sequential p50", "Sequential p95",
                                                      "Sequential req/s"]
    assert len(forests[0].findall("s:circle", ns)) == 3  # one per round
    # these runs recorded no send times: no latency-over-time plot
    assert [s.get("aria-label") for s in svgs[3:]] == ["Sequential: latency distribution"]
    # no script, nothing fetched: the only URLs are the XML namespaces
    assert "<script" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in text
    assert set(re.findall(r"https?://[^\s\"]+", text)) == {"http://www.w3.org/1999/xhtml",
                                                          "http://www.w3.org/2000/svg"}
    assert "\x01" not in text


def test_report_page_of_rounds_that_cannot_be_judged(tmp_path, cli):
    three_rounds(tmp_path, flagged=True)
    result, text, root = page_of(tmp_path, cli)
    assert result.code == 3
    assert root.find(".//{http://www.w3.org/1999/xhtml}h1").text == "INCONCLUSIVE"
    assert "1 usable round, fewer than 3" in text


def test_environment_columns_no_run_recorded_are_left_out_and_named(tmp_path, cli):
    # GPU memory recorded on one side only: the column stays, n/a where it was not recorded
    three_rounds(tmp_path)
    text = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu").out
    header = next(line for line in text.splitlines() if line.startswith("round  side"))
    assert header.split() == ["round", "side", "load", "router", "cpus", "gpu", "MiB",
                              "restarts/faults", "discarded", "driver", "cpu", "flags"]
    assert "not recorded in any run" not in text
    # runs that recorded none of them (no GPU, no load, no router): those columns go
    bare = tmp_path / "bare"
    bare.mkdir()
    for number in (1, 2, 3):
        for side in ("cpu", "gpu"):
            make_run(bare / f"r{number}-{side}.json", label=side,
                     started_unix=1000.0 * number + 500 * ((side == "gpu") == number % 2))
    text = cli("rounds", "--dir", bare, "--base", "cpu", "--new", "gpu", "--html",
               bare / "page.html").out
    header = next(line for line in text.splitlines() if line.startswith("round  side"))
    assert header.split() == ["round", "side", "discarded", "flags"]
    assert ("not recorded in any run: load, router cpus, gpu MiB, restarts/faults, "
            "driver cpu") in text
    page = (bare / "page.html").read_text()
    assert "gpu MiB</th>" not in page and "not recorded in any run: load" in page


HASH_A, HASH_B = "a" * 64, "b" * 64


def test_rounds_outputs_never_overwrite_a_round_or_each_other(tmp_path, cli, monkeypatch):
    three_rounds(tmp_path)
    round_file = tmp_path / "r2-gpu.json"
    before = round_file.read_bytes()
    os.link(round_file, tmp_path / "hard.html")
    os.symlink(round_file, tmp_path / "soft.xml")
    base = ("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    for extra, named in [
            (("--html", round_file), "--html"),
            (("--junit", tmp_path / "sub" / ".." / "r2-gpu.json"), "--junit"),
            (("--html", tmp_path / "hard.html"), "--html"),
            (("--junit", tmp_path / "soft.xml"), "--junit"),
            (("--html", tmp_path / "same.out", "--junit", tmp_path / "same.out"), "--html")]:
        (tmp_path / "sub").mkdir(exist_ok=True)
        result = cli(*base, *extra)
        assert_one_line_error(result, "is the same file as", f"({named})")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(round_file))
    assert_one_line_error(cli(*base), "GITHUB_STEP_SUMMARY", "round file")
    assert round_file.read_bytes() == before and not (tmp_path / "same.out").exists()


def test_markdown_cells_are_one_line_and_notify_nobody(tmp_path, cli, monkeypatch):
    three_rounds(tmp_path, differ_in_round=2, decisions=HOSTILE)
    summary = tmp_path / "summary.md"
    summary.write_text("")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "markdown", "--per-round")
    for text in (result.out, summary.read_text()):
        for line in text.splitlines():
            assert not shown_raw(line), repr(line)
            if line.startswith("|"):
                assert line.endswith("|"), repr(line)
        assert "@octocat" not in text and "#123" not in text
        assert "@&#8203;octocat" in text and "#&#8203;123" in text
        assert "esc\\u001b[31mred" in text or "esc\\\\u001b\\[31mred" in text
    plain = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--per-round")
    assert not shown_raw(plain.out.replace("\n", ""))
    assert "alm\\u061cmark" in plain.out and "tag\\udb40\\udc41hidden" in plain.out
    as_json = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                  "json")
    json.loads(as_json.out)  # still JSON, with the decision as the router sent it
    assert '"tab\\there"' in as_json.out and '"tab\\\\there"' not in as_json.out
    differ = next(line for line in plain.out.splitlines() if line.startswith("decisions r2"))
    assert "#0 line\\nbreak -> d" in differ and "#3 esc\\u001b[31mred -> d" in differ


def rounds_with(tmp_path, cli, *options):
    (tmp_path / "r").mkdir(exist_ok=True)
    three_rounds(tmp_path / "r")
    return cli("rounds", "--dir", tmp_path / "r", "--base", "cpu", "--new", "gpu", *options)


def test_an_output_through_a_link_replaces_the_file_it_names_and_keeps_the_link(tmp_path, cli):
    (tmp_path / "real").mkdir()
    old = tmp_path / "real" / "old.xml"
    old.write_text("old")
    (tmp_path / "junit.xml").symlink_to(old)
    (tmp_path / "page.html").symlink_to(tmp_path / "real" / "new.html")  # dangling: made
    result = rounds_with(tmp_path, cli, "--junit", tmp_path / "junit.xml", "--html",
                         tmp_path / "page.html")
    assert result.code == 3, result.err
    assert (tmp_path / "junit.xml").is_symlink() and (tmp_path / "page.html").is_symlink()
    assert old.read_text().startswith("<?xml")
    assert (tmp_path / "real" / "new.html").read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["new.html", "old.xml"]


def test_an_output_onto_a_fifo_is_written_through_or_refused_never_replaced(tmp_path, cli):
    fifo = tmp_path / "junit.fifo"
    os.mkfifo(fifo)
    result = rounds_with(tmp_path, cli, "--junit", fifo)  # nobody reads it: refused, at once
    assert_one_line_error(result, str(fifo), "a FIFO that nobody reads")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the reader's open is what lets the write start
            result = rounds_with(tmp_path, cli, "--junit", fifo)
            if "nobody reads" not in result.err:
                break
            time.sleep(0.01)
    finally:
        reader.join(10)
    assert result.code == 3 and result.err == "", result.err
    assert got and got[0].startswith(b"<?xml") and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_an_output_onto_a_character_device_is_written_through(tmp_path, cli, simulator):
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
        os.open(null, os.O_WRONLY)
    except OSError:
        pytest.skip("this user cannot make or open a device file")
    for options in (["--junit", null], ["--html", null]):
        result = rounds_with(tmp_path, cli, *options)
        assert result.code == 3 and result.err == "", result.err
        assert stat.S_ISCHR(os.lstat(null).st_mode)
    corpus = write_corpus(tmp_path / "corpus.json", ["a", "b"])
    for force in ((), ("--force",)):
        ran = cli("run", "--url", simulator(delay_ms=0).url, "--corpus", corpus, "--out", null,
                  "--label", "x", "--warmup", "0", "--concurrency", "1", *force)
        assert ran.code == 0 and ran.err == "", ran.err
        assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_socket_is_refused_as_an_output(tmp_path, cli):
    where = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(where))
    try:
        result = rounds_with(tmp_path, cli, "--junit", where)
    finally:
        server.close()
    assert_one_line_error(result, str(where), "is a socket")
    assert stat.S_ISSOCK(os.lstat(where).st_mode)


@pytest.mark.parametrize("allowed", [0, 1000])
def test_the_step_summary_is_appended_whole_or_not_at_all(tmp_path, cli, monkeypatch, allowed):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    real_write = os.write

    def full_disk(fd, data):  # the disk takes `allowed` bytes of the summary, then is full
        if os.path.realpath(f"/proc/self/fd/{fd}") != str(summary):
            return real_write(fd, data)
        if not allowed:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, bytes(data[:allowed]))

    monkeypatch.setattr(os, "write", full_disk)
    result = rounds_with(tmp_path, cli)
    monkeypatch.setattr(os, "write", real_write)
    assert result.code == 3
    assert result.err.startswith("router-latency: warning: cannot append to "
                                 "GITHUB_STEP_SUMMARY: ") and result.err.count("\n") == 1
    assert "nothing of it was left in the file" in result.err, result.err
    assert summary.read_text() == "# earlier step\n"


@pytest.mark.parametrize("form", ["{side}-r{n}", "{side}_r{n}", "{side} r{n}", "{side}",
                                  "{side}-{n}", "{side}-R{n}"])
def test_a_label_with_its_round_suffix_names_its_side(tmp_path, cli, form):
    folder = rounds_folder(tmp_path / "rounds", lambda n, side: form.format(side=side, n=n))
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert result.code in (0, 1, 3) and result.err == "", result.err


@pytest.mark.parametrize("wrong, says", [
    (lambda n, side: f"{side}-r{n + 1}" if side == "rocm" and n == 2 else f"{side}-r{n}",
     "the run's label is 'rocm-r3', but the file name says side 'rocm' of round 2"),
    (lambda n, side: "cpu-r1" if (n, side) == (1, "rocm") else f"{side}-r{n}",
     "the run's label is 'cpu-r1', but the file name says side 'rocm' of round 1"),
    (lambda n, side: "rocmx-r1" if (n, side) == (1, "rocm") else side,
     "the run's label is 'rocmx-r1'"),
])
def test_a_label_of_another_side_or_round_is_refused(tmp_path, cli, wrong, says):
    folder = rounds_folder(tmp_path / "rounds", wrong)
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert_one_line_error(result, says, "a copied or renamed file?")


def test_rounds_says_loudly_the_warnings_of_the_result_cache_kind_and_no_other(tmp_path, cli):
    folder = rounds_folder(tmp_path / "rounds", lambda n, side: side)
    for n in (1, 2, 3):
        mark_cached(folder / f"r{n}-rocm.json")
        for side in ("cpu", "rocm"):  # the driver's spread above the change: a floor warning
            run = load_run(str(folder / f"r{n}-{side}.json"))
            write_atomic(run.path, dump_run(run._replace(floor=Floor(spread_ms=50.0))))
    runs = {n: {s: load_run(str(folder / f"r{n}-{s}.json")) for s in ("cpu", "rocm")}
            for n in (1, 2, 3)}
    report = judge_rounds(runs, "cpu", "rocm", GateSettings(allow_mismatch=("cache",)))
    cached = [w.text for w in report.warnings if w.kind == "result_cache"]
    assert len(cached) == 2 and all("a result cache answered" in text for text in cached)
    assert [w.kind for w in report.warnings].count("floor") == 1
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                 "--allow-mismatch", "cache", "--format", "json")
    # the command line chooses by kind: every result_cache warning, nothing else
    assert result.err == "".join(f"router-latency: {text}\n" for text in cached)
    assert json.loads(result.out)["warnings"] == [w.text for w in report.warnings]


def differing_rounds(folder):
    """Three rounds whose rocm side decides differently on 2 of 5 inputs, and is faster."""
    folder.mkdir(exist_ok=True)
    for number in (1, 2, 3):
        for side, p50, decisions in (("cpu", 10.0, ["a", "b", "c", "d", "e"]),
                                     ("rocm", 5.0 + number * 0.1, ["a", "x", "c", "y", "e"])):
            make_run(folder / f"r{number}-{side}.json", label=side, count=40,
                     decisions=decisions, passes={1: (p50, p50 * 2, p50 * 3, 1000 / p50)},
                     started_unix=1000.0 * number + 500 * (side == "rocm"))
    return folder


def test_decisions_report_lets_the_latency_rows_decide(tmp_path, cli):
    folder = differing_rounds(tmp_path / "rounds")
    gated = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert gated.code == 1 and "decisions differ in r1 (2 inputs)" in gated.out
    reported = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                   "--decisions", "report")
    lines = reported.out.splitlines()
    assert lines[0] == "verdict: PASS" and lines[1] == ""
    assert lines[2] == ("decisions reported, not gated (--decisions report): they differ in 3 "
                        "of 3 used rounds (up to 2 inputs a round); the latency rows decide "
                        "the exit code")
    assert ("decisions r1: 38/40 agree in every pass; differ: #1 b -> x (Sequential), #3 d -> y "
            "(Sequential)") in lines
    assert "decisions differ" not in reported.out and reported.code != 1
    markdown = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                   "--decisions", "report", "--format", "markdown")
    # the verdict first (a job summary's first line), the note right below it
    assert markdown.out.startswith("**Verdict: PASS**")
    assert markdown.out.splitlines()[2].startswith("**decisions reported, not gated")
    document = json.loads(cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm",
                              "--decisions", "report", "--format", "json").out)
    assert document["settings"]["decisions"] == "report"


def test_rounds_of_sides_identical_but_for_sampled_selections_pass_in_full_agreement(
        simulator, tmp_path, cli):
    answers = SimulatedAnswers(no_decision_share=0.0, sampled_share=1.0)
    router = simulator(delay_ms=0, answers=answers)
    corpus = write_corpus(tmp_path / "corpus.json", SAMPLED)
    folder = tmp_path / "rounds"
    folder.mkdir()
    for number in (1, 2, 3):
        for side in ("a", "b"):
            out = folder / f"r{number}-{side}.json"
            result = cli("run", "--url", router.url, "--corpus", corpus, "--out", out,
                         "--label", f"{side}-r{number}", "-c", "1", "--repeat", "2",
                         "--warmup", "0", "--quiet")
            assert result.code == 0, result.err
    # the decisions gate on; timing judged only against a slowdown no noise reaches
    result = cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--decisions", "gate",
                 "--tolerance", "1000", "--pass-unless-worse")
    lines = result.out.splitlines()
    assert f"decisions r1: {N}/{N} agree in every pass" in lines, result.out + result.err
    assert f"sampled selections r1 b: {N} inputs got a model the router sampled or chose by its " \
           "state (model-a, model-b, model-c): apart from decision agreement" in lines
    assert result.code == 0 and lines[0].startswith("verdict: PASS"), result.out
    report = json.loads(cli("rounds", "--dir", folder, "--base", "a", "--new", "b",
                            "--format", "json", "--tolerance", "1000").out)
    assert report["outcomes"][0]["sampled"] == N
    assert report["outcomes"][0]["sampled_models"] == ["model-a", "model-b", "model-c"]


def test_a_sequential_look_that_cannot_decide_stops_for_futility_in_its_words_and_json(
        tmp_path, cli):
    # every gated row about the tolerance, far apart round to round: 7 more rounds of a plan of
    # 10 cannot decide them
    for number, factor in enumerate((0.85, 1.30, 1.02), 1):
        sides(tmp_path, number, new=(10 * factor, 20 * factor, 30 * factor, 100 / factor))
    look = rounds(cli, tmp_path, "--sequential", "10")
    assert look.code == 3
    stop = [line for line in look.out.splitlines() if line.startswith("stop: futility: ")]
    assert stop and "; it could have missed a slowdown of " in stop[0]
    document = json.loads(rounds(cli, tmp_path, "--sequential", "10", "--format", "json").out)
    assert document["futility"] and stop[0].startswith(f"stop: {document['futility']}")
    # the headline names it and keeps to 200 characters (whole, it was 268); the reason in
    # full on its line below
    head = look.out.splitlines()[0]
    assert len(head) <= 200 and head.endswith("; futility (below)"), head
    assert f"  {document['futility']}" in look.out.splitlines()
    # as a fixed design (no looks) nothing stops for futility
    fixed = rounds(cli, tmp_path)
    assert fixed.code == 3 and "futility" not in fixed.out


def mark_timed(path, detected):
    """Give a run file a result cache finding that rests on timing alone (no counters)."""
    document = json.loads(Path(path).read_text())
    document["result_cache"] = {"detected": detected, "metrics": None, "timing": {
        "compared": 20, "faster": 15 if detected else 2,
        "median_ratio": 0.3 if detected else 0.9, "detected": detected}}
    Path(path).write_text(json.dumps(document))


@pytest.mark.parametrize("timed", [
    {("rocm", 1), ("rocm", 2), ("rocm", 3)},  # the sides differ
    {("rocm", 2), ("cpu", 3)},  # an A/A pair under load: the finding flips round to round
])
def test_a_cache_finding_by_timing_alone_never_refuses_the_judgment(tmp_path, cli, timed):
    # "the runs were not measured alike: cache: r1-rocm.json 'detected'" refused an A/A pair
    folder = rounds_folder(tmp_path / "rounds", lambda n, side: side)
    for n in (1, 2, 3):
        for side in ("cpu", "rocm"):
            mark_timed(folder / f"r{n}-{side}.json", (side, n) in timed)
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert result.code in (0, 1, 3) and "not measured alike" not in result.err, result.err
    assert "note: the result cache finding differs between the runs (" in result.out
    assert "rests on timing, which a loaded node flips: judged as measured" in result.out
    if all(side == "rocm" for side, _ in timed):
        assert "warning: a result cache answered rocm but not cpu: the comparison measures " \
               "the cache, not the change" in result.out
    compared = cli("compare", "--base", folder / "r1-cpu.json", "--new", folder / "r2-rocm.json")
    assert compared.code != 2 and "a result cache answered" in compared.out


def test_a_cache_finding_by_counters_on_both_sides_still_refuses(tmp_path, cli):
    folder = rounds_folder(tmp_path / "rounds", lambda n, side: side)
    for n in (1, 2, 3):
        mark_cached(folder / f"r{n}-rocm.json")
        document = json.loads((folder / f"r{n}-cpu.json").read_text())
        document["result_cache"] = {"detected": True, "metrics": {"hits": 0.0, "lookups": 60.0},
                                    "timing": {"compared": 20, "faster": 15,
                                               "median_ratio": 0.3, "detected": True}}
        (folder / f"r{n}-cpu.json").write_text(json.dumps(document))
    # the counters decide where they exist: no hit on cpu, whatever its timing said
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert result.code == 2 and "not measured alike: cache: r1-rocm.json 'detected'" in \
        result.err and "(r1-cpu.json 'not detected')" in result.err
    for n in (1, 2, 3):  # a cache seen by timing alone beside none counted: judged, and said
        mark_timed(folder / f"r{n}-rocm.json", True)
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "rocm")
    assert result.code != 2 and "r1-rocm.json 'detected by timing'" in result.out


def test_two_rows_slowed_are_both_named_worse_where_holms_second_step_decides(tmp_path, cli):
    # three gated rows (p50, p95, req/s) over 5 rounds: p50 far slower, p95 slower by a t that
    # passes Holm's second step (2.5% / 2) but not its first (2.5% / 3), req/s unchanged. Holm
    # names both slowed rows worse; a correction of every step by the 3 rows would not name p95
    pattern = (0.01, -0.01, 0.0, 0.005, -0.005)
    se = math.sqrt(math.fsum(e * e for e in pattern) / 4 / 5)
    first, second = (-t_ppf(0.025 / m, 4) for m in (3, 2))
    t = (first + second) / 2
    assert second < t < first  # the premise: only Holm's second step decides p95
    p95_shift = math.log(1.05) + t * se
    for number, e in enumerate(pattern, 1):
        make_run(tmp_path / f"r{number}-cpu.json", label="cpu", passes={1: (10, 20, 60, 100)},
                 started_unix=10.0 * number)
        make_run(tmp_path / f"r{number}-gpu.json", label="gpu",
                 passes={1: (10 * math.exp(0.3 + e), 20 * math.exp(p95_shift + e), 60, 100)},
                 started_unix=10.0 * number + (3 if number % 2 else -3))
    result = rounds(cli, tmp_path, "--format", "json")
    assert result.code == 1, result.out
    document = json.loads(result.out)
    words = {row["metric"]: row["verdict"] for row in document["rows"] if row["gated"]}
    assert words == {"p50_ms": "worse", "p95_ms": "worse", "req_per_s": "same"}
    assert document["status"] == "fail"
    assert {"Sequential p50 is worse than the tolerance",
            "Sequential p95 is worse than the tolerance"} <= set(document["reasons"])


@pytest.mark.parametrize("gate, said", [
    ("c4:p50", "no Conc 4 p50 row to gate: these rounds' passes are Sequential"),
    ("sequential:p50,c16:req/s", "no Conc 16 req/s row to gate"),
    ("signal:pii:p95", "no signal:pii:p95 row to gate: these rounds' passes are Sequential; "
                       "their parts of the time: none (no signal or router times recorded)"),
    ("sequential:router:queue:mean", "no Sequential router:queue:mean row to gate")])
def test_a_gate_that_no_row_answers_to_is_refused_not_passed(tmp_path, cli, gate, said):
    # a pass or a part the runs do not have gated nothing, and the verdict was PASS with
    # 0 rows: a misspelt --gate in CI would pass every change
    three_rounds(tmp_path)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--gate", gate)
    assert_one_line_error(result, said, "(--gate)")
    assert result.out == ""
    passed = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--gate",
                 "sequential:p50,p95", "--tolerance", "1000")
    assert passed.code == 0 and "gate (*): p95 of every pass, Sequential p50, 2 rows" in passed.out
