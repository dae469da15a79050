"""A two-arm interval rule's frame: checks, verdict from bounds, decide, plan.

A rule of this kind (clopper-pearson, newcombe) supplies two pure functions:

- ``bounds_grid(baseline_successes, baseline_n, candidate_successes, candidate_n, per_arm_alpha)``
  -> ``(lower, upper)``: its bounds on candidate minus baseline, for broadcast arrays of counts;
- ``arm_alpha(alpha, conditions, looks)``: the two-sided level of each per-arm interval at one look.

``Decide`` and ``Plan`` turn them into the rule's ``decide`` and ``plan`` (see
``certlab_core.plugin.types.rule.StatisticalRule``): both check their arguments the same way (one
``UsageError`` line naming the bad value), and ``plan`` enumerates exactly with
``certlab_rule_support.exact_plan``. PASS iff lower > -delta, BLOCK iff upper < -delta (both strict),
otherwise INCONCLUSIVE. Nothing here imports numpy or scipy at module import.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attrs import frozen

from certlab_core.plugin import Bounds, UsageError
from certlab_core.plugin.types.rule import GateVerdict
from certlab_rule_support.exact_plan import exact_plan

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    BoundsGrid = Callable[
        [ArrayLike, ArrayLike, ArrayLike, ArrayLike, float], tuple[NDArray[np.float64], NDArray[np.float64]]
    ]

ArmAlpha = Callable[[float, int, int], float]

DEFAULT_ALPHA = 0.05
DEFAULT_DELTA = 0.10


# --------------------------------------------------------------------------- checks


def whole(value: Any, what: str, least: int) -> int:
    """``value`` as an int of at least ``least`` (a bool is not a number); else a UsageError naming ``what``."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise UsageError(f"{what} must be a whole number, got {value!r}") from None
    if number < least:
        raise UsageError(f"{what} must be at least {least}, got {number}")
    return number


def arm_counts(successes: Any, n: Any, arm: str, least_n: int = 1) -> tuple[int, int]:
    """One arm's ``(successes, trials)``, checked: whole numbers, at least ``least_n`` trials, wins <= trials."""
    trials = whole(n, f"{arm} trials", least_n)
    wins = whole(successes, f"{arm} successes", 0)
    if wins > trials:
        raise UsageError(f"{arm} has more successes than trials ({wins}/{trials})")
    return wins, trials


def success_rate(value: Any, what: str) -> float:
    """A probability from 0 to 1; else a UsageError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise UsageError(f"{what} must be a probability from 0 to 1, got {value!r}")
    return float(value)


def margin(value: Any) -> float:
    """The margin delta, from 0 (inclusive) to 1 (exclusive); else a UsageError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise UsageError(f"delta must be a number from 0 (inclusive) to 1 (exclusive), got {value!r}")
    return float(value)


def verdict_of(lower: float, upper: float, delta: float) -> GateVerdict:
    """PASS iff lower > -delta, BLOCK iff upper < -delta (both strict), otherwise INCONCLUSIVE."""
    if lower > -delta:
        return "PASS"
    if upper < -delta:
        return "BLOCK"
    return "INCONCLUSIVE"


# --------------------------------------------------------------------------- the rule's decide and plan


@frozen
class Decide:
    """A rule's ``decide``; ``arm_alpha`` tells readers the level of the per-arm intervals it combines."""

    bounds_grid: BoundsGrid
    arm_alpha: ArmAlpha

    def __call__(
        self,
        baseline_successes: int,
        baseline_n: int,
        candidate_successes: int,
        candidate_n: int,
        alpha: float = DEFAULT_ALPHA,
        delta: float = DEFAULT_DELTA,
        conditions: int = 1,
        looks: int = 1,
    ) -> Bounds:
        """Bounds on candidate minus baseline and the verdict at one look, from the cumulative counts at that look."""
        b_wins, b_trials = arm_counts(baseline_successes, baseline_n, "baseline")
        c_wins, c_trials = arm_counts(candidate_successes, candidate_n, "candidate")
        checked_delta = margin(delta)
        level = self.arm_alpha(alpha, conditions, looks)
        lower, upper = self.bounds_grid(b_wins, b_trials, c_wins, c_trials, level)
        low, high = float(lower), float(upper)
        return Bounds(lower=low, upper=high, verdict=verdict_of(low, high, checked_delta))


@frozen
class Plan:
    """A rule's ``plan``: exact P(PASS), P(BLOCK), P(INCONCLUSIVE), by ``certlab_rule_support.exact_plan``."""

    bounds_grid: BoundsGrid
    arm_alpha: ArmAlpha

    def __call__(
        self,
        p_baseline: float,
        p_candidate: float,
        n: int,
        alpha: float = DEFAULT_ALPHA,
        delta: float = DEFAULT_DELTA,
        conditions: int = 1,
        looks: int = 1,
    ) -> dict[str, float]:
        """Exact P(PASS), P(BLOCK), P(INCONCLUSIVE) for ``n`` trials per arm, stopping at the first decisive look."""
        baseline_rate = success_rate(p_baseline, "the baseline success rate")
        candidate_rate = success_rate(p_candidate, "the candidate success rate")
        checked_delta = margin(delta)
        level = self.arm_alpha(alpha, conditions, looks)
        bounds_grid = self.bounds_grid

        def grid(baseline_counts: Any, candidate_counts: Any, trials: int) -> Any:
            return bounds_grid(baseline_counts, trials, candidate_counts, trials, level)

        return exact_plan(grid, baseline_rate, candidate_rate, whole(n, "trials per arm", 1), checked_delta, looks)
