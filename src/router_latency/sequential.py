"""Group-sequential boundaries: how much of the error rate each look of a sequential run may
spend (O'Brien-Fleming or Pocock), the boundaries that spend it, and the Student t criticals
for looks at every round simulated once from fixed seeds; pure functions, no I/O."""

from __future__ import annotations

import functools
import math
import operator
from typing import Callable, Iterator, Sequence, Tuple, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only, never imported when run
    import array

from .constants import MAX_PLAN_ROUNDS, MIN_ROUNDS, NamedTuple
from .errors import RouterLatencyError
from .stats import (checked_list, checked_probability, checked_whole, normal_cdf, normal_ppf,
                    SQRT_2, SQRT_2PI, t_ppf)

__all__ = ["look_critical", "MAX_SEQUENTIAL_ROUNDS"]


class Boundary(NamedTuple):
    """One look of a group-sequential design."""
    n: int  # rounds at this look
    information: float  # information fraction n / max_rounds
    spent_alpha: float  # cumulative alpha spent up to and including this look
    nominal_alpha: float  # level of the ordinary t test to use at this look
    critical_t: float  # |t| above which that test rejects (sided as the design)


_SPENDING_KINDS = ("obrien-fleming", "pocock")


def _looks(looks, max_rounds) -> tuple[list[int], int]:
    """Return looks as a list of strictly increasing round counts >= 2, and max_rounds.

    max_rounds None means the last look; a look beyond max_rounds is refused.
    """
    looks = checked_list(looks, "looks (whole numbers)")
    if not looks:
        raise RouterLatencyError("looks must hold at least one look")
    for i, n in enumerate(looks):
        checked_whole(n, f"looks[{i}]", 2)  # a t test needs 2 rounds
        if i and n <= looks[i - 1]:
            raise RouterLatencyError(f"looks must be strictly increasing, got {looks!r}")
    if max_rounds is None:
        max_rounds = looks[-1]
    max_rounds = checked_whole(max_rounds, "max_rounds", 2)
    if looks[-1] > max_rounds:
        raise RouterLatencyError(f"the last look ({looks[-1]}) exceeds max_rounds ({max_rounds})")
    return looks, max_rounds


def spending_alpha(information_fraction: float, alpha: float = 0.05, *,
                   kind: str = "obrien-fleming", sided: int = 2) -> float:
    """Return the cumulative type-I error spent at the given information fraction.

    Lan-DeMets spending functions on t in [0, 1], both 0 at t = 0 and alpha at t = 1:
    'obrien-fleming' (O'Brien-Fleming-type) alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))
    for a two-sided design and 1 - Phi(z_{1-alpha} / sqrt(t)) for a one-sided one, spending
    almost nothing early; 'pocock' (Pocock-type) alpha(t) = alpha ln(1 + (e - 1) t), spending
    evenly on the log scale, for either sidedness.
    """
    t = checked_probability(information_fraction, "information_fraction", closed=True)
    alpha = checked_probability(alpha, "alpha")
    if kind not in _SPENDING_KINDS:
        raise RouterLatencyError(f"kind must be one of {', '.join(_SPENDING_KINDS)}, got {kind!r}")
    if sided not in (1, 2):
        raise RouterLatencyError(f"sided must be 1 or 2, got {sided!r}")
    if t == 0.0:
        return 0.0
    if kind == "pocock":
        return alpha * math.log1p((math.e - 1.0) * t)
    z = normal_ppf(1.0 - alpha / sided)
    # Phi of the negated argument: 1 - Phi(z / sqrt(t)) would cancel for small t
    return sided * normal_cdf(-z / math.sqrt(t))


_GS_WIDTH = 8.0


_GS_STEPS_PER_SD = 8


_GS_BISECTIONS = 200  # a cap only: the bracket is narrow and halves to 1e-10 in ~35 steps


# An increment below this is finer than the grid's truncation error can resolve; such a look
# gets the conservative end of its bracket instead (it is a p level under 1e-12 either way)
_GS_TINY_INCREMENT = 1e-12


class _GsGrid(NamedTuple):
    """The sub-density of the score at one look, on its Simpson grid: points
    top - (m - i) * step for i = 0..m, weighted[i] the Simpson weight times the sub-density
    at point i."""
    top: float
    m: int  # intervals, even
    step: float
    weighted: Sequence[float] = ()


def _gs_z_boundaries(times: Sequence[float], spent: Sequence[float]) -> list[float]:
    """Return the z boundaries c_k that spend exactly spent[k] - spent[k-1] at look k.

    times are increasing information fractions in (0, 1], spent the spending function at
    them. Under H0 with independent increments, P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1},
    Z_k >= c_k) equals the increment; math.inf marks a look whose increment is 0.
    """
    sds = [math.sqrt(times[0])] + [math.sqrt(b - a) for a, b in zip(times, times[1:])]
    wanted = [min(a, b) / _GS_STEPS_PER_SD for a, b in zip(sds, sds[1:])]
    # every step is the finest one times a power of 2: consecutive grids then share a lattice
    # up to a shift, so the transition kernel between them is a function of the lag alone and
    # takes O(m) exponentials instead of O(m^2); a step at most halves what accuracy needs,
    # while one step for all would let a single close pair of looks refine every grid
    finest = min(wanted, default=1.0)
    steps = [finest * 2.0 ** math.floor(math.log2(w / finest) + 1e-9) for w in wanted]
    bounds = []
    grid = _GsGrid(0.0, 0, 1.0)  # the previous look's
    spent_before = 0.0
    for k, (t, sd) in enumerate(zip(times, sds)):
        target = spent[k] - spent_before
        spent_before = spent[k]
        root_t = math.sqrt(t)
        if target <= 0.0:
            c = math.inf  # nothing to spend: the look cannot reject
        elif k == 0 or target < _GS_TINY_INCREMENT:
            # exact at the first look; for a tiny increment the conservative bracket end
            c = -normal_ppf(target)
        else:
            c = _gs_solve(grid, target, -normal_ppf(spent[k]), -normal_ppf(target), root_t, sd)
        bounds.append(c)
        if k + 1 == len(times):
            break
        # the sub-density of W_k on its continuation region, for the next look
        new_step = steps[k]
        new_top = min(c, _GS_WIDTH) * root_t
        # (at least one panel: only an alpha within 1e-15 of 1 puts c below the grid)
        new_m = max(2, math.ceil((new_top + _GS_WIDTH * root_t) / new_step))
        new_m += new_m % 2  # Simpson needs an even number of intervals
        if k == 0:
            density = [math.exp(-0.5 * ((new_top - (new_m - j) * new_step) / root_t) ** 2)
                       / (SQRT_2PI * root_t) for j in range(new_m + 1)]
        else:
            density = _gs_propagate(grid, _GsGrid(new_top, new_m, new_step), sd)
        third = new_step / 3.0
        weights = [2.0 * third if j % 2 == 0 else 4.0 * third for j in range(new_m + 1)]
        weights[0] = weights[-1] = third
        grid = _GsGrid(new_top, new_m, new_step, [w * f for w, f in zip(weights, density)])
    return bounds


def _gs_solve(grid: _GsGrid, target: float, low: float, high: float, root_t: float,
              sd: float) -> float:
    """Return the c in [low, high] with P(continue so far, Z_k >= c) = target, by bisection.

    The crossing probability is the previous look's weighted sub-density, on `grid`,
    integrated against the upper tail of the increment, N(0, sd^2), beyond
    c sqrt(t_k) = c root_t.
    """
    top, m, step, weighted = grid
    # the bracket is exact: P(Z_k >= c) - P(rejected before) <= crossing <= P(Z_k >= c), so
    # c lies between the quantiles of the cumulative and of the incremental alpha
    scale = 1.0 / (sd * SQRT_2)
    # points more than _GS_WIDTH sd of the increment below the bracket add nothing
    first = max(0, math.ceil(m - (top - low * root_t + _GS_WIDTH * sd) / step))
    points = [top - (m - i) * step for i in range(first, m + 1)]
    masses = weighted[first:]
    for _ in range(_GS_BISECTIONS):
        mid = 0.5 * (low + high)
        edge = mid * root_t
        crossing = 0.5 * sum(g * math.erfc((edge - s) * scale) for g, s in zip(masses, points))
        if crossing > target:
            low = mid
        else:
            high = mid
        if high - low <= 1e-10 * max(1.0, abs(mid)):
            break
    return 0.5 * (low + high)


def _gs_propagate(grid: _GsGrid, new: _GsGrid, sd: float) -> list[float]:
    """Return the sub-density of the score at the points of the next grid, `new` (its
    weights are not read).

    It is the previous grid's weighted sub-density pushed through the normal transition
    kernel N(0, sd^2) of the increment. One step divides the other by a power of 2.
    """
    top, m, step, weighted = grid
    new_top, new_m, new_step = new.top, new.m, new.step
    fine = min(step, new_step)
    ratio, new_ratio = round(step / fine), round(new_step / fine)
    # x_j - s_i = shift + lag * fine with the whole-number lag
    # (m - i) * ratio - (new_m - j) * new_ratio, so the kernel is tabulated once per lag
    shift = new_top - top
    reach = _GS_WIDTH * sd
    lag_low = math.ceil((-reach - shift) / fine)
    lag_high = math.floor((reach - shift) / fine)
    half_precision = 0.5 / (sd * sd)
    # from the highest lag down, so that increasing i, whose lag falls by ratio, walks
    # forward through the table
    kernel = [math.exp(-half_precision * (shift + lag * fine) ** 2)
              for lag in range(lag_high, lag_low - 1, -1)]
    norm = 1.0 / (SQRT_2PI * sd)
    density = []
    for j in range(new_m + 1):
        base = m * ratio - (new_m - j) * new_ratio  # the lag at i = 0
        low = max(0, -((lag_high - base) // ratio))  # ceil((base - lag_high) / ratio)
        high = min(m, (base - lag_low) // ratio)
        if low > high:
            density.append(0.0)
            continue
        first = lag_high - base + low * ratio  # the table index of i = low
        density.append(norm * sum(map(operator.mul, weighted[low:high + 1],
                                      kernel[first:first + (high - low) * ratio + 1:ratio])))
    return density


def group_sequential_levels(looks: Sequence[int], max_rounds: int, alpha: float, *,
                            kind: str = "obrien-fleming") -> list[Boundary]:
    """Return a Boundary per look of an exact one-sided group-sequential design.

    The test rejects only for "worse" (a large positive t). Information fractions are
    t_k = n_k / max_rounds. The z boundaries c_k of the cumulative z statistic, a Brownian
    motion with independent increments under H0, solve

        P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = alpha(t_k) - alpha(t_{k-1}),

    by the recursive numerical integration of Armitage, McPherson and Rowe (Jennison and
    Turnbull, Group Sequential Methods, ch. 19): the sub-density of the score on a Simpson
    grid cut at 8 sd, carried from look to look by the normal transition kernel, with each
    c_k found by bisection. Spending functions (Lan-DeMets, one-sided level alpha):
    'obrien-fleming' alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)), as gsDesign's sfLDOF and
    rpact's asOF, and 'pocock' alpha(t) = alpha ln(1 + (e - 1) t).

    Each Boundary holds spent_alpha = alpha(t_k), nominal_alpha = p_k = 1 - Phi(c_k), the
    exact level of a z test at look k, and critical_t = t_{1-p_k, n_k-1}: the t test at the
    same nominal level, the usual approximation when the spread is estimated; reject at look
    k when t > critical_t. A look whose increment is 0 gets p_k 0 and critical_t inf. Unlike
    testing each look alone at its increment alpha(t_k) - alpha(t_{k-1}) (a union bound,
    which spends at most alpha), this spends alpha(t_K) exactly for z tests; for t tests
    it is an approximation, not a bound,
    and with few rounds it runs over: for looks at n = 3..10 of 10 and normal data, the
    false-rejection rate is about 0.029 for alpha 0.025 and 0.057 for 0.05 (O'Brien-Fleming
    type; Pocock type slightly more), against 0.025 and 0.050 for the z boundaries.
    """
    max_rounds = checked_whole(max_rounds, "max_rounds", 2)  # required: no default to the last look
    looks, max_rounds = _looks(looks, max_rounds)
    alpha = checked_probability(alpha, "alpha")
    if kind not in _SPENDING_KINDS:
        raise RouterLatencyError(f"kind must be one of {', '.join(_SPENDING_KINDS)}, got {kind!r}")
    times = [n / max_rounds for n in looks]
    # spending_alpha's two-sided O'Brien-Fleming form at level alpha is the Lan-DeMets
    # one-sided function of the group-sequential literature (its sided=1 form,
    # 1 - Phi(z_{1-alpha} / sqrt(t)), is a different function that spends more early);
    # Pocock-type spending does not depend on the sidedness
    spent = [spending_alpha(t, alpha, kind=kind, sided=2) for t in times]
    boundaries = []
    for n, t, cumulative, c in zip(looks, times, spent, _gs_z_boundaries(times, spent)):
        nominal = normal_cdf(-c)  # Phi(-c) rather than 1 - Phi(c): c is often 3 or more
        # from the lower tail: 1 - nominal rounds away the small early levels
        critical = -t_ppf(nominal, n - 1) if nominal > 0 else math.inf
        boundaries.append(Boundary(n, t, cumulative, nominal, critical))
    return boundaries


SEQUENTIAL_PATHS = 65536  # simulated null paths (and their mirror images)


SEQUENTIAL_SEED = 17  # fixed, so every run on every machine gets the same boundaries


# the calibration's own error on fresh paths is about +-4% of the level (+0.12 points at 2.5%
# for 20 looks): the boundaries spend this much less, so that the rate stays at its level
SEQUENTIAL_MARGIN = 0.04


# the most rounds a sequential plan may run: as many as the plan proposes (rounds --plan plans
# at most MAX_PLAN_ROUNDS), so that every plan printed can be run by --until-decided
MAX_SEQUENTIAL_ROUNDS = MAX_PLAN_ROUNDS


# a plan of at most this many rounds looks after every round from the third; a longer one
# looks this many times, spread evenly (its paths cost about 0.04 s of CPU per look to simulate)
MAX_LOOKS = 40


def sequential_looks(max_rounds: int, *, first: int = MIN_ROUNDS) -> Tuple[int, ...]:
    """Return the rounds after which a sequential plan of at most max_rounds rounds looks:
    every round from `first` up to MAX_LOOKS rounds; beyond, look k of MAX_LOOKS after
    ceil(max_rounds k / MAX_LOOKS) rounds (at least `first`). run_rounds.sh computes the same
    rounds (its sequential_looks)."""
    max_rounds = checked_whole(max_rounds, "max_rounds", first)
    if max_rounds <= MAX_LOOKS:
        return tuple(range(first, max_rounds + 1))
    return tuple(sorted({max(first, -(-max_rounds * k // MAX_LOOKS))
                         for k in range(1, MAX_LOOKS + 1)}))


@functools.lru_cache(maxsize=2)
def _null_t_paths(first: int, max_rounds: int) -> tuple[array.array[float], ...]:
    """Return, per look of sequential_looks(max_rounds, first=first), the one-sample t
    statistics of SEQUENTIAL_PATHS standard normal sequences at that look's rounds (an array
    per look)."""
    if max_rounds > MAX_LOOKS:
        return _null_t_blocks(sequential_looks(max_rounds, first=first))
    return _null_t_rounds(first, max_rounds)


# The two simulations below draw from random.Random(SEQUENTIAL_SEED) as its gauss and
# gammavariate would, written out in the loop (the same draws of random() in the same order,
# the same arithmetic: Python 3.9 to 3.13 have the same two methods), since two calls a look
# were half of a plan's CPU; tests/test_gate.py checks them against the methods themselves.


def _normals(draw: Callable[[], float]) -> Iterator[float]:
    """Yield standard normals as random.gauss makes them from draw (random.random): a pair of
    Box-Muller's from two draws, the second kept for the next call, so that the draws of
    random() between two normals (gammavariate's) come in the same order as with gauss."""
    sqrt, log, cos, sin, two_pi = math.sqrt, math.log, math.cos, math.sin, 2.0 * math.pi
    while True:
        turn = draw() * two_pi
        radius = sqrt(-2.0 * log(1.0 - draw()))
        yield cos(turn) * radius
        yield sin(turn) * radius


def _null_t_rounds(first: int, max_rounds: int, paths: int = SEQUENTIAL_PATHS
                   ) -> tuple[array.array[float], ...]:
    """Return _null_t_paths's columns drawn a round at a time, for `paths` paths."""
    import array
    import random
    normal = _normals(random.Random(SEQUENTIAL_SEED).random).__next__
    sqrt = math.sqrt
    columns = tuple(array.array("d") for _ in range(first, max_rounds + 1))
    # per round: i, as a float, i (i - 1) for its t (a whole number: exact as a float), and
    # where its t goes (None before the first look)
    steps = [(float(i), float(i * (i - 1)), columns[i - first].append if i >= first else None)
             for i in range(1, max_rounds + 1)]
    for _ in range(paths):
        mean = m2 = 0.0
        for i, pairs, append in steps:
            x = 0.0 + normal()  # gauss(0.0, 1.0) returns 0.0 + z * 1.0
            delta = x - mean
            mean += delta / i  # Welford: one stable pass, as the t statistic needs per look
            m2 += delta * (x - mean)
            if append is not None:
                append(mean * sqrt(pairs / m2))
    return columns


def _null_t_blocks(looks: Sequence[int], paths: int = SEQUENTIAL_PATHS
                   ) -> tuple[array.array[float], ...]:
    """Return _null_t_paths's columns for looks some rounds apart, drawing each block of
    rounds between two looks whole: the mean of k standard normals is N(0, 1/k) and their
    squared deviations from it sum to a chi-square on k - 1 degrees of freedom (twice a
    gamma of shape (k - 1) / 2), independent of that mean, and Chan's merge adds a block to
    the running mean and sum of squares exactly. Two draws a look, not one a round."""
    import array
    import random
    draw = random.Random(SEQUENTIAL_SEED).random
    normal = _normals(draw).__next__
    sqrt, log, exp = math.sqrt, math.log, math.exp
    magic = 1.0 + math.log(4.5)
    columns = tuple(array.array("d") for _ in looks)
    steps = _block_steps(looks, columns)
    for _ in range(paths):
        mean = m2 = 0.0
        for spread, method, shape, one, two, three, n, size, total, pairs, append in steps:
            block_mean = 0.0 + normal() * spread  # gauss(0.0, spread)
            # block_m2 = 2.0 * gammavariate(shape, 1.0) (its x * 1.0 is x)
            if method == 1:
                block_m2 = 2.0 * -log(1.0 - draw())
            elif method == 3:
                while True:
                    u1 = draw()
                    if not 1e-7 < u1 < 0.9999999:
                        continue
                    u2 = 1.0 - draw()
                    v = log(u1 / (1.0 - u1)) / one
                    x = shape * exp(v)
                    w = u1 * u1 * u2
                    r = two + three * v - x
                    if r + magic - 4.5 * w >= 0.0 or r >= log(w):
                        break
                block_m2 = 2.0 * x
            elif method == 2:
                while True:
                    p = one * draw()
                    if p <= 1.0:
                        x = p ** two
                        if draw() <= exp(-x):
                            break
                    else:
                        x = -log((one - p) / shape)
                        if draw() <= x ** three:
                            break
                block_m2 = 2.0 * x
            else:
                block_m2 = 0.0
            delta = block_mean - mean
            mean += delta * size / total
            m2 += block_m2 + delta * delta * n * size / total
            append(mean * sqrt(pairs / m2))
    return columns


# a look's block for _null_t_blocks's loop (a plain tuple: the loop unpacks it 2.6 million times)
_BlockStep = Tuple[float, int, float, float, float, float, float, float, float, float,
                   Callable[[float], None]]


def _block_steps(looks: Sequence[int], columns: Sequence[array.array[float]]
                 ) -> list[_BlockStep]:
    """Return, per look, what _null_t_blocks's loop needs of its block: the spread of its
    mean, gammavariate(shape, 1.0)'s method for its sum of squares, shape and three
    constants, Chan's merge's rounds before, in and after the block and n (n - 1) (whole
    numbers, exact as floats), and where its t goes."""
    steps: list[_BlockStep] = []
    before = 0
    for look, column in zip(looks, columns):
        size = look - before
        shape = 0.5 * (size - 1)
        # none for a block of one round; the exponential at shape 1; below 1 Kennedy and
        # Gentle's GS with b, 1 / shape and shape - 1; above, Cheng's with sqrt(2 shape - 1),
        # shape - log 4 and shape + that root
        if size == 1:
            method, one, two, three = 0, 0.0, 0.0, 0.0
        elif shape == 1.0:
            method, one, two, three = 1, 0.0, 0.0, 0.0
        elif shape < 1.0:
            method, one, two, three = 2, (math.e + shape) / math.e, 1.0 / shape, shape - 1.0
        else:
            root = math.sqrt(2.0 * shape - 1.0)
            method, one, two, three = 3, root, shape - math.log(4.0), shape + root
        steps.append((1.0 / math.sqrt(size), method, shape, one, two, three, float(before),
                      float(size), float(look), float(look * (look - 1)), column.append))
        before = look
    return steps


def _highest(column: Sequence[float], count: int, gone: set[int]) -> list[tuple[float, int]]:
    """Return the `count` highest (t, path) of the paths not in `gone`, highest first, as
    heapq.nlargest would: path i < len(column) has t column[i], its mirror image i + len(column)
    has -column[i]; equal t go by the higher path.

    Only the paths at or above a cut are sorted: one well below the count + len(gone)-th
    highest |t| of every 8th path, which leaves a few more than `count` paths above it; where
    it leaves too few, every path."""
    half = len(column)
    sample = sorted(map(abs, column[::8]), reverse=True)
    place = 2 * (count + len(gone)) // 8 + 16
    for cut in (sample[place] if place < len(sample) else -math.inf, -math.inf):
        top = [(t, i) for i, t in enumerate(column) if t >= cut and i not in gone]
        top += [(-t, i + half) for i, t in enumerate(column) if -t >= cut and i + half not in gone]
        if len(top) >= count:
            break
    top.sort(reverse=True)
    return top[:count]


@functools.lru_cache(maxsize=256)
def sequential_t_criticals(max_rounds: int, alpha: float, *,
                           first: int = MIN_ROUNDS) -> tuple[float, ...]:
    """Return the critical one-sided t values of a group-sequential t test, one per look of
    sequential_looks(max_rounds, first=first): reject "mean <= 0" at the first look where
    t >= its value.

    The z boundaries of group_sequential_levels, turned into t quantiles, run over their
    level at 2 to 9 degrees of freedom (about 2.9% for 2.5%). These are calibrated for t
    itself: the spending function (O'Brien-Fleming type, as there) says how much of alpha
    the looks up to k may spend, less SEQUENTIAL_MARGIN of it, and c_k is set so that that
    share of the simulated null paths (SEQUENTIAL_PATHS and their mirror images), counting
    those that crossed an earlier look, has crossed by look k. The t statistic of normal
    data does not depend on its scale, so one set of paths serves every spread. A look whose
    share is under one path cannot reject (inf). docs/gate.md gives the rates achieved on
    fresh paths.
    """
    max_rounds = checked_whole(max_rounds, "max_rounds", first)
    if max_rounds > MAX_SEQUENTIAL_ROUNDS:
        raise RouterLatencyError(f"a sequential plan of at most {MAX_SEQUENTIAL_ROUNDS:,} "
                                 f"rounds, got {max_rounds:,}")
    alpha = checked_probability(alpha, "alpha")
    columns = _null_t_paths(first, max_rounds)
    paths = 2 * SEQUENTIAL_PATHS  # each path and its mirror image: t is odd in the data
    gone: set[int] = set()
    crossed, criticals = 0, []
    for n, column in zip(sequential_looks(max_rounds, first=first), columns):
        spent = spending_alpha(n / max_rounds, alpha, kind="obrien-fleming", sided=2)
        share = math.floor(spent * (1 - SEQUENTIAL_MARGIN) * paths) - crossed
        if share <= 0:
            criticals.append(math.inf)
            continue
        top = _highest(column, share + 1, gone)
        criticals.append(0.5 * (top[share - 1][0] + top[share][0]))
        gone.update(i for _, i in top[:share])
        crossed += share
    return tuple(criticals)


def look_critical(max_rounds: int, alpha: float, rounds: int) -> float:
    """Return the critical one-sided t of a sequential plan's look after `rounds` rounds;
    inf (it cannot reject) where the plan takes no look."""
    looks = sequential_looks(max_rounds)
    if rounds not in looks:
        return math.inf
    return sequential_t_criticals(max_rounds, alpha)[looks.index(rounds)]
