"""Inline SVG plots: a condition's interval against its margin, an OC curve.

Each function returns one ``<svg>`` element as text, with no namespace URL (inline SVG in
HTML5 needs none) and no external reference, so the page stays self-contained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from attrs import frozen

VERDICT_COLOURS = {
    "PASS": "#1a7f37",
    "BLOCK": "#cf222e",
    "INCONCLUSIVE": "#9a6700",
    "STOPPED": "#6e7781",
    "ERROR": "#8250df",
    "reported only": "#6e7781",
}
OUTCOME_COLOURS = {"PASS": "#1a7f37", "BLOCK": "#cf222e", "INCONCLUSIVE": "#6e7781"}


def _n(value: float) -> str:
    return f"{value:.1f}"


@frozen
class Axis:
    """A linear map from data values ``[low, high]`` to pixels ``[start, end]``."""

    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = self.high - self.low or 1.0
        return self.start + (value - self.low) / span * (self.end - self.start)


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering ``[low, high]``: steps of 1, 2 or 5 times a power of ten."""
    span = high - low
    if span <= 0:
        return [low]
    raw = span / max(1, count)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    values = []
    value = first
    while value <= high + 1e-9:
        values.append(0.0 if abs(value) < 1e-9 else round(value, 10))
        value += step
    return values


def difference_range(lower: float | None, upper: float | None, delta: float) -> tuple[float, float]:
    """The x range of a condition plot: the interval, -delta and 0, padded, within [-1, 1]."""
    points = [-delta, 0.0] + [v for v in (lower, upper) if v is not None]
    low, high = min(points), max(points)
    pad = max(0.05, 0.08 * (high - low))
    return max(-1.0, low - pad), min(1.0, high + pad)


def condition_plot(
    name: str, verdict: str, lower: float | None, upper: float | None, estimate: float | None, delta: float
) -> str:
    """One condition: its interval for candidate minus baseline, the margin -delta, and zero."""
    width, height = 640, 96
    left, right, baseline_y = 40.0, width - 20.0, 58.0
    low, high = difference_range(lower, upper, delta)
    x = Axis(low, high, left, right)
    colour = VERDICT_COLOURS.get(verdict, "#24292f")
    label = (
        f"{name}: candidate minus baseline in [{lower:.4f}, {upper:.4f}] against the margin -{delta:g}: {verdict}"
        if lower is not None and upper is not None
        else f"{name}: not evaluated ({verdict})"
    )
    parts = [
        f'<svg class="condition-plot" data-condition="{escape(name)}" data-verdict="{escape(verdict)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
        # the region where a drop is larger than the margin
        f'<rect x="{_n(left)}" y="14" width="{_n(max(0.0, x(-delta) - left))}" height="{_n(baseline_y - 14)}" '
        'fill="#cf222e" fill-opacity="0.08"/>',
        f'<line x1="{_n(left)}" y1="{_n(baseline_y)}" x2="{_n(right)}" y2="{_n(baseline_y)}" stroke="#57606a"/>',
    ]
    for tick in ticks(low, high):
        tx = x(tick)
        parts.append(
            f'<line x1="{_n(tx)}" y1="{_n(baseline_y)}" x2="{_n(tx)}" y2="{_n(baseline_y + 5)}" stroke="#57606a"/>'
        )
        parts.append(
            f'<text x="{_n(tx)}" y="{_n(baseline_y + 18)}" font-size="11" text-anchor="middle" fill="#57606a">'
            f"{tick:+.2f}</text>"
        )
    zero = x(0.0)
    margin = x(-delta)
    parts.append(f'<line class="zero" x1="{_n(zero)}" y1="14" x2="{_n(zero)}" y2="{_n(baseline_y)}" stroke="#57606a"/>')
    parts.append(
        f'<line class="margin" x1="{_n(margin)}" y1="10" x2="{_n(margin)}" y2="{_n(baseline_y)}" '
        'stroke="#cf222e" stroke-dasharray="4 3"/>'
    )
    parts.append(
        f'<text x="{_n(margin)}" y="9" font-size="11" text-anchor="middle" fill="#cf222e">−δ = {-delta:+.2f}</text>'
    )
    if lower is not None and upper is not None:
        x1, x2, y = x(lower), x(upper), 34.0
        parts.append(
            f'<line class="interval" x1="{_n(x1)}" y1="{_n(y)}" x2="{_n(x2)}" y2="{_n(y)}" '
            f'stroke="{colour}" stroke-width="6" stroke-linecap="butt"/>'
        )
        for end in (x1, x2):
            parts.append(
                f'<line x1="{_n(end)}" y1="{_n(y - 9)}" x2="{_n(end)}" y2="{_n(y + 9)}" stroke="{colour}" '
                'stroke-width="2"/>'
            )
        if estimate is not None:
            parts.append(
                f'<circle cx="{_n(x(estimate))}" cy="{_n(y)}" r="4" fill="#ffffff" stroke="{colour}" stroke-width="2"/>'
            )
    else:
        parts.append(
            f'<text x="{_n((left + right) / 2)}" y="38" font-size="12" text-anchor="middle" '
            f'fill="{colour}">not evaluated</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


@frozen
class OcPoint:
    """The plan at one true difference: the probability of each verdict."""

    difference: float
    pass_: float
    block: float
    inconclusive: float


def oc_plot(points: Sequence[OcPoint], delta: float, caption: str) -> str:
    """The operating characteristic: P(PASS), P(BLOCK), P(INCONCLUSIVE) against the true difference."""
    width, height = 640, 300
    left, right, top, bottom = 48.0, width - 130.0, 16.0, height - 40.0
    low = min(p.difference for p in points)
    high = max(p.difference for p in points)
    x = Axis(low, high, left, right)
    y = Axis(0.0, 1.0, bottom, top)
    parts = [
        f'<svg class="oc-plot" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(caption)}">',
        f"<title>{escape(caption)}</title>",
        f'<line x1="{_n(left)}" y1="{_n(bottom)}" x2="{_n(right)}" y2="{_n(bottom)}" stroke="#57606a"/>',
        f'<line x1="{_n(left)}" y1="{_n(top)}" x2="{_n(left)}" y2="{_n(bottom)}" stroke="#57606a"/>',
    ]
    for tick in ticks(low, high, 6):
        tx = x(tick)
        parts.append(f'<line x1="{_n(tx)}" y1="{_n(bottom)}" x2="{_n(tx)}" y2="{_n(bottom + 5)}" stroke="#57606a"/>')
        parts.append(
            f'<text x="{_n(tx)}" y="{_n(bottom + 18)}" font-size="11" text-anchor="middle" fill="#57606a">'
            f"{tick:+.2f}</text>"
        )
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        ty = y(tick)
        parts.append(
            f'<line x1="{_n(left - 5)}" y1="{_n(ty)}" x2="{_n(right)}" y2="{_n(ty)}" stroke="#d0d7de" '
            'stroke-width="0.5"/>'
        )
        parts.append(
            f'<text x="{_n(left - 8)}" y="{_n(ty + 4)}" font-size="11" text-anchor="end" fill="#57606a">'
            f"{tick:.2f}</text>"
        )
    parts.append(
        f'<text x="{_n((left + right) / 2)}" y="{_n(height - 6)}" font-size="11" text-anchor="middle" '
        'fill="#24292f">true candidate − baseline success rate</text>'
    )
    if low <= -delta <= high:
        mx = x(-delta)
        parts.append(
            f'<line x1="{_n(mx)}" y1="{_n(top)}" x2="{_n(mx)}" y2="{_n(bottom)}" stroke="#cf222e" '
            'stroke-dasharray="4 3"/>'
        )
        parts.append(f'<text x="{_n(mx + 4)}" y="{_n(top + 10)}" font-size="11" fill="#cf222e">−δ</text>')
    series = (
        ("PASS", [p.pass_ for p in points]),
        ("BLOCK", [p.block for p in points]),
        ("INCONCLUSIVE", [p.inconclusive for p in points]),
    )
    for row, (verdict, values) in enumerate(series):
        path = " ".join(f"{_n(x(p.difference))},{_n(y(v))}" for p, v in zip(points, values, strict=True))
        colour = OUTCOME_COLOURS[verdict]
        parts.append(
            f'<polyline class="oc-{verdict.lower()}" points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
        )
        ly = top + 14 + 18 * row
        parts.append(
            f'<line x1="{_n(right + 12)}" y1="{_n(ly)}" x2="{_n(right + 32)}" y2="{_n(ly)}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{_n(right + 36)}" y="{_n(ly + 4)}" font-size="11" fill="#24292f">P({verdict})</text>')
    parts.append("</svg>")
    return "".join(parts)
