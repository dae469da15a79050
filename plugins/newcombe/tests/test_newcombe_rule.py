"""The newcombe rule: Newcombe's published examples, Wilson's closed form, exact planning with looks, and its plugin."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
from certlab_newcombe import rule

from certlab_core._runtime.registry import discover
from certlab_core.plugin.errors import UsageError
from certlab_core.testing import RuleConformance
from certlab_core.testing.rule_checks import (
    cached_verdicts,
    stepwise_plan,
)

# --------------------------------------------------------------------------- known values


# Newcombe (1998), Statistics in Medicine 17:873-890, Table II, method 10 at 95%: (m/M, n/N) -> interval for m/M - n/N.
NEWCOMBE_1998_TABLE_II = [
    ((56, 70), (48, 80), (0.0524, 0.3339)),
    ((9, 10), (3, 10), (0.1705, 0.8090)),
    ((5, 56), (0, 29), (-0.0381, 0.1926)),
    ((0, 10), (0, 20), (-0.1611, 0.2775)),
    ((0, 10), (0, 10), (-0.2775, 0.2775)),
    ((10, 10), (0, 20), (0.6791, 1.0000)),
    ((10, 10), (0, 10), (0.6075, 1.0000)),
]


@pytest.mark.parametrize(("candidate", "baseline", "published"), NEWCOMBE_1998_TABLE_II)
def test_newcombe_1998_worked_examples(
    candidate: tuple[int, int], baseline: tuple[int, int], published: tuple[float, float]
) -> None:
    bounds = rule.decide(*baseline, *candidate, alpha=0.05, delta=0.1)
    assert (round(bounds.lower, 4), round(bounds.upper, 4)) == published


# Newcombe (1998), Statistics in Medicine 17:857-872, Table I, Wilson score method at 95%.
@pytest.mark.parametrize(
    ("successes", "n", "published"),
    [(81, 263, (0.2553, 0.3662)), (15, 148, (0.0624, 0.1605)), (0, 20, (0.0, 0.1611)), (1, 29, (0.0061, 0.1718))],
)
def test_wilson_matches_the_published_single_proportion_examples(
    successes: int, n: int, published: tuple[float, float]
) -> None:
    low, high = rule.interval(successes, n, 0.05)
    assert (round(low, 4), round(high, 4)) == published


@pytest.mark.parametrize(("successes", "n", "alpha"), [(0, 7, 0.05), (7, 7, 0.05), (3, 11, 0.01), (130, 200, 0.0125)])
def test_wilson_is_the_closed_form(successes: int, n: int, alpha: float) -> None:
    z = NormalDist().inv_cdf(1 - alpha / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low, high = rule.interval(successes, n, alpha)
    assert low == pytest.approx(max(0.0, centre - half), abs=1e-12)
    assert high == pytest.approx(min(1.0, centre + half), abs=1e-12)


@pytest.mark.parametrize(("conditions", "looks"), [(1, 1), (3, 1), (1, 4), (2, 5)])
def test_decide_uses_wilson_at_confidence_one_minus_alpha_over_kl(conditions: int, looks: int) -> None:
    alpha = 0.05
    per_arm = alpha / (conditions * looks)
    assert rule.decide.arm_alpha(alpha, conditions, looks) == pytest.approx(per_arm)
    b_low, b_high = rule.interval(171, 190, per_arm)
    c_low, c_high = rule.interval(150, 185, per_arm)
    p_b, p_c = 171 / 190, 150 / 185
    bounds = rule.decide(171, 190, 150, 185, alpha=alpha, conditions=conditions, looks=looks)
    assert bounds.lower == pytest.approx(p_c - p_b - math.hypot(p_c - c_low, b_high - p_b), abs=1e-14)
    assert bounds.upper == pytest.approx(p_c - p_b + math.hypot(c_high - p_c, p_b - b_low), abs=1e-14)


def test_the_issue_example_blocks_under_newcombe_too() -> None:
    bounds = rule.decide(200, 200, 130, 200)
    assert bounds.verdict == "BLOCK" and bounds.upper < -0.1


def test_the_verdict_thresholds_are_strict() -> None:
    assert rule.verdict_of(-0.1, 0.3, 0.1) == "INCONCLUSIVE"
    assert rule.verdict_of(-0.0999, 0.3, 0.1) == "PASS"
    assert rule.verdict_of(-0.4, -0.1, 0.1) == "INCONCLUSIVE"
    assert rule.verdict_of(-0.4, -0.1001, 0.1) == "BLOCK"


# --------------------------------------------------------------------------- planning


_verdict = cached_verdicts(rule.decide)


def test_a_decisive_early_look_stops_the_experiment() -> None:
    # 3 looks of 10 trials per arm: mass decided at look 1 never reaches look 2.
    alpha, delta, looks = 0.2, 0.2, 3
    one_look = rule.plan(0.95, 0.95, 10, alpha=alpha / looks, delta=delta)  # look 1 alone, at the per-look alpha
    three_looks = rule.plan(0.95, 0.95, 30, alpha=alpha, delta=delta, looks=looks)
    assert one_look["PASS"] > 0.05
    assert three_looks["PASS"] >= one_look["PASS"]
    reference = stepwise_plan(_verdict, 0.95, 0.95, 30, alpha, delta, looks)
    assert three_looks["PASS"] == pytest.approx(reference["PASS"], abs=1e-12)


# --------------------------------------------------------------------------- bad input and the plugin


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: rule.decide(201, 200, 130, 200), "more successes than trials"),
        (lambda: rule.decide(10, 10, 1, 0), "candidate trials must be at least 1"),
        (lambda: rule.decide(10, 10, 1, 10, alpha=-0.1), "alpha"),
        (lambda: rule.decide(10, 10, 1, 10, delta=-0.1), "delta"),
        (lambda: rule.decide(10, 10, 1, 10, looks=0), "looks"),
        (lambda: rule.plan(0.5, -0.5, 100), "probability"),
        (lambda: rule.plan(0.5, 0.5, 3, looks=4), "looks"),
    ],
)
def test_bad_arguments_are_usage_errors(call: object, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        call()  # type: ignore[operator]


def test_the_plugin_provides_the_rule_through_discovery() -> None:
    registry = discover()
    found = registry.get("statistical_rules", "newcombe")
    assert found.decide is rule.decide and found.interval is rule.interval and found.plan is rule.plan
    assert registry.plugin_of("statistical_rules", "newcombe").distribution == "certlab-newcombe"


# --------------------------------------------------------------------------- the conformance kit


class TestNewcombeConformance(RuleConformance):
    """What every rule is checked for: ordered bounds, exact plans (stepwise, simulated), error rates, lean imports."""

    rule_name = "newcombe"
