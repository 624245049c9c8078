"""The noise taken apart (within one instance, between instances), the plan in node time and
the instances' speed groups: noise.py, read through `rounds` as a user reads it."""

import json
import math
import re
import statistics

import pytest

from router_latency.files import write_atomic
from router_latency.instance import Instance
from router_latency.pools import load_side
from router_latency.runfile import dump_run, load_run
from router_latency.roundset import Rounds
from router_latency.gate import GateSettings
from router_latency.noise import (INSTANCE_S, LOOK_S, node_cost, noise_findings, pass_within,
                                  plan_sentence, PLAN_DETECT_POWER, rounds_for, run_within,
                                  side_within)
from router_latency.pools import pool_run
from router_latency.stats import detectable_change
from router_latency.rounds import judge_rounds
from conftest import NOISE_PROMPTS, noise_run, pair_folder

# its run files are written only to be read back: no wait for the disk's flush
# (conftest.no_fsync)
pytestmark = pytest.mark.usefixtures("no_fsync")


# instances that keep their own speed (as aa-gpu's): 10 ms or 14 ms, 3 ms apart within
INSTANCES = [(10, 14), (10, 10), (14, 10), (10, 14), (14, 14)]
# the same, 10 ms or 10.5 ms: a plan within 1,000 rounds at an upper bound of 5 rounds' noise
MILD = [(10, 10.5), (10, 10), (10.5, 10), (10, 10.5), (10.5, 10.5)]


def test_instances_make_the_spread_and_the_plan_asks_rounds(tmp_path, cli):
    folder = pair_folder(tmp_path, MILD, 0.02, 3)
    result = cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--plan")
    assert result.code == 0
    p50 = next(line for line in result.out.splitlines() if line.startswith("Sequential p50:"))
    found = re.search(r"within one instance ([\d.]+)% \[[\d.]+, [\d.]+\] \(its sendings, new "
                      r"minus base\) and between instances ([\d.]+)% \[[\d.]+, [\d.]+\] \(log "
                      r"standard deviations x 100, 90% intervals: their squares add\): mostly "
                      r"between instances: more rounds narrow it", p50)
    assert found, p50
    within, between = map(float, found.groups())
    assert within < 0.5 < 2.5 < between
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
    # a best case, and the line says so: runs of one instance a round cannot tell the
    # between part from what a round shares
    assert "what a pool buys (the between part counted as between instances, which runs of " \
           "one instance a round cannot tell from what a round shares: the best case for " \
           "pools): one instance a round: about" in result.out
    assert f"{gpus['1']['instances']} instances a round on one GPU: about " in result.out
    assert f"{gpus['8']['instances']} instances a round one per GPU on 8 GPUs (run_rounds.sh " \
           f"--gpus all --concurrent): about " in result.out


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
        # their squares add up to the spread's square, whether or not within was cut to it
        assert math.hypot(within, between) == pytest.approx(spread, rel=1e-9)
    # the mean row's within, worked from the files: per round, each sending's log mean of new
    # minus base (paired by sending); their squares about the round's mean pooled over the
    # rounds, per sending, scaled to a whole pass (over the sendings of a pass)
    runs = {n: {s: load_run(str(folder / f"r{n}-{s}.json")) for s in "ab"}
            for n in range(1, len(INSTANCES) + 1)}
    squares, df, scale = 0.0, 0, []
    for sides in runs.values():
        means = {}
        for side in "ab":
            requests = sides[side].pass_named("sequential").requests
            means[side] = [statistics.fmean(r.latency_ms for r in requests if r.rep == rep)
                           for rep in sorted({r.rep for r in requests})]
        differences = [math.log(b / a) for a, b in zip(means["a"], means["b"])]
        centre = statistics.fmean(differences)
        squares += sum((d - centre) ** 2 for d in differences)
        df += len(differences) - 1
        scale.append(1 / len(differences))
    by_hand = math.sqrt(squares / df * statistics.fmean(scale))
    mean = next(r for r in document["rows"] if r["metric"] == "mean_ms")
    spread = statistics.stdev(math.log(n / b) for b, n in zip(mean["base_values"],
                                                               mean["new_values"]))
    # the instances (10 or 14 ms) make most of the spread: within is the sendings' part, not
    # cut, and the rest is between instances
    assert by_hand < spread
    assert mean["noise"]["within_pct"] / 100 == pytest.approx(by_hand, rel=1e-9)
    assert mean["noise"]["capped"] is False and mean["noise"]["between_pct"] > 0


@pytest.mark.parametrize("second", [NOISE_PROMPTS, NOISE_PROMPTS - 5])
def test_within_from_sendings_is_their_variance_over_their_count(tmp_path, second):
    # sendings of means 10, 12.1 and 10 ms on both sides: the pass's log mean varies within
    # by var(ln 10, ln 12.1, ln 10) / 3 a side, twice that for the change; a sending that
    # kept fewer answers (second: 35 of 40) has the same mean, and the same share
    for number in (1, 2, 3):
        for side in "ab":
            noise_run(tmp_path / f"r{number}-{side}.json", side,
                      [[10.0] * NOISE_PROMPTS, [12.1] * second, [10.0] * NOISE_PROMPTS],
                      1000.0 * number + (50 if side == "b" else 0))
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
    # the change pairs new with base per sending: the sendings' trend, alike on both sides,
    # cancels, and the noise split sees none within (every round alike: none between either)
    item = report.noise.of(mean_row)
    assert item.within == pytest.approx(0.0, abs=1e-12)
    assert item.parts.within.df == 3 * (3 - 1)


def test_halves_of_one_sending_time_req_per_s_by_their_latencies(tmp_path):
    # one sending split into interleaved halves (by prompt), the new side's odd prompts 20%
    # slower: the halves share one span, so each half's req/s is its requests over its
    # summed latency, and it varies within as the mean latency does
    for number in (1, 2, 3):
        for side, odd in (("a", 10.0), ("b", 12.0)):
            noise_run(tmp_path / f"r{number}-{side}.json", side,
                      [[odd if i % 2 else 10.0 for i in range(NOISE_PROMPTS)]],
                      1000.0 * number + (50 if side == "b" else 0))
    runs = {n: {s: load_run(str(tmp_path / f"r{n}-{s}.json")) for s in "ab"} for n in (1, 2, 3)}
    report = judge_rounds(runs, "a", "b")
    mean, rate = (report.noise.of(next(r for r in report.rows if r.metric == metric))
                  for metric in ("mean_ms", "req_per_s"))
    assert mean.split == rate.split == "halves"
    assert mean.within > 0.05 and rate.within == pytest.approx(mean.within, rel=1e-9)


@pytest.mark.parametrize("sendings", [1, 2])
def test_a_pass_in_two_parts_varies_within_as_its_two_parts_do(tmp_path, sendings):
    # sent once: two halves interleaved by prompt (even ids at 10 ms, odd at 12 ms); sent
    # twice: the two sendings (10 ms, then 12 ms); either way two parts, the fewest that split
    latencies = ([[12.0 if i % 2 else 10.0 for i in range(NOISE_PROMPTS)]] if sendings == 1
                 else [[10.0] * NOISE_PROMPTS, [12.0] * NOISE_PROMPTS])
    noise_run(tmp_path / "r1-a.json", "a", latencies, 1000.0)
    record = load_run(str(tmp_path / "r1-a.json")).pass_named("sequential")
    within, split = pass_within(record, "mean_ms")
    assert split == ("halves" if sendings == 1 else "sendings")
    assert within == pytest.approx(statistics.variance([math.log(10), math.log(12)]) / 2,
                                   rel=1e-9)


def test_a_pools_within_is_that_of_its_instances_mean(tmp_path):
    # a pool's statistic is the mean of its K instances' logs: their within variances added,
    # over K^2 (the instances' requests are not one pass to split)
    instances = []
    for i, slow in enumerate((11.0, 13.0, 10.5), 1):
        noise_run(tmp_path / f"r1-a@{i}.json", "a",
                  [[10.0] * NOISE_PROMPTS, [slow] * NOISE_PROMPTS, [10.0] * NOISE_PROMPTS],
                  1000.0 + 100 * i)
        instances.append(load_run(str(tmp_path / f"r1-a@{i}.json")))
    alone = [pass_within(run.pass_named("sequential"), "mean_ms") for run in instances]
    within, split = run_within(pool_run(instances), "sequential", "mean_ms")
    assert split == "sendings" and all(a[0] > 0 for a in alone)
    assert within == pytest.approx(sum(a[0] for a in alone) / 3 ** 2, rel=1e-12)
    assert run_within(instances[0], "sequential", "mean_ms") == alone[0]


def test_a_plan_from_sides_sent_differently_gives_its_rounds_and_their_range(tmp_path, cli):
    # the base sent every prompt twice, the new side once (--allow-mismatch passes): no row
    # splits alike on both sides, so each keeps its spread, the range's ends at its bounds
    clock = 1000.0
    for number, speeds in enumerate(MILD, 1):
        for side, speed, sendings in (("a", speeds[0], 2), ("b", speeds[1], 1)):
            latencies = [[speed * (1 + 0.02 * ((i * 7 + number) % 5 - 2) / 2)
                          for i in range(NOISE_PROMPTS)] for _ in range(sendings)]
            noise_run(tmp_path / f"r{number}-{side}.json", side, latencies, clock)
            clock += 12.0 + sum(map(sum, latencies)) / 1000
    result = cli("rounds", "--dir", tmp_path, "--base", "a", "--new", "b", "--format", "json",
                 "--allow-mismatch", "passes")
    assert result.code in (0, 3), result.err
    plan = json.loads(result.out)["plan"]
    low, high = plan["rounds_range"]
    assert low <= plan["rounds"] <= high


def test_plan_costs_rounds_from_the_run_files(tmp_path):
    folder = pair_folder(tmp_path, MILD, 0.02, 3)
    runs = {n: {s: load_run(str(folder / f"r{n}-{s}.json")) for s in "ab"} for n in range(1, 6)}
    report = judge_rounds(runs, "a", "b")
    cost, plan = report.noise.cost, report.noise.plan
    assert cost.ready_s == pytest.approx(10.0)
    assert cost.other_s == pytest.approx(1.0, abs=0.01)
    assert cost.gap_s == pytest.approx(1.0, abs=0.01)
    assert cost.requests == 3 * NOISE_PROMPTS and cost.repeat == 3
    # each round: two side runs of ready, warm-up, gap and passes scaled to the plan's requests,
    # and a look
    single = report.noise.single
    side_s = 10.0 + cost.other_s + cost.gap_s + cost.passes_s * single.scale
    assert single.instances == 1
    assert single.node_minutes == pytest.approx(single.rounds * (2 * side_s + cost.look_s) / 60)
    # a pool: its start-up once, each instance's warm-up and passes, and the step from one
    # instance's run to the next (no pool measured here: its usual cost)
    assert not cost.instance_measured and cost.instance_s == INSTANCE_S
    pool_s = 10.0 + cost.gap_s + plan.instances * (cost.other_s + cost.passes_s * plan.scale) \
        + (plan.instances - 1) * INSTANCE_S
    assert plan.node_minutes == pytest.approx(plan.rounds * (2 * pool_s + cost.look_s) / 60)
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


def test_an_undecided_verdict_gives_one_more_rounds_figure_and_points_to_the_plan(tmp_path, cli):
    folder = pair_folder(tmp_path, MILD, 0.02, 3)
    result = cli("rounds", "--dir", folder, "--base", "a", "--new", "b")
    assert result.code == 3
    line = next(x for x in result.out.splitlines() if x.startswith("undecided:"))
    # one figure: the plan (a fresh run's, its own questions) is --plan's, named, not a second
    # number of rounds
    assert re.fullmatch(r"undecided: about \d+ more rounds would decide it 80% of the time, over "
                        r"the change and spread these rounds support \(not their point "
                        r"values\); a fresh run's plan: rounds --plan", line), line
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
    # a report without rows holds no findings at all (RoundsReport.noise None): no plan either
    assert plan_sentence(None) is None


def test_at_tolerance_zero_the_plan_is_for_the_slowdown_alone(tmp_path, cli):
    folder = pair_folder(tmp_path, MILD, 0.02, 3)
    result = cli("rounds", "--dir", folder, "--base", "a", "--new", "b", "--tolerance", "0",
                 "--plan")
    assert result.code == 0, result.err
    plan = next(line for line in result.out.splitlines() if line.startswith("plan: "))
    assert "passes" not in plan and ": a 10% slowdown of one gated row is found 80% of the " \
        "time, planned at an 80% upper bound" in plan


def test_plan_costs_a_look_per_round_measured_from_the_gaps_between_rounds(tmp_path):
    # rounds 3 s further apart than the runs of one round: the look --until-decided makes
    folder = pair_folder(tmp_path, MILD, 0.02, 3, look_s=3.0)
    runs = {n: {s: load_run(str(folder / f"r{n}-{s}.json")) for s in "ab"} for n in range(1, 6)}
    report = judge_rounds(runs, "a", "b")
    cost, plan = report.noise.cost, report.noise.plan
    assert cost.look_measured and cost.look_s == pytest.approx(3.0, abs=0.01)
    assert cost.gap_s == pytest.approx(1.0, abs=0.01)  # the gap within a round, without it
    pool_s = cost.ready_s + cost.gap_s + plan.instances * (
        cost.other_s + cost.passes_s * plan.scale) + (plan.instances - 1) * cost.instance_s
    assert plan.node_minutes == pytest.approx(plan.rounds * (2 * pool_s + cost.look_s) / 60)
    # files that ran no look (a fixed design): the plan still counts one a round, its usual cost
    (tmp_path / "fixed").mkdir()
    fixed = pair_folder(tmp_path / "fixed", INSTANCES, 0.02, 3)
    runs = {n: {s: load_run(str(fixed / f"r{n}-{s}.json")) for s in "ab"} for n in range(1, 6)}
    cost = judge_rounds(runs, "a", "b").noise.cost
    assert not cost.look_measured and cost.look_s == LOOK_S


def test_the_plan_holds_at_an_upper_bound_of_the_noise_and_gives_the_range_the_pilot_supports(
        tmp_path, cli):
    folder = pair_folder(tmp_path, MILD, 0.02, 3)
    runs = {n: {s: load_run(str(folder / f"r{n}-{s}.json")) for s in "ab"} for n in range(1, 6)}
    report = judge_rounds(runs, "a", "b")
    plan, settings = report.noise.plan, GateSettings()
    gated = [r for r in report.rows if r.gated]
    # at the point values the plan would ask fewer rounds: it plans at an upper bound (runs of
    # one instance a round: the between part counted as between instances, over the pool)
    parts = [report.noise.of(r).parts for r in gated]
    point = rounds_for([math.sqrt((p.rounds.value ** 2 + p.within.value ** 2 / plan.scale)
                                  / plan.instances) for p in parts], settings)
    assert point <= plan.rounds
    low, high = plan.rounds_range
    assert low <= point and (high is None or plan.rounds <= high)
    document = json.loads(cli("rounds", "--dir", folder, "--base", "a", "--new", "b",
                              "--format", "json").out)["plan"]
    assert document["rounds"] == plan.rounds and document["rounds_range"] == [low, high]
    line = next(x for x in cli("rounds", "--dir", folder, "--base", "a", "--new", "b",
                               "--plan").out.splitlines() if x.startswith("plan: "))
    top = "more than 1,000" if high is None else f"{high:,}"
    assert line.endswith(f"the pilot's 90% intervals of the parts support anywhere from "
                         f"{low:,} to {top} rounds")


@pytest.mark.parametrize("max_mde", [7.0, 10.0, 15.0])
def test_the_plans_rounds_grow_with_the_gated_rows_and_keep_its_promise(max_mde):
    # each gated row is tested at Holm's first level, 2.5% over the rows, so more gated rows
    # need more rounds to find a row slowed by --max-mde alone 80% of the time; the plan's
    # rounds must keep that promise at every count of rows, whichever term decides
    settings = GateSettings(max_mde_pct=max_mde)
    room = math.log1p(max_mde / 100) - settings.tolerance_log
    found = []
    for spread in (0.02, 0.05):
        planned = [rounds_for([spread] * m, settings) for m in range(1, 7)]
        assert planned == sorted(planned) and planned[-1] > planned[0], planned
        for m, n in enumerate(planned, 1):
            found.append(detectable_change(spread, n, alpha=settings.alpha / 2 / m,
                                           power=PLAN_DETECT_POWER, sided=1) <= room)
    assert all(found)


def timed_pools(folder, together, *, count=3, rounds=3, ready=5.0, step=0.4, gap=0.7):
    """Write pools of `count` a side whose runs follow each other as run_rounds.sh runs them:
    a pool's start-up (`ready`, recorded as each instance's fact ready_s), each instance's
    warm-up (1 s) and pass, `step` from one instance's run to the next, `gap` from a pool's
    last run to the next pool's start (a stop); with `together` one pool a round of both
    sides, measured a1 b1 b2 a2 ... Return the seconds from the first start to the last end."""
    clock, began = 1000.0, 1000.0
    for number in range(1, rounds + 1):
        sides = [("a", "b")] if together else [("a",), ("b",)]
        for pool in sides:
            clock += ready
            order = [(side, i) for i in range(1, count + 1)
                     for side in (pool if i % 2 else pool[::-1])]
            for k, (side, i) in enumerate(order):
                latencies = [[10.0 * (1 + 0.01 * i)] * NOISE_PROMPTS for _ in range(3)]
                path = folder / f"r{number}-{side}@{i}.json"
                noise_run(path, side, latencies, clock)
                run = load_run(str(path))
                run = run._replace(ready_after_s=0.0, started_unix=clock, passes=tuple(
                    p._replace(attempt=p.attempt._replace(started_unix=clock + 1.0))
                    for p in run.passes), instance=Instance(
                        number, side, i, count, facts={"ready_s": ready}))
                write_atomic(str(path), dump_run(run))
                clock += 1.0 + sum(map(sum, latencies)) / 1000
                if k < len(order) - 1:
                    clock += step
            clock += gap
    return clock - gap - began


@pytest.mark.parametrize("together", [False, True])
def test_a_pools_cost_is_its_start_up_once_and_a_step_an_instance_matching_the_files_span(
        tmp_path, together):
    span = timed_pools(tmp_path, together)
    runs = {n: {s: load_side(str(tmp_path / f"r{n}-{s}@1.json")) for s in "ab"}
            for n in (1, 2, 3)}
    cost = node_cost(Rounds(runs, "a", "b", (1, 2, 3)))
    assert cost.together is together and cost.instance_measured
    assert cost.ready_s == pytest.approx(5.0) and cost.instance_s == pytest.approx(0.4)
    assert cost.other_s == pytest.approx(1.0) and cost.gap_s == pytest.approx(0.7)
    # the model over the files' rounds is their span, and the gap after the last pool
    modelled = 3 * cost.round_s(1, 3, together=together) - 3 * cost.look_s
    assert modelled == pytest.approx(span + 0.7)
