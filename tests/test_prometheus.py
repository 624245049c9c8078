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
