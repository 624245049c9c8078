"""A gated row's noise in one nested model, each part with its confidence interval; pure.

On the log scale a round's change of a row is the mean over its K instances of log(new
statistic) minus the same for base. Its variance has three parts,

    spread^2(K, s) = rounds^2 + (instances^2 + within^2 / s) / K,

within: a pass statistic's own sampling noise inside one instance (narrowed by s, the
requests per pass against the runs'); instances: between the instances of one round; rounds:
what a round shares (time, node state). With one instance a round (K = 1) the last two are
not told apart: `rounds` is then both, and `instances` None.

The parts are estimated on paired differences, new minus base per sending (or per half of a
pass that sends the corpus once), so that a trend both sides share over their sendings (a
warm-up) and the prompts' own differences cancel, by a nested analysis of variance: each
mean square minus the one below it, a negative difference held at the boundary 0 (the
restricted maximum likelihood of a balanced design does the same) rather than capping one
part at the spread. Each part has a CONFIDENCE interval: the within part chi-square on its
degrees of freedom; a difference of mean squares Williams' interval (Burdick and Graybill,
Confidence Intervals on Variance Components, 1992, 3.3), with Satterthwaite's degrees of
freedom. A part whose interval reaches 0 is not told apart from the noise below it.
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Tuple

from .constants import NamedTuple
from .errors import RouterLatencyError
from .stats import chi2_ppf, f_ppf

__all__ = ["CONFIDENCE", "NoiseParts", "noise_parts", "Part"]


CONFIDENCE = 0.9  # two-sided, as "detects" plugs in a 90% bound of the spread
# "mostly between" or "mostly within" is said only where an F test shows it at this level a
# side: with the parts equal it is said in at most twice this share of pilots. At 2.5% a side,
# 5 rounds of between 4.24 beside within 2.41 (a warm-up) said "mostly within" in 5.4% +- 0.7%
# of the pilots where a sentence was printed; at 1%, 3.8% +- 0.8% (8,000 pilots,
# bench/gate_statistics.py split). Near-equal parts stay a guess at any level (limits).
LARGER_LEVEL = 0.01


class Part(NamedTuple):
    """One part of a row's noise: a log standard deviation and its interval."""
    value: float  # the estimate, 0 at the boundary
    low: float
    high: float
    df: float  # its degrees of freedom (Satterthwaite's for a difference; 0 at the boundary)
    told_apart: bool  # its interval stays above 0: the data tell it from the noise below


class NoiseParts(NamedTuple):
    """A row's noise: within one instance's pass, between instances of a round (None with
    one instance a round), and between rounds (with one instance: both, not told apart)."""
    within: Part
    instances: Optional[Part]
    rounds: Part
    # which part is shown the larger (LARGER_LEVEL a side, an F test of between^2 against
    # within^2): "between", "within", or "" where the data do not say
    larger: str = ""

    @property
    def between(self) -> float:
        """Between instances and rounds together, as one round of one instance a side has."""
        instances = 0.0 if self.instances is None else self.instances.value
        return math.hypot(instances, self.rounds.value)

    def spread(self, instances: int = 1, scale: float = 1.0) -> float:
        """Return the spread of one round's change with `instances` a side, at `scale` times
        the runs' requests per pass."""
        shared = 0.0 if self.instances is None else self.instances.value ** 2
        return math.sqrt(self.rounds.value ** 2
                         + (shared + self.within.value ** 2 / scale) / instances)

    def spread_high(self, instances: int = 1, scale: float = 1.0) -> float:
        """Return spread() at the upper ends of the parts' intervals: what a plan that must
        hold over pilots plans with."""
        shared = 0.0 if self.instances is None else self.instances.high ** 2
        return math.sqrt(self.rounds.high ** 2
                         + (shared + self.within.high ** 2 / scale) / instances)


def chi2_part(variance: float, df: float, confidence: float) -> Part:
    """Return a variance estimated on df degrees of freedom as a Part (its square root) with
    the chi-square interval."""
    tail = (1 - confidence) / 2
    if df <= 0:
        return Part(math.sqrt(variance), 0.0, math.inf, 0.0, False)
    low = df * variance / chi2_ppf(1 - tail, df)
    high = df * variance / chi2_ppf(tail, df)
    return Part(math.sqrt(variance), math.sqrt(low), math.sqrt(high), df, low > 0)


def difference_part(upper: float, df1: float, lower: float, df2: float,
                    confidence: float) -> Part:
    """Return the part theta1 - theta2 of two mean squares, `upper` (expecting the part plus
    `lower`'s) on df1 and `lower` on df2: its estimate held at 0, Williams' interval (each
    end at least 0; an empty one widened to the upper mean square's own bound),
    Satterthwaite's degrees of freedom."""
    tail = (1 - confidence) / 2
    estimate = max(0.0, upper - lower)
    if df1 <= 0:
        return Part(math.sqrt(estimate), 0.0, math.inf, 0.0, False)
    if df2 <= 0 or lower == 0.0:  # nothing below it: a chi-square interval of its own
        return chi2_part(estimate, df1, confidence)
    low = (upper - f_ppf(1 - tail, df1, df2) * lower) * df1 / chi2_ppf(1 - tail, df1)
    high = (upper - f_ppf(tail, df1, df2) * lower) * df1 / chi2_ppf(tail, df1)
    if high <= 0:  # Williams' interval is empty: the part is at most the whole upper one
        high = upper * df1 / chi2_ppf(tail, df1)
    df = estimate ** 2 / (upper ** 2 / df1 + lower ** 2 / df2) if estimate > 0 else 0.0
    return Part(math.sqrt(estimate), math.sqrt(max(0.0, low)), math.sqrt(max(0.0, high)), df,
                low > 0)


def larger_part(upper: float, df1: float, lower: float, df2: float) -> str:
    """Return which part of `upper` = between^2 + within^2 (on df1) the larger is, `lower`
    being within^2 (on df2): between^2 > within^2 exactly when upper > 2 within^2, so
    upper / (2 lower) is F on (df1, df2) at the boundary; "" where the test says neither."""
    if df1 <= 0 or df2 <= 0:
        return ""
    if lower == 0.0:
        return "between" if upper > 0 else ""
    ratio = upper / (2 * lower)
    if ratio > f_ppf(1 - LARGER_LEVEL, df1, df2):
        return "between"
    if ratio < f_ppf(LARGER_LEVEL, df1, df2):
        return "within"
    return ""


def mean_square(groups: List[List[float]]) -> Tuple[float, float]:
    """Return the pooled variance of values about their own group's mean and its df."""
    squares, df = 0.0, 0
    for group in groups:
        if len(group) < 2:
            continue
        centre = math.fsum(group) / len(group)
        squares += math.fsum((v - centre) ** 2 for v in group)
        df += len(group) - 1
    return (squares / df if df else 0.0), df


def noise_parts(table: Mapping[Tuple[int, int, int], float], *, top: Optional[float] = None,
                confidence: float = CONFIDENCE) -> NoiseParts:
    """Return a row's noise parts from its paired differences: table[(round, instance,
    sending)] is log(new) - log(base) of that sending's statistic (instances numbered within
    a round; sendings within an instance).

    top: the variance over rounds of the whole passes' change (the row's spread squared), in
    place of the variance of the rounds' mean differences, so that the parts add up to the
    spread the gate judges (the mean of a pass's sendings' statistics is not its statistic);
    it needs one instance a round."""
    cells: Dict[Tuple[int, int], List[float]] = {}
    for (round_, instance, _), value in sorted(table.items()):
        cells.setdefault((round_, instance), []).append(value)
    rounds = sorted({r for r, _ in cells})
    if len(rounds) < 2:
        raise RouterLatencyError("the noise split needs at least 2 rounds")
    # within: the sendings about their instance's mean, scaled to a whole pass (1 / sendings)
    per_sending, within_df = mean_square(list(cells.values()))
    scale = sum(1 / len(v) for v in cells.values()) / len(cells)
    within = chi2_part(per_sending * scale, within_df, confidence)
    means = {key: math.fsum(v) / len(v) for key, v in cells.items()}
    by_round = [[m for (r, _), m in means.items() if r == n] for n in rounds]
    instances_each = min(len(g) for g in by_round)
    round_means = [math.fsum(g) / len(g) for g in by_round]
    if instances_each < 2:
        if top is None:
            top, top_df = mean_square([round_means])
        else:
            top_df = len(rounds) - 1
        lower = within.value ** 2
        return NoiseParts(within, None, difference_part(top, top_df, lower, within_df,
                                                        confidence),
                          larger_part(top, top_df, lower, within_df))
    if top is not None:
        raise RouterLatencyError("top needs one instance a round")
    # instances: the instances' means about their round's, minus what within puts there
    between_instances, instances_df = mean_square(by_round)
    instances = difference_part(between_instances, instances_df, within.value ** 2,
                                within_df, confidence)
    over_rounds, rounds_df = mean_square([round_means])
    shared = difference_part(over_rounds, rounds_df, between_instances / instances_each,
                             instances_df, confidence)
    return NoiseParts(within, instances, shared)
