"""Tests of pools.py: a side's round on several instances (r<N>-<side>@<i>.json) read as one
run of that side and round, paired within the round."""

import json
import math
import re

import pytest

from router_latency.files import write_atomic
from router_latency.instance import Instance
from router_latency.runfile import dump_run, load_run

from conftest import assert_one_line_error, make_run

# each test writes its pools, up to 48 run files three times each, only to read them back
pytestmark = pytest.mark.usefixtures("no_fsync")

def pool_round(folder, number, side, p50s, *, instances=None, started=0.0):
    """Write round `number` of `side` as one file per instance, their sequential p50s given
    (p95 and p99 above them); return the paths."""
    paths = []
    for i, p50 in enumerate(p50s, 1):
        path = folder / f"r{number}-{side}@{i}.json"
        make_run(path, label=side, passes={1: (p50, p50 * 1.5, p50 * 2, 1000 / p50)},
                 started_unix=1000.0 * number + started + i)
        run = load_run(str(path))._replace(instance=Instance(
            number, side, i, len(p50s) if instances is None else instances, 8800 + i))
        write_atomic(str(path), dump_run(run))
        paths.append(path)
    return paths


BASE = {1: (10.0, 14.0), 2: (13.0, 9.5), 3: (16.0, 10.0)}
NEW = {1: (10.5, 14.5), 2: (13.0, 10.0), 3: (16.5, 10.0)}


def write_pools(folder, base=BASE, new=NEW):
    for number in base:
        pool_round(folder, number, "cpu", base[number])
        pool_round(folder, number, "gpu", new[number], started=100.0)


def test_a_pool_is_judged_on_its_instances_mean_log_paired_within_the_round(tmp_path, cli):
    write_pools(tmp_path)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "json", "--tolerance", "50")
    report = json.loads(result.out)
    row = next(r for r in report["rows"] if (r["pass"], r["metric"]) == ("sequential", "p50_ms"))
    for values, pools in ((row["base_values"], BASE), (row["new_values"], NEW)):
        assert values == [pytest.approx(math.sqrt(a * b), rel=1e-12) for a, b in pools.values()]
    assert report["files"]["r1"] == {"cpu": str(tmp_path / "r1-cpu@1.json"),
                                     "gpu": str(tmp_path / "r1-gpu@1.json")}
    assert result.code == 0, result.out


def test_pools_of_other_sizes_or_a_missing_instance_are_refused(tmp_path, cli):
    write_pools(tmp_path)
    pool_round(tmp_path, 3, "gpu", (16.5, 10.0, 12.0))  # a third instance in one round
    assert_one_line_error(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"),
                          "the rounds' pools differ in size", "r3 gpu 3")
    (tmp_path / "r3-gpu@2.json").unlink()
    assert_one_line_error(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"),
                          "round 3 of side gpu has instances 1, 3 but not 2")


def test_an_instance_whose_run_names_another_is_refused(tmp_path, cli):
    write_pools(tmp_path)
    pool_round(tmp_path, 2, "cpu", (13.0, 9.5), instances=3)  # its runs say "of 3"
    assert_one_line_error(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"),
                          "r2-cpu@1.json", "the file names instance 1 of 2 of cpu in round 2, "
                          "its run instance 1 of 3 of cpu in round 2")


def placed_pools(folder, slow_gpus, *, count=8, rounds=3):
    """Write `rounds` rounds of pools of `count` a side, instance i on GPU i - 1 (a stand-in
    8-GPU node): the instances on slow_gpus at 14 ms, the rest at 10 ms, 3% apart within a
    round by their number."""
    for number in range(1, rounds + 1):
        for side, started in (("cpu", 0.0), ("gpu", 100.0)):
            p50s = [(14.0 if i - 1 in slow_gpus(number, side) else 10.0) * (1 + 0.003 * i)
                    * (1.002 if side == "gpu" else 1.0) * (1 + 0.001 * number)
                    for i in range(1, count + 1)]
            for i, path in enumerate(pool_round(folder, number, side, p50s, started=started), 1):
                run = load_run(str(path))
                facts = {"numa_nodes": "0", "start_order": i, "ready_s": 13.0 + 0.1 * i}
                write_atomic(str(path), dump_run(run._replace(instance=run.instance._replace(
                    gpu=str(i - 1), facts=facts))))


def test_the_fact_that_separates_the_speed_groups_is_named(tmp_path, cli):
    # the instances on GPUs 4-7 are slower: their GPU separates the groups
    placed_pools(tmp_path, lambda number, side: {4, 5, 6, 7})
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--plan")
    lines = [x for x in result.out.splitlines() if x.startswith("instance speeds: ")]
    assert [re.sub(r"[\d.]+-[\d.]+ ms", "X ms", line) for line in lines] == [
        f"instance speeds: {side}'s instances of Sequential ran at 2 speeds (gpu 0, 1, 2, 3: "
        f"12 at X ms; gpu 4, 5, 6, 7: 12 at X ms): what separates them is its gpu"
        for side in ("cpu", "gpu")], result.out + result.err
    document = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                              "--format", "json").out)
    assert [s["separated_by"] for s in document["instance_speeds"]] == ["gpu", "gpu"]


def test_speed_groups_that_follow_nothing_recorded_say_so(tmp_path, cli):
    # the slow GPUs move from round to round: no GPU is slow in every round
    placed_pools(tmp_path, lambda number, side: {(number + k) % 8 for k in (0, 3, 5, 6)})
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--plan")
    lines = [x for x in result.out.splitlines() if x.startswith("instance speeds: ")]
    assert len(lines) == 2 and all(line.endswith(
        ": nothing the instances recorded (gpu, numa_nodes) separates them: a property not "
        "recorded (the router's start, a neighbour), worth pinning down") for line in lines), \
        result.out


def test_pools_up_together_are_judged_their_instances_measured_one_at_a_time(tmp_path, cli):
    # --together: a round's instances measured a1 b1 b2 a2, each after the one before ended;
    # a side's pool spans the other's instances, and is still measured one run at a time
    write_pools(tmp_path)
    for number in BASE:
        order = [("cpu", 1), ("gpu", 1), ("gpu", 2), ("cpu", 2)]
        for k, (side, i) in enumerate(order if number % 2 else order[::-1]):
            path = tmp_path / f"r{number}-{side}@{i}.json"
            run = load_run(str(path))
            start = 1000.0 * number + 10.0 * k
            write_atomic(str(path), dump_run(run._replace(started_unix=start, passes=tuple(
                p._replace(attempt=p.attempt._replace(started_unix=start + 1.0))
                for p in run.passes))))
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--tolerance",
                 "50")
    assert result.code == 0, result.err
    # an instance that did start before the one before it ended is still refused
    path = tmp_path / "r2-gpu@1.json"
    run = load_run(str(path))
    write_atomic(str(path), dump_run(run._replace(started_unix=2000.5)))
    assert_one_line_error(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"),
                          "r2-gpu@1.json started before")


def as_pools(folder, count, gpus=None):
    """Turn a rounds folder's r<N>-<side>.json into pools of `count`: each instance its run
    a little apart (its start, its timings), placed on gpus[i - 1] where given."""
    for path in sorted(folder.glob("r*-*.json")):
        number, side = INSTANCE_FILE_SIDE.match(path.name).groups()
        run = load_run(str(path))
        for i in range(1, count + 1):
            passes = tuple(p._replace(attempt=p.attempt._replace(requests=tuple(
                r._replace(latency_ms=r.latency_ms + 0.001 * (i - 1)) for r in p.requests)))
                for p in run.passes)
            write_atomic(str(folder / f"r{number}-{side}@{i}.json"), dump_run(run._replace(
                started_unix=run.started_unix + 0.001 * (i - 1), passes=passes,
                instance=Instance(int(number), side, i, count,
                                  gpu=None if gpus is None else gpus[i - 1]))))
        path.unlink()
    return folder


INSTANCE_FILE_SIDE = re.compile(r"^r(\d+)-([^@]+)\.json$")


def test_rounds_placed_unlike_are_refused_unless_allowed(tmp_path, cli):
    # a pool's placement is measured like the rest: round 3 on other GPUs than rounds 1 and 2
    write_pools(tmp_path)
    for path in tmp_path.glob("r*-*@*.json"):
        run = load_run(str(path))
        gpu = str(run.instance.number - 1 + (4 if run.instance.round == 3 else 0))
        write_atomic(str(path), dump_run(run._replace(instance=run.instance._replace(gpu=gpu))))
    assert_one_line_error(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"),
                          "the runs were not measured alike: instances: r3-cpu@1.json "
                          "'2 on GPUs 4,5', r3-gpu@1.json '2 on GPUs 4,5' (r1-cpu@1.json "
                          "'2 on GPUs 0,1')")
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--tolerance",
                 "50", "--allow-mismatch", "instances")
    assert result.code == 0 and "note: --allow-mismatch instances" in result.out, result.err
