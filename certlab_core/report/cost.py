"""Cost and tokens per arm, with intervals, and what the figures can support.

Given each arm's per-trial ``Usage`` reports (None for a trial that reported nothing),
:func:`cost_report` gives, per arm and per quantity (dollars, input, output and cached
tokens), the mean per reporting trial with a Student-t interval, and, between two arms,
Welch's interval on the difference of means. A comparison ("cheaper", "costlier", "no
difference shown") is refused, with its reason, when either arm reported nothing, when
the arms (or the trials of one arm) report in different shapes, when a shape does not
report the quantity, or when the dollars come from different sources. Every dollar figure
is rendered with the note that it is the client's own estimate.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from functools import lru_cache

from attrs import frozen

from certlab_core.plugin.types.agent import Usage
from certlab_core.report.incomplete_beta import regularized_beta

QUANTITIES = ("cost_usd", "input_tokens", "output_tokens", "cached_input_tokens")
LABELS = {
    "cost_usd": "cost",
    "input_tokens": "input tokens",
    "output_tokens": "output tokens",
    "cached_input_tokens": "cached input tokens",
}
DOLLAR_NOTE = "the client's own estimate, not a bill"


# ----------------------------------------------------------------------------- Student's t, exactly enough


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (any positive real)."""
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=64)  # the arms' figures share their degrees of freedom
def t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t (bisection on the CDF, to 1e-12)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0 (got p={p}, df={df})")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
        if high > 1e12:
            return math.inf
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


# ----------------------------------------------------------------------------- the records


@frozen
class Figure:
    """One quantity of one arm: the mean per reporting trial, its interval, and the total."""

    quantity: str
    n: int
    mean: float | None
    low: float | None
    high: float | None
    total: float | None


@frozen
class ArmCost:
    arm: str
    trials: int
    reported: int
    shapes: tuple[str, ...]
    cost_sources: tuple[str, ...]
    figures: Mapping[str, Figure]


@frozen
class CostComparison:
    """``candidate`` against ``baseline`` on one quantity: a claim, or the reason there is none."""

    quantity: str
    claim: str | None  # "cheaper", "costlier", "no difference shown"
    refused: str | None
    low: float | None = None
    high: float | None = None


@frozen
class CostReport:
    alpha: float
    arms: Mapping[str, ArmCost]
    comparisons: tuple[CostComparison, ...]
    baseline: str
    candidate: str

    def lines(self) -> list[str]:
        """The report as text; every dollar figure says it is the client's own estimate."""
        out: list[str] = []
        level = f"{100 * (1 - self.alpha):g}%"
        for arm in self.arms.values():
            if not arm.reported:
                out.append(f"{arm.arm}: no usage reported by any of its {arm.trials} trials")
                continue
            shapes = ", ".join(arm.shapes)
            out.append(f"{arm.arm}: {arm.reported} of {arm.trials} trials reported usage ({shapes})")
            for quantity in QUANTITIES:
                figure = arm.figures[quantity]
                if not figure.n or figure.mean is None:
                    continue
                out.append(f"  {LABELS[quantity]}: {_render(quantity, figure, level)}")
        for comparison in self.comparisons:
            label = LABELS[comparison.quantity]
            if comparison.refused:
                out.append(f"{label}: no comparison claimed: {comparison.refused}")
                continue
            interval = (
                f"[{_amount(comparison.quantity, comparison.low)}, {_amount(comparison.quantity, comparison.high)}]"
            )
            note = f" ({DOLLAR_NOTE})" if comparison.quantity == "cost_usd" else ""
            if comparison.claim in ("cheaper", "costlier"):
                if comparison.quantity == "cost_usd":
                    said = f"{self.candidate} is {comparison.claim} than {self.baseline}"
                else:
                    fewer = "fewer" if comparison.claim == "cheaper" else "more"
                    said = f"{self.candidate} uses {fewer} {label} than {self.baseline}"
            else:
                said = f"no difference shown between {self.candidate} and {self.baseline}"
            out.append(f"{label}: {said}")
            out[-1] += f"; {self.candidate} - {self.baseline} per trial in {interval} at {level}{note}"
        return out


def _amount(quantity: str, value: float | None) -> str:
    if value is None:
        return "?"
    if quantity == "cost_usd":
        return f"${value:,.4f}" if value >= 0 else f"-${-value:,.4f}"
    return f"{value:,.1f}"


def _render(quantity: str, figure: Figure, level: str) -> str:
    per = f"{_amount(quantity, figure.mean)} per trial"
    if figure.low is not None and figure.high is not None:
        per += f" [{_amount(quantity, figure.low)}, {_amount(quantity, figure.high)}] at {level}"
    else:
        per += " (one trial: no interval)"
    per += f", {_amount(quantity, figure.total)} in all over {figure.n} trial(s)"
    if quantity == "cost_usd":
        per += f" ({DOLLAR_NOTE})"
    return per


# ----------------------------------------------------------------------------- computing


@frozen
class _Moments:
    """The values of one quantity of one arm, summed once: count, exact mean and sample variance."""

    n: int
    mean: float | None
    variance: float | None  # None below two values
    total: float | None


def _moments(values: Sequence[float]) -> _Moments:
    n = len(values)
    if n == 0:
        return _Moments(0, None, None, None)
    total = math.fsum(values)
    mean = total / n
    if n == 1:
        return _Moments(1, mean, None, total)
    return _Moments(n, mean, math.fsum([(v - mean) ** 2 for v in values]) / (n - 1), total)


def _mean_interval(moments: _Moments, alpha: float) -> tuple[float | None, float | None]:
    if moments.variance is None or moments.mean is None:
        return None, None
    half = t_quantile(1 - alpha / 2, moments.n - 1) * math.sqrt(moments.variance / moments.n)
    return moments.mean - half, moments.mean + half


def _values(reports: Sequence[Usage], quantity: str) -> list[float]:
    return [float(v) for v in map(operator.attrgetter(quantity), reports) if v is not None]


def _arm_cost(
    arm: str, usages: Sequence[Usage | None], reports: Sequence[Usage], moments: Mapping[str, _Moments], alpha: float
) -> ArmCost:
    figures: dict[str, Figure] = {}
    for quantity in QUANTITIES:
        m = moments[quantity]
        low, high = _mean_interval(m, alpha)
        figures[quantity] = Figure(quantity, m.n, m.mean, low, high, m.total)
    return ArmCost(
        arm=arm,
        trials=len(usages),
        reported=len(reports),
        shapes=tuple(sorted({u.shape for u in reports})),
        cost_sources=tuple(sorted({u.cost_source for u in reports if u.cost_source})),
        figures=figures,
    )


def _welch(a: _Moments, b: _Moments, alpha: float) -> tuple[float, float] | None:
    """Welch's interval on mean(b) - mean(a); None when either side has fewer than two values."""
    if a.variance is None or b.variance is None or a.mean is None or b.mean is None:
        return None
    var_a, var_b = a.variance / a.n, b.variance / b.n
    spread = var_a + var_b
    difference = b.mean - a.mean
    if spread == 0.0:
        return difference, difference
    df = spread**2 / ((var_a**2) / (a.n - 1) + (var_b**2) / (b.n - 1))
    half = t_quantile(1 - alpha / 2, df) * math.sqrt(spread)
    return difference - half, difference + half


def _refusal(quantity: str, base: ArmCost, cand: ArmCost, names: tuple[str, str]) -> str | None:
    for arm, name in ((base, names[0]), (cand, names[1])):
        if not arm.reported:
            return f"the {name} arm reported nothing"
    for arm, name in ((base, names[0]), (cand, names[1])):
        if len(arm.shapes) > 1:
            return f"the {name} arm's trials report in different shapes ({', '.join(arm.shapes)})"
    if base.shapes != cand.shapes:
        return f"the arms report different shapes ({base.shapes[0]} against {cand.shapes[0]}), which do not compare"
    for arm, name in ((base, names[0]), (cand, names[1])):
        if arm.figures[quantity].n == 0:
            return f"the {name} arm's {arm.shapes[0]} reports carry no {LABELS[quantity]}"
    if quantity == "cost_usd" and base.cost_sources != cand.cost_sources:
        return "the dollars come from different sources " + (
            f"({', '.join(base.cost_sources) or 'none'} against {', '.join(cand.cost_sources) or 'none'})"
        )
    if base.figures[quantity].n < 2 or cand.figures[quantity].n < 2:
        return "an arm has fewer than two reports of it, so no interval"
    return None


def cost_report(
    arms: Mapping[str, Sequence[Usage | None]],
    alpha: float = 0.05,
    baseline: str = "baseline",
    candidate: str = "candidate",
) -> CostReport:
    """Per-arm figures for every arm given, and candidate-against-baseline comparisons (when both are given)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    reports = {name: [u for u in usages if u is not None] for name, usages in arms.items()}
    moments = {
        name: {quantity: _moments(_values(reports[name], quantity)) for quantity in QUANTITIES} for name in arms
    }  # each quantity of each arm is summed once, for its figure and for the comparison
    figures = {name: _arm_cost(name, usages, reports[name], moments[name], alpha) for name, usages in arms.items()}
    comparisons: list[CostComparison] = []
    if baseline in figures and candidate in figures:
        base, cand = figures[baseline], figures[candidate]
        for quantity in QUANTITIES:
            if quantity == "cached_input_tokens" and not (base.figures[quantity].n or cand.figures[quantity].n):
                continue
            reason = _refusal(quantity, base, cand, (baseline, candidate))
            if reason is not None:
                comparisons.append(CostComparison(quantity, None, reason))
                continue
            interval = _welch(moments[baseline][quantity], moments[candidate][quantity], alpha)
            assert interval is not None
            low, high = interval
            claim = "cheaper" if high < 0 else "costlier" if low > 0 else "no difference shown"
            comparisons.append(CostComparison(quantity, claim, None, low, high))
    return CostReport(alpha=alpha, arms=figures, comparisons=tuple(comparisons), baseline=baseline, candidate=candidate)
