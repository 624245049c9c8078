"""rendering: the exact text, Markdown and JSON that compare and rounds print for run files
written with known figures."""

import hashlib
import json
import textwrap

import pytest

from conftest import three_rounds, two_runs, write_corpus


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

        pass        metric     A     B  B - A    B/A
        Sequential  p50 ms  10.0  4.00  -6.00  0.40x
                    p95 ms  20.0  8.00  -12.0  0.40x
                    p99 ms  30.0  9.00  -21.0  0.30x
                    req/s    100   250   +150  2.50x
                    errors     0     1     +1
        Conc 4      p50 ms  12.0  5.00  -7.00  0.42x
                    p95 ms  25.0  9.00  -16.0  0.36x
                    p99 ms  40.0  12.0  -28.0  0.30x
                    req/s    300   700   +400  2.33x
                    errors     0     1     +1
        errors in Sequential: B timeout 1
        errors in Conc 4: B timeout 1

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
        speedup: geometric mean of the per-round ratios (base/new for latency, new/base for req/s)\
 with a 95% Student t interval on their logs, df 2; new - base: mean paired difference; medians ov\
er rounds, descriptive; tolerance 5%; detects: the slowdown found 80% of the time
        gate (*): p50, p95, req/s of every pass, 3 rows worth 2.0 independent; one-sided tests at \
2.5% each on their per-round mean and by Holm across them (family-wise 5%)

        pass        metric   cpu   gpu     gpu - cpu [95% CI]    speedup [95% CI]  worse  detects \
 verdict
        Sequential  p50*    10.0  6.00   -4.00 [-6.48, -1.52]  1.68x [1.11, 2.56]    0/3   >= 77% \
 better
                    p95*    20.0  20.5  +0.500 [-0.742, 1.74]  0.98x [0.92, 1.04]    2/3   >= 13% \
 inconclusive
                    p99     30.0  41.0     +11.0 [8.52, 13.5]  0.73x [0.69, 0.78]    3/3   >= 13% \
 worse
                    mean    15.4  14.4  -1.25 [-2.45, -0.052]  1.09x [1.00, 1.19]    0/3   >= 17% \
 inconclusive
                    req/s*   100   100    0.000 [-2.48, 2.48]  1.00x [0.98, 1.03]    1/3    >= 8% \
 same

        gated rows together: -15.2% [-25.3%, -3.8%] per round, one-sided p 0.991

        pass        metric  r1 cpu / gpu  r2 cpu / gpu  r3 cpu / gpu
        Sequential  p50      10.0 / 5.00   10.0 / 6.00   10.0 / 7.00
                    p95      20.0 / 20.5   20.0 / 21.0   20.0 / 20.0
                    p99      30.0 / 40.0   30.0 / 41.0   30.0 / 42.0
                    mean     15.4 / 13.6   15.4 / 14.4   15.4 / 14.5
                    req/s     100 / 99.0     100 / 101     100 / 100

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
    assert lines[4] == "| pass | metric | cpu | gpu | gpu - cpu [95% CI] | speedup [95% CI] " \
                       "| worse | detects | verdict |"
    assert lines[6] == "| Sequential | p50* | 10.0 | 6.00 | -4.00 [-6.48, -1.52] | " \
                       "1.68x [1.11, 2.56] | 0/3 | >= 77% | better |"


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
