"""run file: the records and their summary figures, the writer and reader round-tripping byte
for byte, and the reader refusing bad files with one line naming the file and field."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import router_latency as rl
from conftest import BAD_FILES, assert_one_line_error, bad_file, make_run

TEXT = st.text(min_size=0, max_size=20)
REQUEST = st.tuples(st.floats(min_value=0, max_value=1e5, allow_nan=False),
                    st.one_of(st.none(), st.sampled_from(rl.ERROR_KINDS)),
                    st.one_of(TEXT, st.sampled_from(["math|model-a", "code"])),
                    st.floats(min_value=0, max_value=50, allow_nan=False))


def run_of(requests, wall_s, *, open_loop, discarded_pass, repeated=False):
    """Return a RunFile with one measured pass of these requests, built like measure_run's;
    repeated: the corpus is half as long and sent twice (--repeat 2)."""
    count = (len(requests) + 1) // 2 if repeated else len(requests)
    records = tuple(
        rl.Request(i % count, round(start, 4), round(latency, 4), None if error else 200,
                   None if error else decision, error,
                   round(latency, 4) if open_loop else None, 0.0 if open_loop else None,
                   i // count)
        for i, (latency, error, decision, start) in enumerate(requests))
    attempt = rl.Attempt(100.0 if open_loop else None, "poisson" if open_loop else None,
                         "2026-01-01T00:00:00Z", 1.5, {"start": 0.5, "end": 0.7, "min": 0.5,
                                                       "max": 0.7, "samples": 2},
                         0.01, {"router_cpus": "0-3", "gpu": {"tool": "rocm-smi",
                                                              "before": {"used_mib": {"c0": 5.0}},
                                                              "after": {"error": "x"}}},
                         rl.pass_summary(records, wall_s), records)
    passes = [rl.PassRecord("r100" if open_loop else "sequential", 64 if open_loop else 1,
                            False, False, attempt, (attempt,))]
    if discarded_pass:
        passes.append(rl.PassRecord("c4", 4, True, False,
                                    attempt._replace(rate=None, arrival=None, summary=None,
                                                     requests=()), (attempt._replace(
                                                         rate=None, arrival=None),)))
    return rl.RunFile("x", True, {"path": "c.json", "sha256": "0" * 64, "count": count},
                      tuple(passes), started_utc="2026-01-01T00:00:00Z", started_unix=1.0,
                      header_names=("X-Key",), settings={"max_load": 120.0},
                      floor={"spread_ms": 0.02}, warmup={"requests": 0})


@settings(max_examples=60, deadline=None)
@given(st.lists(REQUEST, min_size=1, max_size=30), st.floats(min_value=1e-3, max_value=100),
       st.booleans(), st.booleans(), st.booleans())
def test_write_read_write_is_byte_identical(tmp_path_factory, requests, wall_s, open_loop,
                                            discarded_pass, repeated):
    run = run_of(requests, wall_s, open_loop=open_loop, discarded_pass=discarded_pass,
                 repeated=repeated)
    written = b"".join(rl.dump_run(run))
    path = tmp_path_factory.mktemp("run") / "run.json"
    path.write_bytes(written)
    loaded = rl.load_run(str(path))
    assert b"".join(rl.dump_run(loaded)) == written
    assert loaded._replace(path="") == run
    assert json.loads(written)["passes"][0]["requests"][0]["id"] == 0
    first = loaded.passes[0]
    answered = {}  # the first answered repetition's decision, None when none answered
    for r in run.passes[0].requests:
        if answered.get(r.id) is None:
            answered[r.id] = r.decision
    assert first.decisions == answered
    assert (b'"rep": ' in written) == (repeated and len(requests) > 1)


def test_a_summary_from_the_exact_wall_time_agrees_with_the_rounded_one(tmp_path):
    # 2 / wall is just below 23.335: the summary rounds it to 23.33, but the wall time the
    # file keeps (to 1 us) gives 23.3353, which rounds to 23.34
    run = run_of([(1.0, None, "d", 0.0), (2.0, None, "d", 0.5)], 2 / 23.3349999,
                 open_loop=False, discarded_pass=False)
    assert run.passes[0].summary.req_per_s == 23.33
    path = tmp_path / "run.json"
    rl.write_atomic(str(path), rl.dump_run(run))
    assert rl.load_run(str(path)).passes[0].summary.req_per_s == 23.33


def test_pass_summary_counts_failures_but_leaves_them_out_of_percentiles():
    requests = [rl.Request(0, 0.0, v, 200, "d", None) for v in (1.0, 2.0, 3.0, 4.0)]
    requests.append(rl.Request(0, 0.0, 900.0, None, None, "timeout"))
    requests.append(rl.Request(0, 0.0, 0.5, 500, None, "http_5xx"))
    summary = rl.pass_summary(requests, wall_s=2.0)
    assert summary.to_json() == {"requests": 6, "ok": 4, "errors": {"http_5xx": 1, "timeout": 1},
                                 "p50_ms": 2.5, "p95_ms": 3.85, "p99_ms": 3.97, "mean_ms": 2.5,
                                 "min_ms": 1.0, "max_ms": 4.0, "req_per_s": 2.0, "wall_s": 2.0}


def test_pass_summary_of_only_failures_has_no_percentiles():
    summary = rl.pass_summary([rl.Request(0, 0.0, 1.0, None, None, "connect")], wall_s=0.5)
    assert summary.ok == 0 and summary.p50_ms is None and summary.req_per_s == 0.0


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_compare_rejects_bad_run_files(tmp_path, cli, kind):
    good = make_run(tmp_path / "good.json")
    path = bad_file(tmp_path, kind)
    assert_one_line_error(cli("compare", good, path), str(path), BAD_FILES[kind][1])


def test_newer_schema_asks_for_an_upgrade(tmp_path, cli):
    path = Path(make_run(tmp_path / "run.json"))
    document = json.loads(path.read_text())
    document["schema"] = "router-latency/run/2"
    path.write_text(json.dumps(document))
    result = cli("compare", path, path)
    assert_one_line_error(result, "schema router-latency/run/2 is newer than this tool reads")


@pytest.mark.parametrize("edit,field,message", [
    (lambda d: d["passes"][0]["requests"][0].update(latency_ms="12"),
     "passes[0].requests[0].latency_ms", "expected a finite number"),
    (lambda d: d["passes"][0]["requests"][0].update(latency_ms=-1),
     "passes[0].requests[0].latency_ms", "expected a number >= 0"),
    (lambda d: d["passes"][0]["summary"].update(p50_ms="fast"),
     "passes[0].summary.p50_ms", "expected a finite number"),
    (lambda d: d["passes"][0]["requests"][0].update(id=101),
     "passes[0].requests[0].id", "expected a prompt id from 0 to 100"),
    (lambda d: d["passes"][0].update(concurrency=0), "passes[0].concurrency",
     "expected a whole number >= 1"),
    (lambda d: d["passes"][0]["summary"].update(ok=1), "passes[0].summary",
     "ok + errors does not add up to requests"),
    (lambda d: d["corpus"].update(sha256="xyz"), "corpus", "expected corpus.sha256"),
    (lambda d: d.pop("complete"), "complete", "expected true or false"),
    (lambda d: d.update(passes={}), "passes", "expected a list"),
    (lambda d: d["passes"][0]["requests"][0].update(rep=-1), "passes[0].requests[0].rep",
     "expected a whole number >= 0"),
    (lambda d: d["settings"].update(repeat=0), "settings.repeat", "expected a whole number >= 1"),
    (lambda d: d["settings"].update(duration_s="30s"), "settings.duration_s",
     "expected a finite number"),
])
def test_compare_rejects_wrong_types_in_run_files(tmp_path, cli, edit, field, message):
    good = make_run(tmp_path / "good.json")
    document = json.loads(open(good).read())
    edit(document)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    assert_one_line_error(cli("compare", good, bad), f"{bad}: {field}", message)


def test_truncated_run_file(tmp_path, cli):
    good = make_run(tmp_path / "good.json")
    truncated = tmp_path / "r1-gpu.json"
    truncated.write_bytes(open(good, "rb").read()[:-40])
    assert_one_line_error(cli("compare", good, truncated), str(truncated), "invalid JSON")


def test_rounds_refuses_an_unknown_error_kind(tmp_path, cli):
    path = make_run(tmp_path / "r1-cpu.json", errors={"timeout": 1})
    document = json.loads(Path(path).read_text())
    document["passes"][0]["requests"][-1]["error"] = "gremlins"
    Path(path).write_text(json.dumps(document))
    result = cli("compare", path, path)
    assert result.code == 2 and "passes[0].requests[100].error" in result.err


@pytest.mark.parametrize("edit,field,message", [
    (lambda d: d["passes"][0]["requests"].clear(), "passes[0].summary.requests",
     "the summary says 101, its records give 0"),
    (lambda d: d["passes"][0]["requests"][5].update(id=4), "passes[0].requests[5].id",
     "prompt 4 measured twice in one pass"),
    (lambda d: (d["passes"][0]["requests"][4].update(rep=1),
                d["passes"][0]["requests"][5].update(id=4, rep=1)), "passes[0].requests[5].id",
     "prompt 4 (repetition 1) measured twice in one pass"),
    (lambda d: d["passes"][0]["summary"].update(p95_ms=11.0), "passes[0].summary.p95_ms",
     "the summary says 11.0, its records give 12.0"),
    (lambda d: d["passes"][0]["requests"][0].update(error="timeout", decision=None),
     "passes[0].summary.ok", "the summary says 101, its records give 100"),
    (lambda d: d["passes"][0]["requests"][0].update(latency_ms=5.0),
     "passes[0].summary.mean_ms", "its records give"),
])
def test_a_run_file_must_agree_with_itself(tmp_path, cli, edit, field, message):
    path = Path(make_run(tmp_path / "run.json"))
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    assert_one_line_error(cli("compare", path, path), f"{path}: {field}", message)
