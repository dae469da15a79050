"""A long run's heartbeat: now and then, the trials in flight and their ages.

Progress is printed as each trial finishes; a real agent's trial takes minutes, and nothing
finishes meanwhile. While ``beating`` is in force, a line such as ``still running:
intervals/off-by-one/1 for 2:00; elapsed 2:30`` goes to the run's progress every
``CERTLAB_HEARTBEAT_S`` seconds (30 by default; 0 turns it off). Nothing of the evidence
changes: the line is the console's alone.

The parent forks its trials and must start no thread, so the beat is a ``SIGALRM`` interval
timer: the waits it interrupts are resumed by Python itself (PEP 475). A forked child gets the
handler that was there before (the timer is not inherited), so the agent's and the graders'
code never sees this one. Where no timer can be set (not the main thread, or a timer already
running that is not ours), there is no heartbeat, and the run is otherwise the same.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from certlab_core.plugin.errors import UsageError

HEARTBEAT_VARIABLE = "CERTLAB_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 30.0


def clock(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


def heartbeat_interval(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between heartbeats from ``CERTLAB_HEARTBEAT_S`` (None: off); a value that is no number is refused."""
    raw = (os.environ if env is None else env).get(HEARTBEAT_VARIABLE)
    if raw is None or not raw.strip():
        return DEFAULT_HEARTBEAT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0.0 <= seconds <= 86400.0:
        raise UsageError(f"{HEARTBEAT_VARIABLE}={raw!r}: give seconds between heartbeats, 0 to 86400 (0: none)")
    return seconds or None


class InFlight:
    """The trials running now, each with the moment it started."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._running: dict[str, float] = {}

    def start(self, name: str) -> None:
        self._running.setdefault(name, time.monotonic())

    def finish(self, name: str) -> None:
        self._running.pop(name, None)

    def line(self) -> str | None:
        """``still running: A for 1:05, B for 0:12; elapsed 3:10``, or None when nothing runs."""
        if not self._running:
            return None
        now = time.monotonic()
        running = ", ".join(f"{name} for {clock(now - since)}" for name, since in self._running.items())
        return f"still running: {running}; elapsed {clock(now - self.started)}"


_previous: list[Any] = []  # the SIGALRM handler a running heartbeat replaced (what a forked child gets back)


def _restore_in_child() -> None:
    if _previous:
        signal.signal(signal.SIGALRM, _previous[0])
        _previous.clear()


os.register_at_fork(after_in_child=_restore_in_child)


@contextlib.contextmanager
def beating(in_flight: InFlight, write: Callable[[str], None], interval_s: float | None) -> Iterator[None]:
    """While the block runs, ``write`` the in-flight line every ``interval_s`` seconds (None: never)."""
    if interval_s is None or _previous:
        yield
        return

    def beat(_signum: int, _frame: object) -> None:
        line = in_flight.line()
        if line is None:
            return
        with contextlib.suppress(Exception):  # an interrupted write of the same stream: this beat is skipped
            write(line)

    if signal.getitimer(signal.ITIMER_REAL)[0] > 0:  # someone else's timer: leave it alone
        yield
        return
    try:
        previous = signal.signal(signal.SIGALRM, beat)
    except ValueError:  # not the main thread: no timer here
        yield
        return
    _previous.append(previous)
    signal.setitimer(signal.ITIMER_REAL, interval_s, interval_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)
        _previous.clear()
