"""Option values the commands share, refused in one line: seconds and workers.

A number of seconds is finite, above 0 and at most a week: ``nan`` passed every comparison and
``inf`` reached the bundle's JSON (an internal error), a preflight's smoke call ran without a time
limit, and ``1e308`` made a deadline infinite (an internal error).
Workers are 1 or more, or 0 for the CPUs this process may run on (its affinity, as a container's
or ``taskset``'s limit sets it, not the machine's count).
"""

from __future__ import annotations

import math
import os

from certlab_core.plugin.errors import UsageError

#: The most seconds an option may give (a week): ``1e308`` was finite, and a deadline past it was infinite.
MAX_SECONDS = 7 * 24 * 3600


def refuse_bad_seconds(option: str, seconds: float) -> None:
    """Refuse ``seconds`` given to ``option`` unless it is a finite number above 0 and at most :data:`MAX_SECONDS`."""
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_SECONDS:
        raise UsageError(f"{option} {seconds:g}: give a number of seconds above 0 and at most {MAX_SECONDS} (a week)")


def usable_cpus() -> int:
    """How many CPUs this process may run on (at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def workers_or_cpus(workers: int, what: str) -> int:
    """The ``--workers`` given (``what`` run at once), or the usable CPUs for 0; below 0 is refused."""
    if workers < 0:
        raise UsageError(f"--workers {workers}: give a number of {what} at once, 1 or more (0: the number of CPUs)")
    return workers or usable_cpus()
