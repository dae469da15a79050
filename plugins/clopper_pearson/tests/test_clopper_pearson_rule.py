"""The clopper-pearson rule: known values, scipy's beta quantiles, exact planning with looks, and its plugin."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from certlab_clopper_pearson import rule
from scipy import stats

from certlab_core._runtime.registry import discover
from certlab_core.plugin.errors import UsageError
from certlab_core.sdk.looks import look_sizes
from certlab_core.testing import RuleConformance
from certlab_core.testing.rule_checks import (
    cached_verdicts,
)

# --------------------------------------------------------------------------- known values


def test_the_issue_example_blocks_with_the_published_bounds() -> None:
    bounds = rule.decide(200, 200, 130, 200)
    assert (round(bounds.lower, 4), round(bounds.upper, 4)) == (-0.4304, -0.2537)
    assert bounds.verdict == "BLOCK"


def test_two_equal_arms_at_080_with_200_per_arm_pass_with_probability_0218() -> None:
    chances = rule.plan(0.80, 0.80, 200)
    assert round(chances["PASS"], 3) == 0.218


@pytest.mark.parametrize(
    ("successes", "n", "alpha"),
    [(0, 10, 0.05), (10, 10, 0.05), (3, 10, 0.05), (130, 200, 0.025), (1, 5000, 0.001), (4999, 5000, 0.2), (0, 1, 0.5)],
)
def test_interval_is_the_beta_quantiles(successes: int, n: int, alpha: float) -> None:
    low, high = rule.interval(successes, n, alpha)
    expected_low = 0.0 if successes == 0 else stats.beta.ppf(alpha / 2, successes, n - successes + 1)
    expected_high = 1.0 if successes == n else stats.beta.isf(alpha / 2, successes + 1, n - successes)
    assert low == pytest.approx(expected_low, abs=1e-12)
    assert high == pytest.approx(expected_high, abs=1e-12)


def _tail_minus(successes: int, n: int, p: float, tail: Fraction, *, upper: bool) -> Fraction:
    """P(X >= x) (``upper``) or P(X <= x), minus ``tail``, in exact rational arithmetic at the double ``p``."""
    chance = Fraction(p)
    terms = range(successes, n + 1) if upper else range(successes + 1)
    return sum((math.comb(n, j) * chance**j * (1 - chance) ** (n - j) for j in terms), Fraction(0)) - tail


def _within_ulps(value: float, ulps: int, sign_at: Callable[[float], Fraction]) -> bool:
    """True if the exact root lies within ``ulps`` doubles of ``value``: the tail crosses its target there."""
    below = above = value
    for _ in range(ulps):
        below, above = math.nextafter(below, 0.0), math.nextafter(above, 1.0)
    return sign_at(below) * sign_at(above) <= 0


@pytest.mark.parametrize(
    ("successes", "n"), [(3, 10), (7, 40), (1, 300), (299, 300), (130, 200), (171, 190), (150, 185), (50, 100)]
)
@pytest.mark.parametrize("alpha", [0.5, 0.05, 0.00625, 0.005, 1e-6])
def test_interval_is_within_four_ulps_of_the_exact_root(successes: int, n: int, alpha: float) -> None:
    # At most 3 ulps off over this grid; scipy's beta quantiles miss by up to 31 (130/200 at alpha 0.005).
    low, high = rule.interval(successes, n, alpha)
    tail = Fraction(alpha / 2)
    assert _within_ulps(low, 4, lambda p: _tail_minus(successes, n, p, tail, upper=True))
    assert _within_ulps(high, 4, lambda p: _tail_minus(successes, n, p, tail, upper=False))


def test_one_interval_imports_neither_numpy_nor_scipy() -> None:
    probe = (
        "import sys; from certlab_clopper_pearson import rule; rule.interval(130, 200, 0.05); "
        "print(sorted(m for m in ('numpy', 'scipy') if m in sys.modules))"
    )
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert found.stdout.strip() == "[]"


def test_an_arm_with_no_trials_has_the_whole_unit_interval() -> None:
    assert rule.interval(0, 0, 0.05) == (0.0, 1.0)


@pytest.mark.parametrize(("conditions", "looks"), [(1, 1), (3, 1), (1, 4), (2, 5)])
def test_decide_combines_per_arm_intervals_with_tail_alpha_over_4kl(conditions: int, looks: int) -> None:
    alpha = 0.05
    per_arm = alpha / (2 * conditions * looks)  # two-sided level: each tail alpha / (4 K L)
    assert rule.decide.arm_alpha(alpha, conditions, looks) == pytest.approx(per_arm)
    baseline_low, baseline_high = rule.interval(171, 190, per_arm)
    candidate_low, candidate_high = rule.interval(150, 185, per_arm)
    bounds = rule.decide(171, 190, 150, 185, alpha=alpha, delta=0.1, conditions=conditions, looks=looks)
    assert bounds.lower == pytest.approx(candidate_low - baseline_high, abs=1e-15)
    assert bounds.upper == pytest.approx(candidate_high - baseline_low, abs=1e-15)


def test_the_verdict_thresholds_are_strict() -> None:
    assert rule.verdict_of(-0.1, 0.3, 0.1) == "INCONCLUSIVE"
    assert rule.verdict_of(-0.0999, 0.3, 0.1) == "PASS"
    assert rule.verdict_of(-0.4, -0.1, 0.1) == "INCONCLUSIVE"
    assert rule.verdict_of(-0.4, -0.1001, 0.1) == "BLOCK"
    assert rule.verdict_of(0.0, 0.0, 0.0) == "INCONCLUSIVE"


# --------------------------------------------------------------------------- planning


_verdict = cached_verdicts(rule.decide)


def test_a_decisive_early_look_stops_the_experiment() -> None:
    # Baseline always succeeds, so only the candidate's count matters: 10 then 20 trials per arm.
    alpha, delta, looks, q = 0.05, 0.45, 2, 0.85
    first, final = look_sizes(20, looks)
    early_pass = [x for x in range(first + 1) if _verdict(first, x, first, alpha, delta, looks) == "PASS"]
    final_pass = [x for x in range(final + 1) if _verdict(final, x, final, alpha, delta, looks) == "PASS"]
    # A candidate that passes at the first look and then fails its next trials would not pass at the last:
    assert any(x in early_pass and x not in final_pass for x in range(first + 1))
    pmf_first = stats.binom.pmf(np.arange(first + 1), first, q)
    pmf_rest = stats.binom.pmf(np.arange(final - first + 1), final - first, q)
    undecided = [x for x in range(first + 1) if _verdict(first, x, first, alpha, delta, looks) == "INCONCLUSIVE"]
    with_stopping = sum(pmf_first[x] for x in early_pass) + sum(
        pmf_first[x] * pmf_rest[k] for x in undecided for k in range(final - first + 1) if x + k in final_pass
    )
    last_look_only = sum(stats.binom.pmf(x, final, q) for x in final_pass)
    chances = rule.plan(1.0, q, 20, alpha=alpha, delta=delta, looks=looks)
    assert chances["PASS"] == pytest.approx(with_stopping, abs=1e-12)
    assert abs(with_stopping - last_look_only) > 1e-3


def test_more_looks_spend_less_alpha_per_look() -> None:
    single = rule.decide(180, 200, 175, 200, looks=1)
    split = rule.decide(180, 200, 175, 200, looks=5)
    assert split.lower < single.lower and split.upper > single.upper


def test_plan_at_5000_per_arm_with_looks_is_exact_and_quick() -> None:
    chances = rule.plan(0.9, 0.75, 5000, looks=5)
    assert sum(chances.values()) == pytest.approx(1.0, abs=1e-12)
    assert chances["BLOCK"] > 0.5


# --------------------------------------------------------------------------- bad input and the plugin


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: rule.decide(201, 200, 130, 200), "more successes than trials"),
        (lambda: rule.decide(10, 0, 1, 10), "baseline trials must be at least 1"),
        (lambda: rule.decide(10, 10, 1, 10, alpha=0.0), "alpha"),
        (lambda: rule.decide(10, 10, 1, 10, alpha=1.0), "alpha"),
        (lambda: rule.decide(10, 10, 1, 10, delta=1.0), "delta"),
        (lambda: rule.decide(10, 10, 1, 10, conditions=0), "conditions"),
        (lambda: rule.decide(10, 10, 1.5, 10), "whole number"),  # type: ignore[arg-type]
        (lambda: rule.plan(1.5, 0.5, 100), "probability"),
        (lambda: rule.plan(0.5, 0.5, 10, looks=11), "looks"),
        (lambda: rule.plan(0.5, 0.5, 0), "trials per arm"),
        (lambda: rule.interval(3, 2, 0.05), "more successes than trials"),
    ],
)
def test_bad_arguments_are_usage_errors(call: object, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        call()  # type: ignore[operator]


def test_the_plugin_provides_the_rule_through_discovery() -> None:
    registry = discover()
    found = registry.get("statistical_rules", "clopper-pearson")
    assert found.decide is rule.decide and found.interval is rule.interval and found.plan is rule.plan
    assert registry.plugin_of("statistical_rules", "clopper-pearson").distribution == "certlab-clopper-pearson"


# --------------------------------------------------------------------------- the conformance kit


class TestClopperPearsonConformance(RuleConformance):
    """What every rule is checked for: ordered bounds, exact plans (stepwise, simulated), error rates, lean imports."""

    rule_name = "clopper-pearson"
    sum_designs = (*RuleConformance.sum_designs, (1.0, 0.0, 10, 10))
    stepwise_designs = (
        *RuleConformance.stepwise_designs[:2],
        (0.95, 0.4, 16, 0.2, 0.2, 4),
        (0.7, 0.75, 13, 0.3, 0.3, 2),
    )
    monte_carlo_design = (0.9, 0.8, 40, 0.2, 0.2, 2, 20240601)
