"""Crash-safe run stores: one writer, a torn line cut, no trial run twice.

A run killed with ``kill -9`` leaves a store whose trials.jsonl holds every trial recorded so
far, sealed, and at most one torn last line (the write in progress). ``certlab run --resume
RUNDIR`` opens it with the same sink: the sink takes the store's lock (an ``flock`` on the
store folder, which the kernel drops with the process, so a killed run leaves none behind),
cuts the torn line, and the runner schedules only the trials that have no final record. The
rule then reads the same records an uninterrupted run would have written, so the verdict is
the same. See docs/run-store.md, "Resuming a run".
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from attrs import frozen

from certlab_core.evidence.record_file import count_recorded, notice_interrupt_total, torn
from certlab_core.gate.manifest import Manifest
from certlab_core.gate.trial import Job
from certlab_core.plugin.errors import InstrumentError, UsageError


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
    from certlab_core.gate.store import collector_paused
    from certlab_core.gate.summaries import read_summaries

    try:
        if os.stat(path).st_size == 0:  # a new run: nothing recorded yet (and nothing to read)
            return {}
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise InstrumentError(f"{path}: unreadable ({error.strerror}); the run store is damaged") from None
    with collector_paused():
        trials = read_summaries(manifest, path, workers=1)
    if trials.problems:
        raise InstrumentError(f"{path}: {trials.problems[0]}; the store is damaged or edited, so it cannot be resumed")
    return {trial_id: Recorded(summary.attempt, summary.outcome) for trial_id, summary in trials.latest.items()}


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
    cut = " (a torn last line is cut: its trial runs again)" if torn(folder / TRIALS) else ""
    print(
        f"certlab: resuming {folder}: {recorded} of {scheduled_trials(manifest)} trials recorded{cut}",
        file=sys.stderr,
        flush=True,
    )
    return manifest


def notice_interrupt(folder: Path, manifest: Manifest, command: str = "certlab run --resume") -> None:
    """On SIGINT, say ``interrupted: N of M trials recorded; resume with COMMAND FOLDER`` and stop (exit 130).

    The handler prints that line and raises KeyboardInterrupt, so every ``finally`` of the run
    (the sink, the worker pool) still runs; the CLI then exits 130. One that Python dropped is
    raised again before the next line is written (``record_file.notice_interrupt_line``).
    """
    notice_interrupt_total(folder / "trials.jsonl", scheduled_trials(manifest), f"{command} {folder}")
