"""Tests of stall.py: the head-and-body stall (Nagle's algorithm and a delayed ACK), named in
compare and rounds when a side shows it."""

from router_latency.files import write_atomic
from router_latency.runfile import dump_run, load_run
from router_latency.stall import late_bodies, stall_text
from conftest import make_run, plain_rounds


def stalled(path, share):
    """Mark the first `share` of each pass's answers as come with a late body."""
    run = load_run(str(path))
    passes = []
    for item in run.passes:
        requests = item.attempt.requests
        cut = int(len(requests) * share)
        marked = tuple(r._replace(late_body=i < cut) for i, r in enumerate(requests))
        passes.append(item._replace(attempt=item.attempt._replace(requests=marked)))
    write_atomic(run.path, dump_run(run._replace(passes=tuple(passes))))


def test_most_answers_late_is_a_stall_and_a_few_are_not(tmp_path):
    make_run(tmp_path / "a.json")
    stalled(tmp_path / "a.json", 0.4)
    run = load_run(str(tmp_path / "a.json"))
    assert late_bodies(run.passes) == (40, 101) and stall_text(run.passes) == ""
    stalled(tmp_path / "a.json", 0.9)
    run = load_run(str(tmp_path / "a.json"))
    assert stall_text(run.passes).startswith("head-and-body stall: 90 of 101 answers came ")
    assert run.passes[0].requests[0].late_body and not run.passes[0].requests[-1].late_body


def test_compare_and_rounds_name_the_side_that_stalls(tmp_path, cli):
    folder = plain_rounds(tmp_path / "rounds")
    for n in (1, 2, 3):
        stalled(folder / f"r{n}-gpu.json", 1.0)
    result = cli("rounds", "--dir", folder, "--base", "cpu", "--new", "gpu")
    assert result.code != 2, result.err
    assert "warning: gpu r1, gpu r2, gpu r3: head-and-body stall: 303 of 303 answers came " \
           "with their body 30 ms or more after their head" in result.out
    assert "cpu r1" not in result.out.split("head-and-body stall")[0].splitlines()[-1]
    compared = cli("compare", "--base", folder / "r1-cpu.json", "--new", folder / "r1-gpu.json")
    assert "warning: B: head-and-body stall: 101 of 101 answers came with their body 30 ms or " \
           "more after their head" in compared.out and "TCP_NODELAY" in compared.out
    plain = cli("compare", "--base", folder / "r1-cpu.json", "--new", folder / "r2-cpu.json")
    assert "stall" not in plain.out
