"""One arm's exact Clopper-Pearson limits in plain Python: no numpy, no scipy.

The rule's ``interval`` (what the contract, the report and ``certlab stats`` print) needs
one pair of limits at a time, and importing scipy for it costs about 0.4 s of CPU: more
than a small certification's own summary. Each limit is the root of a binomial tail,
found by bisection over the doubles until no double lies between the two ends:

- the lower limit for ``x`` of ``n``: the ``p`` at which P(X >= x) = alpha / 2;
- the upper limit: the ``p`` at which P(X <= x) = alpha / 2.

Each tail is a ratio of sums of binomial terms taken relative to the mode, so no log-gamma
difference (whose rounding grows with ``n``) and no ``1 - tail`` cancellation enters it.
Every term is added until the next is below 1e-17 of the sum it joins. The limits come out
within 4 units in the last place of the true root (scipy's beta quantiles: up to 31;
``tests/test_clopper_pearson_rule.py`` checks against exact rational arithmetic).
"""

from __future__ import annotations

_NEGLIGIBLE = 1e-17  # a term this much smaller than its sum no longer changes the double


def binomial_tail(x: int, n: int, p: float, *, upper: bool) -> float:
    """P(X >= x) (``upper``) or P(X <= x) for X ~ Binomial(n, p), to a few ulps."""
    if p <= 0.0:
        return 1.0 if not upper or x <= 0 else 0.0
    if p >= 1.0:
        return 1.0 if upper or x >= n else 0.0
    odds = p / (1.0 - p)
    mode = min(n, int((n + 1) * p))
    total = 1.0  # the mode's term; every other term is relative to it
    chosen = 1.0 if (mode >= x if upper else mode <= x) else 0.0
    for step in (1, -1):
        toward_chosen_end = (step > 0) == upper  # the chosen terms run on to this end
        term, j = 1.0, mode
        while (j < n) if step > 0 else (j > 0):
            term *= (n - j) / (j + 1) * odds if step > 0 else j / ((n - j + 1) * odds)
            j += step
            if term == 0.0:
                break
            total += term
            is_chosen = j >= x if upper else j <= x
            if is_chosen:
                chosen += term
            if (is_chosen or not toward_chosen_end) and term < _NEGLIGIBLE * (chosen or total):
                break
    return chosen / total


def _root(x: int, n: int, target: float, *, upper: bool) -> float:
    """The ``p`` whose tail is ``target``: P(X >= x) rises with p, P(X <= x) falls."""
    low, high = 0.0, 1.0
    while True:
        middle = (low + high) / 2.0
        if middle <= low or middle >= high:
            return middle
        below = binomial_tail(x, n, middle, upper=upper) < target
        if below == upper:
            low = middle
        else:
            high = middle


def limits(successes: int, n: int, alpha: float) -> tuple[float, float]:
    """The exact Clopper-Pearson limits of ``successes`` of ``n`` at two-sided level ``alpha``; n = 0: [0, 1]."""
    if n == 0:
        return 0.0, 1.0
    tail = alpha / 2.0
    low = 0.0 if successes == 0 else _root(successes, n, tail, upper=True)
    high = 1.0 if successes == n else _root(successes, n, tail, upper=False)
    return low, high
