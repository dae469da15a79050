"""The Clopper-Pearson rule: exact per-arm intervals, bounds on the difference.

With ``K`` gating conditions and ``L`` looks, each arm gets an exact Clopper-Pearson interval
with tail ``alpha / (4 K L)`` (two-sided level ``alpha / (2 K L)``); the bounds on candidate
minus baseline are ``[L_c - U_b, U_c - L_b]``; PASS iff the lower bound > -delta, BLOCK iff the
upper bound < -delta, otherwise INCONCLUSIVE. ``decide`` and ``plan`` work on arrays with
numpy and scipy, imported lazily; ``interval``, one arm at a time, needs neither
(``certlab_clopper_pearson.one_arm``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certlab_rule_support import numerics
from certlab_rule_support.two_arm_rule import DEFAULT_ALPHA as DEFAULT_ALPHA
from certlab_rule_support.two_arm_rule import DEFAULT_DELTA as DEFAULT_DELTA
from certlab_rule_support.two_arm_rule import Decide, Plan, arm_counts, whole
from certlab_rule_support.two_arm_rule import verdict_of as verdict_of

from certlab_clopper_pearson import one_arm
from certlab_core.sdk.looks import look_alpha

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

NAME = "clopper-pearson"


def arm_alpha(alpha: float = DEFAULT_ALPHA, conditions: int = 1, looks: int = 1) -> float:
    """The two-sided level of each per-arm interval at one look: ``alpha / (2 K L)`` (tail ``alpha / (4 K L)``)."""
    per_look = look_alpha(alpha, looks)
    return per_look / (2 * whole(conditions, "conditions", 1))


# --------------------------------------------------------------------------- the arithmetic


def limits(successes: ArrayLike, n: ArrayLike, alpha: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Clopper-Pearson limits at two-sided level ``alpha`` for arrays of counts (vectorised, broadcasting)."""
    numerics.load("numpy", "scipy.special")
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


# --------------------------------------------------------------------------- the rule's three functions


def interval(successes: int, n: int, alpha: float = DEFAULT_ALPHA) -> tuple[float, float]:
    """The exact Clopper-Pearson interval for ``successes`` of ``n`` at two-sided level ``alpha``."""
    wins, trials = arm_counts(successes, n, "the arm", least_n=0)
    look_alpha(alpha)  # checks 0 < alpha < 1
    return one_arm.limits(wins, trials, float(alpha))


# decide and plan: the frame every two-arm interval rule shares, over this rule's bounds and per-arm level.
decide = Decide(bounds_grid, arm_alpha)
plan = Plan(bounds_grid, arm_alpha)
