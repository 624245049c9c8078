"""rounds: medians, paired intervals, verdicts, exit codes, bad round folders."""

import json
import textwrap

import pytest

import router_latency as rl
from conftest import make_run

# new p50 5, 6, 7 against base 10: differences -5, -4, -3 (mean -4, s 1, t(2) 4.302653);
# ln(new/base) of 0.5, 0.6, 0.7 gives the speedup interval [1.11, 2.56] worked by hand.
NEW = [(5, 20.5, 40, 99), (6, 21, 41, 101), (7, 20, 42, 100)]


def three_rounds(folder, *, differ_in_round=None, base=(10, 20, 30, 100)):
    """Three rounds; cpu starts first in r1 and r3, gpu in r2. r2's cpu router had other cores,
    r2's gpu side ran above the load limit, r3's gpu router restarted once."""
    for number, figures in enumerate(NEW, 1):
        make_run(folder / f"r{number}-cpu.json", label="cpu", passes={1: base},
                 started_unix=1000.0 * number,
                 environment={"router_cpus": "0-7" if number == 2 else "0-15"},
                 load={"start": 0.5, "end": 1.5, "min": 0.5, "max": 1.5}, driver_cpu_s=0.015)
        decisions = ["d", "d", "e"] if number == differ_in_round else None
        environment = {"router_cpus": "16-31",
                       "gpu": {"tool": "rocm-smi", "before": {"used_mib": {"card0": 1024.0}},
                               "after": {"used_mib": {"card0": 1100.0}}},
                       "metrics": {"deltas": {"router_restarts_total": float(number == 3)}}}
        make_run(folder / f"r{number}-gpu.json", label="gpu", passes={1: figures},
                 decisions=decisions, started_unix=1000.0 * number + (-500 if number == 2 else 500),
                 environment=environment, driver_cpu_s=0.015,
                 load={"start": 1.0, "end": 130.0 if number == 2 else 2.0})


def test_rounds_table_reads_like_the_published_record(tmp_path, cli):
    three_rounds(tmp_path, differ_in_round=2)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--per-round")
    assert result.err == ""
    assert result.out == textwrap.dedent("""\
        rounds: 3 used (r1, r2, r3); base cpu, new gpu; corpus aaaaaaaaaaaa (3 prompts)
        medians over rounds; new - base: mean of paired differences, 95% Student t, df 2; \
speedup: base/new for latency, new/base for req/s; tolerance 5% of the base median

        pass        metric   cpu   gpu     gpu - cpu [95% CI]    speedup [95% CI]  worse  verdict
        Sequential  p50     10.0  6.00   -4.00 [-6.48, -1.52]  1.67x [1.11, 2.56]    0/3  better
                    p95     20.0  20.5  +0.500 [-0.742, 1.74]  0.98x [0.92, 1.04]    2/3  inconclusive
                    p99     30.0  41.0     +11.0 [8.52, 13.5]  0.73x [0.69, 0.78]    3/3  regression
                    req/s    100   100    0.000 [-2.48, 2.48]  1.00x [0.98, 1.03]    1/3  same

        pass        metric  r1 cpu / gpu  r2 cpu / gpu  r3 cpu / gpu
        Sequential  p50      10.0 / 5.00   10.0 / 6.00   10.0 / 7.00
                    p95      20.0 / 20.5   20.0 / 21.0   20.0 / 20.0
                    p99      30.0 / 40.0   30.0 / 41.0   30.0 / 42.0
                    req/s     100 / 99.0     100 / 101     100 / 100

        decisions r1: 3/3 agree
        decisions r2: 2/3 agree; differ: #2 d -> e
        decisions r3: 3/3 agree
        errors (cpu/gpu): r1 0/0, r2 0/0, r3 0/0

        round  side        load  router cpus      gpu MiB  restarts/faults  discarded    driver cpu  flags
        r1     cpu   0.500-1.50  0-15                 n/a              n/a          0  0.01 s (50%)  -
        r1     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (50%)  -
        r2     cpu   0.500-1.50  0-7                  n/a              n/a          0  0.01 s (50%)  cpuset differs (usually 0-15)
        r2     gpu     1.00-130  16-31        1,024-1,100                0          0  0.01 s (50%)  load above 120
        r3     cpu   0.500-1.50  0-15                 n/a              n/a          0  0.01 s (50%)  -
        r3     gpu    1.00-2.00  16-31        1,024-1,100                1          0  0.01 s (50%)  restart/fault

        order: cpu first in r1, r3; gpu first in r2; balanced
        mean p50 gpu - cpu when cpu / gpu started first: Sequential -4.00 / -4.00
        verdict: FAIL: regression in Sequential p99; decisions differ in r2 (1 input)
        """)
    assert result.code == 1


def test_rounds_json_carries_rows_and_agreement(tmp_path, cli):
    three_rounds(tmp_path)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "json")
    report = json.loads(result.out)
    assert report["schema"] == "router-latency/rounds/1"
    row = report["rows"][0]
    assert (row["pass"], row["metric"], row["verdict"]) == ("sequential", "p50_ms", "better")
    assert row["diff"]["mean"] == pytest.approx(-4.0)
    assert row["diff"]["df"] == 2 and row["base_values"] == [10, 10, 10]
    assert [r["verdict"] for r in report["rows"]] == ["better", "inconclusive", "regression",
                                                      "same"]
    assert report["exit_code"] == result.code == 1


def test_rounds_markdown(tmp_path, cli):
    three_rounds(tmp_path)
    lines = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                "markdown").out.splitlines()
    assert lines[3] == "| pass | metric | cpu | gpu | gpu - cpu [95% CI] | speedup [95% CI] " \
                       "| worse | verdict |"
    assert lines[5] == "| Sequential | p50 | 10.0 | 6.00 | -4.00 [-6.48, -1.52] | " \
                       "1.67x [1.11, 2.56] | 0/3 | better |"


def test_rounds_passes_when_nothing_regressed(tmp_path, cli):
    for number in (1, 2, 3):
        make_run(tmp_path / f"r{number}-cpu.json", passes={1: (10, 20, 30, 100)})
        make_run(tmp_path / f"r{number}-gpu.json",
                 passes={1: (5 + number * 0.1, 10 + number * 0.1, 15, 200 + number)})
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert result.code == 0
    assert result.out.splitlines()[-1] == "verdict: PASS"


def test_rounds_strict_fails_on_inconclusive_rows(tmp_path, cli):
    for number, new_p50 in enumerate((9.0, 11.5, 10.0), 1):
        make_run(tmp_path / f"r{number}-cpu.json", passes={1: (10, 20, 30, 100)})
        make_run(tmp_path / f"r{number}-gpu.json", passes={1: (new_p50, 20, 30, 100)})
    args = ["rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"]
    plain = cli(*args)
    assert plain.code == 0 and plain.out.splitlines()[-1] == "verdict: PASS (1 inconclusive rows)"
    assert cli(*args, "--strict").code == 3


def test_rounds_tolerance_moves_the_verdict(tmp_path, cli):
    for number, new_p50 in enumerate((10.7, 10.75, 10.8), 1):  # [+6.3 %, +8.7 %]
        make_run(tmp_path / f"r{number}-cpu.json", passes={1: (10, 20, 30, 100)})
        make_run(tmp_path / f"r{number}-gpu.json", passes={1: (new_p50, 20, 30, 100)})
    args = ["rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu"]
    assert cli(*args).code == 1
    assert cli(*args, "--tolerance", "10").code == 0


@pytest.mark.parametrize("metric,low,high,expected", [
    ("p50_ms", 0.6, 0.8, "regression"),     # beyond +5 % of 10
    ("p50_ms", 0.1, 0.4, "same"),           # worse, but within tolerance
    ("p50_ms", -0.4, -0.1, "better"),       # wholly better, even if small
    ("p50_ms", -0.8, 0.6, "inconclusive"),
    ("req_per_s", -0.8, -0.6, "regression"),  # fewer req/s is worse
    ("req_per_s", 0.6, 0.8, "better"),
])
def test_verdict_of(metric, low, high, expected):
    diff = rl.Interval((low + high) / 2, low, high, 3)
    assert rl.verdict_of(metric, diff, 10.0, 5.0) == expected


def test_rounds_leaves_out_rounds_with_a_discarded_pass(tmp_path, cli):
    three_rounds(tmp_path)
    make_run(tmp_path / "r4-cpu.json", passes={1: (10, 20, 30, 100), 4: (1, 1, 1, 1)},
             discarded=(4,))
    make_run(tmp_path / "r4-gpu.json", passes={1: (1, 1, 1, 1)})
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert result.out.splitlines()[0].startswith("rounds: 3 used (r1, r2, r3)")
    assert "left out: r4: r4-cpu.json: Conc 4 pass discarded (load above the limit)" in result.out


def test_rounds_refuses_incomplete_runs_unless_allowed(tmp_path, cli):
    three_rounds(tmp_path)
    make_run(tmp_path / "r3-gpu.json", passes={1: NEW[2]}, complete=False)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert "left out: r3: r3-gpu.json: incomplete run (--allow-incomplete uses it)" in result.out
    allowed = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                  "--allow-incomplete")
    assert allowed.out.startswith("rounds: 3 used")


def test_rounds_error_rows_of_bad_folders(tmp_path, cli):
    make_run(tmp_path / "r1-cpu.json")
    make_run(tmp_path / "r1-gpu.json")
    single = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert single.code == 2
    assert single.err == f"router-latency: error: need at least 2 usable rounds, have 1 ({tmp_path})\n"
    make_run(tmp_path / "r2-cpu.json")
    missing = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert missing.code == 2 and missing.err == (
        f"router-latency: error: round 2 has no gpu side (r2-gpu.json) "
        f"({tmp_path / 'r2-cpu.json'})\n")
    make_run(tmp_path / "r2-gpu.json")
    make_run(tmp_path / "r02-gpu.json")
    duplicate = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert duplicate.code == 2 and "round 2 of side gpu twice" in duplicate.err
    (tmp_path / "r02-gpu.json").unlink()
    make_run(tmp_path / "r2-gpu.json", sha="b" * 64)
    mismatch = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert mismatch.code == 2 and "files of different corpora" in mismatch.err
    assert "r2-gpu.json" in mismatch.err


def test_rounds_agreement_counts_failed_requests_as_disagreeing(tmp_path, cli):
    for number in (1, 2):
        make_run(tmp_path / f"r{number}-cpu.json")
        make_run(tmp_path / f"r{number}-gpu.json", errors={"timeout": 1} if number == 2 else None)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu")
    assert "decisions r2: 2/3 agree; differ: #2 d -> (no decision)" in result.out
    assert result.code == 1


def test_rounds_warns_when_the_start_order_is_unbalanced(tmp_path, cli):
    for number in (1, 2, 3):
        make_run(tmp_path / f"r{number}-cpu.json", started_unix=100.0 * number)
        make_run(tmp_path / f"r{number}-gpu.json", started_unix=100.0 * number + 50)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                 "json")
    order = json.loads(result.out)["order"]
    assert order["base_first"] == [1, 2, 3] and order["new_first"] == []
    assert order["balanced"] is False
    text = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu").out
    assert "order: cpu first in r1, r2, r3; gpu first in none" in text
    assert "warning: start order unbalanced: rounds should alternate which side starts first" \
        in text


def test_rounds_json_carries_the_environment(tmp_path, cli):
    three_rounds(tmp_path)
    report = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json").out)
    rows = {(r["round"], r["side"]): r for r in report["environment"]}
    assert rows[(2, "cpu")]["flags"] == ["cpuset differs (usually 0-15)"]
    assert rows[(3, "gpu")]["faults"] == 1.0
    assert rows[(1, "gpu")]["gpu_mib_min"] == 1024.0 and rows[(1, "gpu")]["gpu_mib_max"] == 1100.0
    assert rows[(2, "gpu")]["above_load_limit"] is True
    assert report["order"]["first"] == {"r1": "cpu", "r2": "gpu", "r3": "cpu"}
