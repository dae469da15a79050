"""A deadline on a plugin's call in the harness: a SIGALRM timer, no thread."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType


class TooSlow(BaseException):
    """Raised in the block by the deadline's alarm (a BaseException: a plugin's ``except Exception`` lets it by)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` with :class:`TooSlow` (a SIGALRM timer: the harness starts no thread).

    Off the main thread, where no signal can be handled, the block runs without one. A timer
    already running (certify's heartbeat) is put back afterwards with what was left of it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def too_slow(_signum: int, _frame: FrameType | None) -> None:
        raise TooSlow

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, too_slow)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            left = max(0.001, previous_delay - (time.monotonic() - started))
            signal.setitimer(signal.ITIMER_REAL, left, previous_interval)
