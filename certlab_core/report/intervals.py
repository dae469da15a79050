"""Per-arm intervals for reading: exact Clopper-Pearson, and pass^k.

Neither decides anything: the verdict comes from the sealed statistical rule. Both are at a
two-sided level ``alpha``; ``n = 0`` gives the whole ``[0, 1]``.
"""

from __future__ import annotations

import math

from certlab_core.sdk.wilson import wilson as wilson  # the report shows it beside the exact one

_BISECTION_STEPS = 100
_CF_ITERATIONS = 300
_CF_EPSILON = 3e-16
_TINY = 1e-300


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _CF_ITERATIONS + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < _CF_EPSILON:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the Beta(a, b) distribution function at ``x``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of Beta(a, b), by bisection on ``regularized_beta``."""
    low, high = 0.0, 1.0
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2.0
        if regularized_beta(a, b, middle) < q:
            low = middle
        else:
            high = middle
        if high - low < 1e-15:
            break
    return (low + high) / 2.0


def clopper_pearson(successes: int, n: int, alpha: float) -> tuple[float, float]:
    """The exact Clopper-Pearson interval for ``successes`` of ``n`` at two-sided level ``alpha``."""
    if n == 0:
        return 0.0, 1.0
    low = 0.0 if successes == 0 else beta_quantile(alpha / 2.0, successes, n - successes + 1)
    high = 1.0 if successes == n else beta_quantile(1.0 - alpha / 2.0, successes + 1, n - successes)
    return low, high


def pass_hat_k(successes: int, n: int, k: int) -> float | None:
    """pass^k: the unbiased estimate that ``k`` independent trials all succeed, C(s, k) / C(n, k); None if k > n."""
    if k < 1 or k > n:
        return None
    return math.comb(successes, k) / math.comb(n, k)
