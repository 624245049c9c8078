"""Tests of requests.py: a pass's requests: each one's record, outcomes counted, the summary."""

from router_latency.words import failure_text
from router_latency.requests import pass_summary, Request


def test_pass_summary_keeps_expected_rejections_apart_and_counts_codes():
    requests = [Request(0, 0.0, v, 200, "d", None) for v in (1.0, 2.0, 3.0)]
    requests.append(Request(1, 0.0, 0.2, 400, None, None, code="INVALID_INPUT",
                               outcome="expected_rejection"))
    requests += [Request(2, 0.0, 0.1, 429, None, "http_4xx", code="OVERLOADED")] * 2
    requests.append(Request(3, 0.0, 0.1, 404, None, "http_4xx"))
    requests.append(Request(4, 0.0, 5.0, 200, "e", None, outcome="unexpected_routing"))
    summary = pass_summary(requests, wall_s=1.0)
    assert (summary.requests, summary.ok, summary.rejected) == (8, 4, 1)
    assert summary.errors == {"http_4xx": 3}
    assert summary.error_codes == {"http_4xx": {"OVERLOADED": 2}}
    assert (summary.p50_ms, summary.min_ms, summary.max_ms) == (2.5, 1.0, 5.0)
    assert failure_text(summary.errors, summary.error_codes) == \
        "http_4xx: OVERLOADED 2, http_4xx 1"
    assert summary.to_json()["rejected"] == 1


def test_pass_summary_counts_failures_but_leaves_them_out_of_percentiles():
    requests = [Request(0, 0.0, v, 200, "d", None) for v in (1.0, 2.0, 3.0, 4.0)]
    requests.append(Request(0, 0.0, 900.0, None, None, "timeout"))
    requests.append(Request(0, 0.0, 0.5, 500, None, "http_5xx"))
    summary = pass_summary(requests, wall_s=2.0)
    assert summary.to_json() == {"requests": 6, "ok": 4, "errors": {"http_5xx": 1, "timeout": 1},
                                 "p50_ms": 2.5, "p95_ms": 3.85, "p99_ms": 3.97, "mean_ms": 2.5,
                                 "min_ms": 1.0, "max_ms": 4.0, "req_per_s": 2.0, "wall_s": 2.0}


def test_pass_summary_of_only_failures_has_no_percentiles():
    summary = pass_summary([Request(0, 0.0, 1.0, None, None, "connect")], wall_s=0.5)
    assert summary.ok == 0 and summary.p50_ms is None and summary.req_per_s == 0.0
