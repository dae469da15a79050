"""Pre-registered looks: trials per arm at each look, and the alpha it spends.

A design with ``n`` trials per arm and ``looks`` equally spaced looks evaluates its rule at
look ``j`` (1-based) on the first ``ceil(j * n / looks)`` trials of each arm, spends
``alpha / looks`` at every look, and stops at the first decisive look. Pure and tiny: the
gate engine and every statistical rule use the same sizes.
"""

from __future__ import annotations

import operator
from typing import Any

from certlab_core.plugin.errors import UsageError


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise UsageError(f"{what} must be a whole number, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise UsageError(f"{what} must be a whole number, got {value!r}") from None


def look_sizes(n: int, looks: int = 1) -> tuple[int, ...]:
    """The cumulative trials per arm at each look: look ``j`` sees ``ceil(j * n / looks)``; the last sees ``n``."""
    trials = _whole(n, "trials per arm")
    count = _whole(looks, "looks")
    if trials < 1:
        raise UsageError(f"trials per arm must be at least 1, got {trials}")
    if not 1 <= count <= trials:
        raise UsageError(f"looks must be from 1 to the trials per arm ({trials}), got {count}")
    return tuple(-(-j * trials // count) for j in range(1, count + 1))


def look_alpha(alpha: float, looks: int = 1) -> float:
    """The alpha one look spends: ``alpha`` split equally over ``looks``."""
    count = _whole(looks, "looks")
    if count < 1:
        raise UsageError(f"looks must be at least 1, got {count}")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0.0 < alpha < 1.0:
        raise UsageError(f"alpha must be a number strictly between 0 and 1, got {alpha!r}")
    return float(alpha) / count
