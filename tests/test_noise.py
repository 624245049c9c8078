"""The noise taken apart (within one instance, between instances), the plan in node time and
the instances' speed groups: noise.py, read through `rounds` as a user reads it."""

import json
import math
import re
import statistics

import pytest

from router_latency.runfile import load_run
from router_latency.roundset import Rounds
from router_latency.gate import GateSettings
from router_latency.noise import noise_findings, plan_sentence, side_within
from router_latency.rounds import judge_rounds
from conftest import NOISE_PROMPTS, noise_run, pair_folder


# instances that keep their own speed (as aa-gpu's): 10 ms or 14 ms, 3 ms apart within
INSTANCES = [(10, 14), (10, 10), (14, 10), (10, 14), (14, 14)]


def test_instances_make_the_spread_and_the_plan_asks_rounds(tmp_path, cli):
    folder = pair_folder(tmp_path, INSTANCES, 0.02, 3)
    result = cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--plan")
    assert result.code == 0
    p50 = next(line for line in result.out.splitlines() if line.startswith("Sequential p50:"))
    found = re.search(r"within one instance ([\d.]+)% \(its sendings\) and between instances "
                      r"([\d.]+)% \(log standard deviations x 100: their squares add\): mostly "
                      r"between instances: more rounds narrow it", p50)
    assert found, p50
    within, between = map(float, found.groups())
    assert within < 2 < 20 < between
    plan = json.loads(cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--format",
                          "json").out)["plan"]
    # more instances than the 5 run, at no more requests per pass than the 120 sent: a pool
    # of them a round, as the between part is all between instances
    assert plan["rounds"] * plan["instances"] > 5 and plan["instances"] > 1
    assert plan["requests_per_pass"] <= 3 * NOISE_PROMPTS
    assert f"plan: about {plan['rounds']} rounds of {plan['instances']} instances a side of " \
           f"{plan['requests_per_pass']} requests per pass" in result.out
    assert f"--instances {plan['instances']})" in result.out
    # what K buys: one instance a round costs more, one per GPU on 8 GPUs less
    gpus = plan["gpus"]
    assert set(gpus) == {"1", "8"} and gpus["1"]["instances"] == plan["instances"]
    assert gpus["8"]["instances"] % 8 == 0
    assert gpus["8"]["node_minutes"] < gpus["1"]["node_minutes"] == plan["node_minutes"]
    one = re.search(r"one instance a round: about (\d+) rounds, ([\d.,]+) minutes", result.out)
    assert one and float(one.group(2).replace(",", "")) > plan["node_minutes"]


def test_within_and_between_add_up_to_the_spread(tmp_path, cli):
    folder = pair_folder(tmp_path, INSTANCES, 0.3, 2)
    document = json.loads(cli("rounds", "--dir", folder, "--base", "a", "--new", "b",
                              "--format", "json").out)
    for row in document["rows"]:
        noise = row["noise"]
        # 100 x the log standard deviations, as the plan table's spread column
        within, between = (noise[k] / 100 for k in ("within_pct", "between_pct"))
        logs = [math.log(n / b) for b, n in zip(row["base_values"], row["new_values"])]
        spread = statistics.stdev(logs)
        assert noise["split"] == "sendings" and within > 0
        if between > 0:  # the rest of the spread: their squares add up to its square
            assert math.hypot(within, between) == pytest.approx(spread, rel=1e-9)
        else:
            assert within >= spread


def test_within_from_sendings_is_their_variance_over_their_count(tmp_path):
    # sendings of means 10, 12.1 and 10 ms on both sides: the pass's log mean varies within
    # by var(ln 10, ln 12.1, ln 10) / 3 a side, twice that for the change
    for number in (1, 2, 3):
        for side in "ab":
            noise_run(tmp_path / f"r{number}-{side}.json", side,
                      [[10.0] * NOISE_PROMPTS, [12.1] * NOISE_PROMPTS, [10.0] * NOISE_PROMPTS], 1000.0 * number
                      + (50 if side == "b" else 0))
    runs = {n: {s: load_run(str(tmp_path / f"r{n}-{s}.json")) for s in "ab"} for n in (1, 2, 3)}
    report = judge_rounds(runs, "a", "b")
    mean_row = next(r for r in report.rows if r.metric == "mean_ms")
    logs = [math.log(10), math.log(12.1), math.log(10)]
    centre = sum(logs) / 3
    variance = sum((v - centre) ** 2 for v in logs) / 2 / 3
    rounds = Rounds(runs, "a", "b", (1, 2, 3))
    found = [side_within(rounds, side, mean_row.pass_name, "mean_ms") for side in "ab"]
    assert [f[0] for f in found] == pytest.approx([variance, variance], rel=1e-9)
    assert {f[1] for f in found} == {"sendings"}
    # every round alike: the spread is no larger than that, and a part is no larger than the
    # spread: within is cut to it (and says so), nothing is left for instances
    item = report.noise.of(mean_row)
    assert math.sqrt(2 * variance) > mean_row.spread
    assert item.capped and item.within == mean_row.spread and item.between == 0.0


def test_plan_costs_rounds_from_the_run_files(tmp_path):
    folder = pair_folder(tmp_path, INSTANCES, 0.02, 3)
    runs = {n: {s: load_run(str(folder / f"r{n}-{s}.json")) for s in "ab"} for n in range(1, 6)}
    report = judge_rounds(runs, "a", "b")
    cost, plan = report.noise.cost, report.noise.plan
    assert cost.ready_s == pytest.approx(10.0)
    assert cost.other_s == pytest.approx(1.0, abs=0.01)
    assert cost.gap_s == pytest.approx(1.0, abs=0.01)
    assert cost.requests == 3 * NOISE_PROMPTS and cost.repeat == 3
    # each round: two side runs of ready, warm-up, gap and passes scaled to the plan's requests
    single = report.noise.single
    side_s = 10.0 + cost.other_s + cost.gap_s + cost.passes_s * single.scale
    assert single.instances == 1
    assert single.node_minutes == pytest.approx(single.rounds * 2 * side_s / 60)
    # a pool: its start-up once, each instance's warm-up and passes
    pool_s = 10.0 + cost.gap_s + plan.instances * (cost.other_s + cost.passes_s * plan.scale)
    assert plan.node_minutes == pytest.approx(plan.rounds * 2 * pool_s / 60)
    assert plan.node_minutes < single.node_minutes
    minutes = f"{plan.node_minutes:,.0f}" if plan.node_minutes >= 10 else \
        f"{plan.node_minutes:.1f}"
    assert plan_sentence(report.noise) == (
        f"about {plan.rounds} rounds of {plan.instances} instances a side of "
        f"{plan.requests_per_pass} requests per pass, about {minutes} minutes on this node")


def test_speed_groups_are_named_with_their_rounds_and_speeds(tmp_path, cli):
    folder = pair_folder(tmp_path, INSTANCES, 0.02, 3)
    result = cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--plan")
    groups = [line for line in result.out.splitlines() if line.startswith("speed groups:")]
    assert len(groups) == 2
    assert re.match(r"speed groups: a's instances ran at 2 speeds \(Sequential p50: r1, r2, "
                    r"r4 at [\d.-]+ ms; r3, r5 at [\d.-]+ ms\)", groups[0]), groups[0]
    assert "docs/gpu-node.md" in groups[0]
    document = json.loads(cli("rounds", "--dir", folder, "--base", "a", "--new", "b",
                              "--format", "json").out)
    assert [g["rounds"] for g in document["plan"]["speed_groups"][1]["groups"]] == [
        [2, 3], [1, 4, 5]]
    # one speed, within noise alone: no groups
    (tmp_path / "alike").mkdir()
    alike = pair_folder(tmp_path / "alike", [(10, 10)] * 5, 0.02, 3)
    result = cli("rounds", "--dir", alike, "--base", "a", "--new", "b", "--plan")
    assert "speed groups" not in result.out


def test_an_undecided_verdict_names_the_plan(tmp_path, cli):
    folder = pair_folder(tmp_path, INSTANCES, 0.02, 3)
    result = cli("rounds", "--dir", folder, "--base", "a", "--new", "b")
    assert result.code == 3
    line = next(x for x in result.out.splitlines() if x.startswith("undecided:"))
    assert re.search(r"; a plan that passes an unchanged pair 90% of the time and finds a 10% "
                     r"slowdown 80% \(rounds --plan\): about \d+ rounds of \d+ instances a side "
                     r"of \d+ requests per pass, about [\d.,]+ minutes on this node$", line), line
    page = tmp_path / "page.html"
    cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--html", page)
    text = page.read_text()
    assert "<h2>Noise and a plan</h2>" in text and "between instances" in text


def test_no_plan_without_the_times_still_takes_noise_apart(tmp_path):
    folder = pair_folder(tmp_path, INSTANCES, 0.02, 3)
    runs = {n: {s: load_run(str(folder / f"r{n}-{s}.json"))._replace(ready_after_s=None)
                for s in "ab"} for n in range(1, 6)}
    report = judge_rounds(runs, "a", "b")
    found = noise_findings(Rounds(runs, "a", "b", report.used), report.rows, GateSettings())
    assert found.cost is None and found.plan is None and plan_sentence(found) is None
    assert len(found.rows) == 5  # every client row of the one pass


def test_at_tolerance_zero_the_plan_is_for_the_slowdown_alone(tmp_path, cli):
    folder = pair_folder(tmp_path, INSTANCES, 0.02, 3)
    result = cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--tolerance", "0",
                 "--plan")
    assert result.code == 0, result.err
    plan = next(line for line in result.out.splitlines() if line.startswith("plan: "))
    assert "passes" not in plan and plan.endswith(
        ": a 10% slowdown of one gated row is found 80% of the time")
