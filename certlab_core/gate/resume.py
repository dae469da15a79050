"""Crash-safe run stores: one writer at a time, a torn last line cut, and the trials already recorded never run twice.

A run killed with ``kill -9`` leaves a store whose trials.jsonl holds every trial recorded so
far, sealed, and at most one torn last line (the write in progress). ``certlab run --resume
RUNDIR`` opens it with the same sink: the sink takes the store's lock (an ``flock`` on the
store folder, which the kernel drops with the process, so a killed run leaves none behind),
cuts the torn line, and the runner schedules only the trials that have no final record. The
rule then reads the same records an uninterrupted run would have written, so the verdict is
the same. See docs/run-store.md, "Resuming a run".
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import FrameType

from attrs import frozen

from certlab_core.gate.manifest import Manifest
from certlab_core.gate.trial import Job
from certlab_core.plugin.errors import InstrumentError, UsageError

_held: set[int] = set()  # the lock descriptors this process holds; a forked child closes its copies


def _close_held_in_child() -> None:
    # A forked trial or oracle inherits the lock's descriptor; closing the copy (never unlocking:
    # that would unlock the parent's too) means a child left running after its parent was killed
    # does not hold the store's lock.
    for fd in list(_held):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


def held_by_this_process_only(fd: int) -> None:
    """Have every child forked from now on close its copy of the lock descriptor ``fd`` (see lock_store)."""
    _held.add(fd)


def forget_held(fd: int) -> None:
    _held.discard(fd)


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
    _held.add(fd)
    return fd


def unlock_store(fd: int) -> None:
    _held.discard(fd)
    with contextlib.suppress(OSError):
        os.close(fd)  # closing the last descriptor of the lock releases it


def cut_torn_tail(path: Path) -> int:
    """Cut a last line that has no newline (a write that a kill interrupted); returns how many bytes were cut.

    A record is written whole with its newline, so bytes after the last newline are a record
    whose write never finished: its trial was not recorded and runs again.
    """
    try:
        with path.open("rb+") as handle:
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
    except FileNotFoundError:
        return 0
    except OSError as error:
        raise InstrumentError(f"{path}: cannot repair the record sink ({error.strerror})") from None


@frozen
class Recorded:
    """A trial's last record in the store: its attempt and its outcome (success, failure or error)."""

    attempt: int
    outcome: str


def recorded_trials(path: Path, manifest: Manifest) -> dict[str, Recorded]:
    """Each recorded trial's last attempt, read from the store's lines with the decision's own checks.

    A line that is not a sealed trial record of this manifest (its seal, identity and attempt
    checked as ``certlab gate`` checks them) makes the store unfit to resume (exit 3):
    resuming must never build on records certlab did not write.
    """
    from certlab_core.gate.decision import read_lines
    from certlab_core.gate.store import collector_paused, iter_raw_line_bytes

    try:
        if os.stat(path).st_size == 0:  # a new run: nothing recorded yet (and nothing to read)
            return {}
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise InstrumentError(f"{path}: unreadable ({error.strerror}); the run store is damaged") from None
    with collector_paused():
        trials = read_lines(manifest, iter_raw_line_bytes(path))
    if trials.problems:
        raise InstrumentError(f"{path}: {trials.problems[0]}; the store is damaged or edited, so it cannot be resumed")
    return {
        trial_id: Recorded(int(line.get("attempt") or 1), str(line.get("outcome")))
        for trial_id, line in trials.latest.items()
    }


def pending_jobs(
    jobs: Iterable[Job], recorded: Mapping[str, Recorded], retry_infra: bool
) -> tuple[list[Job], str | None]:
    """The jobs of a look still to run, and why the run stops (a recorded final error), as an uninterrupted run would.

    A trial recorded as a success or a failure is done. One recorded as an error is done, and
    stops the run, unless ``retry_infra`` gives its first attempt a second one.
    """
    pending: list[Job] = []
    stopped: str | None = None
    for job in jobs:
        done = recorded.get(job.key.id)
        if done is None:
            pending.append(job)
        elif done.outcome == "error":
            if retry_infra and done.attempt == 1:
                pending.append(Job(job.key, 2, job.identity))
            else:
                stopped = stopped or f"{job.key.id}: recorded as an infrastructure error before the run was resumed"
    return pending, stopped


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


def scheduled_trials(manifest: Manifest) -> int:
    """How many trials the manifest schedules at most (every look of every condition, both arms)."""
    return 2 * manifest.n_per_arm * len(manifest.conditions)


def open_for_resume(folder: Path, descriptor: Path | None) -> Manifest:
    """The verified manifest of a run store to resume; refuses a finished one, or a descriptor given beside it."""
    from certlab_core.gate.store import DECISION, TRIALS, open_manifest

    if descriptor is not None:
        raise UsageError(f"--resume {folder}: the run store holds its sealed manifest; give no descriptor")
    manifest = open_manifest(folder)
    if os.path.lexists(folder / DECISION):
        raise UsageError(f"{folder}: this run is finished (it has {DECISION}); recompute its verdict with certlab gate")
    try:
        regular = stat.S_ISREG(os.lstat(folder / TRIALS).st_mode)
    except FileNotFoundError:
        regular = True  # the sink creates it
    except OSError as error:
        raise InstrumentError(f"{folder / TRIALS}: unreadable ({error.strerror}); the run store is damaged") from None
    if not regular:
        raise InstrumentError(f"{folder / TRIALS}: not a regular file; the run store is damaged and cannot be resumed")
    recorded = count_recorded(folder / TRIALS)
    torn = " (a torn last line is cut: its trial runs again)" if _torn(folder / TRIALS) else ""
    print(
        f"certlab: resuming {folder}: {recorded} of {scheduled_trials(manifest)} trials recorded{torn}",
        file=sys.stderr,
        flush=True,
    )
    return manifest


def _torn(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return False
            handle.seek(size - 1)
            return handle.read(1) != b"\n"
    except OSError:
        return False


def notice_interrupt(folder: Path, manifest: Manifest, command: str = "certlab run --resume") -> None:
    """On SIGINT, say ``interrupted: N of M trials recorded; resume with COMMAND FOLDER`` and stop (exit 130).

    The handler prints that line and raises KeyboardInterrupt, so every ``finally`` of the run
    (the sink, the worker pool) still runs; the CLI then exits 130. A forked child that has
    not reset the handler gets the plain KeyboardInterrupt.
    """
    notice_interrupt_total(folder / "trials.jsonl", scheduled_trials(manifest), f"{command} {folder}")


def notice_interrupt_total(path: Path, total: int, resume_with: str) -> None:
    """The SIGINT handler of :func:`notice_interrupt` for any record file of ``total`` trials."""
    owner = os.getpid()

    def interrupted(_signum: int, _frame: FrameType | None) -> None:
        if os.getpid() == owner:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C is a plain one
            line = f"certlab: interrupted: {count_recorded(path)} of {total} trials recorded; resume with {resume_with}"
            with contextlib.suppress(OSError, ValueError):
                print(line, file=sys.stderr, flush=True)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
