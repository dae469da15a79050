"""``certlab selfcheck`` off its grid: its maxima are the grid's, it says so, and a denser grid stays within alpha/K.

selfcheck sweeps false PASS at the margin (candidate = baseline - delta) and false BLOCK under
no change over N = 20, 50, 100, 200, 500, 1000, 2000 per arm and baseline rates in steps of
0.05. Those are maxima over the grid, not over every design: with K = 2 it prints 0.005332 and
0.000004, while off the grid false PASS reaches 0.006249 (N = 1872) and false BLOCK 7.0e-6
(N = 18). Here the default rule is checked at every N from 1 to 1000, every 4th N to 2000, and
every baseline rate in steps of 0.01 (about 240,000 designs per K), and its worst value is compared with alpha/K and
with the bound the rule's construction gives, alpha/(2K) (each side errs only when one arm's
exact one-sided interval misses, at most alpha/(4K) each). The worst designs found are checked
against the rule's own ``plan``.

Newcombe's rule has no such guarantee: on every N from 1 to 300 it exceeds alpha/K only at a few
sizes below 20 per arm (0.069 at N = 3, K = 1), all off selfcheck's grid, which is why selfcheck
says what its grid is. docs/statistics.md states both findings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pytest
from certlab_clopper_pearson import rule as clopper_pearson
from certlab_newcombe import rule as newcombe
from numpy.typing import NDArray
from scipy import special

from certlab_core.testing import run_certlab

ALPHA, DELTA = 0.05, 0.10
STEP = 0.01
RATES = np.round(np.arange(0, 101) * STEP, 10)
SHIFT = round(DELTA / STEP)  # the candidate's rate at the margin is RATES[i - SHIFT]
GRID_SIZES = (20, 50, 100, 200, 500, 1000, 2000)
#: Every N per arm from 1 to 1000, then every 4th to 2000 (1,250 sizes): seconds, not minutes, on 2 cores.
DENSE_SIZES = (*range(1, 1001), *range(1004, 2001, 4))


# --------------------------------------------------------------------------- exact binomial masses, windowed


def windowed_pmf(n: int) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """For each rate of RATES: the first count of its window, the window's counts and their binomial masses.

    Each window spans 10 standard deviations and 40 counts either side of the mean, which leaves
    out far less than 1e-15 of the mass (the test checks each row sums to 1).
    """
    sd = np.sqrt(n * RATES * (1 - RATES))
    low = np.clip(np.floor(n * RATES - 10 * sd - 40), 0, n).astype(np.int64)
    high = np.clip(np.ceil(n * RATES + 10 * sd + 40), 0, n).astype(np.int64)
    counts = low[:, None] + np.arange(int((high - low).max()) + 1)[None, :]
    inside = counts <= high[:, None]
    counts = np.minimum(counts, n)
    k = np.arange(n + 1, dtype=np.float64)
    log_choose = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
    pmf = np.zeros(counts.shape)
    middle = slice(1, len(RATES) - 1)  # rates 0 and 1 are point masses
    kk = counts[middle].astype(np.float64)
    rate = RATES[middle, None]
    pmf[middle] = np.exp(log_choose[counts[middle]] + kk * np.log(rate) + (n - kk) * np.log1p(-rate))
    pmf = np.where(inside, pmf, 0.0)
    pmf[0] = 0.0
    pmf[0, 0] = 1.0  # rate 0: the window starts at count 0
    pmf[-1] = 0.0
    pmf[-1, int(np.argmax(counts[-1] == n))] = 1.0
    return low, counts, pmf


def _first_where(predicate_at: object, guess: NDArray[np.int64], n: int) -> NDArray[np.int64]:
    """The first count c (0..n+1) where a predicate monotone in c turns true, refined from a guess."""
    found = guess.copy()
    for _ in range(8):
        before = (found > 0) & predicate_at(np.maximum(found - 1, 0))  # type: ignore[operator]
        after = (found <= n) & ~predicate_at(np.minimum(found, n))  # type: ignore[operator]
        if not before.any() and not after.any():
            return found
        found = found - before + after
    raise AssertionError(f"N={n}: the region is not monotone in the candidate's count")


def clopper_pearson_rates(n: int, conditions: int) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
    """False PASS at the margin for each baseline rate of RATES from delta up, false BLOCK under no change for each
    rate, at N per arm; and how far the windowed masses' rows are from summing to 1.

    The rule's bounds are ``[L_c - U_b, U_c - L_b]`` from its per-arm limits (``rule.limits``, at
    ``rule.arm_alpha``): for each baseline count ``b``, PASS holds exactly for the candidate counts
    from a first one up (L_c never decreases), BLOCK for those below a last one; found with the
    rule's own float comparisons, so each region is the one ``decide`` gives.
    """
    first, counts, pmf = windowed_pmf(n)
    mass_error = float(np.abs(pmf.sum(axis=1) - 1.0).max())
    zeros = np.zeros((len(RATES), 1))
    at_least = np.concatenate([np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1], zeros], axis=1)  # P(C >= first + j)
    below = np.concatenate([zeros, np.cumsum(pmf, axis=1)], axis=1)  # P(C < first + j)
    width = pmf.shape[1]
    level = clopper_pearson.arm_alpha(ALPHA, conditions, 1)
    lower_limit, upper_limit = clopper_pearson.limits(np.arange(n + 1, dtype=np.float64), n, level)
    passes_from = _first_where(
        lambda c: (lower_limit[c] - upper_limit) > -DELTA,
        np.searchsorted(lower_limit, upper_limit - DELTA, side="right"),
        n,
    )
    blocks_below = _first_where(
        lambda c: ~((upper_limit[c] - lower_limit) < -DELTA),
        np.searchsorted(upper_limit, lower_limit - DELTA, side="left"),
        n,
    )
    baseline, candidate = slice(SHIFT, len(RATES)), slice(0, len(RATES) - SHIFT)
    where = np.clip(passes_from[counts[baseline]] - first[candidate, None], 0, width)
    false_pass = (pmf[baseline] * np.take_along_axis(at_least[candidate], where, axis=1)).sum(axis=1)
    where = np.clip(blocks_below[counts] - first[:, None], 0, width)
    false_block = (pmf * np.take_along_axis(below, where, axis=1)).sum(axis=1)
    return false_pass, false_block, mass_error


def clopper_pearson_sweep(sizes: Iterable[int], conditions: int) -> dict[str, tuple[float, int, float]]:
    """The worst false PASS at the margin and false BLOCK under no change over ``sizes`` and RATES.

    Each is ``(rate, N, baseline rate)``; ``mass_error`` is the worst window's distance from a total of 1.
    """
    worst = {"pass": (0.0, 0, 0.0), "block": (0.0, 0, 0.0), "mass_error": (0.0, 0, 0.0)}
    for n in sizes:
        false_pass, false_block, mass_error = clopper_pearson_rates(n, conditions)
        i, j = int(false_pass.argmax()), int(false_block.argmax())
        if false_pass[i] > worst["pass"][0]:
            worst["pass"] = (float(false_pass[i]), n, float(RATES[SHIFT + i]))
        if false_block[j] > worst["block"][0]:
            worst["block"] = (float(false_block[j]), n, float(RATES[j]))
        if mass_error > worst["mass_error"][0]:
            worst["mass_error"] = (mass_error, n, 0.0)
    return worst


def full_grid_rates(rule: object, n: int, conditions: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The same two rates from every (baseline, candidate) count pair the rule's own ``bounds_grid`` decides."""
    counts = np.arange(n + 1, dtype=np.float64)
    level = rule.arm_alpha(ALPHA, conditions)  # type: ignore[attr-defined]
    lower, upper = rule.bounds_grid(counts[:, None], n, counts[None, :], n, level)  # type: ignore[attr-defined]
    _first, window, pmf = windowed_pmf(n)
    full = np.zeros((len(RATES), n + 1))
    np.add.at(full, (np.arange(len(RATES))[:, None], window), pmf)  # a window's clipped counts carry no mass
    passes, blocks = (lower > -DELTA).astype(np.float64), (upper < -DELTA).astype(np.float64)
    false_pass = ((full[SHIFT:] @ passes) * full[: len(RATES) - SHIFT]).sum(axis=1)
    false_block = ((full @ blocks) * full).sum(axis=1)
    return false_pass, false_block


def selfcheck_sweep(conditions: int, rule: str = "clopper-pearson") -> dict[str, dict[str, float]]:
    done = run_certlab("selfcheck", "--rule", rule, "--conditions", str(conditions), "--json")
    assert done.returncode == 0, done.stderr
    sweep: dict[str, dict[str, float]] = json.loads(done.stdout)["sweep"]
    return sweep


# --------------------------------------------------------------------------- the claim printed


def test_selfcheck_says_its_maxima_are_over_its_grid_and_prints_the_grid() -> None:
    done = run_certlab("selfcheck", "--conditions", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "the grid: N per arm 20, 50, 100, 200, 500, 1000, 2000" in lines
    assert "  baseline rates for false PASS: 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, " \
           "0.75, 0.8, 0.85, 0.9, 0.95, 1" in lines  # fmt: skip
    assert (
        "false PASS at the margin (candidate = baseline - 0.1): at most 0.005332 over the grid "
        "(at N=2000, baseline 1); limit alpha/K = 0.025: holds"
    ) in lines
    assert (
        "false BLOCK under no change (candidate = baseline): at most 0.000004 over the grid "
        "(at N=20, baseline 0.5); limit alpha/K = 0.025: holds"
    ) in lines
    assert "designs off the grid (other N, other rates) are not checked here; see docs/statistics.md" in lines
    assert lines[-1] == "selfcheck: clopper-pearson holds its error rates at alpha 0.05 over the grid"
    sweep = json.loads(run_certlab("selfcheck", "--conditions", "2", "--json").stdout)["sweep"]
    assert sweep["sizes"] == list(GRID_SIZES) and sweep["false_pass_rates"][:2] == [0.1, 0.15]
    assert len(sweep["false_block_rates"]) == 21 and sweep["over"].startswith("the grid only")


# --------------------------------------------------------------------------- the default rule, densely


@pytest.mark.parametrize("conditions", [1, 2])
def test_clopper_pearson_stays_within_alpha_over_k_at_1250_sizes_to_2000_and_every_rate_in_steps_of_0_01(
    conditions: int,
) -> None:
    limit = ALPHA / conditions
    worst = clopper_pearson_sweep(DENSE_SIZES, conditions)
    assert worst["mass_error"][0] < 1e-10, worst["mass_error"]
    false_pass, n_pass, rate_pass = worst["pass"]
    false_block, n_block, rate_block = worst["block"]
    # within alpha/K, and within the construction's own bound, alpha/(2K)
    assert false_pass <= limit / 2 and false_block <= limit / 2, worst
    # the grid's maxima are not the maxima: off it, both rates are higher than selfcheck prints
    grid = selfcheck_sweep(conditions)
    assert false_pass > grid["false_pass_at_margin"]["rate"] and n_pass not in GRID_SIZES, (worst, grid)
    assert false_block > grid["false_block_no_change"]["rate"] and n_block not in GRID_SIZES, (worst, grid)
    # the worst designs, by the rule's own exact enumeration
    plan = clopper_pearson.plan
    assert plan(rate_pass, round(rate_pass - DELTA, 10), n_pass, ALPHA, DELTA, conditions)["PASS"] == pytest.approx(
        false_pass, rel=1e-9, abs=1e-15
    )
    assert plan(rate_block, rate_block, n_block, ALPHA, DELTA, conditions)["BLOCK"] == pytest.approx(
        false_block, rel=1e-9, abs=1e-15
    )
    if conditions == 2:  # the demo's K: the figures, off the grid
        assert (round(false_pass, 6), n_pass) == (0.006249, 1872)
        assert (f"{false_block:.1e}", n_block) == ("7.0e-06", 18)


@pytest.mark.parametrize("n", [3, 18, 218, 800, 1000])
def test_the_dense_sweep_gives_what_the_rules_own_bounds_and_plan_give(n: int) -> None:
    """Off and on the grid, K = 2: every rate equals the sum over the rule's own full grid of count pairs, and
    a few equal ``plan``'s exact enumeration."""
    false_pass, false_block, _error = clopper_pearson_rates(n, 2)
    full_pass, full_block = full_grid_rates(clopper_pearson, n, 2)
    np.testing.assert_allclose(false_pass, full_pass, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(false_block, full_block, rtol=1e-9, atol=1e-15)
    for baseline in (0.13, 0.5, 0.87, 1.0):
        row = round(baseline / STEP)
        planned = clopper_pearson.plan(baseline, round(baseline - DELTA, 10), n, ALPHA, DELTA, 2)
        assert false_pass[row - SHIFT] == pytest.approx(planned["PASS"], rel=1e-9, abs=1e-15), baseline
        planned = clopper_pearson.plan(baseline, baseline, n, ALPHA, DELTA, 2)
        assert false_block[row] == pytest.approx(planned["BLOCK"], rel=1e-9, abs=1e-15), baseline


# --------------------------------------------------------------------------- newcombe: a real finding, off the grid


def test_newcombe_exceeds_alpha_over_k_only_below_the_grid_at_every_n_to_300() -> None:
    exceeded: dict[int, list[tuple[int, float]]] = {1: [], 2: []}
    within_grid_span: dict[int, float] = {1: 0.0, 2: 0.0}
    for conditions in (1, 2):
        limit = ALPHA / conditions
        for n in range(1, 301):
            false_pass, false_block = full_grid_rates(newcombe, n, conditions)
            worst = float(max(false_pass.max(), false_block.max()))
            if worst > limit:
                exceeded[conditions].append((n, round(worst, 4)))
            elif n >= GRID_SIZES[0]:
                within_grid_span[conditions] = max(within_grid_span[conditions], worst)
    assert exceeded == {1: [(3, 0.0692)], 2: [(2, 0.041), (5, 0.0274)]}
    assert all(n < GRID_SIZES[0] for found in exceeded.values() for n, _rate in found)
    assert within_grid_span[1] <= ALPHA and within_grid_span[2] <= ALPHA / 2, within_grid_span
