"""statistics: t quantiles, paired and ratio intervals, percentiles. Known answers from
published tables and worked examples, and properties (hypothesis) of intervals and percentiles."""

import math
import re
import random
import statistics

import pytest
from hypothesis import given, strategies as st

from router_latency.errors import RouterLatencyError
from router_latency.stats import (benjamini_hochberg, chi2_ppf, detectable_change, effective_rows,
                                  f_cdf, f_ppf, holm,
                                  Interval, normal_cdf, normal_ppf, order_effect, OrderEffect,
                                  outlier_rounds, paired_interval, percentile, ratio_interval,
                                  noncentral_detectable, power_shift, rounds_needed, t_cdf,
                                  t_ppf, t_quantile, t_test_p)
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
    assert abs(t_quantile(df) - expected) <= tolerance


def test_t_quantile_tends_to_the_normal_quantile_and_decreases():
    values = [t_quantile(df) for df in range(1, 2000)]
    assert all(a > b for a, b in zip(values, values[1:]))
    assert abs(t_quantile(10 ** 7) - 1.959964) < 1e-5


def test_t_quantile_beyond_the_table_is_the_exact_quantile_to_its_rounding():
    # past df 30 the expansion stands in for the table: its error below 1e-7 (the table's
    # six decimals), against the quantile solved from the t distribution itself
    for df in list(range(31, 200)) + [250, 500, 1000, 10 ** 4, 10 ** 6]:
        assert abs(t_quantile(df) - t_ppf(0.975, df)) < 1e-7, df


@pytest.mark.parametrize("df", [0, -1, 1.5, True, "3"])
def test_t_quantile_rejects_invalid_degrees_of_freedom(df):
    with pytest.raises(RouterLatencyError):
        t_quantile(df)


def test_paired_interval_student_sleep_data():
    # Cushny and Peebles' sleep data, Student (1908); R's t.test(group2, group1,
    # paired = TRUE) prints mean difference 1.58, 95% CI 0.7001142 2.4598858.
    group1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
    group2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
    interval = paired_interval(group1, group2)
    assert interval.df == 9
    assert interval.mean == pytest.approx(1.58, abs=1e-12)
    assert interval.low == pytest.approx(0.7001142, abs=2e-6)
    assert interval.high == pytest.approx(2.4598858, abs=2e-6)


def test_paired_interval_worked_by_hand():
    # differences -5, -4, -3: mean -4, s = 1, t(2) = 4.302653, half width 4.302653 / sqrt(3)
    interval = paired_interval([10, 10, 10], [5, 6, 7])
    half = 4.302653 / math.sqrt(3)
    assert interval == pytest.approx(Interval(-4.0, -4.0 - half, -4.0 + half, 2))


def test_paired_interval_with_identical_differences_is_a_point():
    assert paired_interval([1.0, 2.0], [3.0, 4.0]) == (2.0, 2.0, 2.0, 1)


def test_paired_interval_needs_two_pairs_of_equal_length():
    with pytest.raises(RouterLatencyError):
        paired_interval([1.0], [2.0])
    with pytest.raises(RouterLatencyError):
        paired_interval([1.0, 2.0], [2.0])


def test_ratio_interval_is_exp_of_the_log_interval():
    # worked by hand: ratios 0.5, 1, 2 have logs -ln 2, 0, ln 2 (mean 0, s = ln 2), so the
    # interval is 2 ** (-+ t(2) / sqrt 3) with t(2) = 4.302653: [0.178731, 5.594999]
    even = ratio_interval([10.0, 10.0, 10.0], [5.0, 10.0, 20.0])
    assert even == pytest.approx(Interval(1.0, 0.178731, 5.594999, 2), rel=1e-6)
    # uneven ratios: exp of the Student t interval of the logs, computed here
    base, new = [10.0, 8.0, 12.0, 9.0], [5.0, 6.0, 7.0, 4.5]
    logs = [math.log(n / b) for b, n in zip(base, new)]
    mean, spread = statistics.fmean(logs), statistics.stdev(logs)
    half = 3.182446 * spread / math.sqrt(len(logs))  # t(3), 97.5%: R's qt(0.975, 3)
    expected = Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), 3)
    assert ratio_interval(base, new) == pytest.approx(expected, rel=1e-6)


def test_ratio_interval_refuses_non_positive_values():
    with pytest.raises(RouterLatencyError):
        ratio_interval([1.0, 0.0], [1.0, 2.0])


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
    assert percentile(values, q) == pytest.approx(expected)


@pytest.mark.parametrize("values,q", [([], 50), ([1.0], -1), ([1.0], 101)])
def test_percentile_rejects_bad_input(values, q):
    with pytest.raises(RouterLatencyError):
        percentile(values, q)


FINITE = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


PAIRS = st.integers(2, 12).flatmap(
    lambda n: st.tuples(st.lists(FINITE, min_size=n, max_size=n),
                        st.lists(FINITE, min_size=n, max_size=n)))


@SETTINGS
@given(PAIRS)
def test_paired_interval_contains_its_mean_and_is_symmetric(pair):
    base, new = pair
    interval = paired_interval(base, new)
    assert interval.low <= interval.mean <= interval.high
    assert math.isclose(interval.mean - interval.low, interval.high - interval.mean,
                        rel_tol=1e-9, abs_tol=1e-6)
    assert interval.df == len(base) - 1


@SETTINGS
@given(PAIRS, st.floats(min_value=0.01, max_value=100), st.floats(min_value=-1e3, max_value=1e3))
def test_paired_interval_scales_and_shifts_with_its_data(pair, scale, shift):
    base, new = pair
    interval = paired_interval(base, new)
    scaled = paired_interval([b * scale for b in base], [n * scale for n in new])
    tolerance = 1e-6 * (1 + max(abs(v) for v in base + new)) * scale
    for a, b in zip(scaled[:3], interval[:3]):
        assert math.isclose(a, b * scale, abs_tol=tolerance * 10)
    shifted = paired_interval(base, [n + shift for n in new])
    for a, b in zip(shifted[:3], interval[:3]):
        assert math.isclose(a, b + shift, abs_tol=tolerance * 10 + 1e-6 * abs(shift))


@SETTINGS
@given(st.lists(FINITE, min_size=1, max_size=50), st.floats(0, 100), st.floats(0, 100))
def test_percentile_is_monotone_in_q_and_within_the_data(values, q1, q2):
    low_q, high_q = sorted((q1, q2))
    low, high = percentile(values, low_q), percentile(values, high_q)
    assert min(values) <= low <= high <= max(values)


@pytest.mark.parametrize("p, df, expected", [
    (0.975, 4, 2.776445105197793),
    (0.975, 1, 12.706204736174698),  # tan(0.475 pi)
    (0.975, 2, 4.302652729749464),  # 0.95 / sqrt(2 * 0.975 * 0.025)
    (0.95, 10, 1.812461122811676),
    (0.99, 30, 2.457261542247140),
    (0.5, 7, 0.0),
])
def test_t_ppf_known_answers(p, df, expected):
    assert t_ppf(p, df) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_t_ppf_matches_the_module_table():
    # router_latency.T_TABLE_95, six decimals
    table = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
             2.262157, 2.228139)
    for df, value in enumerate(table, start=1):
        assert round(t_ppf(0.975, df), 6) == value


def test_t_cdf_closed_forms():
    for t in (-50.0, -3.0, -1.0, -0.2, 0.0, 0.7, 2.0, 12.0):
        cauchy = 0.5 + math.atan(t) / math.pi
        df2 = 0.5 + t / (2 * math.sqrt(2 + t * t))
        df3 = 0.5 + (t / (math.sqrt(3) * (1 + t * t / 3)) + math.atan(t / math.sqrt(3))) / math.pi
        assert t_cdf(t, 1) == pytest.approx(cauchy, rel=1e-12)
        assert t_cdf(t, 2) == pytest.approx(df2, rel=1e-12)
        assert t_cdf(t, 3) == pytest.approx(df3, rel=1e-12)
    # far lower tail of the Cauchy keeps its relative accuracy: F(-x) = atan(1/x) / pi
    assert t_cdf(-1e8, 1) == pytest.approx(math.atan(1e-8) / math.pi, rel=1e-12)


def test_t_cdf_symmetry_limits_and_round_trip():
    for df in (1, 3, 9, 40, 200, 2.5):
        assert t_cdf(0.0, df) == 0.5
        assert t_cdf(math.inf, df) == 1.0
        assert t_cdf(-math.inf, df) == 0.0
        for t in (0.1, 1.0, 2.5, 8.0):
            assert t_cdf(-t, df) + t_cdf(t, df) == pytest.approx(1.0, abs=1e-15)
        for p in (1e-6, 0.003, 0.2, 0.5, 0.8, 0.999):
            assert t_cdf(t_ppf(p, df), df) == pytest.approx(p, rel=1e-11)


def test_infinite_df_is_normal():
    assert t_cdf(1.3, math.inf) == normal_cdf(1.3)
    assert t_ppf(0.9, math.inf) == normal_ppf(0.9)
    # and large df approaches it
    assert t_ppf(0.975, 1e6) == pytest.approx(1.959963984540054, rel=1e-5)


def test_normal_known_answers():
    assert normal_ppf(0.975) == pytest.approx(1.959963984540054, rel=1e-14)
    assert normal_ppf(0.5) == 0.0
    assert normal_ppf(0.8413447460685429) == pytest.approx(1.0, rel=1e-13)
    assert normal_ppf(1e-10) == pytest.approx(-6.361340902404056, rel=1e-13)
    assert normal_cdf(0.0) == 0.5
    assert normal_cdf(-1.959963984540054) == pytest.approx(0.025, rel=1e-14)
    for p in (1e-300, 1e-20, 1e-3, 0.02425, 0.3, 0.5, 0.7, 0.97575, 1 - 1e-12):
        assert normal_cdf(normal_ppf(p)) == pytest.approx(p, rel=1e-12)


def test_rounds_needed_is_the_smallest_sufficient_n():
    for spread, target, power in [(0.05, 0.05, 0.8), (0.05, 0.01, 0.8), (0.2, 0.1, 0.9),
                                  (0.03, 0.2, 0.8), (0.05, 0.02, 0.3)]:
        n = rounds_needed(spread, target, power=power)
        brute = next(m for m in range(3, 1001)
                     if noncentral_detectable(spread, m, power=power) <= target)
        assert n == brute
        # the two agree but for few rounds, where the noncentral t asks more (over many
        # rounds its normal approximation may ask one round fewer)
        central = next(m for m in range(3, 1001)
                       if detectable_change(spread, m, power=power) <= target)
        assert n >= central - 1
    assert rounds_needed(0.0, 0.01) == 3
    assert rounds_needed(0.5, 0.01) is None
    most = rounds_needed(0.05, 0.01)
    assert rounds_needed(0.05, 0.01, max_rounds=most - 1) is None
    assert rounds_needed(0.05, 0.01, max_rounds=most) == most


def test_rounds_needed_plans_by_the_noncentral_t_at_holms_small_levels():
    # 9 gated rows at a 2% spread, a 10% slowdown past a 5% tolerance at Holm's first level:
    # the shifted central t planned too few rounds (found 76-77% of the time for 80%)
    room, level = math.log(1.10) - math.log(1.05), 0.025 / 9
    n = rounds_needed(0.02, room, alpha=level, sided=1)
    central = next(m for m in range(3, 1001)
                   if detectable_change(0.02, m, alpha=level, sided=1) <= room)
    assert n > central
    assert power_shift(-t_ppf(level, n - 1), n - 1) * 0.02 / math.sqrt(n) <= room
    assert power_shift(-t_ppf(level, n - 2), n - 2) * 0.02 / math.sqrt(n - 1) > room


def test_holm_names_the_p_value_that_is_no_number():
    with pytest.raises(RouterLatencyError, match=r"^p_values\[1\] must not be NaN$"):
        holm([0.1, math.nan])


def test_an_unknown_alternative_is_named_with_those_there_are():
    with pytest.raises(RouterLatencyError, match="^alternative must be one of greater, less, "
                                                 "two-sided, got 'smaller'$"):
        t_test_p([1.0, 2.0, 3.0], alternative="smaller")


def test_the_detectable_change_is_defined_from_two_rounds_and_shrinks_with_more():
    # one difference of each round: a change to detect from two rounds on (df 1), the
    # detectable change shrinking with every round added
    found = [detectable_change(0.05, n) for n in range(2, 8)]
    assert all(math.isfinite(f) and f > 0 for f in found)
    assert found == sorted(found, reverse=True) and len(set(found)) == len(found)


@pytest.mark.parametrize("call", [
    lambda: detectable_change(-0.1, 10), lambda: detectable_change(0.1, 1),
    lambda: detectable_change(0.1, 10.0), lambda: detectable_change(0.1, 10, alpha=0),
    lambda: detectable_change(0.1, 10, sided=3), lambda: rounds_needed(0.1, 0.0),
    lambda: rounds_needed(0.1, 0.1, max_rounds=2),
])
def test_power_bad_input(call):
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize("ps, alpha, expected", [
    # sorted 0.005 <= 0.05/4, 0.01 <= 0.05/3, then 0.03 > 0.05/2 stops
    ([0.01, 0.04, 0.03, 0.005], 0.05, [True, False, False, True]),
    # 0.001 <= 0.05/3, 0.02 <= 0.05/2, 0.04 <= 0.05/1
    ([0.04, 0.001, 0.02], 0.05, [True, True, True]),
    # 0.03 > 0.025 at the first step: nothing, though 0.03 < alpha
    ([0.03, 0.03], 0.05, [False, False]),
    # thresholds are inclusive
    ([0.025, 0.05], 0.05, [True, True]),
    # the step-down stops: 0.01 <= 0.05/4, 0.02 > 0.05/3 stops, and 0.0249 is kept
    # though below its own threshold 0.05/2
    ([0.0249, 0.3, 0.01, 0.02], 0.05, [False, False, True, False]),
    # 0.011 > 0.04/4 at the first step: nothing
    ([0.3, 0.011, 0.012, 0.02], 0.04, [False, False, False, False]),
    ([0.3, 0.011, 0.012, 0.02], 0.1, [False, True, True, True]),
    ([], 0.05, []),
    ([0.0, 1.0], 0.05, [True, False]),
])
def test_holm(ps, alpha, expected):
    assert holm(ps, alpha=alpha) == expected


@pytest.mark.parametrize("ps,expected", [
    # step-up: 0.03 misses its own threshold 2 q / 4 = 0.025, but 0.04 <= 4 q / 4 carries it
    ([0.001, 0.03, 0.035, 0.04], [True, True, True, True]),
    # each p just above k q / m: nothing is rejected
    ([0.01, 0.02, 0.03, 0.04, 0.05, 0.9], [False] * 6),
    # input order kept: the two smallest of five pass 0.01 and 0.02
    ([0.5, 0.004, 0.3, 0.015, 0.2], [False, True, False, True, False]),
    ([], []),
])
def test_benjamini_hochberg(ps, expected):
    assert benjamini_hochberg(ps, 0.05) == expected


def test_benjamini_hochberg_rejects_more_than_holm_on_many_small_p_values():
    ps = [0.004] * 10 + [0.5] * 90
    assert sum(benjamini_hochberg(ps, 0.05)) == 10 and sum(holm(ps, 0.05)) == 0


def test_holm_alpha_positional_or_keyword():
    assert holm([0.01, 0.04], 0.05) == holm([0.01, 0.04], alpha=0.05) == [True, True]
    assert holm([0.01, 0.04], 0.02) == [True, False]


def test_holm_bad_input():
    for ps, alpha in [([0.1, 1.2], 0.05), ([-0.1], 0.05), ([0.1], 0.0), ([math.nan], 0.05)]:
        with pytest.raises(ValueError):
            holm(ps, alpha=alpha)


def test_t_test_p_hand_worked():
    # mean 0.1425, sd 0.04349329450233296, n 4: t = 6.552851
    values = [0.1, 0.2, 0.15, 0.12]
    t = 0.1425 / (0.04349329450233296 / 2)
    assert t_test_p(values) == pytest.approx(t_cdf(-t, 3), rel=1e-12)
    assert t_test_p(values, alternative="less") == pytest.approx(t_cdf(t, 3), rel=1e-12)
    assert t_test_p(values, alternative="two-sided") == pytest.approx(2 * t_cdf(-t, 3),
                                                                          rel=1e-12)
    assert t_test_p(values, mu=0.1425, alternative="two-sided") == pytest.approx(1.0)


def test_t_test_p_zero_spread():
    assert t_test_p([0.2, 0.2, 0.2]) == 0.0
    assert t_test_p([0.2, 0.2, 0.2], alternative="less") == 1.0
    assert t_test_p([0.2, 0.2, 0.2], alternative="two-sided") == 0.0
    assert t_test_p([-0.2, -0.2], alternative="less") == 0.0
    assert t_test_p([-0.2, -0.2]) == 1.0
    for alternative in ("greater", "less", "two-sided"):
        assert t_test_p([0.3, 0.3], mu=0.3, alternative=alternative) == 1.0


def test_t_test_p_bad_input():
    with pytest.raises(ValueError):
        t_test_p([0.1])
    with pytest.raises(ValueError):
        t_test_p([0.1, 0.2], alternative="bigger")
    with pytest.raises(ValueError):
        t_test_p([0.1, math.inf])


def hadamard(order: int) -> list:
    rows = [[1]]
    while len(rows) < order:
        rows = [r + r for r in rows] + [r + [-v for v in r] for r in rows]
    return rows


def test_effective_rows_identical_and_orthogonal():
    base = [0.01, 0.03, -0.02, 0.05, 0.0, 0.02]
    # copies, affine copies and mirror images are one row's worth of information
    assert effective_rows([base, base, base]) == pytest.approx(1.0)
    affine = [2 * v + 1 for v in base]
    assert effective_rows([base, affine, [-v for v in base]]) == pytest.approx(1.0)
    # the non-constant rows of a Hadamard matrix are centred and mutually orthogonal: r = 0
    rows = hadamard(8)[1:]
    assert effective_rows(rows) == pytest.approx(7.0)
    assert effective_rows(rows[:3]) == pytest.approx(3.0)
    assert effective_rows([base]) == 1.0


def test_effective_rows_half_correlated_and_constant_rows():
    h = hadamard(4)
    a, b = h[1], h[2]
    mixed = [x + y for x, y in zip(a, b)]  # r(a, mixed) = r(b, mixed) = 1/sqrt(2)
    assert effective_rows([a, b, mixed]) == pytest.approx(9 / (3 + 4 * 0.5))
    # a constant row correlates with nothing: r = 0 with the others, 1 with itself
    assert effective_rows([a, a, [0.2, 0.2, 0.2, 0.2]]) == pytest.approx(9 / 5)
    assert effective_rows([[0.0] * 4, [1.0] * 4]) == pytest.approx(2.0)


def test_effective_rows_bounds_and_bad_input():
    rng = random.Random(11)
    for k in (2, 5, 9):
        rows = [[rng.gauss(0, 1) for _ in range(6)] for _ in range(k)]
        assert 1.0 <= effective_rows(rows) <= min(k, 5) + 1e-9  # at most n - 1 = 5
    with pytest.raises(ValueError):
        effective_rows([[0.1], [0.2]])
    with pytest.raises(ValueError):
        effective_rows([[0.1, 0.2], [0.2, 0.3, 0.4]])


def test_outlier_rounds():
    # median 1.05, deviations 0.05, 0.15, 0, 0.05, 3.95: MAD 0.05, M(5) = 53.3, M(0.9) = 2.02
    assert outlier_rounds([1.0, 0.9, 1.05, 1.1, 5.0]) == [4]
    assert outlier_rounds([1.0, 0.9, 1.05, 1.1, 5.0], threshold=2.0) == [1, 4]
    assert outlier_rounds([1.0, 0.9, 1.05, 1.1, -5.0, 1.02]) == [4]
    assert outlier_rounds([1.0, 100.0]) == []
    assert outlier_rounds([]) == []
    # MAD 0: mean absolute deviation instead; one odd value among n scores n / 1.2533
    assert outlier_rounds([0.0, 0.0, 0.0, 0.0, 1.0]) == [4]
    assert outlier_rounds([0.0, 0.0, 0.0, 1.0]) == []
    assert outlier_rounds([0.2] * 5) == []
    # rounding residue is a tie, not an outlier and not a scale
    assert outlier_rounds([0.3, 0.1 + 0.2, 0.3, 0.3, 0.3, 0.3]) == []
    with pytest.raises(ValueError):
        outlier_rounds([1.0, 2.0, 3.0], threshold=0)


def test_order_effect_constructed():
    # treatment 0.1, order 0.03: base-first rounds centre on 0.13, new-first on 0.07
    noise = [-0.01, 0.0, 0.01]
    first = [0.13 + e for e in noise]
    second = [0.07 + e for e in noise]
    result = order_effect(first, second)
    # pooled variance (0.0002 + 0.0002) / 4 = 1e-4; se = sqrt(1e-4 * 2/3) / 2
    se = math.sqrt(1e-4 * 2 / 3) / 2
    half = 2.776445105197793 * se
    assert result.estimate == pytest.approx(0.03, abs=1e-15)
    assert result.df == 4
    assert result.low == pytest.approx(0.03 - half, rel=1e-9)
    assert result.high == pytest.approx(0.03 + half, rel=1e-9)
    assert result.p_value == pytest.approx(2 * t_cdf(-0.03 / se, 4), rel=1e-9)
    # swapping the groups mirrors the effect
    mirrored = order_effect(second, first)
    assert mirrored.estimate == pytest.approx(-0.03)
    assert mirrored.p_value == pytest.approx(result.p_value)


def test_order_effect_edge_cases():
    assert order_effect([], [0.1, 0.2]) is None
    assert order_effect([0.1], [0.2]) is None  # df 0
    one = order_effect([0.1], [0.0, 0.02])  # df 1: the single round adds no spread
    assert one.df == 1 and one.estimate == pytest.approx(0.045)
    flat = order_effect([0.2, 0.2], [0.0, 0.0])
    assert flat == OrderEffect(0.1, 0.1, 0.1, 2, 0.0)
    assert order_effect([0.1, 0.1], [0.1, 0.1]).p_value == 1.0


def test_f_and_chi_square_quantiles_match_the_tables():
    # NIST/SEMATECH e-Handbook tables 1.3.6.7.3 (F, upper 5%) and 1.3.6.7.4 (chi-square)
    assert f_ppf(0.95, 4, 10) == pytest.approx(3.478, abs=1e-3)
    assert f_ppf(0.95, 10, 4) == pytest.approx(5.964, abs=1e-3)
    assert f_ppf(0.05, 4, 10) == pytest.approx(1 / f_ppf(0.95, 10, 4), rel=1e-8)
    assert chi2_ppf(0.95, 4) == pytest.approx(9.488, abs=1e-3)
    assert chi2_ppf(0.05, 4) == pytest.approx(0.711, abs=1e-3)
    assert chi2_ppf(0.05, 1) == pytest.approx(0.00393, abs=1e-5)
    for p in (0.01, 0.3, 0.9):
        assert f_cdf(f_ppf(p, 3, 7), 3, 7) == pytest.approx(p, abs=1e-9)


@pytest.mark.parametrize("first,second,named", [
    ([0.1, math.nan], [0.2], "d_base_first[1]"), ([0.1], [math.inf], "d_new_first[0]"),
    ("0.1", [0.2], "d_base_first (numbers)")])
def test_order_effect_names_the_series_and_the_value_it_refuses(first, second, named):
    with pytest.raises(RouterLatencyError, match=re.escape(named)):
        order_effect(first, second)
