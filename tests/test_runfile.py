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
                    st.floats(min_value=0, max_value=50, allow_nan=False), st.booleans())


def run_of(requests, wall_s, *, open_loop, discarded_pass):
    """Return a RunFile with one measured pass of these requests, built like measure_run's."""
    records = tuple(
        rl.Request(i, round(start, 4), round(latency, 4), None if error else 200,
                   None if error else decision, error,
                   round(latency, 4) if open_loop else None, 0.0 if open_loop else None,
                   retried)
        for i, (latency, error, decision, start, retried) in enumerate(requests))
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
    return rl.RunFile("x", True, {"path": "c.json", "sha256": "0" * 64, "count": len(records)},
                      tuple(passes), started_utc="2026-01-01T00:00:00Z", started_unix=1.0,
                      header_names=("X-Key",), settings={"max_load": 120.0},
                      floor={"spread_ms": 0.02}, warmup={"requests": 0})


@settings(max_examples=60, deadline=None)
@given(st.lists(REQUEST, min_size=1, max_size=30), st.floats(min_value=1e-3, max_value=100),
       st.booleans(), st.booleans())
def test_write_read_write_is_byte_identical(tmp_path_factory, requests, wall_s, open_loop,
                                            discarded_pass):
    run = run_of(requests, wall_s, open_loop=open_loop, discarded_pass=discarded_pass)
    written = b"".join(rl.dump_run(run))
    path = tmp_path_factory.mktemp("run") / "run.json"
    path.write_bytes(written)
    loaded = rl.load_run(str(path))
    assert b"".join(rl.dump_run(loaded)) == written
    assert loaded._replace(path="") == run
    first_record = json.loads(written)["passes"][0]["requests"][0]
    assert first_record["id"] == 0
    assert first_record.get("retried", "absent") == (True if requests[0][4] else "absent")
    first = loaded.passes[0]
    assert first.decisions == {r.id: r.decision for r in run.passes[0].requests}


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
    (lambda d: d["passes"][0]["requests"][0].update(id=99),
     "passes[0].requests[0].id", "expected a prompt id from 0 to 2"),
    (lambda d: d["passes"][0]["requests"][0].update(retried="yes"),
     "passes[0].requests[0].retried", "expected true or false"),
    (lambda d: d["passes"][0].update(concurrency=0), "passes[0].concurrency",
     "expected a whole number >= 1"),
    (lambda d: d["passes"][0]["summary"].update(ok=1), "passes[0].summary",
     "ok + errors does not add up to requests"),
    (lambda d: d["corpus"].update(sha256="xyz"), "corpus", "expected corpus.sha256"),
    (lambda d: d.pop("complete"), "complete", "expected true or false"),
    (lambda d: d.update(passes={}), "passes", "expected a list"),
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
    assert result.code == 2 and "passes[0].requests[2].error" in result.err
