"""What the benches measure alike: their children's CPU seconds."""

from __future__ import annotations

import resource


def children_cpu_s() -> float:
    """User plus system CPU seconds of every child this process has waited for (and theirs, when they waited).

    A process whose parent did not wait for it (one the kernel reaped for a parent that ignored
    SIGCHLD, or one orphaned to init) is counted nowhere: take the difference around one command."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime
