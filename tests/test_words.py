"""Tests of words.py: how counts, figures and decisions are written."""

from router_latency.words import change_text, pct_text


def test_a_change_is_a_signed_percent_of_time_with_its_interval_the_same_way():
    assert change_text(1.35) == "-25.9%"
    assert change_text(1 / 1.14) == "+14.0%"
    assert change_text(1.0) == "+0.0%"
    assert change_text(None) == change_text(0.0) == "n/a"
    assert change_text(1.68, 1.11, 2.56) == "-40.5% [-60.9%, -9.9%]"
    # a slowdown's interval: 1/high - 1 to 1/low - 1 of the speedup's
    assert change_text(0.8, 0.5, 1.25) == "+25.0% [-20.0%, +100.0%]"
    assert pct_text(-1e-17) == "+0.0%"
