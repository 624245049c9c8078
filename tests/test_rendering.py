"""rendering: the exact text, Markdown and JSON that compare and rounds print for run files
written with known figures."""

import hashlib
import json
import textwrap

import pytest

import router_latency as rl
from conftest import make_run, three_rounds, two_runs, write_corpus


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

        pass        metric     A     B  B - A        B vs A
        Sequential  p50 ms  10.0  4.00  -6.00  2.50x faster
                    p95 ms  20.0  8.00  -12.0  2.50x faster
                    p99 ms  30.0  9.00  -21.0  3.33x faster
                    req/s    100   250   +150  2.50x faster
                    errors     0     1     +1
        Conc 4      p50 ms  12.0  5.00  -7.00  2.40x faster
                    p95 ms  25.0  9.00  -16.0  2.78x faster
                    p99 ms  40.0  12.0  -28.0  3.33x faster
                    req/s    300   700   +400  2.33x faster
                    errors     0     1     +1

        decisions: 99/101 inputs agree (sequential pass)
          #2 "third prompt third prompt third prompt third prompt third pr": z -> w
          #100 "prompt 100": d -> (no decision)
        A consistency: 0 inputs changed decision between passes
        B consistency: 0 inputs changed decision between passes
        """)


def test_rounds_table_reads_like_the_published_record(tmp_path, cli):
    three_rounds(tmp_path, differ_in_round=2)
    result = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--per-round")
    assert result.err == ""
    assert result.out == textwrap.dedent("""\
        rounds: 3 used (r1, r2, r3); base cpu, new gpu; corpus aaaaaaaaaaaa (101 prompts)
        gpu vs cpu: how many times faster or slower gpu is, the geometric mean of the per-round ra\
tios with a 95% Student t interval on their logs, df 2; gpu - cpu: mean paired difference; medians\
 over rounds, descriptive; tolerance 5%; detects: the slowdown found 80% of the time
        gate (*): p50, p95, req/s of every pass, 3 rows worth 2.0 independent; one-sided tests at \
2.5% each on their per-round mean and by Holm across them (family-wise 5%)

        pass        metric    cpu   gpu     gpu - cpu [95% CI]        gpu vs cpu [95% CI]  worse  \
detects  verdict
        Sequential  p50 ms*  10.0  6.00   -4.00 [-6.48, -1.52]  1.68x faster [1.11, 2.56]    0/3  \
 >= 77%  better
                    p95 ms*  20.0  20.5  +0.500 [-0.742, 1.74]  1.02x slower [0.96, 1.09]    2/3  \
 >= 13%  inconclusive
                    p99 ms   30.0  41.0     +11.0 [8.52, 13.5]  1.37x slower [1.29, 1.45]    3/3  \
 >= 13%  worse
                    mean ms  15.4  14.4  -1.25 [-2.45, -0.052]  1.09x faster [1.00, 1.19]    0/3  \
 >= 17%  inconclusive
                    req/s*    100   100    0.000 [-2.48, 2.48]  1.00x slower [0.98, 1.03]    1/3  \
  >= 8%  same

        gated rows together: 1.18x faster [1.04, 1.34] per round, one-sided p 0.991

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
        warning: Sequential p95 inconclusive: could only detect >= 13%; about 5 rounds would be ne\
eded for 10%

        round  side        load  router cpus      gpu MiB  restarts/faults  discarded   driver cpu\
  flags
        r1     cpu   0.500-1.50  0-15                 n/a              n/a          0  0.01 s (2%)\
  -
        r1     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (2%)\
  -
        r2     cpu   0.500-1.50  0-7                  n/a              n/a          0  0.01 s (2%)\
  cpuset differs (usually 0-15)
        r2     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (2%)\
  -
        r3     cpu   0.500-1.50  0-15                 n/a              n/a          0  0.01 s (2%)\
  -
        r3     gpu    1.00-2.00  16-31        1,024-1,100                0          0  0.01 s (2%)\
  -

        order: cpu first in r1, r3; gpu first in r2; balanced
        mean p50 gpu - cpu when cpu / gpu started first: Sequential -4.00 / -4.00
        order effect (crossover, gated rows): running second costs -0.6% [-42.8%, +72.9%]
        verdict: FAIL: decisions differ in r2 (1 input)
        """)
    assert result.code == 1


def test_rounds_markdown(tmp_path, cli):
    three_rounds(tmp_path)
    lines = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                "markdown").out.splitlines()
    assert lines[4] == "| pass | metric | cpu | gpu | gpu - cpu [95% CI] | gpu vs cpu [95% CI] " \
                       "| worse | detects | verdict |"
    assert lines[6] == "| Sequential | p50 ms* | 10.0 | 6.00 | -4.00 [-6.48, -1.52] | " \
                       "1.68x faster [1.11, 2.56] | 0/3 | >= 77% | better |"


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
                                                      "inconclusive", "same"]
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


def test_change_is_said_in_words_with_the_interval_in_the_same_direction():
    assert rl.change_text(1.35) == "1.35x faster"
    assert rl.change_text(1 / 1.14) == "1.14x slower"
    assert rl.change_text(1.0) == "no change"
    assert rl.change_text(None) == rl.change_text(0.0) == "n/a"
    assert rl.change_text(1.68, 1.11, 2.56) == "1.68x faster [1.11, 2.56]"
    # a slowdown's interval is the slowdown's: 1/high to 1/low of the speedup's
    assert rl.change_text(0.8, 0.5, 1.25) == "1.25x slower [0.80, 2.00]"


def test_compare_and_rounds_say_the_same_change_the_same_way(tmp_path, cli):
    # gpu takes 14% longer and serves 14% fewer requests a second, in every round alike
    for number, factor in enumerate((1.13, 1.14, 1.15), 1):
        make_run(tmp_path / f"r{number}-cpu.json", label="cpu", passes={1: (10, 20, 30, 100)},
                 started_unix=1000.0 * number)
        make_run(tmp_path / f"r{number}-gpu.json", label="gpu",
                 passes={1: (10 * factor, 20 * factor, 30 * factor, 100 / factor)},
                 started_unix=1000.0 * number + (500 if number % 2 else -500))
    compared = cli("compare", tmp_path / "r2-cpu.json", tmp_path / "r2-gpu.json").out
    changes = [line for line in compared.splitlines() if " ms " in line or " req/s " in line]
    assert len(changes) == 4 and all(line.endswith("  1.14x slower") for line in changes)
    report = json.loads(cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu",
                            "--format", "json").out)
    for row in report["rows"]:
        assert row["change_text"].startswith("1.14x slower [")
        assert row["speedup"] == pytest.approx(1 / 1.14, rel=1e-3)  # the number stays
    text = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu").out
    rows = [line for line in text.splitlines() if "1.14x slower [" in line]
    for metric, row in zip(["p50 ms*", "p95 ms*", "p99 ms ", "mean ms", "req/s*"], rows):
        assert f" {metric} " in row
    assert rows[5].startswith("gated rows together: 1.14x slower [")
    assert "the 3 gated rows together are 1.14x slower [" in rows[6]  # the verdict's reason
