"""Tests of prometheus.py: the router's metrics: the text exposition, deltas, histograms."""

from router_latency.prometheus import parse_prometheus
from conftest import PROMETHEUS_SAMPLE


def test_parse_prometheus_sample():
    samples = parse_prometheus(PROMETHEUS_SAMPLE)
    assert samples['llm_model_routing_modifications_total{source_model="MoM",target_model="qwen3"}'] == 12
    assert samples["process_restarts_total"] == 2
    assert samples[r'classifier_errors_total{reason="say \"hi\", {x}",signal="pii"}'] == 3
    assert samples['request_duration_seconds_bucket{le="+Inf"}'] == 7
    assert "malformed" not in " ".join(samples)


def test_a_delta_its_reader_would_refuse_is_no_figure(tmp_path):
    # a counter past 2^53 (bytes served, 1e20) made a delta `run` wrote (exit 0) and the
    # run file's reader refused ("expected a number from -2^53 to 2^53")
    import re
    from router_latency.prometheus import histogram_deltas, metric_deltas
    from router_latency.runfile import load_run
    from conftest import make_run
    before = {"served_bytes_total": 5.0, "requests_total": 3.0, "gone_total": 1e300}
    after = {"served_bytes_total": 1e20, "requests_total": 10.0, "gone_total": -1e300,
             "x_seconds_count": 2.0 ** 60, "x_seconds_sum": 4.0}
    deltas = metric_deltas(before, after, [re.compile("_total$")])
    assert deltas == {"requests_total": 7.0}
    assert histogram_deltas({}, after, ["x_seconds"]) == {"x_seconds_sum": 4.0}
    run = make_run(tmp_path / "r.json", environment={"metrics": {"deltas": {
        **metric_deltas(before, after, [re.compile("_total$")]),
        **metric_deltas({}, {"big_total": 2.0 ** 53 + 2}, [re.compile("_total$")])}}})
    assert load_run(run).passes[0].attempt.environment["metrics"]["deltas"] == deltas
