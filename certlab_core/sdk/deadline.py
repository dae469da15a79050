"""A plugin's call bounded in this process: a SIGALRM deadline, errors, type."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

from certlab_core.plugin.errors import InstrumentError, UsageError

T = TypeVar("T")


class TooSlow(BaseException):
    """Raised in the block by the deadline's alarm (a BaseException: a plugin's ``except Exception`` lets it by)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` with :class:`TooSlow` (a SIGALRM timer: no thread is started).

    For a plugin's code run in this process, where a fork would cost more than the call. Off
    the main thread, where no signal can be handled, the block runs without one. A timer
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


#: How long a plugin's import, and each hook that gives its records, may take (a provider list's import too),
#: unless ``CERTLAB_PLUGIN_LOAD_S`` says otherwise: past it, the plugin is broken, named in one line, and every
#: command still answers.
PLUGIN_LOAD_S = 60.0
PLUGIN_LOAD_ENV = "CERTLAB_PLUGIN_LOAD_S"


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


def plugin_wait_s() -> float:
    """How long a plugin's import, a hook giving its records, or one of its quick callables may take, in seconds:
    ``CERTLAB_PLUGIN_LOAD_S``, else :data:`PLUGIN_LOAD_S` (a bad value is one line, exit 4)."""
    return seconds_from_environment(PLUGIN_LOAD_ENV, PLUGIN_LOAD_S, "a plugin's import may take, e.g. 60")


def plugin_call(
    whose: str,
    fn: Callable[..., T],
    *args: Any,
    seconds: float,
    wait_variable: str = PLUGIN_LOAD_ENV,
    returns: tuple[type, ...] | None = None,
    passes: tuple[type[Exception], ...] = (UsageError,),
) -> T:
    """``fn(*args)``, a plugin's callable, run here under a deadline of ``seconds``.

    Its refusal (a ``UsageError``, or what else ``passes`` names: a sandbox's launch refuses with
    an OSError) goes on as it is. Anything else it raises, running past ``seconds``
    (``wait_variable`` sets them), or returning none of ``returns`` is one line naming ``whose``
    ("the adapter X's version (its distribution)"): an InstrumentError, exit 3.
    """
    try:
        with deadline(seconds):
            value = fn(*args)
    except passes:
        raise
    except TooSlow:
        raise InstrumentError(f"{whose} did not return within {seconds:g} s ({wait_variable} sets the wait)") from None
    except Exception as error:  # a plugin's code
        raise InstrumentError(f"{whose} raised {type(error).__name__}: {str(error)[:160]}") from None
    if returns is not None and not isinstance(value, returns):
        wanted = " or ".join("None" if t is type(None) else t.__name__ for t in returns)
        raise InstrumentError(f"{whose} returned {type(value).__name__}, not {wanted}")
    return value
