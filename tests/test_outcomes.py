"""Tests of outcomes.py: what each side's requests came to, round by round, and its
section."""

from router_latency.compare import DecisionChange
from router_latency.requests import pass_summary, Request
from router_latency.roundset import Rounds
from router_latency.runfile import Attempt, load_run, PassRecord, RunFile
from router_latency.outcomes import (degraded_signals, outcomes_section, pass_errors, PassErrors,
                                     round_agreement, RoundAgreement, run_outcomes, Outcomes,
                                     SideOutcomes)
from conftest import make_run

PASSES = {1: (10, 20, 30, 100), 4: (12, 25, 40, 300)}


def test_a_rounds_decisions_agree_input_by_input_over_every_pass(tmp_path):
    base = load_run(make_run(tmp_path / "b.json", passes=PASSES, decisions=["x", "y", "z"]))
    new = load_run(make_run(tmp_path / "n.json", passes=PASSES, decisions=["x", "q", "z"],
                            errors={"timeout": 1}))
    found = round_agreement(3, base, new, used=False)
    # #1 differs, #100 failed on the new side: it never agrees; each named in its first pass
    assert found == RoundAgreement(3, 99, 101, False, (
        DecisionChange(1, "y", "q", pass_name="sequential"),
        DecisionChange(100, "d", None, pass_name="sequential")))
    # a pass discarded on either side is not compared
    lone = load_run(make_run(tmp_path / "l.json", passes=PASSES, discarded=(1, 4)))
    assert round_agreement(1, base, lone, used=True) == RoundAgreement(1, 0, 0, True, ())


def test_failed_requests_and_degraded_answers_per_pass_and_round(tmp_path):
    runs = {}
    for n, errors in ((1, None), (2, {"timeout": 2, "reset": 1})):
        runs[n] = {"cpu": load_run(make_run(tmp_path / f"r{n}-cpu.json", passes=PASSES)),
                   "gpu": load_run(make_run(tmp_path / f"r{n}-gpu.json", passes=PASSES,
                                            errors=errors))}
    rounds = Rounds(runs, "cpu", "gpu", (1, 2))
    assert pass_errors(rounds) == [PassErrors("sequential", ((1, 0, 0), (2, 0, 3))),
                                   PassErrors("c4", ((1, 0, 0), (2, 0, 3)))]
    assert pass_errors(rounds, degraded=True) == [PassErrors("sequential", ((1, 0, 0), (2, 0, 0))),
                                                  PassErrors("c4", ((1, 0, 0), (2, 0, 0)))]


SKIPPED = (("signal_errors", "classifier:intent", "timeout"),)
FAILED = (("decision_error", "decision", "no_match"),)


def run_answering(requests, label="gpu"):
    """A run of one sequential pass of these requests."""
    requests = tuple(requests)
    attempt = Attempt(None, None, "", None, {}, None, {}, pass_summary(requests, 1.0), requests)
    return RunFile(label, True, {"path": "c.json", "sha256": "0" * 64, "count": len(requests)},
                   (PassRecord("sequential", 1, False, False, attempt),))


def test_degraded_answers_are_summed_by_signal_and_reason_over_rounds():
    runs = {n: {"gpu": run_answering(
        [Request(0, 0.0, 1.0, 200, "d", None, degraded=SKIPPED),
         Request(1, 1.0, 1.0, 200, "d", None, degraded=SKIPPED if n == 1 else FAILED)])}
        for n in (1, 2)}
    assert degraded_signals(Rounds(runs, "cpu", "gpu"), "gpu", "sequential") == {
        "classifier:intent": {"timeout": 3}, "decision": {"no_match": 1}}
    assert degraded_signals(Rounds(runs, "cpu", "gpu"), "gpu", "c4") == {}  # no such pass


def test_a_runs_outcomes_count_its_requests_surprises_and_sampled_selections():
    run = run_answering([
        Request(0, 0.0, 1.0, 200, "math|~qwen3", None),
        Request(1, 1.0, 1.0, 403, None, None, code="JAILBREAK", outcome="expected_rejection"),
        Request(2, 2.0, 1.0, 200, "code", None, outcome="unexpected_routing"),
        Request(3, 3.0, 1.0, 429, None, "http_4xx", code="OVERLOADED"),
        Request(4, 4.0, 1.0, 200, "d", None)])
    assert run_outcomes(run) == {
        "requests": 5, "ok": 3, "errors": {"http_4xx": 1}, "rejected": 1,
        "error_codes": {"http_4xx": {"OVERLOADED": 1}}, "unexpected_routing": (2,),
        "sampled": 1, "sampled_models": ("qwen3",)}


def outcomes(decisions="gate"):
    """Two rounds, r2 left out: r1's decisions agree, r2's differ in one input; the new side
    failed more in r1's sequential pass, degraded answers in r1 on the new side."""
    agreement = (RoundAgreement(1, 3, 3, True, ()),
                 RoundAgreement(2, 2, 3, False, (DecisionChange(7, "a", None, pass_name="c4"),)))
    sides = (SideOutcomes(1, "cpu", 3, 3, {}, ()),
             SideOutcomes(1, "gpu", 3, 1, {"http_4xx": 1}, (5,),
                          error_codes={"http_4xx": {"OVERLOADED": 1}}, degraded=1,
                          degraded_signals={"classifier:intent": {"timeout": 1}}))
    return Outcomes("cpu", "gpu", (1,), decisions, agreement,
                    (PassErrors("sequential", ((1, 0, 1), (2, 0, 0))),),
                    (PassErrors("sequential", ((1, 0, 1),)),), sides)


def test_the_section_says_each_rounds_agreement_errors_and_surprises():
    section = outcomes_section(outcomes())
    assert section.key == "outcomes" and section.lead == ()
    lines = list(section.blocks)
    assert lines[:5] == [
        "decisions r1: 3/3 agree in every pass",
        "decisions r2: 2/3 agree in every pass (round left out); differ: #7 a -> (no decision) "
        "(Conc 4)",
        "errors Sequential (cpu/gpu): r1 0/1, r2 0/0",
        "degraded Sequential (cpu/gpu): r1 0/1",
        "errors r1 gpu: http_4xx: OVERLOADED 1",
    ]
    assert "surprise r1 gpu: 1 prompt expected a rejection and got routed (#5)" in lines
    assert lines[-1].startswith("429 OVERLOADED: the router sheds previews")
    # the record counts the used rounds only: r2, left out, differs
    assert section.record == ((20, "3/3 inputs agreed in every pass of every round"),
                              (30, "failed requests: cpu 0, gpu 1; degraded answers: cpu 0, "
                                   "gpu 1"))


def test_the_sections_checks_fail_where_the_new_side_did_worse_and_skip_rounds_left_out():
    checks = {c.name: c for c in outcomes_section(outcomes()).checks}
    assert [(name, c.outcome) for name, c in checks.items()] == [
        ("r1 decisions", "passed"), ("r2 decisions", "skipped"),
        ("Sequential errors", "failure"), ("Sequential degraded", "failure")]
    assert checks["r2 decisions"].details == "#7 a -> (no decision) (Conc 4)"
    assert checks["Sequential errors"].message == "failed requests cpu/gpu: r1 0/1, r2 0/0"


def test_the_sections_json_keeps_every_key_and_degraded_only_where_any():
    document = outcomes_section(outcomes()).json
    assert list(document) == ["agreement", "errors", "degraded", "outcomes"]
    assert document["agreement"][1] == {"round": 2, "agree": 2, "total": 3, "used": False,
                                        "differ": [{"id": 7, "pass": "c4", "base": "a",
                                                    "new": None}]}
    assert document["outcomes"][0] == {"round": 1, "side": "cpu", "requests": 3, "ok": 3,
                                       "errors": {}, "unexpected_routing": []}
    assert "degraded" not in outcomes_section(outcomes()._replace(degraded=())).json


def test_decisions_reported_not_gated_lead_the_section():
    assert outcomes_section(outcomes("report")).lead == (
        "decisions reported, not gated (--decisions report): they differ in 0 of 1 used "
        "round; the latency rows decide the exit code",)
