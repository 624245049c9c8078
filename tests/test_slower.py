"""Tests of slower.py: which inputs, decisions and prompt lengths got slower."""

import math
import statistics

import pytest

from router_latency.stats import mean_interval, t_test_p
from router_latency.requests import Request
from router_latency.runfile import Attempt, PassRecord, RunFile
from router_latency.roundset import Rounds
from router_latency.slower import input_slowdowns, InputSlowdowns, Slowdown, slowdown_tables
from conftest import rounds_in_memory


A, B, C = "a" * 64, "b" * 64, "c" * 64


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


def test_slower_inputs_lead_with_those_called_slower_then_the_largest_noise(tmp_path, cli):
    # 15 noisy inputs with the largest ratios, then 12 called slower: the table shows the 12
    # its header counts first, then the largest noise, and names none as "more"
    noise = [Slowdown(i, 2.0 - i / 100, 0.5, 4.0, 2, 3, 0.3, "noise") for i in range(15)]
    slower = [Slowdown(100 + i, 1.3, 1.2, 1.4, 3, 3, 0.001, "slower") for i in range(12)]
    rest = [Slowdown(200 + i, 1.0, 0.9, 1.1, 1, 3, 0.9, "") for i in range(5)]
    found = InputSlowdowns("sequential", (1, 2, 3), tuple(noise + slower + rest), (), (),
                              0.05, 5.0)
    intro, inputs, more, _ = slowdown_tables(found, "base", "new", 20)
    assert intro.startswith("slower inputs: 12 of 32 (")
    assert inputs.caption == "Called slower, then the largest noise"
    assert [row[0] for row in inputs.rows] == [f"#{100 + i}" for i in range(12)] + [
        f"#{i}" for i in range(8)]
    assert [row[3] for row in inputs.rows] == ["slower"] * 12 + ["noise"] * 8
    assert inputs.rows[0][1] == "+30.0% [+20.0%, +40.0%]" and more == ""
    _, inputs, more, _ = slowdown_tables(found, "base", "new", 10)
    assert [row[3] for row in inputs.rows] == ["slower"] * 10
    assert more.startswith("2 more called slower: #110, #111")
