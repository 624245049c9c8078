"""The run file: its writer and reader round-trip byte for byte, and the reader names what it
rejects."""

import json

from hypothesis import given, settings, strategies as st

from conftest import rl

TEXT = st.text(min_size=0, max_size=20)
REQUEST = st.tuples(st.floats(min_value=0, max_value=1e5, allow_nan=False),
                    st.one_of(st.none(), st.sampled_from(rl.ERROR_KINDS)),
                    st.one_of(TEXT, st.sampled_from(["math|model-a", "code"])),
                    st.floats(min_value=0, max_value=50, allow_nan=False))


def run_of(requests, wall_s, *, open_loop, discarded_pass):
    """Return a RunFile with one measured pass of these requests, built like measure_run's."""
    records = tuple(
        rl.Request(i, round(start, 4), round(latency, 4), None if error else 200,
                   None if error else decision, error,
                   round(latency, 4) if open_loop else None, 0.0 if open_loop else None)
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
    assert json.loads(written)["passes"][0]["requests"][0]["id"] == 0
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
