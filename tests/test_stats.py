"""statistics: t quantiles, paired and ratio intervals, percentiles. Known answers from
published tables and worked examples, and properties (hypothesis) of intervals and percentiles."""

import math
import statistics

import pytest
from hypothesis import given, strategies as st

import router_latency as rl
from conftest import SETTINGS

# Two-sided 95% critical values of Student's t as printed in standard tables
# (e.g. NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2).
PUBLISHED_T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365,
               8: 2.306, 9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 25: 2.060, 29: 2.045,
               30: 2.042, 40: 2.021, 50: 2.009, 60: 2.000, 80: 1.990, 100: 1.984,
               120: 1.980, 1000: 1.962}


@pytest.mark.parametrize("df,expected", sorted(PUBLISHED_T.items()))
def test_t_quantile_matches_published_table(df, expected):
    tolerance = 0.0005 if df <= 30 else 0.002
    assert abs(rl.t_quantile(df) - expected) <= tolerance


def test_t_quantile_tends_to_the_normal_quantile_and_decreases():
    values = [rl.t_quantile(df) for df in range(1, 2000)]
    assert all(a > b for a, b in zip(values, values[1:]))
    assert abs(rl.t_quantile(10 ** 7) - 1.959964) < 1e-5


@pytest.mark.parametrize("df", [0, -1, 1.5, True, "3"])
def test_t_quantile_rejects_invalid_degrees_of_freedom(df):
    with pytest.raises(rl.RouterLatencyError):
        rl.t_quantile(df)


def test_paired_interval_student_sleep_data():
    # Cushny and Peebles' sleep data, Student (1908); R's t.test(group2, group1,
    # paired = TRUE) prints mean difference 1.58, 95% CI 0.7001142 2.4598858.
    group1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
    group2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
    interval = rl.paired_interval(group1, group2)
    assert interval.df == 9
    assert interval.mean == pytest.approx(1.58, abs=1e-12)
    assert interval.low == pytest.approx(0.7001142, abs=2e-6)
    assert interval.high == pytest.approx(2.4598858, abs=2e-6)


def test_paired_interval_worked_by_hand():
    # differences -5, -4, -3: mean -4, s = 1, t(2) = 4.302653, half width 4.302653 / sqrt(3)
    interval = rl.paired_interval([10, 10, 10], [5, 6, 7])
    half = 4.302653 / math.sqrt(3)
    assert interval == pytest.approx(rl.Interval(-4.0, -4.0 - half, -4.0 + half, 2))


def test_paired_interval_with_identical_differences_is_a_point():
    assert rl.paired_interval([1.0, 2.0], [3.0, 4.0]) == (2.0, 2.0, 2.0, 1)


def test_paired_interval_needs_two_pairs_of_equal_length():
    with pytest.raises(rl.RouterLatencyError):
        rl.paired_interval([1.0], [2.0])
    with pytest.raises(rl.RouterLatencyError):
        rl.paired_interval([1.0, 2.0], [2.0])


def test_ratio_interval_is_exp_of_the_log_interval():
    # worked by hand: ratios 0.5, 1, 2 have logs -ln 2, 0, ln 2 (mean 0, s = ln 2), so the
    # interval is 2 ** (-+ t(2) / sqrt 3) with t(2) = 4.302653: [0.178731, 5.594999]
    even = rl.ratio_interval([10.0, 10.0, 10.0], [5.0, 10.0, 20.0])
    assert even == pytest.approx(rl.Interval(1.0, 0.178731, 5.594999, 2), rel=1e-6)
    # uneven ratios: exp of the Student t interval of the logs, computed here
    base, new = [10.0, 8.0, 12.0, 9.0], [5.0, 6.0, 7.0, 4.5]
    logs = [math.log(n / b) for b, n in zip(base, new)]
    mean, spread = statistics.fmean(logs), statistics.stdev(logs)
    half = 3.182446 * spread / math.sqrt(len(logs))  # t(3), 97.5%: R's qt(0.975, 3)
    expected = rl.Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), 3)
    assert rl.ratio_interval(base, new) == pytest.approx(expected, rel=1e-6)


def test_ratio_interval_refuses_non_positive_values():
    with pytest.raises(rl.RouterLatencyError):
        rl.ratio_interval([1.0, 0.0], [1.0, 2.0])


@pytest.mark.parametrize("values,q,expected", [
    ([1, 2, 3, 4], 50, 2.5),          # numpy.percentile([1, 2, 3, 4], 50)
    ([1, 2, 3, 4], 95, 3.85),         # h = 3 * 0.95 = 2.85 -> 3 + 0.85 * (4 - 3)
    ([15, 20, 35, 40, 50], 40, 29),   # h = 1.6 -> 20 + 0.6 * 15
    ([40, 15, 50, 35, 20], 40, 29),   # order of the input does not matter
    ([7.5], 99, 7.5),
    ([3, 1, 2], 0, 1),
    ([3, 1, 2], 100, 3),
])
def test_percentile_linear_interpolation(values, q, expected):
    assert rl.percentile(values, q) == pytest.approx(expected)


@pytest.mark.parametrize("values,q", [([], 50), ([1.0], -1), ([1.0], 101)])
def test_percentile_rejects_bad_input(values, q):
    with pytest.raises(rl.RouterLatencyError):
        rl.percentile(values, q)


FINITE = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
PAIRS = st.integers(2, 12).flatmap(
    lambda n: st.tuples(st.lists(FINITE, min_size=n, max_size=n),
                        st.lists(FINITE, min_size=n, max_size=n)))


@SETTINGS
@given(PAIRS)
def test_paired_interval_contains_its_mean_and_is_symmetric(pair):
    base, new = pair
    interval = rl.paired_interval(base, new)
    assert interval.low <= interval.mean <= interval.high
    assert math.isclose(interval.mean - interval.low, interval.high - interval.mean,
                        rel_tol=1e-9, abs_tol=1e-6)
    assert interval.df == len(base) - 1


@SETTINGS
@given(PAIRS, st.floats(min_value=0.01, max_value=100), st.floats(min_value=-1e3, max_value=1e3))
def test_paired_interval_scales_and_shifts_with_its_data(pair, scale, shift):
    base, new = pair
    interval = rl.paired_interval(base, new)
    scaled = rl.paired_interval([b * scale for b in base], [n * scale for n in new])
    tolerance = 1e-6 * (1 + max(abs(v) for v in base + new)) * scale
    for a, b in zip(scaled[:3], interval[:3]):
        assert math.isclose(a, b * scale, abs_tol=tolerance * 10)
    shifted = rl.paired_interval(base, [n + shift for n in new])
    for a, b in zip(shifted[:3], interval[:3]):
        assert math.isclose(a, b + shift, abs_tol=tolerance * 10 + 1e-6 * abs(shift))


@SETTINGS
@given(st.lists(FINITE, min_size=1, max_size=50), st.floats(0, 100), st.floats(0, 100))
def test_percentile_is_monotone_in_q_and_within_the_data(values, q1, q2):
    low_q, high_q = sorted((q1, q2))
    low, high = rl.percentile(values, low_q), rl.percentile(values, high_q)
    assert min(values) <= low <= high <= max(values)
