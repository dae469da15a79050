"""A deadline on a plugin's call in the harness: a SIGALRM timer, no thread."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

from certlab_core.plugin.errors import UsageError

#: How long a plugin's import, and each hook that gives its records, may take (a provider list's import too),
#: unless ``CERTLAB_PLUGIN_LOAD_S`` says otherwise: past it, the plugin is broken, named in one line, and every
#: command still answers.
PLUGIN_LOAD_S = 60.0
PLUGIN_LOAD_ENV = "CERTLAB_PLUGIN_LOAD_S"


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


def seconds_from_environment(variable: str, default: float, example: str) -> float:
    """The seconds ``$variable`` gives (a positive number), or ``default`` when it is unset or blank.

    A value that is no positive number is one line (exit 4), saying what it sets: ``example``
    ("an executor may take to start, e.g. 300").
    """
    said = os.environ.get(variable, "").strip()
    if not said:
        return default
    try:
        seconds = float(said)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 1e9:
        raise UsageError(f"{variable}={said!r}: give the seconds {example}")
    return seconds
