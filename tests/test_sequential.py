"""Tests of sequential.py: group-sequential boundaries: alpha spent per look, t criticals."""

import math
import random

import pytest

from router_latency.stats import normal_cdf, normal_ppf, t_cdf, t_ppf
from router_latency.sequential import group_sequential_levels, spending_alpha


def test_spending_alpha():
    # Lan-DeMets O'Brien-Fleming type at t = 1/2: 2 - 2 Phi(1.959964 * sqrt 2)
    assert spending_alpha(0.5) == pytest.approx(0.005574596680784305, rel=1e-9)
    assert spending_alpha(0.5, kind="pocock") == pytest.approx(
        0.05 * math.log(1 + (math.e - 1) / 2), rel=1e-12)
    for kind in ("obrien-fleming", "pocock"):
        for sided in (1, 2):
            assert spending_alpha(0.0, kind=kind, sided=sided) == 0.0
            assert spending_alpha(1.0, kind=kind, sided=sided) == pytest.approx(0.05, rel=1e-12)
            values = [spending_alpha(i / 10, kind=kind, sided=sided) for i in range(11)]
            assert values == sorted(values)
    # one-sided O'Brien-Fleming type: 1 - Phi(z_0.95 / sqrt t)
    assert spending_alpha(0.25, sided=1) == pytest.approx(
        normal_cdf(-1.6448536269514722 / 0.5), rel=1e-12)
    with pytest.raises(ValueError):
        spending_alpha(1.5)
    with pytest.raises(ValueError):
        spending_alpha(0.5, kind="haybittle")


LOOKS_3_TO_10 = list(range(3, 11))


def z_boundaries(bounds) -> list:
    """The z boundaries c_k behind the nominal levels p_k = 1 - Phi(c_k)."""
    return [-normal_ppf(b.nominal_alpha) if b.nominal_alpha > 0 else math.inf
            for b in bounds]


@pytest.mark.parametrize("kind", ["obrien-fleming", "pocock"])
@pytest.mark.parametrize("alpha", [0.025, 0.05, 0.1])
def test_group_sequential_single_look_is_the_fixed_test(kind, alpha):
    (b,) = group_sequential_levels([10], 10, alpha, kind=kind)
    assert b == (10, 1.0, b.spent_alpha, b.nominal_alpha, b.critical_t)
    assert b.spent_alpha == pytest.approx(alpha, rel=1e-12)
    assert b.nominal_alpha == pytest.approx(alpha, rel=1e-12)
    assert z_boundaries([b])[0] == pytest.approx(normal_ppf(1 - alpha), rel=1e-12)
    assert b.critical_t == pytest.approx(t_ppf(1 - alpha, 9), rel=1e-12)
    # a single look before max_rounds tests at what the spending function has spent by then
    (early,) = group_sequential_levels([4], 10, alpha, kind=kind)
    assert early.nominal_alpha == pytest.approx(
        spending_alpha(0.4, alpha, kind=kind, sided=2), rel=1e-12)


def test_group_sequential_lan_demets_two_looks():
    # O'Brien-Fleming-type spending, one-sided 0.025, looks at t = 1/2 and 1: the published
    # Lan-DeMets boundaries 2.963 and 1.969 (gsDesign sfLDOF, rpact asOF). The first is
    # closed form: alpha(1/2) = 2 - 2 Phi(z_0.9875 sqrt 2)
    bounds = group_sequential_levels([5, 10], 10, 0.025)
    c1, c2 = z_boundaries(bounds)
    assert c1 == pytest.approx(2.963, abs=5e-4)
    assert c2 == pytest.approx(1.969, abs=5e-4)
    assert bounds[0].spent_alpha == pytest.approx(2 * normal_cdf(-2.241402727604947 * 2 ** 0.5),
                                                  rel=1e-9)
    assert c1 == pytest.approx(-normal_ppf(bounds[0].spent_alpha), rel=1e-12)


def test_group_sequential_lan_demets_two_looks_by_monte_carlo():
    # independent check: simulate the two z statistics, Z_2 = sqrt(1/2) Z_1 + sqrt(1/2) E,
    # and count rejections at either look; 100000 draws give a standard error of 0.0005
    c1, c2 = z_boundaries(group_sequential_levels([5, 10], 10, 0.025))
    rng = random.Random(20240611)
    half = 0.5 ** 0.5
    trials, rejected = 100_000, 0
    for _ in range(trials):
        z1 = rng.gauss(0.0, 1.0)
        if z1 >= c1 or half * z1 + half * rng.gauss(0.0, 1.0) >= c2:
            rejected += 1
    assert abs(rejected / trials - 0.025) < 4 * (0.025 * 0.975 / trials) ** 0.5


@pytest.mark.parametrize("looks, max_rounds, alpha, kind, expected", [
    # rpact's unit tests (tests/testthat/test-f_design_group_sequential.R): critical values
    # of getDesignGroupSequential, one-sided; non-binding futility bounds leave them as
    # without futility. asP with informationRates c(0.4, 0.7), alpha 0.025
    ([4, 7], 10, 0.025, "pocock", [2.223875, 2.3050796]),
    # asP, informationRates c(0.35, 0.7, 1), alpha 0.13
    ([7, 14, 20], 20, 0.13, "pocock", [1.5446617, 1.4828682, 1.4620058]),
    # asOF, informationRates c(0.4, 0.75, 1) and c(0.4, 0.75, 0.85, 1), alpha 0.13
    ([8, 15, 20], 20, 0.13, "obrien-fleming", [2.1280732, 1.4368565, 1.2468994]),
    ([8, 15, 17, 20], 20, 0.13, "obrien-fleming", [2.1280732, 1.4368565, 1.422873, 1.2970881]),
])
def test_group_sequential_against_rpact(looks, max_rounds, alpha, kind, expected):
    bounds = group_sequential_levels(looks, max_rounds, alpha, kind=kind)
    assert z_boundaries(bounds) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("kind", ["obrien-fleming", "pocock"])
def test_group_sequential_monotone(kind):
    bounds = group_sequential_levels(LOOKS_3_TO_10, 10, 0.025, kind=kind)
    assert [b.n for b in bounds] == LOOKS_3_TO_10
    assert [b.information for b in bounds] == [n / 10 for n in LOOKS_3_TO_10]
    spent = [b.spent_alpha for b in bounds]
    assert spent == sorted(spent) and spent[-1] == pytest.approx(0.025, rel=1e-12)
    previous = 0.0
    for b, c in zip(bounds, z_boundaries(bounds)):
        increment = b.spent_alpha - previous
        previous = b.spent_alpha
        # the exact level lies between the union bound's and the cumulative alpha: the looks'
        # positive correlation lets each one test at more than its increment
        assert increment * (1 - 1e-9) <= b.nominal_alpha <= b.spent_alpha * (1 + 1e-9)
        # the t test at the nominal level: a heavier tail than z, so a larger critical value
        assert t_cdf(-b.critical_t, b.n - 1) == pytest.approx(b.nominal_alpha, rel=1e-9)
        assert b.critical_t > c
    assert bounds[0].nominal_alpha == pytest.approx(bounds[0].spent_alpha, rel=1e-12)
    assert all(b.nominal_alpha > b.spent_alpha - a.spent_alpha
               for a, b in zip(bounds, bounds[1:]))
    # later looks have more rounds, so the critical t falls; for O'Brien-Fleming the z
    # boundary falls too, while Pocock-type keeps it roughly flat after the first look
    critical = [b.critical_t for b in bounds]
    assert critical == sorted(critical, reverse=True)
    zs = z_boundaries(bounds)
    if kind == "obrien-fleming":
        assert zs == sorted(zs, reverse=True)
    else:
        assert max(zs[1:]) - min(zs[1:]) < 0.1
    # a larger alpha lowers every boundary
    looser = group_sequential_levels(LOOKS_3_TO_10, 10, 0.05, kind=kind)
    assert all(a.critical_t < b.critical_t for a, b in zip(looser, bounds))


def test_group_sequential_edge_cases():
    # stopping short of max_rounds spends alpha(t_K) < alpha
    bounds = group_sequential_levels([3, 5], 10, 0.025)
    assert bounds[-1].spent_alpha == pytest.approx(spending_alpha(0.5, 0.025, sided=2))
    # a first look so early that O'Brien-Fleming-type spending underflows cannot reject, and
    # the later looks are unaffected by it
    early = group_sequential_levels([2, 5000, 10000], 10000, 0.025)
    assert early[0].spent_alpha == 0.0 and early[0].nominal_alpha == 0.0
    assert early[0].critical_t == math.inf
    assert z_boundaries(early[1:]) == pytest.approx(
        z_boundaries(group_sequential_levels([5, 10], 10, 0.025)), abs=1e-6)
    # unequal spacing, with steps of different grids differing by powers of 2
    bounds = group_sequential_levels([10, 11, 50, 51, 100], 100, 0.1)
    assert bounds[-1].spent_alpha == pytest.approx(0.1, rel=1e-12)
    assert all(b.critical_t > 0 for b in bounds)


@pytest.mark.parametrize("call", [
    lambda: group_sequential_levels([], 10, 0.025),
    lambda: group_sequential_levels([3, 3], 10, 0.025),
    lambda: group_sequential_levels([1, 5], 10, 0.025),
    lambda: group_sequential_levels([3, 11], 10, 0.025),
    lambda: group_sequential_levels([3.0, 5], 10, 0.025),
    lambda: group_sequential_levels(5, 10, 0.025),
    lambda: group_sequential_levels([3, 5], None, 0.025),
    lambda: group_sequential_levels([3, 5], 10.0, 0.025),
    lambda: group_sequential_levels([3, 5], 10, 0.0),
    lambda: group_sequential_levels([3, 5], 10, 1.0),
    lambda: group_sequential_levels([3, 5], 10, 0.025, kind="haybittle"),
])
def test_group_sequential_bad_input(call):
    with pytest.raises(ValueError):
        call()
