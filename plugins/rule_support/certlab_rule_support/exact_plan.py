"""Exact P(PASS), P(BLOCK), P(INCONCLUSIVE) of a two-arm rule with looks.

Shared by the statistical rules that plan exactly (clopper-pearson, newcombe): a rule gives
its bounds for a grid of count pairs, and this module does the rest.

Each arm's cumulative successes at look ``j`` are binomial; the joint probability of every
pair of counts that has not stopped yet is carried from look to look (the increments of the
two arms are independent binomials, so a step is two matrix products), and at each look the
pairs the rule decides are removed and their mass added to PASS or BLOCK. What is left after
the last look is INCONCLUSIVE.

Binomial probabilities come from Loader's saddle-point form (as in R's ``dbinom``), accurate
to about 1e-15 in total. Counts whose cumulative probability beyond them is below
``TAIL_MASS`` (on either side, per arm and look) are not enumerated: that omits at most
``4 * looks * TAIL_MASS`` of mass, far below the rounding of the sums.
numpy and scipy are imported inside the functions, never at module import: the kernel
imports without them, and a rule's plugin module stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from certlab_core.sdk.looks import look_sizes
from certlab_rule_support import numerics

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Counts = NDArray[np.float64]
    # (baseline counts as a column, candidate counts as a row, trials per arm) -> (lower, upper) grids
    BoundsGrid = Callable[[Counts, Counts, int], tuple[NDArray[np.float64], NDArray[np.float64]]]

TAIL_MASS = 1e-20


def _stirling_error(n: NDArray[np.float64]) -> NDArray[np.float64]:
    """``log(n!) - log(sqrt(2 pi n) (n / e)^n)`` for n >= 1 (Loader 2000: direct below 16, else its series)."""
    numerics.load("numpy", "scipy.special")
    import numpy as np
    from scipy import special

    n = np.maximum(n, 1.0)
    direct = special.gammaln(n + 1.0) - (n + 0.5) * np.log(n) + n - 0.5 * np.log(2.0 * np.pi)
    nn = n * n
    s0, s1, s2, s3, s4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
    series = np.where(
        n > 500,
        (s0 - s1 / nn) / n,
        np.where(
            n > 80,
            (s0 - (s1 - s2 / nn) / nn) / n,
            np.where(
                n > 35,
                (s0 - (s1 - (s2 - s3 / nn) / nn) / nn) / n,
                (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / n,
            ),
        ),
    )
    return np.where(n <= 15, direct, series)


def _deviance(x: NDArray[np.float64], mean: float) -> NDArray[np.float64]:
    """``x log(x / mean) + mean - x`` without cancellation near ``x = mean`` (Loader 2000)."""
    numerics.load("numpy", "scipy.special")
    import numpy as np
    from scipy import special

    ratio = (x - mean) / (x + mean)
    near = np.abs(x - mean) < 0.1 * (x + mean)
    total = (x - mean) * ratio
    term = 2.0 * x * ratio
    for j in range(1, 20):  # near: ratio^2 < 0.01, so 19 terms reach far below rounding
        term = term * ratio * ratio
        total = total + term / (2 * j + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        far = special.xlogy(x, x / mean) + mean - x
    return np.where(near, total, far)


def binomial_pmf(n: int, p: float) -> NDArray[np.float64]:
    """P(X = k) for k = 0..n, X ~ Binomial(n, p), by Loader's saddle-point form (total error about 1e-15)."""
    numerics.load("numpy")
    import numpy as np

    pmf = np.zeros(n + 1)
    if p <= 0.0 or p >= 1.0:
        pmf[0 if p <= 0.0 else n] = 1.0
        return pmf
    pmf[0] = np.exp(n * np.log1p(-p))
    pmf[n] = np.exp(n * np.log(p))
    if n > 1:
        k = np.arange(1, n, dtype=np.float64)
        log_core = (
            _stirling_error(np.array(float(n)))
            - _stirling_error(k)
            - _stirling_error(n - k)
            - _deviance(k, n * p)
            - _deviance(n - k, n * (1.0 - p))
        )
        log_spread = np.log(2.0 * np.pi) + np.log(k) + np.log1p(-k / n)
        pmf[1:n] = np.exp(log_core - 0.5 * log_spread)
    return pmf


def support(pmf: NDArray[np.float64]) -> tuple[int, int]:
    """The smallest range ``[low, high]`` outside which each side holds at most ``TAIL_MASS``."""
    numerics.load("numpy")
    import numpy as np

    below = np.cumsum(pmf)  # P(X <= k)
    above = np.cumsum(pmf[::-1])[::-1]  # P(X >= k)
    low = int(np.argmax(below > TAIL_MASS))
    high = len(pmf) - 1 - int(np.argmax(above[::-1] > TAIL_MASS))
    return low, max(low, high)


def transition(old: tuple[int, int], new: tuple[int, int], increment_pmf: NDArray[np.float64]) -> NDArray[np.float64]:
    """``T[i, k]`` = P(cumulative count goes from ``old[0] + i`` to ``new[0] + k``) for one arm."""
    numerics.load("numpy")
    import numpy as np

    step = np.arange(new[0], new[1] + 1)[None, :] - np.arange(old[0], old[1] + 1)[:, None]
    most = len(increment_pmf) - 1
    possible = (step >= 0) & (step <= most)
    return np.where(possible, increment_pmf[np.clip(step, 0, most)], 0.0)


def exact_plan(
    bounds_grid: BoundsGrid,
    p_baseline: float,
    p_candidate: float,
    n: int,
    delta: float,
    looks: int = 1,
) -> dict[str, float]:
    """Exact probabilities of each verdict for ``n`` trials per arm, stopping at the first decisive look.

    ``bounds_grid(baseline_counts, candidate_counts, trials)`` returns the rule's lower and upper
    bounds on candidate minus baseline for every pair (broadcasting a column against a row),
    computed exactly as the rule's ``decide`` computes them for one pair.
    """
    numerics.load("numpy")
    import numpy as np

    state = np.ones((1, 1))  # probability of each (baseline, candidate) count pair still undecided
    baseline_range = candidate_range = (0, 0)
    done = 0
    passed_mass = blocked_mass = 0.0
    for size in look_sizes(n, looks):
        new_baseline = support(binomial_pmf(size, p_baseline))
        new_candidate = support(binomial_pmf(size, p_candidate))
        to_baseline = transition(baseline_range, new_baseline, binomial_pmf(size - done, p_baseline))
        to_candidate = transition(candidate_range, new_candidate, binomial_pmf(size - done, p_candidate))
        joint = to_baseline.T @ state @ to_candidate
        baseline_counts = np.arange(new_baseline[0], new_baseline[1] + 1, dtype=np.float64)[:, None]
        candidate_counts = np.arange(new_candidate[0], new_candidate[1] + 1, dtype=np.float64)[None, :]
        lower, upper = bounds_grid(baseline_counts, candidate_counts, size)
        passes = lower > -delta
        blocks = upper < -delta
        passed_mass += float(joint[passes].sum())
        blocked_mass += float(joint[blocks].sum())
        state = np.where(passes | blocks, 0.0, joint)
        baseline_range, candidate_range, done = new_baseline, new_candidate, size
    return {
        "PASS": min(1.0, passed_mass),
        "BLOCK": min(1.0, blocked_mass),
        "INCONCLUSIVE": min(1.0, float(state.sum())),
    }
