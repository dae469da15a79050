"""The Clopper-Pearson rule: exact per-arm intervals combined into bounds on candidate minus baseline.

With ``K`` gating conditions and ``L`` looks, each arm gets an exact Clopper-Pearson interval
with tail ``alpha / (4 K L)`` (two-sided level ``alpha / (2 K L)``); the bounds on candidate
minus baseline are ``[L_c - U_b, U_c - L_b]``; PASS iff the lower bound > -delta, BLOCK iff the
upper bound < -delta, otherwise INCONCLUSIVE. scipy and numpy are imported lazily.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from certlab_core.errors import UsageError
from certlab_core.looks import look_alpha
from certlab_core.records import Bounds

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

NAME = "clopper-pearson"
DEFAULT_ALPHA = 0.05
DEFAULT_DELTA = 0.10


# --------------------------------------------------------------------------- checks


def _whole(value: Any, what: str, least: int) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise UsageError(f"{what} must be a whole number, got {value!r}") from None
    if number < least:
        raise UsageError(f"{what} must be at least {least}, got {number}")
    return number


def _counts(successes: Any, n: Any, arm: str, least_n: int = 1) -> tuple[int, int]:
    trials = _whole(n, f"{arm} trials", least_n)
    wins = _whole(successes, f"{arm} successes", 0)
    if wins > trials:
        raise UsageError(f"{arm} has more successes than trials ({wins}/{trials})")
    return wins, trials


def _rate(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise UsageError(f"{what} must be a probability from 0 to 1, got {value!r}")
    return float(value)


def _delta(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise UsageError(f"delta must be a number from 0 (inclusive) to 1 (exclusive), got {value!r}")
    return float(value)


def arm_alpha(alpha: float = DEFAULT_ALPHA, conditions: int = 1, looks: int = 1) -> float:
    """The two-sided level of each per-arm interval at one look: ``alpha / (2 K L)`` (tail ``alpha / (4 K L)``)."""
    per_look = look_alpha(alpha, looks)
    return per_look / (2 * _whole(conditions, "conditions", 1))


# --------------------------------------------------------------------------- the arithmetic


def limits(successes: ArrayLike, n: ArrayLike, alpha: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Clopper-Pearson limits at two-sided level ``alpha`` for arrays of counts (vectorised, broadcasting)."""
    import numpy as np
    from scipy import special

    x = np.asarray(successes, dtype=np.float64)
    trials = np.asarray(n, dtype=np.float64)
    tail = alpha / 2.0
    failures = trials - x
    # Feed the beta inverses valid shapes everywhere; the ends are fixed by np.where.
    low = np.where(x > 0, special.betaincinv(np.maximum(x, 1.0), failures + 1.0, tail), 0.0)
    high = np.where(failures > 0, special.betainccinv(x + 1.0, np.maximum(failures, 1.0), tail), 1.0)
    return low, high


def bounds_grid(
    baseline_successes: ArrayLike,
    baseline_n: ArrayLike,
    candidate_successes: ArrayLike,
    candidate_n: ArrayLike,
    per_arm_alpha: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``[L_c - U_b, U_c - L_b]`` for (broadcast) arrays of counts, each arm at two-sided level ``per_arm_alpha``."""
    baseline_low, baseline_high = limits(baseline_successes, baseline_n, per_arm_alpha)
    candidate_low, candidate_high = limits(candidate_successes, candidate_n, per_arm_alpha)
    return candidate_low - baseline_high, candidate_high - baseline_low


def verdict_of(lower: float, upper: float, delta: float) -> str:
    """PASS iff lower > -delta, BLOCK iff upper < -delta (both strict), otherwise INCONCLUSIVE."""
    if lower > -delta:
        return "PASS"
    if upper < -delta:
        return "BLOCK"
    return "INCONCLUSIVE"


# --------------------------------------------------------------------------- the rule's three functions


def interval(successes: int, n: int, alpha: float = DEFAULT_ALPHA) -> tuple[float, float]:
    """The exact Clopper-Pearson interval for ``successes`` of ``n`` at two-sided level ``alpha``."""
    wins, trials = _counts(successes, n, "the arm", least_n=0)
    look_alpha(alpha)  # checks 0 < alpha < 1
    low, high = limits(wins, trials, float(alpha))
    return float(low), float(high)


class Decide:
    """The rule's ``decide``; ``arm_alpha`` tells readers the level of the per-arm intervals it combines."""

    arm_alpha = staticmethod(arm_alpha)

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
        b_wins, b_trials = _counts(baseline_successes, baseline_n, "baseline")
        c_wins, c_trials = _counts(candidate_successes, candidate_n, "candidate")
        margin = _delta(delta)
        level = arm_alpha(alpha, conditions, looks)
        lower, upper = bounds_grid(b_wins, b_trials, c_wins, c_trials, level)
        low, high = float(lower), float(upper)
        return Bounds(lower=low, upper=high, verdict=verdict_of(low, high, margin))


decide = Decide()


def plan(
    p_baseline: float,
    p_candidate: float,
    n: int,
    alpha: float = DEFAULT_ALPHA,
    delta: float = DEFAULT_DELTA,
    conditions: int = 1,
    looks: int = 1,
) -> dict[str, float]:
    """Exact P(PASS), P(BLOCK), P(INCONCLUSIVE) for ``n`` trials per arm, stopping at the first decisive look."""
    from certlab_clopper_pearson.enumeration import exact_plan

    baseline_rate = _rate(p_baseline, "the baseline success rate")
    candidate_rate = _rate(p_candidate, "the candidate success rate")
    margin = _delta(delta)
    level = arm_alpha(alpha, conditions, looks)

    def grid(baseline_counts: Any, candidate_counts: Any, trials: int) -> Any:
        return bounds_grid(baseline_counts, trials, candidate_counts, trials, level)

    return exact_plan(grid, baseline_rate, candidate_rate, _whole(n, "trials per arm", 1), margin, looks)
