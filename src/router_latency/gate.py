"""The gate's rule, in one module: the rows' estimator and words, the family-wise test of the
gated rows, the sequential look, and the outcome, three-way (PASS, FAIL, INCONCLUSIVE) or by
--pass-unless-worse: one GateRule, chosen once from the settings (GateSettings.rule), decides a
result that nothing failed; gate_rows() applies the whole rule and returns a typed GateOutcome
that every renderer reads. A rule change is this module and tests/test_gate.py."""

from __future__ import annotations

import functools
import math
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from .constants import (EXIT_GATE, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_USAGE, LADDER_METRICS,
                        MAX_PLAN_ROUNDS, NamedTuple)
from .errors import Notice, RouterLatencyError
from .words import (BOUND_PCT, change_text, metric_title, pct_text, plural, slowdown_text,
                    worse_sign)
from .stats import (chi2_ppf, composite_log_ratios, effective_rows, Interval,
                    mean_and_squares, mean_interval, normal_ppf, paired_interval,
                    power_shift, rounds_needed, sample_spread, SQRT_2, t_cdf, t_ppf, t_test_p)
from .sequential import look_critical
from .requests import pass_title
from .roundset import Rounds

__all__ = [
    "BEYOND_LIMIT", "check_look", "combined_exit", "composite_text", "crosses",
    "DECIDE_PROBABILITY", "DETECTS_CONFIDENCE", "detectable_text", "detects_text", "GATE_ALPHA",
    "GateOutcome", "gate_rows", "GateSettings", "GateTest", "holm_step_down", "judged_word",
    "Look", "missed_pct", "missed_text", "more_rounds",
    "one_sided", "OneSided", "outcome_of", "Row", "row_judged_interval", "row_of", "row_word",
    "spread_bound",
    "undecided_text", "upper_critical", "word_status",
]


DEFAULT_GATE = ("p50_ms", "p95_ms", "req_per_s")  # judged; p99 and mean are reported
GATE_ALPHA = 0.05  # the gate's family-wise false-fail rate
# a row's words: "no worse" is shown within the tolerance on the worse side, but its interval
# reaches past the tolerance on the better side too, so it is not shown the same
ROW_WORDS = ("better", "same", "no worse", "worse", "inconclusive")
# "detects" plugs in this upper confidence bound of the spread, not the spread seen, so that
# the figure has its 80% power in about this share of runs (bench/gate_simulation.py --detects)
DETECTS_CONFIDENCE = 0.9
# "more rounds": the further rounds that decide an undecided row this often, averaged over the
# change and spread the rounds so far support (not their point values)
DECIDE_PROBABILITY = 0.8
# a --sequential look stops for futility when an undecided gated row would be decided by the
# plan's last look in under this share of what the rounds so far support: it ends
# INCONCLUSIVE, never PASS or FAIL, so the design's false FAIL and false PASS rates stay (a
# non-binding futility boundary; bench/gate_statistics.py futility simulates them)
FUTILITY_PROBABILITY = 0.1
DECIDE_LIMIT = MAX_PLAN_ROUNDS  # rounds: beyond this, "more than 1,000 rounds would be needed"
BEYOND_LIMIT = f"more than {DECIDE_LIMIT:,}"  # the rounds a row past DECIDE_LIMIT needs
# the exit code of several verdicts combined is the first of these any of them has: an error,
# then a FAIL, then undecided, then pass; not the largest code, since 3 would hide a FAIL's 1
EXIT_PRECEDENCE = (EXIT_USAGE, EXIT_GATE, EXIT_INCONCLUSIVE, EXIT_OK)


class GateSettings(NamedTuple):
    """How `rounds` judges: what may change, which rows gate, and how sure it must be."""
    tolerance_pct: float = 5.0  # a change within this percentage is 'same'
    gate: Tuple[str, ...] = DEFAULT_GATE  # metrics of every pass, or 'pass:metric'
    # --pass-unless-worse: an underpowered inconclusive gated row makes it inconclusive
    strict: bool = False
    max_mde_pct: Optional[float] = None  # default: twice the tolerance, 10% at tolerance 0
    allow_incomplete: bool = False
    allow_mismatch: Tuple[str, ...] = ()  # fields of CHECKED_FIELDS allowed to differ between runs
    allow_config_change: bool = False  # judge a side whose x-vsr-config-hash changed
    sequential_max: Optional[int] = None  # group-sequential: the most rounds that will be run
    alpha: float = GATE_ALPHA  # family-wise false-fail rate
    # the old rule, PASS_UNLESS_WORSE: PASS unless a gated row is shown worse (a PASS then
    # shows nothing within the tolerance); by default, THREE_WAY, PASS needs every gated row
    # shown within it (the rule property chooses)
    pass_unless_worse: bool = False
    slo_p95_ms: Optional[float] = None  # ladders: capacity within it (default: the runs')
    # ladders: (side or None, USD an hour, per what) entries
    cost_per_hour: Tuple[Tuple[Optional[str], float, str], ...] = ()
    decisions: str = "gate"  # gate: a changed decision fails; report: reported, not gated

    @property
    def tolerance_log(self) -> float:
        return math.log1p(self.tolerance_pct / 100)

    @property
    def target_pct(self) -> float:
        """The change a gated row should be able to detect (--max-mde)."""
        if self.max_mde_pct is not None:
            return self.max_mde_pct
        return 2 * self.tolerance_pct if self.tolerance_pct > 0 else 10.0

    @property
    def rule(self) -> GateRule:
        """The rule that decides a result nothing failed: the one place it is chosen."""
        return PASS_UNLESS_WORSE if self.pass_unless_worse else THREE_WAY

    def gates(self, pass_name_: str, metric: str) -> bool:
        return metric in self.gate or f"{pass_name_}:{metric}" in self.gate

    def gating_nothing(self, rows: Sequence[Row]) -> Tuple[str, ...]:
        """Return the --gate entries no row answers to (a pass or a part the runs do not
        have): a gate of no row would pass whatever the change. The ladder's own rows say
        why they are missing where they are made (capacity.ladder_rows)."""
        return tuple(g for g in self.gate if g not in LADDER_METRICS and not any(
            g in (r.metric, f"{r.pass_name}:{r.metric}") for r in rows))


class Row(NamedTuple):
    """One pass and metric of the rounds table."""
    pass_name: str
    metric: str
    gated: bool
    base_median: float  # descriptive
    new_median: float  # descriptive
    diff: Interval  # mean paired difference new - base, in the metric's unit
    log_ratio: Interval  # mean of ln(new / base) over rounds, 95% t interval
    speedup: float  # geometric mean: base/new for latency, new/base for req/s
    speedup_low: float
    speedup_high: float
    worse_rounds: int
    rounds: int
    p_value: float  # one-sided: worse than the tolerance
    detectable_pct: Optional[float]  # smallest slowdown found with 80% power; None: no spread
    rounds_needed: Optional[int]  # for the target change; None: beyond 1,000
    verdict: str  # better, same, worse or inconclusive (ROW_WORDS)
    base_values: Tuple[float, ...]
    new_values: Tuple[float, ...]
    worse_end_pct: Optional[float] = None  # the worse end of the interval the gate uses
    more_rounds: Optional[int] = None  # inconclusive: rounds that would decide it; None: > 1,000
    # inconclusive: the further rounds that decide it DECIDE_PROBABILITY of the time over what
    # the rounds so far support (rounds_to_go); None: > 1,000
    rounds_to_go: Optional[int] = None
    spread: float = 0.0  # sample standard deviation of ln(new / base) over the rounds
    # the interval the word and the gate judge, of the worse-direction log ratio: the 95% one
    # in a fixed design, a --sequential look's (its boundary) for a gated row; None: unjudged
    judged: Optional[Interval] = None
    # gated, its judged interval wholly beyond the tolerance, yet not shown worse: Holm's
    # correction for the gated rows (or a look's boundary) held it back
    held_by_holm: bool = False

    @property
    def change_pct(self) -> float:
        """The geometric-mean change in the worse direction, in percent."""
        return 100 * (math.exp(worse_sign(self.metric) * self.log_ratio.mean) - 1)

    @property
    def worse_series(self) -> List[float]:
        sign = worse_sign(self.metric)
        return [sign * math.log(n / b) for b, n in zip(self.base_values, self.new_values)]


class Look(NamedTuple):
    """A look of a group-sequential plan (--sequential): the rounds judged now, of the most."""
    rounds: int
    max_rounds: int

    @property
    def last(self) -> bool:
        """The plan's last look: no round will follow to decide what it leaves open."""
        return self.rounds == self.max_rounds


class GateTest(NamedTuple):
    """The family-wise test of the gated rows: their per-round mean and Holm across them."""
    rows: int  # gated rows
    effective_rows: float  # independent rows their correlation is worth
    composite: Optional[Interval]  # mean over gated rows of the worse-direction log ratio
    composite_p: Optional[float]
    level: float  # one-sided level of each of the two tests
    regressions: Tuple[Tuple[str, str], ...]  # (pass, metric) Holm rejects
    composite_worse: bool = False  # the composite test rejects
    within_critical: float = math.inf  # critical t of each row's test within the tolerance
    holm_criticals: Tuple[float, ...] = ()  # critical t of Holm's steps reached: level / m, ...
    # every gated row slowing together: None with no spread (any change), inf where the
    # look's boundary cannot reject (none yet), as detectable_text says a row's
    composite_detectable_pct: Optional[float] = None


class GateOutcome(NamedTuple):
    """What the gate decided, once: every renderer and the command line read it."""
    status: str  # pass, fail or inconclusive
    reasons: Tuple[str, ...]  # why it failed or is inconclusive
    exit_code: int  # EXIT_OK, EXIT_GATE or EXIT_INCONCLUSIVE
    undecided: Tuple[Row, ...] = ()  # the gated rows decided neither way (verdict inconclusive)
    # a --sequential look before the last at which the rounds left cannot decide (futility):
    # the words that say so; "" where it goes on (or is no such look)
    futility: str = ""


class GateJudgement(NamedTuple):
    """The whole rule applied to the rows of the used rounds (gate_rows)."""
    rows: Tuple[Row, ...]  # with the gate's words on the gated ones
    test: Optional[GateTest]  # None: no rows
    look: Optional[Look]  # None: a fixed design
    outcome: GateOutcome


class GateRule(NamedTuple):
    """How the gate decides a result that nothing failed (no failure, no row shown worse):
    which undecided gated rows leave it open, and how the reports name the rule."""
    option: str  # the option that selects it; "" for the default, which reports do not name
    text: str  # the rule in one line
    # the doubts the undecided gated rows raise at this look: any makes it inconclusive
    doubts: Callable[[Sequence[Row], GateSettings, Optional[Look]], List[str]]
    # what the reader must know of the undecided gated rows that no doubt names
    warnings: Callable[[Sequence[Row], GateSettings], List[Notice]]


class OneSided(NamedTuple):
    """A one-sided t test that a worse-direction mean lies beyond a bound (the tolerance, or no
    change): its t statistic and degrees of freedom. A gated row of rounds has the rounds'
    n - 1; a drift of history, a sum of steps, its own (Welch and Satterthwaite)."""
    statistic: float
    df: float


class StepDown(NamedTuple):
    """Holm's step-down over a family of one-sided tests (holm_step_down)."""
    rejected: Tuple[bool, ...]  # in the tests' order
    criticals: Tuple[float, ...]  # critical t of each step reached: at level / m, ...


def row_of(name: str, metric: str, base_values: list, new_values: list,
           settings: GateSettings) -> Row:
    """Return one row of the rounds table: one estimator, the geometric mean of the
    per-round ratios, with its t interval on the log ratios; its verdict before the gate."""
    import statistics
    if any(v is None or v <= 0 for v in (*base_values, *new_values)):
        raise RouterLatencyError(f"{pass_title(name)} {metric_title(metric)}: a round has no "
                                 f"positive value")
    logs = [math.log(n / b) for b, n in zip(base_values, new_values)]
    log_ratio = mean_interval(logs)
    sign = worse_sign(metric)
    worse = [sign * v for v in logs]
    faster = -sign  # speedup: base/new for latency, new/base for req/s
    bounds = sorted((math.exp(faster * log_ratio.low), math.exp(faster * log_ratio.high)))
    row = Row(pass_name=name, metric=metric, gated=settings.gates(name, metric),
              base_median=statistics.median(base_values),
              new_median=statistics.median(new_values),
              diff=paired_interval(base_values, new_values), log_ratio=log_ratio,
              speedup=math.exp(faster * log_ratio.mean), speedup_low=bounds[0],
              speedup_high=bounds[1], worse_rounds=sum(v > 0 for v in worse), rounds=len(logs),
              p_value=t_test_p(worse, mu=settings.tolerance_log, alternative="greater"),
              detectable_pct=None, rounds_needed=None, verdict="inconclusive",
              base_values=tuple(base_values), new_values=tuple(new_values))
    # its own words: the plain 95% interval, and its own one-sided test at 2.5% for worse
    critical = upper_critical(settings.alpha / 2, len(logs) - 1)
    return row_judged(row, settings, critical, critical,
                      row.p_value < settings.alpha / 2)


def one_sided(diff: float, se: float, df: float) -> OneSided:
    """Return the one-sided t test of a mean `diff` beyond its bound with standard error se:
    with no spread (se 0) its statistic is +-inf on the side of the mean, 0 at the bound (as
    t_test_p judges equal values)."""
    if se == 0.0:
        return OneSided(math.inf if diff > 0 else -math.inf if diff < 0 else 0.0, df)
    return OneSided(diff / se, df)


def t_statistic(values: Sequence[float], mu: float) -> float:
    """Return the one-sample t statistic of values against mu (one_sided's; no spread when
    the values are equal, judged on the values themselves)."""
    mean, ss = mean_and_squares(values)
    n = len(values)
    if min(values) == max(values) or ss == 0.0:
        return one_sided(values[0] - mu, 0.0, n - 1).statistic
    return one_sided(mean - mu, math.sqrt(ss / (n - 1) / n), n - 1).statistic


def row_judged(row: Row, settings: GateSettings, within: float, fail: float,
               shown_worse: bool) -> Row:
    """Return the row with its word, worse end, "detects" and rounds to a decision.

    within: the critical t of the test that it lies within the tolerance (and of "better"),
    fail: that of the test that finds it worse when only it slows (Holm's first step for a
    gated row); shown_worse: that test, as the gate applied it, rejected.
    """
    worse = row.worse_series
    n, tolerance = len(worse), settings.tolerance_log
    mean, ss = mean_and_squares(worse)
    se = math.sqrt(ss / (n - 1) / n) if min(worse) != max(worse) else 0.0
    end, start = mean + within * se, mean - within * se
    verdict = judged_word(start, end, tolerance, shown_worse)
    spread = sample_spread(worse)
    detectable = tolerance + power_shift(fail, n - 1) * spread_bound(spread, n - 1) \
        / math.sqrt(n)
    room = math.log1p(settings.target_pct / 100) - tolerance
    level = nominal_level(fail, n - 1)  # of the fail test at this look, to plan with
    needed = rounds_needed(spread, room if room > 0 else math.log1p(settings.target_pct / 100),
                           alpha=level, sided=1)
    more = None if verdict != "inconclusive" else \
        rounds_to_decide(mean, spread, tolerance, settings.alpha / 2, level, n)
    to_go = None if verdict != "inconclusive" else \
        rounds_to_go(mean, spread, tolerance, settings.alpha / 2, level, n)
    return row._replace(
        verdict=verdict, worse_end_pct=100 * math.expm1(end) if math.isfinite(end) else None,
        detectable_pct=100 * math.expm1(detectable) if spread > 0 and math.isfinite(detectable)
        else None, rounds_needed=needed, more_rounds=more, rounds_to_go=to_go, spread=spread,
        judged=Interval(mean, start, end, n - 1),
        held_by_holm=row.gated and verdict == "inconclusive" and start > tolerance)


def judged_word(start: float, end: float, tolerance: float, shown_worse: bool) -> str:
    """Return a judged interval's word (ROW_WORDS) in the worse direction, start to end, at a
    tolerance (a log ratio): worse when its test, as the gate applied it, rejected; better,
    same or no worse by where it lies; inconclusive when it reaches past the tolerance."""
    return ("worse" if shown_worse else "better" if end < 0
            else "same" if end <= tolerance and start >= -tolerance
            else "no worse" if end <= tolerance else "inconclusive")


def word_status(word: str) -> str:
    """Return what a gated row's word says to the gate: fail (shown worse), inconclusive
    (undecided: GateOutcome.undecided) or pass (shown within the tolerance)."""
    return {"worse": "fail", "inconclusive": "inconclusive"}.get(word, "pass")


def spread_bound(spread: float, df: int, confidence: float = DETECTS_CONFIDENCE) -> float:
    """Return the one-sided upper confidence bound of a normal standard deviation estimated
    as `spread` on df degrees of freedom: spread * sqrt(df / chi2_{1 - confidence, df}), the
    chi-square quantile by Wilson and Hilferty's cube (a little low at 2 df, so the bound errs
    wide). The spread seen is below the true one about half the time, so a "detects" figure
    made from it has its stated power in only about half of the runs."""
    z = normal_ppf(1 - confidence)
    cube = 1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))
    return spread / math.sqrt(cube ** 3) if cube > 0 else math.inf


@functools.lru_cache(maxsize=1024)  # a few critical values recur for every row
def nominal_level(critical: float, df: int) -> float:
    """Return the one-sided level of a t test with this critical value, at least 1e-12."""
    return max(t_cdf(-critical, df), 1e-12) if math.isfinite(critical) else 1e-12


def rounds_to_decide(mean: float, spread: float, tolerance: float, within_level: float,
                     fail_level: float, rounds: int) -> Optional[int]:
    """Return how many more rounds would decide a row if its mean and spread stayed as seen:
    within the tolerance (its worse end inside it) or beyond it; None past DECIDE_LIMIT."""
    gap = abs(tolerance - mean)
    if gap == 0.0 or spread == 0.0:
        return None if gap == 0.0 else 1
    level = within_level if mean < tolerance else fail_level
    # the normal quantile is below t's: its n is a lower bound to scan up from
    start = max(rounds + 1, int((normal_ppf(1 - level) * spread / gap) ** 2))
    for n in range(start, DECIDE_LIMIT + 1):
        if -t_ppf(level, n - 1) * spread / math.sqrt(n) <= gap:
            return n - rounds
    return None


# the posterior of a row's (change, spread) after n rounds, on a fixed grid: the spread at
# these quantiles of its chi-square, the change at these normal quantiles given the spread
_SPREAD_QUANTILES = tuple((i + 0.5) / 8 for i in range(8))
_CHANGE_Z = tuple(normal_ppf((j + 0.5) / 16) for j in range(16))


def decide_probability(mean: float, spread: float, tolerance: float,
                       levels: Tuple[float, float], rounds: int, more: int) -> float:
    """Return the probability that `more` further rounds decide a row (its worse end inside
    the tolerance, or its test beyond it), averaged over what the rounds so far support: the
    true spread s^2 (n - 1) / chi2, the true change N(mean, spread^2 / n) (the reference
    prior's posterior), the rounds to come normal about it. levels: the one-sided levels of
    the tests within the tolerance and beyond it."""
    within_level, fail_level = levels
    n, total = rounds, rounds + more
    within_c = upper_critical(within_level, total - 1)
    fail_c = upper_critical(fail_level, total - 1)
    found = 0.0
    # normal_cdf(x) written out, 0.5 erfc(-x / sqrt 2), as are the terms the loop shares: a
    # row's rounds_to_go asks this some 15 times, 256 normal_cdf each (the same arithmetic)
    erfc, base, root_n = math.erfc, n * mean, math.sqrt(n)
    for q in _SPREAD_QUANTILES:
        sigma = spread * math.sqrt((n - 1) / chi2_ppf(q, n - 1))
        se, sd = sigma / math.sqrt(total), math.sqrt(more) * sigma / total
        within_end, fail_end = tolerance - within_c * se, fail_c * se
        for z in _CHANGE_Z:
            centre = (base + more * (mean + z * sigma / root_n)) / total
            found += (0.5 * erfc(-((within_end - centre) / sd) / SQRT_2)
                      + 0.5 * erfc(-((centre - tolerance - fail_end) / sd) / SQRT_2))
    if math.isnan(found):  # as normal_cdf refuses a NaN
        raise RouterLatencyError("x must not be NaN")
    return found / (len(_SPREAD_QUANTILES) * len(_CHANGE_Z))


def rounds_to_go(mean: float, spread: float, tolerance: float, within_level: float,
                 fail_level: float, rounds: int) -> Optional[int]:
    """Return the fewest further rounds that decide a row DECIDE_PROBABILITY of the time over
    what its rounds so far support (decide_probability); None past DECIDE_LIMIT rounds."""
    if spread == 0.0:
        return None if mean == tolerance else 1

    def decides(more: int) -> bool:
        return decide_probability(mean, spread, tolerance, (within_level, fail_level), rounds,
                                  more) >= DECIDE_PROBABILITY
    most = DECIDE_LIMIT - rounds
    if most < 1 or not decides(most):
        return None
    low, high = 0, 1  # decides(high); not decides(low) (0 rounds decide nothing more)
    while not decides(high):
        low, high = high, min(2 * high, most)
    while high - low > 1:  # the probability grows with the rounds: bisect
        middle = (low + high) // 2
        low, high = (low, middle) if decides(middle) else (middle, high)
    return high


def gate_critical(settings: GateSettings, rounds: int, level: float) -> float:
    """Return the critical one-sided t of a test at `level` on `rounds` rounds: the t
    quantile, or with --sequential the calibrated boundary of this look."""
    if settings.sequential_max is None:
        return upper_critical(level, rounds - 1)
    return look_critical(settings.sequential_max, level, rounds)


def crosses(statistic: float, critical: float) -> bool:
    """Return True when a t statistic reaches a critical value a look can reject at."""
    return math.isfinite(critical) and statistic >= critical


def upper_critical(level: float, df: float) -> float:
    """Return the critical t of a one-sided test at `level` on df degrees of freedom."""
    return -t_ppf(level, df)


def upper_p(test: OneSided) -> float:
    """Return the one-sided p-value of a test (0 at +inf, 1 at -inf)."""
    if math.isinf(test.statistic):
        return 0.0 if test.statistic > 0 else 1.0
    return t_cdf(-test.statistic, test.df)


def holm_step_down(tests: Sequence[OneSided], level: float,
                   critical: Callable[[float, float], float] = upper_critical) -> StepDown:
    """Return Holm's step-down over one-sided tests at family-wise `level`: the smallest
    p-value first (on one df, the largest t; with a df each, by upper_p), step k rejects when
    its test reaches critical(level / (m - k), df), and the first that does not stops it.
    The gate's rows and history's drifts and change points are judged by it; critical is the
    t quantile (upper_critical) or a --sequential look's boundary."""
    m = len(tests)
    one_df = len({t.df for t in tests}) <= 1
    order = sorted(range(m), key=lambda i: -tests[i].statistic if one_df else upper_p(tests[i]))
    rejected = [False] * m
    steps: List[float] = []  # each step's boundary only once reached (a sequential one costs)
    for step, index in enumerate(order):
        steps.append(critical(level / (m - step), tests[index].df))
        if not crosses(tests[index].statistic, steps[step]):
            break
        rejected[index] = True
    return StepDown(tuple(rejected), tuple(steps))


def gate_test(rows: Sequence[Row], settings: GateSettings, level: float) -> GateTest:
    """Return the gate's test of "worse than the tolerance": a composite one-sided t test on
    the mean of the gated rows' per-round log ratios at `level`, and Holm across the gated
    rows at `level` (family-wise 2 level), with the critical t of each.

    The rows of a round move together (a slow round is slow everywhere), so a correction
    made for independent tests alone would throw away the power the shared signal gives;
    the composite test is one test, so it needs no correction, and Holm names the rows.
    """
    gated = [r for r in rows if r.gated]
    if not gated:
        return GateTest(rows=0, effective_rows=0.0, composite=None, composite_p=None,
                        level=level, regressions=())
    n, tolerance, m = gated[0].rounds, settings.tolerance_log, len(gated)
    series = [r.worse_series for r in gated]
    tests = [OneSided(t_statistic(x, tolerance), n - 1) for x in series]
    step_down = holm_step_down(tests, level, lambda level_, df: gate_critical(settings, n, level_))
    composite = composite_log_ratios(series)
    critical = gate_critical(settings, n, level)
    spread = sample_spread(composite)
    detectable = tolerance + power_shift(critical, n - 1) * spread_bound(spread, n - 1) \
        / math.sqrt(n)
    return GateTest(
        rows=m, effective_rows=effective_rows(series) if m > 1 else 1.0,
        composite=mean_interval(composite),
        composite_p=t_test_p(composite, mu=tolerance, alternative="greater"), level=level,
        regressions=tuple((r.pass_name, r.metric) for r, worse in zip(gated, step_down.rejected)
                          if worse),
        composite_worse=crosses(t_statistic(composite, tolerance), critical),
        within_critical=critical, holm_criticals=step_down.criticals,
        # None: no spread, any change is found; inf: this look's boundary cannot reject
        composite_detectable_pct=None if spread == 0 else
        100 * math.expm1(detectable) if math.isfinite(detectable) else math.inf)


def look_of(settings: GateSettings, rounds: int) -> Optional[Look]:
    """Return the look that `rounds` rounds are of a --sequential plan; None without one. Its
    boundaries come from gate_critical."""
    if settings.sequential_max is None:
        return None
    return Look(rounds, settings.sequential_max)


def check_look(rounds: Rounds, settings: GateSettings) -> None:
    """Raise when the rounds go past the sequential plan's last look: more rounds than it
    allows is a new plan, whose error rates no boundary holds."""
    last = settings.sequential_max
    if last is not None and len(rounds.runs) > last:
        raise RouterLatencyError(
            f"{len(rounds.runs)} rounds, past the last look of --sequential {last}: a look beyond "
            f"the plan keeps no error rate; judge them as a fixed design (without "
            f"--sequential) or plan more rounds from the start")


def three_way_doubts(undecided: Sequence[Row], settings: GateSettings,
                     look: Optional[Look]) -> List[str]:
    """Return the default rule's doubts: every undecided gated row, and a last look that left
    any undecided (PASS needs every gated row shown within the tolerance)."""
    doubts = [undecided_text(r, settings) for r in undecided]
    if undecided and look is not None and look.last:
        doubts.append(f"the last look of the plan ({look.max_rounds} rounds) left "
                      f"{plural(len(undecided), 'gated row')} undecided")
    return doubts


def unless_worse_doubts(undecided: Sequence[Row], settings: GateSettings,
                        look: Optional[Look]) -> List[str]:
    """Return the doubts of --pass-unless-worse, the rule before the three-way gate: an
    undecided gated row at a --sequential look before the last, and with --strict one that
    could not detect the --max-mde change; else it passes."""
    doubts = []
    if look is not None and not look.last and undecided:
        doubts.append(f"not decided after {look.rounds} of at most {look.max_rounds} rounds: "
                      f"{plural(len(undecided), 'gated row')} open")
    if settings.strict:
        doubts += [f"{pass_title(r.pass_name)} {metric_title(r.metric)} inconclusive and could "
                   f"only detect {detectable_text(r)} (--max-mde {settings.target_pct:g})"
                   for r in undecided
                   if r.detectable_pct is None or r.detectable_pct > settings.target_pct]
    return doubts


def unless_worse_warnings(undecided: Sequence[Row], settings: GateSettings) -> List[Notice]:
    """Return a warning per undecided gated row that --pass-unless-worse passed: what it could
    detect, and the rounds the --max-mde change would need."""
    warnings = []
    for row in undecided:
        needed = BEYOND_LIMIT if row.rounds_needed is None else \
            f"about {row.rounds_needed}"
        warnings.append(Notice("inconclusive", f"warning: {pass_title(row.pass_name)} "
                               f"{metric_title(row.metric)} inconclusive: could only detect "
                               f"{detectable_text(row)}; {needed} rounds would be needed for "
                               f"{settings.target_pct:g}%"))
    return warnings


def no_warnings(undecided: Sequence[Row], settings: GateSettings) -> List[Notice]:
    """Return no warning: the default rule's reasons name every undecided gated row."""
    return []


THREE_WAY = GateRule("", "PASS when every gated row is shown within the tolerance, FAIL when one "
                     "is shown worse, INCONCLUSIVE otherwise", three_way_doubts, no_warnings)
PASS_UNLESS_WORSE = GateRule(
    "--pass-unless-worse", "--pass-unless-worse: PASS unless a gated row is shown worse than "
    "the tolerance; a PASS does not show that the rows lie within it", unless_worse_doubts,
    unless_worse_warnings)


def gate_outcome(rows: Sequence[Row], test: Optional[GateTest], failures: Sequence[str],
                 doubts: Sequence[str], settings: GateSettings,
                 look: Optional[Look]) -> GateOutcome:
    """Return the gate's outcome, three-way: its one rule.

    fail: a new side failed, erred beyond the base or changed a decision, or a gated row is
    shown worse than the tolerance (the composite test or Holm, family-wise 5%); else the
    settings' rule decides: by default pass when every gated row is shown within the
    tolerance (its worse end inside it: two one-sided tests at 2.5%, intersection-union),
    with no doubt, inconclusive for anything else (a failing base side, too few usable
    rounds, a gated row not decided either way); --pass-unless-worse passes unless it fails
    or has a doubt (unless_worse_doubts).
    """
    undecided = tuple(r for r in rows
                      if r.gated and word_status(r.verdict) == "inconclusive")
    reasons = list(failures)
    if test is not None:
        reasons += [f"{pass_title(p)} {metric_title(m)} is worse than the tolerance"
                    for p, m in test.regressions]
        if test.composite_worse and test.composite is not None:
            reasons.append(f"the {test.rows} gated rows together are "
                           f"{composite_text(test.composite)}, worse than the tolerance")
    if reasons:
        return outcome_of(reasons, (), undecided)
    futile = futility_text(undecided, sum(r.gated for r in rows), settings, look)
    outcome = outcome_of((), list(doubts) + settings.rule.doubts(undecided, settings, look)
                         + ([futile] if futile else []), undecided)
    return outcome._replace(futility=futile) if futile else outcome


def futility_text(undecided: Sequence[Row], gated: int, settings: GateSettings,
                  look: Optional[Look]) -> str:
    """Return why a --sequential look before the last stops for futility ("" where it goes
    on): the undecided gated rows that the rounds left would decide by the last look in under
    FUTILITY_PROBABILITY of what the rounds so far support (decide_probability at the last
    look's boundaries: within the tolerance, and Holm's first step over the `gated` rows)."""
    if look is None or look.last or not undecided:
        return ""
    last, level = look.max_rounds, settings.alpha / 2
    gated = max(1, gated)
    levels = (nominal_level(gate_critical(settings, last, level), last - 1),
              nominal_level(gate_critical(settings, last, level / gated), last - 1))
    futile = []
    for row in undecided:
        if row.judged is None:
            continue
        chance = decide_probability(row.judged.mean, row.spread, settings.tolerance_log, levels,
                                    look.rounds, last - look.rounds)
        if chance < FUTILITY_PROBABILITY:
            futile.append(f"{pass_title(row.pass_name)} {metric_title(row.metric)} in "
                          f"{chance:.0%}")
    if not futile:
        return ""
    # short: the script repeats it in its look line, a headline of about 200 characters
    return (f"futility: {plural(last - look.rounds, 'more round')} (of {last}) would decide "
            f"{', '.join(futile)} of runs, under {FUTILITY_PROBABILITY:.0%}")


def outcome_of(failures: Sequence[str], doubts: Sequence[str],
               undecided: Tuple[Row, ...] = ()) -> GateOutcome:
    """Return the status and exit code, once: fail (EXIT_GATE) when anything failed, with the
    failures as its reasons; else inconclusive (EXIT_INCONCLUSIVE) when anything leaves it
    open, with the doubts; else pass (EXIT_OK)."""
    if failures:
        return GateOutcome("fail", tuple(failures), EXIT_GATE, undecided)
    if doubts:
        return GateOutcome("inconclusive", tuple(doubts), EXIT_INCONCLUSIVE, undecided)
    return GateOutcome("pass", (), EXIT_OK, undecided)


def combined_exit(codes: Iterable[int]) -> int:
    """Return the exit code of several verdicts, by meaning (EXIT_PRECEDENCE): an error (2),
    else a FAIL (1), else undecided (3), else pass (0, also for none); a code outside them (a
    signal's) comes before all of them. outcome_of keeps the same order within one verdict:
    a failure before a doubt."""
    rank = {code: place for place, code in enumerate(EXIT_PRECEDENCE)}
    return min(codes, key=lambda code: rank.get(code, -1), default=EXIT_OK)


def gate_rows(rows: Sequence[Row], settings: GateSettings, failures: Sequence[str] = (),
              doubts: Sequence[str] = ()) -> GateJudgement:
    """Return the rows with the gate's words, its test, the look and the outcome: the whole
    rule applied to the rows of the used rounds (none: too few rounds).
    bench/gate_simulation.py applies it to synthetic rows through this same function."""
    if not rows:
        return GateJudgement((), None, None, gate_outcome([], None, failures, doubts, settings,
                                                          None))
    level, look = settings.alpha / 2, look_of(settings, rows[0].rounds)
    test = gate_test(rows, settings, level)
    judged = tuple(row_judged(r, settings, test.within_critical, test.holm_criticals[0],
                              (r.pass_name, r.metric) in test.regressions) if r.gated else r
                   for r in rows)
    return GateJudgement(judged, test, look,
                         gate_outcome(judged, test, failures, doubts, settings, look))


def more_rounds(outcome: GateOutcome) -> Optional[int]:
    """Return the further rounds that decide each undecided gated row DECIDE_PROBABILITY of
    the time over what the rounds so far support (the most any needs): the one "more rounds"
    figure of the undecided line, --plan and the JSON; None past 1,000 or when none is
    undecided."""
    counts = [r.rounds_to_go for r in outcome.undecided if r.rounds_to_go is not None]
    if not outcome.undecided or len(counts) < len(outcome.undecided):
        return None
    return max(counts)


def undecided_text(row: Row, settings: GateSettings) -> str:
    """Return why a gated row is undecided: how far its worse end reaches, and about how many
    more rounds would decide it DECIDE_PROBABILITY of the time over what the rounds so far
    support (rounds_to_go: the one "more rounds" figure, as the undecided line, the headline,
    --plan and the JSON give it)."""
    reach = ("its interval is unbounded on the worse side" if row.worse_end_pct is None
             else f"its worse end reaches {pct_text(row.worse_end_pct / 100)}")
    more = (f"{BEYOND_LIMIT} rounds would be needed" if row.rounds_to_go is None
            else f"about {plural(row.rounds_to_go, 'more round')} would decide it")
    return (f"{pass_title(row.pass_name)} {metric_title(row.metric)} undecided: {reach} "
            f"(tolerance {settings.tolerance_pct:g}%); {more}")


def composite_text(composite: Interval) -> str:
    """Return the gated rows' mean change in words, as the rows say theirs."""
    # the composite is a mean of worse-direction logs: its speedup is exp(-mean)
    return change_text(math.exp(-composite.mean), math.exp(-composite.high),
                       math.exp(-composite.low))


def detectable_text(row: Row) -> str:
    """Return what the row's test, as the gate applies it, finds 80% of the time."""
    if row.detectable_pct is not None:
        return detects_text(row.detectable_pct)
    # no spread finds any change; a look whose boundary cannot reject finds none
    return "any change" if row.spread == 0 else "none yet"


def detects_text(pct: float) -> str:
    """Return a "detects" figure as every output writes it: >= 24%, or past sense a bound."""
    return f"more than {1 + BOUND_PCT / 100:g}x" if pct > BOUND_PCT else f">= {pct:.0f}%"


def row_judged_interval(row: Row) -> Optional[Tuple[float, float, float]]:
    """Return the change and interval a row's word judges, as speedups (change_text's
    arguments: above 1 is better): the one interval every output shows; None: unjudged."""
    if row.judged is None:
        return None
    judged = row.judged
    return math.exp(-judged.mean), math.exp(-judged.high), math.exp(-judged.low)


def row_word(row: Row) -> str:
    """Return a row's word as every output shows it: its verdict, and "(Holm)" where the
    gate's correction for the gated rows, not the interval shown, left it undecided."""
    return f"{row.verdict} (Holm)" if row.held_by_holm else row.verdict


def missed_pct(outcome: GateOutcome) -> Optional[float]:
    """Return the largest slowdown, in percent, that a result which is not a FAIL could have
    missed: the farthest worse end of an undecided gated row (inf: one has no end); None
    where nothing was missed (a FAIL, or a PASS with every gated row decided)."""
    if outcome.status == "fail":
        return None
    if outcome.undecided:
        ends = [r.worse_end_pct for r in outcome.undecided]
        return math.inf if any(e is None for e in ends) else max(e for e in ends
                                                                   if e is not None)
    return math.inf if outcome.status == "inconclusive" else None


def missed_text(outcome: GateOutcome) -> str:
    """Return what a result that is not a FAIL could have missed, in words ("" if nothing):
    the first thing a CI summary of an undecided gate says."""
    missed = missed_pct(outcome)
    if missed is None:
        return ""
    if not math.isfinite(missed):
        return "it could have missed a slowdown of any size"
    farthest = max((r for r in outcome.undecided if r.worse_end_pct is not None),
                   key=lambda r: r.worse_end_pct or 0.0)
    return (f"it could have missed a slowdown of {slowdown_text(missed / 100)} "
            f"({pass_title(farthest.pass_name)} {metric_title(farthest.metric)})")
