"""Tests of words.py: how counts, figures and decisions are written."""

from router_latency.words import change_text, p_text, pct_text, plural, slowdown_text


def test_a_change_is_a_signed_percent_of_time_with_its_interval_the_same_way():
    assert change_text(1.35) == "-25.9%"
    assert change_text(1 / 1.14) == "+14.0%"
    assert change_text(1.0) == "+0.0%"
    assert change_text(None) == change_text(0.0) == "n/a"
    assert change_text(1.68, 1.11, 2.56) == "-40.5% [-60.9%, -9.9%]"
    # a slowdown's interval: 1/high - 1 to 1/low - 1 of the speedup's
    assert change_text(0.8, 0.5, 1.25) == "+25.0% [-20.0%, +100.0%]"
    assert pct_text(-1e-17) == "+0.0%"


def test_a_p_value_past_three_digits_is_a_bound_and_a_slowdown_past_ten_times_no_up_to():
    # "one-sided p 1" claimed a certainty no test gives
    assert [p_text(p) for p in (1.0, 0.9996, 0.999, 0.0123, 0.001, 0.0004, 0.0)] == [
        "p > 0.999", "p > 0.999", "p 0.999", "p 0.0123", "p 0.001", "p < 0.001", "p < 0.001"]
    assert slowdown_text(0.075) == "up to +7.5%"
    assert slowdown_text(9.0) == "up to +900.0%" and slowdown_text(9.01) == "more than 10x"
    assert plural(1, "minute") == "1 minute" and plural(2, "gated row") == "2 gated rows"
