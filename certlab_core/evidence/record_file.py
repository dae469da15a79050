"""Append-only record files: one writer, a torn tail cut, Ctrl-C said.

The writer holds an ``flock`` on the file's folder, which the kernel drops with the process,
so a killed writer leaves no lock behind, and every child forked after it closes its copy of
the descriptor. A record is written whole with its newline, so bytes after the last newline
are a write that a kill interrupted: they are cut, and that record is made again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.sdk.processes import keep_from_children, release_to_children


def lock_store(folder: Path) -> int:
    """Take the writer's lock of the run store ``folder`` (an flock on the folder); refuse in one line if it is held.

    Returns the descriptor to give :func:`unlock_store`.
    """
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise UsageError(f"{folder}: cannot open the run store ({error.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(
            f"{folder}: another certlab run is writing this run store; wait for it to end, "
            f"then resume with certlab run --resume {folder}"
        ) from None
    keep_from_children(fd)  # a trial left running after its run was killed must not keep the store locked
    return fd


def unlock_store(fd: int) -> None:
    release_to_children(fd)
    with contextlib.suppress(OSError):
        os.close(fd)  # closing the last descriptor of the lock releases it


def cut_torn_tail(path: Path) -> int:
    """Cut a last line that has no newline (a write that a kill interrupted); returns how many bytes were cut.

    A record is written whole with its newline, so bytes after the last newline are a record
    whose write never finished: its trial was not recorded and runs again. Only a regular file
    is cut: a link in its place (to a file of the user's) or a FIFO is refused, never followed.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise InstrumentError(f"{path}: a link, not the record file certlab wrote; it cannot be resumed") from None
        raise InstrumentError(f"{path}: cannot repair the record sink ({error.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InstrumentError(f"{path}: not a regular file, so not the record file certlab wrote; it cannot be resumed")
    try:
        with os.fdopen(fd, "rb+") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return 0
            position = size
            block = 1 << 16
            while position > 0:
                start = max(0, position - block)
                handle.seek(start)
                chunk = handle.read(position - start)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                position = start
            else:
                keep = 0
            if keep < size:
                handle.truncate(keep)
                os.fsync(handle.fileno())
            return size - keep
    except OSError as error:
        raise InstrumentError(f"{path}: cannot repair the record sink ({error.strerror})") from None


def count_recorded(path: Path) -> int:
    """How many distinct trials trials.jsonl records (for the interruption message; never raises)."""
    seen: set[str] = set()
    try:
        with path.open("rb") as handle:
            for raw in _whole_lines(handle):
                try:
                    document = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(document, dict) and isinstance(document.get("id"), str):
                    seen.add(document["id"])
    except OSError:
        return len(seen)
    return len(seen)


def _whole_lines(handle: Iterable[bytes]) -> Iterator[bytes]:
    for raw in handle:
        if raw.endswith(b"\n"):
            yield raw


def torn(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return False
            handle.seek(size - 1)
            return handle.read(1) != b"\n"
    except OSError:
        return False


_report_unraisable = sys.unraisablehook  # the hook _quiet_when_dropped passes every other unraisable to
_interrupted: set[int] = set()  # the pid of the process a SIGINT interrupted (it has said so), once it came
_stop_line: dict[int, Callable[[int, FrameType | None], None]] = {}  # by pid: the interrupt-line handler made there


def notice_interrupt_line(say: Callable[[], str]) -> None:
    """On SIGINT in this process: print ``say()`` (what is recorded, how to resume), raise KeyboardInterrupt.

    Python drops an exception that a signal handler raises while an at-fork callback or a
    finaliser runs (``Exception ignored in ...``), and a run that forks a process per trial
    would then go on to its end as if nobody had pressed Ctrl-C. So the interrupt stays
    pending, and :func:`raise_if_interrupted`, which the writers call before each record and
    at the end of their runs, raises it again. A forked child that has not reset the handler
    gets the plain KeyboardInterrupt. The drop is not reported (``sys.unraisablehook``): the
    one line said is the interrupt's.

    A process started with SIGINT ignored (a background job of a script: the shell ignores it
    there, so that Ctrl-C stops only the foreground) keeps ignoring it, as POSIX means; the
    line is then said on SIGTERM alone (:func:`stop_line_handler`).
    """
    owner = os.getpid()
    if sys.unraisablehook is not _quiet_when_dropped:
        global _report_unraisable
        _report_unraisable = sys.unraisablehook
        sys.unraisablehook = _quiet_when_dropped

    def interrupted(_signum: int, _frame: FrameType | None) -> None:
        if os.getpid() == owner:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C is a plain one
            _interrupted.add(owner)
            with contextlib.suppress(OSError, ValueError):
                print(say(), file=sys.stderr, flush=True)
        raise KeyboardInterrupt

    _stop_line[owner] = interrupted
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, interrupted)


def stop_line_handler() -> Callable[[int, FrameType | None], None] | None:
    """The handler :func:`notice_interrupt_line` made in this process (SIGTERM calls it), else None."""
    return _stop_line.get(os.getpid())


def _quiet_when_dropped(unraisable: Any) -> None:
    """``sys.unraisablehook``: the KeyboardInterrupt Python dropped is raised again, so it is not reported."""
    if not (isinstance(unraisable.exc_value, KeyboardInterrupt) and os.getpid() in _interrupted):
        _report_unraisable(unraisable)


def interrupt_said() -> bool:
    """Whether a SIGINT interrupted this process and its line (:func:`notice_interrupt_line`) was said."""
    return os.getpid() in _interrupted


def raise_if_interrupted() -> None:
    """Raise the KeyboardInterrupt of a SIGINT whose handler's exception Python dropped (its line is said)."""
    if os.getpid() in _interrupted:
        raise KeyboardInterrupt


def where_it_stands(path: Path, total: int, resume_with: str) -> str:
    """``: N of M trials recorded; resume with COMMAND``, said after "interrupted" or "stopped"."""
    return f": {count_recorded(path)} of {total} trials recorded; resume with {resume_with}"


def notice_interrupt_total(path: Path, total: int, resume_with: str) -> None:
    """:func:`notice_interrupt_line` for a record file of ``total`` trials: ``N of M trials recorded``."""
    notice_interrupt_line(lambda: f"certlab: interrupted{where_it_stands(path, total, resume_with)}")
