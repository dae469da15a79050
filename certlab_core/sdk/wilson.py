"""The Wilson score interval, shown beside a rule's exact ones for reading."""

from __future__ import annotations

import math
from statistics import NormalDist


def wilson(successes: int, n: int, alpha: float) -> tuple[float, float]:
    """The Wilson score interval (no continuity correction) at two-sided level ``alpha``."""
    if n == 0:
        return 0.0, 1.0
    z = -NormalDist().inv_cdf(alpha / 2.0)
    spread = z * math.sqrt(z * z + 4.0 * successes * (n - successes) / n)
    low = 0.0 if successes == 0 else (2.0 * successes + z * z - spread) / (2.0 * (n + z * z))
    high = 1.0 if successes == n else (2.0 * successes + z * z + spread) / (2.0 * (n + z * z))
    return max(0.0, low), min(1.0, high)
