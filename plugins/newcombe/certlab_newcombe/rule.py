"""The Newcombe rule: Wilson intervals per arm, combined by his method 10.

With ``K`` gating conditions and ``L`` looks, each arm gets a Wilson score interval (no
continuity correction) at confidence ``1 - alpha / (K L)``; with ``p`` the observed rates and
``(l, u)`` the Wilson limits, the bounds on candidate minus baseline ``d = p_c - p_b`` are

    lower = d - sqrt((p_c - l_c)^2 + (u_b - p_b)^2)
    upper = d + sqrt((u_c - p_c)^2 + (p_b - l_b)^2)

(Newcombe 1998, Statistics in Medicine 17:873-890, method 10). PASS iff lower > -delta,
BLOCK iff upper < -delta (both strict), otherwise INCONCLUSIVE. numpy and scipy are
imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certlab_rule_support import numerics
from certlab_rule_support.two_arm_rule import DEFAULT_ALPHA as DEFAULT_ALPHA
from certlab_rule_support.two_arm_rule import DEFAULT_DELTA as DEFAULT_DELTA
from certlab_rule_support.two_arm_rule import Decide, Plan, arm_counts, whole
from certlab_rule_support.two_arm_rule import verdict_of as verdict_of

from certlab_core.sdk.looks import look_alpha

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

NAME = "newcombe"


def arm_alpha(alpha: float = DEFAULT_ALPHA, conditions: int = 1, looks: int = 1) -> float:
    """The two-sided level of each per-arm Wilson interval at one look: ``alpha / (K L)``."""
    per_look = look_alpha(alpha, looks)
    return per_look / whole(conditions, "conditions", 1)


def z_of(alpha: float) -> float:
    """The standard normal quantile for a two-sided level ``alpha``: ``z`` with P(Z > z) = alpha / 2."""
    from statistics import NormalDist

    return -NormalDist().inv_cdf(alpha / 2.0)


# --------------------------------------------------------------------------- the arithmetic


def limits(successes: ArrayLike, n: ArrayLike, alpha: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Wilson score limits (no continuity correction) at two-sided level ``alpha``, vectorised.

    ``(2x + z^2 -+ z sqrt(z^2 + 4 x (n - x) / n)) / (2 (n + z^2))``; exactly 0 at x = 0 and 1 at x = n.
    """
    numerics.load("numpy")
    import numpy as np

    x = np.asarray(successes, dtype=np.float64)
    trials = np.asarray(n, dtype=np.float64)
    z = z_of(alpha)
    z2 = z * z
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = z * np.sqrt(z2 + 4.0 * x * (trials - x) / trials)
        denominator = 2.0 * (trials + z2)
        low = np.where(x > 0, (2.0 * x + z2 - spread) / denominator, 0.0)
        high = np.where(x < trials, (2.0 * x + z2 + spread) / denominator, 1.0)
    return np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)


def bounds_grid(
    baseline_successes: ArrayLike,
    baseline_n: ArrayLike,
    candidate_successes: ArrayLike,
    candidate_n: ArrayLike,
    per_arm_alpha: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Newcombe's hybrid score bounds on candidate minus baseline for (broadcast) arrays of counts."""
    numerics.load("numpy")
    import numpy as np

    baseline_rate = np.asarray(baseline_successes, dtype=np.float64) / np.asarray(baseline_n, dtype=np.float64)
    candidate_rate = np.asarray(candidate_successes, dtype=np.float64) / np.asarray(candidate_n, dtype=np.float64)
    baseline_low, baseline_high = limits(baseline_successes, baseline_n, per_arm_alpha)
    candidate_low, candidate_high = limits(candidate_successes, candidate_n, per_arm_alpha)
    difference = candidate_rate - baseline_rate
    lower = difference - np.sqrt((candidate_rate - candidate_low) ** 2 + (baseline_high - baseline_rate) ** 2)
    upper = difference + np.sqrt((candidate_high - candidate_rate) ** 2 + (baseline_rate - baseline_low) ** 2)
    return np.clip(lower, -1.0, 1.0), np.clip(upper, -1.0, 1.0)


# --------------------------------------------------------------------------- the rule's three functions


def interval(successes: int, n: int, alpha: float = DEFAULT_ALPHA) -> tuple[float, float]:
    """The Wilson score interval for ``successes`` of ``n`` at two-sided level ``alpha`` (``(0, 1)`` when n = 0)."""
    wins, trials = arm_counts(successes, n, "the arm", least_n=0)
    look_alpha(alpha)  # checks 0 < alpha < 1
    if trials == 0:
        return 0.0, 1.0
    low, high = limits(wins, trials, float(alpha))
    return float(low), float(high)


# decide and plan: the frame every two-arm interval rule shares, over this rule's bounds and per-arm level.
decide = Decide(bounds_grid, arm_alpha)
plan = Plan(bounds_grid, arm_alpha)
