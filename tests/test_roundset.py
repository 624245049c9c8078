"""Tests of roundset.py: the interleaved rounds as the judging takes them."""

from router_latency.roundset import Rounds
from router_latency.runfile import load_run
from conftest import three_rounds


def test_rounds_hold_each_rounds_run_per_side_and_name_the_sides_base_first(tmp_path):
    three_rounds(tmp_path)
    runs = {n: {side: load_run(str(tmp_path / f"r{n}-{side}.json")) for side in ("gpu", "cpu")}
            for n in (1, 2, 3)}
    rounds = Rounds(runs, "cpu", "gpu")
    assert rounds.sides == ("cpu", "gpu")  # base then new, whatever order the runs hold
    assert rounds.used == ()  # every round, until the usable ones are chosen
    assert rounds._replace(used=(1, 3)).used == (1, 3)
    assert rounds.runs[2]["gpu"].label == runs[2]["gpu"].label
    assert Rounds(runs, "gpu", "cpu").sides == ("gpu", "cpu")
