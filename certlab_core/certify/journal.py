"""Crash-safe certify: each trial journalled in --out; --resume runs the rest.

Real agents take minutes per trial. ``certlab certify`` writes ``OUT/trials.journal.jsonl`` as
it goes: once the agent's trials are scheduled, a line with the certification's options and one
with the number of trials scheduled, then one sealed line per finished trial (the record the bundle will hold), each
written whole and synced. After ``kill -9`` or Ctrl-C, ``certlab certify --resume OUT`` reads
the options back, cuts a torn last line, proves and calibrates again (minutes at most: the
constructed agents are quick), and runs only the trials the journal does not hold; the bundle
then holds every trial once, as an uninterrupted run's would. The journal is removed once
bundle.json and CONTRACT.md are written.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from certlab_core.certify.lab import Progress, TrialRecord, TrialSpec
from certlab_core.certify.trial_runs import run_trials
from certlab_core.evidence.record_file import (
    count_recorded,
    cut_torn_tail,
    notice_interrupt_line,
    raise_if_interrupted,
)
from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.plugin.types.grader import Grader
from certlab_core.sdk.canonical import ShapeError, canonical_json, seal_holds, sealed, structure, unstructure

JOURNAL_FILE = "trials.journal.jsonl"
JOURNAL_SCHEMA = "certlab.certify-journal/1"
RESUME_COMMAND = "certlab certify --resume"


class TrialJournal:
    """The journal of one certification in the folder ``out`` (see the module's docstring)."""

    def __init__(self, out: Path, options: Any = None) -> None:
        """``options``: the certification's CertifyOptions, written with the schedule when the journal is new."""
        self.out = out
        self.path = out / JOURNAL_FILE
        self._options: dict[str, Any] | None = None if options is None else unstructure(options)

    # ------------------------------------------------------------------ writing

    def _append(self, document: dict[str, Any]) -> None:
        data = memoryview(canonical_json(sealed(dict(document, schema=JOURNAL_SCHEMA))) + b"\n")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                while data:
                    data = data[os.write(fd, data) :]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as error:
            raise InstrumentError(f"{self.path}: cannot journal the trial ({error.strerror})") from None

    def start(self) -> None:
        """Refuse a folder that already holds a journal (a new certification must not build on it).

        The file itself is written when the agent's trials are scheduled: a certification that
        stops before (a usage error, a refused proof) leaves nothing to resume.
        """
        if os.path.lexists(self.path):
            raise UsageError(
                f"{self.out} holds an unfinished certification ({JOURNAL_FILE}); "
                f"resume it with {RESUME_COMMAND} {self.out}, or choose a new --out folder"
            )

    def schedule(self, count: int) -> None:
        """Record how many trials the agent's arm schedules (once; a resumed run must schedule the same)."""
        scheduled = self._lines("schedule")
        if scheduled:
            if scheduled[0].get("trials") != count:
                raise InstrumentError(
                    f"{self.path}: the journal scheduled {scheduled[0].get('trials')} trials, this run {count}; "
                    "the families or plugins changed since, so it cannot be resumed: start a new --out folder"
                )
            return
        if self._options is None:
            raise InstrumentError(f"{self.path}: the journal holds no options; start a new --out folder")
        self._append({"kind": "options", "options": self._options})
        self._append({"kind": "schedule", "trials": count})

    def record(self, trial: TrialRecord) -> None:
        raise_if_interrupted()  # an interrupt Python dropped stops the run here, before this trial is journalled
        self._append({"kind": "trial", "id": trial.id, "trial": unstructure(trial)})

    def finish(self) -> None:
        """The certification is written: the journal goes (and an interrupt from now on says so)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        _written.add(self.out)

    # ------------------------------------------------------------------ reading

    def _lines(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The journal's sealed lines (a line whose seal does not hold makes it unfit to resume)."""
        from certlab_core.sdk.safe_io import MAX_DOCUMENT_BYTES

        found: list[dict[str, Any]] = []
        if not os.path.lexists(self.path):
            return found
        if not self.path.is_file() or self.path.is_symlink():
            raise InstrumentError(f"{self.path}: not a regular file; the journal is damaged and cannot be resumed")
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                document: Any = None
                if len(raw) <= MAX_DOCUMENT_BYTES:
                    with contextlib.suppress(ValueError, RecursionError):
                        document = json.loads(raw)
                if not isinstance(document, dict) or not seal_holds(document):
                    raise InstrumentError(
                        f"{self.path} line {number}: not a sealed journal line; the journal is damaged or edited, "
                        "so it cannot be resumed: start a new --out folder"
                    )
                if kind is None or document.get("kind") == kind:
                    found.append(document)
        return found

    def reopen(self) -> dict[str, Any]:
        """The options of the journalled certification, after cutting a torn last line (a kill during a write)."""
        if not os.path.lexists(self.path):
            raise UsageError(f"{self.out}: no unfinished certification to resume (no {JOURNAL_FILE})")
        cut_torn_tail(self.path)
        options = self._lines("options")
        if not options or not isinstance(options[0].get("options"), dict):
            raise InstrumentError(f"{self.path}: the journal holds no options; start a new --out folder")
        found: dict[str, Any] = options[0]["options"]
        return found

    def recorded(self) -> dict[str, TrialRecord]:
        """Every journalled trial by id."""
        found: dict[str, TrialRecord] = {}
        for line in self._lines("trial"):
            try:
                trial = structure(line["trial"], TrialRecord, "trial")
            except Exception as error:  # cattrs raises its own exception groups for a wrong shape
                said = str(error) if isinstance(error, ShapeError) else type(error).__name__
                raise InstrumentError(
                    f"{self.path}: trial {line.get('id')!r} is not a trial record ({said}); start a new --out folder"
                ) from None
            found[trial.id] = trial
        return found

    def scheduled(self) -> int | None:
        lines = self._lines("schedule")
        count = lines[0].get("trials") if lines else None
        return count if isinstance(count, int) else None


def run_journalled(
    specs: Sequence[TrialSpec], graders: Sequence[Grader], workers: int, progress: Progress, journal: TrialJournal
) -> list[TrialRecord]:
    """Run the trials the journal does not hold, journalling each as it finishes; every trial, in schedule order."""
    journal.schedule(len(specs))
    done = journal.recorded()
    unknown = sorted(set(done) - {spec.id for spec in specs})
    if unknown:
        raise InstrumentError(
            f"{journal.path}: trial {unknown[0]} is not scheduled by this certification; start a new --out folder"
        )
    pending = [spec for spec in specs if spec.id not in done]
    if done:
        progress(f"resume: {len(done)} of {len(specs)} trials recorded; running the other {len(pending)}")
    fresh = run_trials(pending, graders, workers, progress, on_record=journal.record)
    raise_if_interrupted()
    by_id = {**done, **{trial.id: trial for trial in fresh}}
    return [by_id[spec.id] for spec in specs]


#: The out folders whose certification this process wrote (their journal finished).
_written: set[Path] = set()


def where_certification_stands(out: Path) -> str:
    """Said after "interrupted" or "stopped": ``: N of M trials recorded; resume with certlab certify --resume
    OUT``, or why there is nothing to resume."""
    journal = TrialJournal(out)
    if journal.out in _written:  # its last steps (signing, the executor's close) were left
        return f" after the certification was written to {out}; nothing to resume"
    try:
        total = journal.scheduled()
    except InstrumentError:
        total = None
    if total is None:
        return " before the agent's trials began; nothing to resume: certify again"
    return f": {count_recorded(journal.path)} of {total} trials recorded; resume with {RESUME_COMMAND} {out}"


def notice_interrupt(out: Path) -> None:
    """On SIGINT: ``interrupted: N of M trials recorded; resume with certlab certify --resume OUT``, then exit 130."""
    notice_interrupt_line(lambda: f"certlab: interrupted{where_certification_stands(out)}")
