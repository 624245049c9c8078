"""Statistics: t quantiles, paired and ratio intervals, percentiles (R7), the false-discovery
and Holm rules, outliers and the order effect; pure functions, no I/O (the group-sequential
boundaries stand in sequential.py)."""

from __future__ import annotations

import functools
import math
from typing import Any, Optional, Sequence

from .constants import NamedTuple
from .errors import is_whole, RouterLatencyError

__all__ = [
    "benjamini_hochberg", "checked_list", "checked_probability", "checked_whole",
    "composite_log_ratios", "effective_rows", "Interval", "mean_and_squares", "mean_interval",
    "normal_cdf", "normal_ppf", "order_effect", "OrderEffect", "outlier_rounds",
    "chi2_ppf", "f_ppf", "paired_interval", "percentile", "percentiles", "power_shift",
    "rounded_percentiles",
    "rounds_needed", "sample_spread", "SQRT_2", "SQRT_2PI", "t_cdf", "t_ppf", "t_test_p",
]


# Two-sided 95% Student-t quantiles (the 0.975 quantile) for df 1..30, to six decimals.
T_TABLE_95 = (
    12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
    2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905,
    2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899,
    2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
)
Z_975 = 1.959963984540054


class Interval(NamedTuple):
    mean: float
    low: float
    high: float
    df: int


def t_quantile(df: int) -> float:
    """Return the two-sided 95% Student-t quantile for df degrees of freedom."""
    if not is_whole(df, 1):
        raise RouterLatencyError(f"degrees of freedom must be a whole number >= 1, got {df!r}")
    if df <= len(T_TABLE_95):
        return T_TABLE_95[df - 1]
    # Cornish-Fisher expansion of t about the normal quantile; beyond df 30 its error is
    # below 1e-7, far inside the table's own rounding.
    z = Z_975
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


class Deviations(NamedTuple):
    """A sample's mean and the sum of its values' squared deviations about it."""
    mean: float
    squares: float


def mean_and_squares(values: Sequence[float]) -> Deviations:
    """Return the mean and the sum of squared deviations about it."""
    mean = math.fsum(values) / len(values)
    # two passes with compensated sums: one-pass formulas cancel badly on the tiny spreads of
    # log ratios near 0, and statistics.stdev of Python 3.9 fails an internal assertion there
    return Deviations(mean, math.fsum((v - mean) ** 2 for v in values))


def sample_spread(values: Sequence[float]) -> float:
    """Return the sample standard deviation of values (n - 1), 0 when they are all equal."""
    if len(set(values)) < 2:
        return 0.0
    return math.sqrt(mean_and_squares(values)[1] / (len(values) - 1))


def mean_interval(values: Sequence[float]) -> Interval:
    """Return the mean of values with its two-sided 95% Student-t interval."""
    n = len(values)
    if n < 2:
        raise RouterLatencyError(f"an interval needs at least 2 values, got {n}")
    mean, ss = mean_and_squares(values)
    spread = math.sqrt(ss / (n - 1))
    half = t_quantile(n - 1) * spread / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n - 1)


def paired_interval(base: Sequence[float], new: Sequence[float]) -> Interval:
    """Return the mean of the paired differences new - base with its 95% t interval."""
    if len(base) != len(new):
        raise RouterLatencyError(f"paired samples differ in length: {len(base)} and {len(new)}")
    return mean_interval([n - b for b, n in zip(base, new)])


def ratio_interval(base: Sequence[float], new: Sequence[float]) -> Interval:
    """Return the geometric mean of new/base with its 95% interval (exp of the t interval of ln)."""
    if any(v <= 0 for v in (*base, *new)):
        raise RouterLatencyError("a ratio interval needs positive values")
    logs = paired_interval([math.log(v) for v in base], [math.log(v) for v in new])
    return Interval(math.exp(logs.mean), math.exp(logs.low), math.exp(logs.high), logs.df)


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """Return the qs-th percentiles (each 0 <= q <= 100) of values, sorting them once.

    Linear interpolation between closest ranks (R7): it is numpy's default, so figures can be
    checked with numpy.percentile, and it is continuous in q, unlike nearest-rank.
    """
    if not values:
        raise RouterLatencyError("percentile of no values")
    ordered = sorted(values)
    found = []
    for q in qs:
        if not 0 <= q <= 100:
            raise RouterLatencyError(f"percentile q must be within 0..100, got {q}")
        h = (len(ordered) - 1) * q / 100
        low = math.floor(h)
        high = min(low + 1, len(ordered) - 1)
        found.append(ordered[low] + (h - low) * (ordered[high] - ordered[low]))
    return found


def percentile(values: Sequence[float], q: float) -> float:
    """Return the q-th percentile (0 <= q <= 100) of values (see percentiles)."""
    return percentiles(values, [q])[0]


def rounded_percentiles(values: Sequence[float], qs: Sequence[float], prefix: str) -> dict:
    """Return {prefix + 'p50_ms': ...} for each q, rounded to 0.1 us; None for no values."""
    found = percentiles(values, qs) if values else [None] * len(qs)
    return {f"{prefix}p{q}_ms": None if v is None else round(v, 4) for q, v in zip(qs, found)}


# The gate's tests: distributions, power, Holm, outliers, crossover order effect.

class OrderEffect(NamedTuple):
    """Crossover period (order) effect on the log scale, with its t interval."""
    estimate: float
    low: float
    high: float
    df: int
    p_value: float


# input checks:

SQRT_2 = math.sqrt(2.0)
SQRT_2PI = math.sqrt(2.0 * math.pi)


def _real(value, name: str) -> float:
    """Return value as a float, refusing bools, NaN and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RouterLatencyError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise RouterLatencyError(f"{name} must not be NaN")
    return value


def _finite(value, name: str) -> float:
    """Return value as a finite float."""
    value = _real(value, name)
    if math.isinf(value):
        raise RouterLatencyError(f"{name} must be finite, got {value!r}")
    return value


def checked_probability(value, name: str, *, closed: bool = False) -> float:
    """Return value as a float in (0, 1), or in [0, 1] when closed."""
    value = _real(value, name)
    if not (0.0 <= value <= 1.0 if closed else 0.0 < value < 1.0):
        interval = "[0, 1]" if closed else "(0, 1)"
        raise RouterLatencyError(f"{name} must lie in {interval}, got {value!r}")
    return value


def _df(value) -> float:
    """Return degrees of freedom as a positive float (math.inf allowed)."""
    value = _real(value, "df")
    if value <= 0:
        raise RouterLatencyError(f"df must be positive, got {value!r}")
    return value


def checked_whole(value, name: str, minimum: int) -> int:
    """Return value as an int of at least minimum, refusing bools and floats."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RouterLatencyError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return value


def checked_list(values: Any, what: str) -> list[Any]:  # Any: the caller's input, checked next
    """Return values as a list; raise when they are a string or not a sequence at all."""
    if isinstance(values, (str, bytes)):
        raise RouterLatencyError(f"{what} must be a sequence")
    try:
        return list(values)
    except TypeError:
        raise RouterLatencyError(f"{what} must be a sequence") from None


def _series(values, name: str, minimum: int) -> list[float]:
    """Return values as a list of finite floats, at least minimum of them."""
    items = checked_list(values, f"{name} (numbers)")
    if len(items) < minimum:
        raise RouterLatencyError(f"{name} needs at least {minimum} values, got {len(items)}")
    return [_finite(v, f"{name}[{i}]") for i, v in enumerate(items)]


# normal distribution:

def normal_cdf(x: float) -> float:
    """Return the standard normal distribution function Phi(x)."""
    x = _real(x, "x")
    # erfc rather than 1 + erf: in the lower tail 1 + erf(x) cancels to 0 long before Phi
    # underflows, while erfc keeps full relative accuracy there
    return 0.5 * math.erfc(-x / SQRT_2)


# Acklam's rational approximation of the normal quantile (relative error < 1.15e-9),
# brought to full double precision by one Halley step on erfc.
_ACKLAM_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
_ACKLAM_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
             6.680131188771972e+01, -1.328068155288572e+01)
_ACKLAM_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00)
_ACKLAM_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
             3.754408661907416e+00)
_ACKLAM_LOW = 0.02425


@functools.lru_cache(maxsize=1024)  # the plans ask for the same few (power, levels) again
def normal_ppf(p: float) -> float:
    """Return the standard normal quantile z with Phi(z) = p, for 0 < p < 1.

    Acklam's rational approximation refined by one Halley step; the result agrees with
    scipy.stats.norm.ppf to about 1e-15 relative.
    """
    p = checked_probability(p, "p")
    if p > 0.5:
        # by symmetry, from the lower tail: 1 - p is exact for p >= 0.5 (Sterbenz), while
        # refining in the upper tail would lose the small 1 - Phi(x) to cancellation
        return -normal_ppf(1.0 - p)
    if p < _ACKLAM_LOW:
        q = math.sqrt(-2.0 * math.log(p))
        c, d = _ACKLAM_C, _ACKLAM_D
        x = ((((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
             / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0))
    else:
        q = p - 0.5
        r = q * q
        a, b = _ACKLAM_A, _ACKLAM_B
        x = ((((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
             / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0))
    # exp(x*x/2) overflows below p ~ 1e-308; there the approximation stands unrefined
    if x * x / 2.0 < 700.0:
        e = 0.5 * math.erfc(-x / SQRT_2) - p
        u = e * SQRT_2PI * math.exp(x * x / 2.0)
        x -= u / (1.0 + x * u / 2.0)
    return x


# Student t distribution:

_FLOAT_MAX = 1.7976931348623157e308
_CF_EPS = 1e-15
_CF_TINY = 1e-300
_CF_MAXIT = 10000


def _lentz_step(aa: float, c: float, d: float) -> tuple[float, float, float]:
    """Return (c, d, the factor for h) of one step of Lentz's method with numerator aa; a zero
    denominator is replaced by a tiny one, not divided by."""
    d = 1.0 + aa * d
    if abs(d) < _CF_TINY:
        d = _CF_TINY
    c = 1.0 + aa / c
    if abs(c) < _CF_TINY:
        c = _CF_TINY
    d = 1.0 / d
    return c, d, d * c


def _betacf(a: float, b: float, x: float) -> float:
    """Return the continued fraction of the incomplete beta function (modified Lentz).

    As Numerical Recipes' betacf: I_x(a, b) = front * betacf(a, b, x) / a, converging fast
    for x < (a + 1) / (a + b + 2).
    """
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < _CF_TINY:
        d = _CF_TINY  # Lentz: a zero denominator is replaced by a tiny one, not divided by
    d = 1.0 / d
    h = d
    for m in range(1, _CF_MAXIT + 1):
        m2 = 2 * m
        # the even step of the fraction, then the odd one
        c, d, delta = _lentz_step(m * (b - m) * x / ((qam + m2) * (a + m2)), c, d)
        h *= delta
        c, d, delta = _lentz_step(-(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)), c, d)
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            return h
    # the fraction needs O(sqrt(max(a, b))) terms; not converging means absurd arguments
    raise RouterLatencyError(
        f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def _betainc(a: float, b: float, x: float, y: float, log_x: float, log_y: float) -> float:
    """Return the regularized incomplete beta function I_x(a, b), where y = 1 - x.

    The caller passes y and both logarithms computed without cancellation, so the prefactor
    x^a y^b / B(a, b) keeps its relative accuracy even when x is near 0 or 1.
    """
    if x <= 0.0 and log_x == -math.inf:
        return 0.0
    if y <= 0.0 and log_y == -math.inf:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * log_x + b * log_y)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    # beyond the switch point the fraction for the complement converges instead
    return 1.0 - math.exp(log_front) * _betacf(b, a, y) / b


def _log1p_t2_over_df(t: float, df: float) -> float:
    """Return ln(1 + t^2 / df) without overflowing for huge t."""
    root_df = math.sqrt(df)
    t = abs(t)
    if t > root_df:
        # t / sqrt(df) itself can overflow when df < 1, so the logarithms are split
        return 2.0 * math.log(t) - math.log(df) + math.log1p((root_df / t) ** 2)
    return math.log1p((t / root_df) ** 2)


def _t_tail(t: float, df: float) -> float:
    """Return P(T <= -|t|) for Student t with df degrees of freedom."""
    # P(T <= -|t|) = I_x(df/2, 1/2) / 2 with x = df / (df + t^2); x and 1 - x are formed
    # from whichever ratio is small, so neither suffers cancellation
    t = abs(t)
    if t == 0.0:
        return 0.5
    if math.isinf(t):
        return 0.0
    log_y_over_x = 2.0 * math.log(t) - math.log(df)  # ln(t^2 / df)
    log1p_term = _log1p_t2_over_df(t, df)
    log_x = -log1p_term
    log_y = log_y_over_x - log1p_term
    x, y = math.exp(log_x), math.exp(log_y)
    return 0.5 * _betainc(df / 2.0, 0.5, x, y, log_x, log_y)


def t_cdf(t: float, df: float) -> float:
    """Return the Student t distribution function P(T <= t) with df degrees of freedom.

    Through the regularized incomplete beta function, P(T <= -|t|) = I_x(df/2, 1/2) / 2 with
    x = df / (df + t^2), evaluated by Lentz's continued fraction. df may be any positive real;
    math.inf gives the normal distribution. The lower tail keeps its relative accuracy, so
    use t_cdf(-t, df) for an upper tail rather than 1 - t_cdf(t, df). Agrees with scipy to
    about 1e-12 relative for df 1..200.
    """
    t = _real(t, "t")
    df = _df(df)
    if math.isinf(df):
        return normal_cdf(t)
    tail = _t_tail(t, df)
    return tail if t <= 0 else 1.0 - tail


def _t_log_pdf(t: float, df: float) -> float:
    """Return the logarithm of the Student t density at t with df degrees of freedom."""
    # in logs: far in the tails of small df the density underflows while F does not
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return log_norm - (df + 1.0) / 2.0 * _log1p_t2_over_df(t, df)


@functools.lru_cache(maxsize=4096)  # the gate asks for the same few quantiles again
def t_ppf(p: float, df: float) -> float:
    """Return the Student t quantile t with P(T <= t) = p, for 0 < p < 1.

    Closed forms for df 1 and 2; otherwise Newton's method on ln P(T <= t), started from the
    Cornish-Fisher expansion (capped by a tail bound) and safeguarded by bisection inside a
    bracket; a quantile beyond the float range (fractional df, tiny p) is -inf or inf. Agrees with
    scipy.stats.t.ppf to about 1e-12 relative for df 1..200 and p in [1e-6, 1 - 1e-6].
    """
    p = checked_probability(p, "p")
    df = _df(df)
    if math.isinf(df):
        return normal_ppf(p)
    # solve in the lower tail, where q = min(p, 1 - p) is exact and P(T <= t) keeps its
    # relative accuracy, then mirror
    q = min(p, 1.0 - p)
    sign = -1.0 if p < 0.5 else 1.0
    if q == 0.5:
        return 0.0
    if df == 1.0:
        # Cauchy: -cot(pi q); tan(pi (q - 1/2)) would lose digits next to its pole
        return sign * (1.0 / math.tan(math.pi * q))
    if df == 2.0:
        return sign * ((1.0 - 2.0 * q) / math.sqrt(2.0 * q * (1.0 - q)))
    return sign * -_t_lower_quantile(q, df)


def _t_lower_quantile(q: float, df: float) -> float:
    """Return the t < 0 with P(T <= t) = q, for 0 < q < 1/2 and df > 0."""
    # Cornish-Fisher start; |t| exceeds |z| for every df, so z caps the start from the right
    z = normal_ppf(q)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    t = min(z + g1 / df + g2 / df ** 2 + g3 / df ** 3, z)
    # in the far tail F(t) < K |t|^-df, so solving K |t|^-df = q gives a start beyond the
    # root; it stops Cornish-Fisher, which is poor for small df there, from overshooting
    # further, and spares Newton a long crawl out from a start far inside
    # (the bound follows from 1 + s^2/df > s^2/df under the tail integral)
    log_k = (math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(math.pi)
             + (df / 2.0 - 1.0) * math.log(df))
    log_far = (log_k - math.log(q)) / df
    if log_far < 709.0:
        t = max(t, -math.exp(log_far))
    elif _t_tail(-_FLOAT_MAX, df) > q:
        return -math.inf  # fractional df: the quantile lies beyond the largest float
    log_q = math.log(q)
    lo, hi = -math.inf, 0.0  # P(T <= lo) <= q <= P(T <= hi)
    for _ in range(200):
        f = _t_tail(t, df)
        if f > q:
            hi = t
        elif f < q:
            lo = t
        else:
            return t
        # Newton on g(t) = ln F(t) - ln q, whose slope is pdf / F: in the heavy tails ln F
        # is close to linear in ln|t|, far straighter than F itself, so the steps stay
        # sensible from a poor start; bisection takes over when a step leaves the bracket
        log_ratio = math.log(f) - _t_log_pdf(t, df) if f > 0.0 else math.inf
        if log_ratio < 709.0:
            candidate = t - (math.log(f) - log_q) * math.exp(log_ratio)
        else:
            candidate = math.nan  # F underflowed, or the step overflows: no slope to follow
        # F itself is good to about 1e-14 relative, so a smaller step is noise (and may
        # round onto the bracket's edge)
        if abs(candidate - t) <= 1e-14 * abs(t):
            return candidate
        if not lo < candidate < hi:
            candidate = 0.5 * (lo + hi) if lo > -math.inf else 2.0 * t
            if hi - lo <= 1e-14 * abs(hi):
                return candidate
        if math.isinf(candidate):
            return candidate  # the quantile lies beyond the largest float
        t = candidate
    return t


def f_cdf(f: float, df1: float, df2: float) -> float:
    """Return P(F <= f) for Fisher's F on df1 and df2 degrees of freedom: I_x(df1/2, df2/2)
    with x = df1 f / (df1 f + df2), its complement formed apart so that neither cancels."""
    if f <= 0.0:
        return 0.0
    if math.isinf(f):
        return 1.0
    total = df1 * f + df2
    x, y = df1 * f / total, df2 / total
    return _betainc(df1 / 2.0, df2 / 2.0, x, y, math.log(df1 * f) - math.log(total),
                    math.log(df2) - math.log(total))


@functools.lru_cache(maxsize=1024)  # the noise split asks for the same few again
def f_ppf(p: float, df1: float, df2: float) -> float:
    """Return the F quantile f with P(F <= f) = p, by bisection on log f (to 1e-10)."""
    p = checked_probability(p, "p")
    low, high = -60.0, 60.0
    while high - low > 1e-10:
        mid = 0.5 * (low + high)
        if f_cdf(math.exp(mid), df1, df2) < p:
            low = mid
        else:
            high = mid
    return math.exp(0.5 * (low + high))


def chi2_ppf(p: float, df: float) -> float:
    """Return the chi-square quantile on df degrees of freedom: the F quantile on (df, a
    million) times df, within 1e-5 relative of the limit."""
    return df * f_ppf(p, df, 1e6)


# power:

def detectable_change(spread: float, n: int, *, alpha: float = 0.05, power: float = 0.8,
                      sided: int = 2) -> float:
    """Return the smallest true mean shift a t test on n rounds detects with the given power.

    In the units of spread, the sample standard deviation of the per-round log ratios d_i.
    Uses the standard approximation

        mde = (t_{1 - alpha/sided, n-1} + t_{power, n-1}) * spread / sqrt(n),

    which treats the test statistic under the alternative as a shifted central t. The exact
    value solves the noncentral-t power equation; against it (alpha 0.05 two-sided, power
    0.8) the approximation is optimistic for tiny n, 5.1% too small at n = 3, 2.2% at 4,
    1.2% at 5, under 0.3% from n = 8 on, and within 0.02% from n = 15.
    """
    spread = _finite(spread, "spread")
    if spread < 0:
        raise RouterLatencyError(f"spread must be >= 0, got {spread!r}")
    n = checked_whole(n, "n", 2)
    alpha = checked_probability(alpha, "alpha")
    power = checked_probability(power, "power")
    if sided not in (1, 2):
        raise RouterLatencyError(f"sided must be 1 or 2, got {sided!r}")
    df = n - 1
    factor = t_ppf(1.0 - alpha / sided, df) + t_ppf(power, df)
    return factor * spread / math.sqrt(n)


def power_shift(critical: float, df: int, power: float = 0.8) -> float:
    """Return the noncentrality at which a one-sided t test rejecting at t >= critical has
    the given power: the true shift in standard errors it finds that often.

    By the normal approximation of the noncentral t (Abramowitz and Stegun 26.7.10),
    P(T' < c) ~ Phi((c (1 - 1/(4 df)) - delta) / sqrt(1 + c^2 / (2 df))), solved for delta.
    At the small levels and df of Holm's first step over few rounds, the shifted central t
    that detectable_change uses is far too optimistic (a row found 70% of the time at n 3 for
    a stated 80%); this one comes within simulation error of 80% from n 3 on.
    """
    return critical * (1 - 1 / (4 * df)) + normal_ppf(power) * math.sqrt(
        1 + critical * critical / (2 * df))


def rounds_needed(spread: float, target: float, *, alpha: float = 0.05, power: float = 0.8,
                  sided: int = 2, max_rounds: int = 1000) -> Optional[int]:
    """Return the smallest n >= 3 whose noncentral_detectable is at most target, or None.

    None when even max_rounds rounds are not enough. spread and target are in the same units
    (log ratios: ln(1 + tolerance) for a tolerance). Zero spread needs the minimum, 3.
    """
    spread = _finite(spread, "spread")
    if spread < 0:
        raise RouterLatencyError(f"spread must be >= 0, got {spread!r}")
    target = _finite(target, "target")
    if target <= 0:
        raise RouterLatencyError(f"target must be > 0, got {target!r}")
    alpha = checked_probability(alpha, "alpha")
    power = checked_probability(power, "power")
    if sided not in (1, 2):
        raise RouterLatencyError(f"sided must be 1 or 2, got {sided!r}")
    max_rounds = checked_whole(max_rounds, "max_rounds", 3)
    start = 3
    if power >= 0.5:
        # the noncentral t needs more than the normal theory does, so the normal-theory n is
        # a lower bound: scanning up from it takes a few steps instead of hundreds
        z = normal_ppf(1.0 - alpha / sided) + normal_ppf(power)
        bound = (z * spread / target) ** 2
        if bound > max_rounds:
            return None
        start = max(3, int(bound))
    for n in range(start, max_rounds + 1):
        if noncentral_detectable(spread, n, alpha=alpha, power=power, sided=sided) <= target:
            return n
    return None


def noncentral_detectable(spread: float, n: int, *, alpha: float = 0.05, power: float = 0.8,
                          sided: int = 2) -> float:
    """Return the smallest true mean shift a t test on n rounds finds with the given power,
    by the noncentral t (power_shift) rather than detectable_change's shifted central t: at
    the small levels of Holm's steps over few rounds the shifted central t is optimistic (9
    rows at a 2% spread: 6 rounds planned found the slowdown 76-77% of the time for 80%)."""
    critical = t_ppf(1.0 - alpha / sided, n - 1)
    return power_shift(critical, n - 1, power) * spread / math.sqrt(n)


# tests:

def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Return, in input order, whether Holm's step-down procedure rejects each hypothesis.

    The sorted p-values p_(1) <= ... <= p_(m) are compared with alpha / (m - j + 1); the first
    one above its threshold stops the procedure and keeps it and every larger one. Rejection
    is p <= threshold, as statsmodels' multipletests. Controls the family-wise error rate at
    alpha under any dependence between the tests.
    """
    ps = _series(p_values, "p_values", 0)
    for i, p in enumerate(ps):
        if not 0.0 <= p <= 1.0:
            raise RouterLatencyError(f"p_values[{i}] must lie in [0, 1], got {p!r}")
    alpha = checked_probability(alpha, "alpha")
    m = len(ps)
    rejected = [False] * m
    # stable sort: tied p-values keep their input order, which only matters for the report
    for rank, index in enumerate(sorted(range(m), key=ps.__getitem__)):
        if ps[index] > alpha / (m - rank):
            break
        rejected[index] = True
    return rejected


def benjamini_hochberg(p_values: Sequence[float], q: float = 0.05) -> list[bool]:
    """Return, in input order, whether the Benjamini-Hochberg step-up procedure rejects each
    hypothesis at false discovery rate q.

    The largest k with p_(k) <= k q / m rejects the k smallest p-values. It bounds the expected
    share of false rejections among the rejections (independent or positively dependent
    tests), which suits a list of suspects better than Holm's family-wise bound: with a
    thousand inputs, Holm would call none slower.
    """
    ps = _series(p_values, "p_values", 0)
    q = checked_probability(q, "q")
    order = sorted(range(len(ps)), key=ps.__getitem__)
    passed = [rank for rank, index in enumerate(order, 1) if ps[index] <= rank * q / len(ps)]
    rejected = [False] * len(ps)
    for index in order[:max(passed, default=0)]:
        rejected[index] = True
    return rejected


_ALTERNATIVES = ("greater", "less", "two-sided")


def t_test_p(values: Sequence[float], *, mu: float = 0.0, alternative: str = "greater") -> float:
    """Return the p-value of the one-sample t test of mean(values) against mu.

    alternative 'greater' tests mean > mu (for sign-adjusted log ratios: worse), 'less'
    mean < mu, 'two-sided' mean != mu. Needs n >= 2. When all values are equal the spread is
    zero and t is undefined: the p-value is then 0 if the mean lies strictly on the side of
    the alternative (any side for two-sided), and 1 otherwise, including mean == mu; no
    evidence is claimed without a difference.
    """
    xs = _series(values, "values", 2)
    mu = _finite(mu, "mu")
    if alternative not in _ALTERNATIVES:
        raise RouterLatencyError(f"alternative must be one of {', '.join(_ALTERNATIVES)}, "
                         f"got {alternative!r}")
    n = len(xs)
    if min(xs) == max(xs):
        # judged on the values themselves: a computed spread of identical values can come
        # out as a rounding residue instead of 0 and give an absurd t
        diff = xs[0] - mu
        if alternative == "greater":
            return 0.0 if diff > 0 else 1.0
        if alternative == "less":
            return 0.0 if diff < 0 else 1.0
        return 0.0 if diff != 0 else 1.0
    mean, ss = mean_and_squares(xs)
    t = (mean - mu) / math.sqrt(ss / (n - 1) / n)
    df = n - 1
    if alternative == "greater":
        return t_cdf(-t, df)
    if alternative == "less":
        return t_cdf(t, df)
    return min(1.0, 2.0 * t_cdf(-abs(t), df))


# rows:

def _rows(rows, minimum_length: int) -> list[list[float]]:
    """Return rows as a list of equal-length lists of finite floats."""
    rows = checked_list(rows, "rows (of numbers)")
    if not rows:
        raise RouterLatencyError("rows must hold at least one row")
    checked = [_series(row, f"rows[{i}]", minimum_length) for i, row in enumerate(rows)]
    lengths = {len(row) for row in checked}
    if len(lengths) != 1:
        raise RouterLatencyError(f"rows differ in length: {sorted(lengths)}")
    return checked


def composite_log_ratios(rows: Sequence[Sequence[float]]) -> list[float]:
    """Return the composite series: for each round, the mean of the rows' log ratios.

    rows holds one list of per-round d_i per row, all of the same length n; the result has n
    values. Averaging within a round keeps the pairing, so the composite's t interval
    accounts for the correlation between rows that a pooled test would miss.
    """
    checked = _rows(rows, 1)
    k = len(checked)
    return [math.fsum(column) / k for column in zip(*checked)]


def effective_rows(rows: Sequence[Sequence[float]]) -> float:
    """Return the effective number of independent rows, a float in [1, k] for k rows.

    From the correlation matrix R of the rows' per-round d_i: n_eff = (sum of eigenvalues)^2
    / (sum of squared eigenvalues) = k^2 / sum_ij r_ij^2, since trace R = k and trace R^2 is
    the sum of squared entries. Identical (or perfectly anti-correlated) rows give 1,
    uncorrelated rows give k. A row with zero variance carries no correlation: its r with
    every other row counts as 0 and with itself as 1.

    Caveats: with n rounds n_eff cannot exceed n - 1 (the rank of R), and sample correlations
    of truly independent rows are not 0 but have E[r^2] = 1/(n - 1), so for few rounds the
    figure is biased low (about k / (1 + (k - 1) / (n - 1)) for independent rows).
    """
    checked = _rows(rows, 2)
    k = len(checked)
    centred, norms = [], []
    for row in checked:
        mean, ss = mean_and_squares(row)
        centred.append([v - mean for v in row])
        norms.append(math.sqrt(ss))
    squares = [1.0] * k  # the diagonal, r_ii = 1 even for a constant row
    for i in range(k):
        for j in range(i + 1, k):
            if norms[i] == 0.0 or norms[j] == 0.0:
                continue
            r = math.fsum(a * b for a, b in zip(centred[i], centred[j])) / (norms[i] * norms[j])
            r = max(-1.0, min(1.0, r))
            squares.append(2.0 * r * r)  # r_ij and r_ji
    n_eff = k * k / math.fsum(squares)
    # rounding can push the ratio a hair outside its mathematical range
    return max(1.0, min(float(k), n_eff))


_MAD_Z = 0.6745  # Phi^-1(3/4): MAD / 0.6745 estimates sigma for normal data
_MEANAD_SCALE = math.sqrt(math.pi / 2.0)  # 1.2533: mean absolute deviation * this ~ sigma
_TIE_RELATIVE = 1e-9


def outlier_rounds(values: Sequence[float], *, threshold: float = 3.5) -> list[int]:
    """Return the indices of values whose modified z-score exceeds threshold.

    Iglewicz and Hoaglin's modified z-score, M_i = 0.6745 |x_i - median| / MAD, with MAD the
    median absolute deviation from the median; 3.5 is their recommended cut. Fewer than 3
    values give [].

    Deviations within 1e-9 of the largest |x| count as 0, so rounding residue of equal
    values is neither a scale nor an outlier. When MAD is 0 (more than half the values tie
    at the median) the score falls back to the mean absolute deviation from the median,
    M_i = |x_i - median| / (1.2533 * MeanAD), the usual substitute (1.2533 = sqrt(pi/2)
    makes both estimate sigma for normal data). A single differing value among n then
    scores n / 1.2533, so it is flagged from n = 5 on: in a handful of rounds one odd value
    among identical ones is not evidence of anything. All values equal give [].
    """
    import statistics
    xs = _series(values, "values", 0)
    threshold = _finite(threshold, "threshold")
    if threshold <= 0:
        raise RouterLatencyError(f"threshold must be > 0, got {threshold!r}")
    if len(xs) < 3:
        return []
    centre = statistics.median(xs)
    tie = _TIE_RELATIVE * max(abs(v) for v in xs)
    deviations = [abs(v - centre) for v in xs]
    deviations = [0.0 if d <= tie else d for d in deviations]
    mad = statistics.median(deviations)
    if mad > 0:
        scale = mad / _MAD_Z
    else:
        mean_ad = math.fsum(deviations) / len(deviations)
        if mean_ad == 0:
            return []
        scale = _MEANAD_SCALE * mean_ad
    return [i for i, d in enumerate(deviations) if d / scale > threshold]


def order_effect(d_base_first: Sequence[float], d_new_first: Sequence[float], *,
                 confidence: float = 0.95) -> Optional[OrderEffect]:
    """Return the crossover order (period) effect with its pooled t interval, or None.

    A 2-period, 2-sequence crossover: each round runs base and new back to back, in either
    order. Model the per-round log ratio as d = tau + pi * s + e, with tau the treatment
    effect, s = +1 when base ran first (new in the second slot) and s = -1 when new ran
    first, and pi the order effect: the log-scale penalty of running second (warm caches
    give a negative pi, thermal throttling or leaks a positive one). The group means estimate
    tau + pi and tau - pi, so

        pi_hat = (mean(d_base_first) - mean(d_new_first)) / 2,
        tau_hat = (mean(d_base_first) + mean(d_new_first)) / 2,

    the halving coming from s moving by 2 between the groups. tau_hat is the treatment
    estimate free of pi even for unequal groups. The interval is the pooled two-sample t
    interval (equal variances, no Welch correction) with df = n1 + n2 - 2 and standard error
    s_p * sqrt(1/n1 + 1/n2) / 2; p_value is two-sided for pi = 0. Zero pooled spread gives a
    point interval and p 0 (estimate != 0) or 1. None when a group is empty or df < 1.
    """
    first = _series(d_base_first, "d_base_first", 0)
    second = _series(d_new_first, "d_new_first", 0)
    confidence = checked_probability(confidence, "confidence")
    n1, n2 = len(first), len(second)
    df = n1 + n2 - 2
    if n1 == 0 or n2 == 0 or df < 1:
        return None
    mean1, ss1 = mean_and_squares(first)
    mean2, ss2 = mean_and_squares(second)
    estimate = (mean1 - mean2) / 2.0
    pooled_var = (ss1 + ss2) / df
    se = math.sqrt(pooled_var * (1.0 / n1 + 1.0 / n2)) / 2.0
    if se == 0.0:
        return OrderEffect(estimate, estimate, estimate, df, 0.0 if estimate != 0 else 1.0)
    half = t_ppf(0.5 + confidence / 2.0, df) * se
    p_value = min(1.0, 2.0 * t_cdf(-abs(estimate) / se, df))
    return OrderEffect(estimate, estimate - half, estimate + half, df, p_value)


# group-sequential design:



# t boundaries of a group-sequential design:
