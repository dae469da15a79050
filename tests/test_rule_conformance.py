"""RuleConformance rejects rules that the gate, plan and selfcheck cannot rely on; the shipped rules pass it.

The broken rules start from the hook spec's example, a point estimate with no uncertainty:
without a plan (plan and selfcheck refuse it), with an honest plan (it passes a candidate at
the margin half the time), with a plan that lies, with bounds that miss the estimate, and
with an ``arm_alpha`` above alpha.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from certlab_core.plugin.types.rule import Bounds, StatisticalRule
from certlab_core.testing import RuleConformance
from certlab_core.testing.rule_checks import cached_verdicts, stepwise_plan

REJECTED = (AssertionError, pytest.fail.Exception)


def interval(successes: int, n: int, alpha: float) -> tuple[float, float]:
    p = successes / n if n else 0.0
    return (p, p)


def decide(
    baseline_successes: int,
    baseline_n: int,
    candidate_successes: int,
    candidate_n: int,
    alpha: float = 0.05,
    delta: float = 0.10,
    conditions: int = 1,
    looks: int = 1,
) -> Bounds:
    diff = candidate_successes / candidate_n - baseline_successes / baseline_n
    verdict = "PASS" if diff > -delta else "BLOCK" if diff < -delta else "INCONCLUSIVE"
    return Bounds(lower=diff, upper=diff, verdict=verdict)


def honest_plan(
    p_baseline: float,
    p_candidate: float,
    n: int,
    alpha: float = 0.05,
    delta: float = 0.10,
    conditions: int = 1,
    looks: int = 1,
) -> dict[str, float]:
    return stepwise_plan(VERDICT, p_baseline, p_candidate, n, alpha, delta, looks)


VERDICT = cached_verdicts(decide)


def lying_plan(*args: Any, **kwargs: Any) -> dict[str, float]:
    return {"PASS": 0.0, "BLOCK": 0.0, "INCONCLUSIVE": 1.0}


def off_target(*args: Any, **kwargs: Any) -> Bounds:
    return Bounds(lower=0.5, upper=0.9, verdict="PASS")


POINT = StatisticalRule(name="point-estimate", description="no uncertainty at all", decide=decide, interval=interval)
SMALL = ((0.9, 12, 0.05, 0.1, 1, 1),)  # a design the reference enumerates quickly


class Checks(RuleConformance):
    rule_name = "point-estimate"
    error_rate_designs = SMALL
    sum_designs = ((0.8, 0.8, 12, 1), (1.0, 0.0, 8, 2))
    stepwise_designs = ((0.9, 0.8, 12, 0.05, 0.2, 1),)

    def __init__(self, rule: StatisticalRule) -> None:
        self.under_test = rule

    def rule(self) -> StatisticalRule:
        return self.under_test


def test_a_rule_without_a_plan_is_refused_naming_plan_and_selfcheck() -> None:
    with pytest.raises(REJECTED, match="has no plan: certlab plan and certlab selfcheck refuse it"):
        Checks(POINT).test_it_can_plan()


def test_a_point_estimate_passes_a_candidate_at_the_margin_far_more_often_than_alpha() -> None:
    checks = Checks(attrs.evolve(POINT, plan=honest_plan))
    checks.test_plan_is_a_probability_over_the_three_verdicts()  # its plan is honest
    with pytest.raises(REJECTED, match="false PASS at the margin"):
        checks.test_its_error_rates_stay_within_alpha_over_k()


def test_a_plan_that_does_not_enumerate_decide_is_rejected() -> None:
    with pytest.raises(REJECTED, match=r"plan says P\(PASS\) = 0.0, decide step by step"):
        Checks(attrs.evolve(POINT, plan=lying_plan)).test_plan_equals_stepwise_enumeration_through_decide()


def test_bounds_that_miss_the_estimate_are_rejected() -> None:
    with pytest.raises(REJECTED, match=r"lower bound 0\.5 past"):
        Checks(
            attrs.evolve(POINT, decide=off_target)
        ).test_decide_gives_ordered_bounds_around_the_estimate_and_the_verdict_they_imply()


def test_an_arm_alpha_above_alpha_is_rejected() -> None:
    with pytest.raises(REJECTED, match=r"arm_alpha\(0.05, 1, 1\) = 0.1"):
        Checks(
            attrs.evolve(POINT, arm_alpha=lambda alpha, k, looks: 2 * alpha)
        ).test_arm_alpha_is_a_level_within_alpha()
