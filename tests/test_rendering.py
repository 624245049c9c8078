"""rendering: the exact text, Markdown and JSON that compare and rounds print for run files
written with known figures."""

import hashlib
import json
import textwrap

import pytest

from conftest import three_rounds, two_runs, write_corpus


def test_compare_table_and_differing_inputs(tmp_path, cli):
    corpus = write_corpus(tmp_path / "c.json", ["first", "second", "third prompt " * 10])
    sha = hashlib.sha256(open(corpus, "rb").read()).hexdigest()
    a, b = two_runs(tmp_path, sha=sha)
    result = cli("compare", a, b, "--corpus", corpus)
    assert result.code == 0 and result.err == ""
    assert result.out == textwrap.dedent(f"""\
        A: {a} (cpu)
        B: {b} (rocm)
        corpus: {sha[:12]} (3 prompts)

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

        decisions: 2/3 inputs agree (sequential pass)
          #2 "third prompt third prompt third prompt third prompt third pr": z -> (no decision)
        A consistency: 0 inputs changed decision between passes
        B consistency: 0 inputs changed decision between passes
        """)


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
                    p95     20.0  20.5  +0.500 [-0.742, 1.74]  0.98x [0.92, 1.04]    2/3  \
inconclusive
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

        round  side        load  router cpus      gpu MiB  restarts/faults  discarded    \
driver cpu  flags
        r1     cpu   0.500-1.50  0-15                 n/a              n/a          0  \
0.01 s (50%)  -
        r1     gpu    1.00-2.00  16-31        1,024-1,100                0          0  \
0.01 s (50%)  -
        r2     cpu   0.500-1.50  0-7                  n/a              n/a          0  \
0.01 s (50%)  cpuset differs (usually 0-15)
        r2     gpu     1.00-130  16-31        1,024-1,100                0          0  \
0.01 s (50%)  load above 120
        r3     cpu   0.500-1.50  0-15                 n/a              n/a          0  \
0.01 s (50%)  -
        r3     gpu    1.00-2.00  16-31        1,024-1,100                1          0  \
0.01 s (50%)  restart/fault

        order: cpu first in r1, r3; gpu first in r2; balanced
        mean p50 gpu - cpu when cpu / gpu started first: Sequential -4.00 / -4.00
        verdict: FAIL: regression in Sequential p99; decisions differ in r2 (1 input)
        """)
    assert result.code == 1


def test_rounds_markdown(tmp_path, cli):
    three_rounds(tmp_path)
    lines = cli("rounds", "--dir", tmp_path, "--base", "cpu", "--new", "gpu", "--format",
                "markdown").out.splitlines()
    assert lines[3] == "| pass | metric | cpu | gpu | gpu - cpu [95% CI] | speedup [95% CI] " \
                       "| worse | verdict |"
    assert lines[5] == "| Sequential | p50 | 10.0 | 6.00 | -4.00 [-6.48, -1.52] | " \
                       "1.67x [1.11, 2.56] | 0/3 | better |"


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
