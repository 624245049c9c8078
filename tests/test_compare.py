"""compare: two runs side by side, decision agreement, corpus checks."""

import hashlib
import textwrap

from conftest import make_run, write_corpus


def two_runs(folder, sha="a" * 64, b_sha=None, **b_options):
    a = make_run(folder / "a.json", label="cpu", passes={1: (10, 20, 30, 100), 4: (12, 25, 40, 300)},
                 decisions=["x", "y", "z"], sha=sha)
    b_options["sha"] = b_sha or sha
    b = make_run(folder / "b.json", label="rocm", passes={1: (4, 8, 9, 250), 4: (5, 9, 12, 700)},
                 decisions=["x", "y", "w"], errors={"timeout": 1}, **b_options)
    return a, b


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

        decisions: 2/3 inputs agree (sequential pass)
          #2 "third prompt third prompt third prompt third prompt third pr": z -> (no decision)
        A consistency: 0 inputs changed decision between passes
        B consistency: 0 inputs changed decision between passes
        """)


def test_compare_fail_on_decision_change(tmp_path, cli):
    a, b = two_runs(tmp_path)
    assert cli("compare", a, b, "--fail-on-decision-change").code == 1
    assert cli("compare", a, a, "--fail-on-decision-change").code == 0


def test_compare_refuses_different_corpora_unless_allowed(tmp_path, cli):
    a, b = two_runs(tmp_path, b_sha="b" * 64)
    refused = cli("compare", a, b)
    assert refused.code == 2 and refused.out == ""
    assert refused.err == (f"router-latency: error: the runs used different corpora "
                           f"(aaaaaaaaaaaa and bbbbbbbbbbbb); --allow-corpus-mismatch compares "
                           f"them anyway ({b})\n")
    allowed = cli("compare", a, b, "--allow-corpus-mismatch")
    assert allowed.code == 0
    assert "warning: different corpora: A aaaaaaaaaaaa, B bbbbbbbbbbbb" in allowed.out


def test_compare_refuses_incomplete_runs_unless_allowed(tmp_path, cli):
    a, b = two_runs(tmp_path, complete=False)
    refused = cli("compare", a, b)
    assert refused.code == 2 and "incomplete run" in refused.err
    assert cli("compare", a, b, "--allow-incomplete").code == 0


def test_compare_reports_a_runs_own_inconsistency(tmp_path, cli):
    a = make_run(tmp_path / "a.json", passes={1: (1, 1, 1, 1)}, decisions=["x", "y", "z"])
    b = make_run(tmp_path / "b.json", passes={1: (1, 1, 1, 1)}, decisions=["x", "y", "z"])
    import json
    document = json.loads(open(b).read())
    extra = json.loads(json.dumps(document["passes"][0]))
    extra.update(name="c4", concurrency=4)
    extra["requests"][1]["decision"] = "other"
    document["passes"].append(extra)
    open(b, "w").write(json.dumps(document))
    out = cli("compare", a, b).out
    assert "B consistency: 1 inputs changed decision between passes (#1)" in out


def test_compare_refuses_a_corpus_the_runs_did_not_use(tmp_path, cli):
    a, b = two_runs(tmp_path)
    corpus = write_corpus(tmp_path / "c.json", ["first", "second", "third"])
    result = cli("compare", a, b, "--corpus", corpus)
    assert result.code == 2 and result.out == ""
    assert "not the corpus of the runs" in result.err and str(corpus) in result.err
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert cli("compare", a, b, "--corpus", broken).code == 2
