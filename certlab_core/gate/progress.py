"""A gate run's progress on stderr: a bar on a terminal, or a line per tenth."""

from __future__ import annotations

import sys
import time
from typing import Any


class ProgressLine:
    """A progress bar on stderr without threads: redrawn in place on a terminal, a line per tenth otherwise."""

    def __init__(self, total: int, enabled: bool = True, stream: Any = None) -> None:
        self.total = max(1, total)
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self.last_draw = 0.0
        self.last_tenth = -1

    def update(self, done: int, failed: int, errors: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        rate = done / max(1e-9, now - self.started)
        if self.tty:
            if now - self.last_draw < 0.1 and done < self.total:
                return
            self.last_draw = now
            width = 30
            filled = int(width * min(done, self.total) / self.total)
            bar = "#" * filled + "-" * (width - filled)
            self.stream.write(f"\r[{bar}] {done}/{self.total} trials  {failed} failed  {errors} errors  {rate:.0f}/s ")
            self.stream.flush()
        else:
            tenth = 10 * done // self.total
            if tenth != self.last_tenth:
                self.last_tenth = tenth
                self.stream.write(f"progress: {done}/{self.total} trials, {failed} failed, {errors} errors\n")
                self.stream.flush()

    def note(self, line: str) -> None:
        """A line of its own (the heartbeat's), above the bar on a terminal."""
        if not self.enabled:
            return
        self.stream.write(f"\r{line}\n" if self.tty else f"{line}\n")
        self.stream.flush()
        self.last_draw = 0.0  # the bar is drawn again at the next update

    def finish(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
