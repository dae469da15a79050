"""``certlab predict``: predictions registered before the run, sealed, chained.

Each prediction is one line of ``EXPERIMENT_DIR/.certlab/predictions.jsonl``: the text of
the expectation (which arm wins, by how much), when it was registered, the seal of the
line before it, and its own seal. A prediction may only be registered before the
experiment is locked: the lock fingerprints the predictions file, so every run checks it
before every arm, and ``certlab predict DIR --check`` compares each prediction with the
lock (and with a certification bundle that recorded it). An edited prediction is reported
as edited: its own seal breaks, the chain to the next one breaks, or its seal differs from
the one the lock or the run recorded.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from attrs import frozen

from certlab_acceptance.lock import lock_path, make_lock_folder, predictions_path, read_lock
from certlab_core.plugin import UsageError
from certlab_core.sdk import canonical, safe_io

PREDICTION_SCHEMA = "certlab.prediction/1"
MAX_PREDICTION_CHARS = 2000


@frozen
class PredictionStatus:
    """One registered prediction and what became of it."""

    index: int
    expect: str
    registered_at: str
    seal: str
    intact: bool
    problems: tuple[str, ...]


def read_predictions(root: Path) -> list[dict[str, Any]]:
    """The prediction lines as they are now (an unreadable line is kept as a marker)."""
    path = predictions_path(root)
    if not path.exists():
        return []
    entries: list[dict[str, Any]] = []
    for number, raw in enumerate(safe_io.iter_capped_lines(path, "predictions file"), start=1):
        line = raw.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        entry = safe_io.parse_line(line)  # None: not JSON under the caps (certlab_core.sdk.safe_io)
        entries.append(entry if isinstance(entry, dict) else {"unreadable_line": number})
    return entries


def register(root: Path, expect: str) -> dict[str, Any]:
    """Seal a new prediction; refused once the experiment is locked (the run's inputs are then fixed)."""
    text = expect.strip()
    if not text:
        raise UsageError('--expect is empty; say which arm wins and by how much, e.g. --expect "candidate +5 points"')
    if len(text) > MAX_PREDICTION_CHARS:
        raise UsageError(f"--expect is longer than {MAX_PREDICTION_CHARS} characters; say it in a sentence or two")
    if lock_path(root).exists():
        raise UsageError(
            f"{root} is already locked: a prediction must be registered before the lock; "
            "to predict anew, register it and lock again with certlab lock --again"
        )
    entries = read_predictions(root)
    problems = [line for status in check_chain(entries) for line in status.problems]
    if problems:
        raise UsageError(f"the registered predictions were edited ({problems[0]}); refusing to add to a broken chain")
    previous = entries[-1]["seal"] if entries else ""
    entry = canonical.sealed(
        {
            "schema": PREDICTION_SCHEMA,
            "index": len(entries) + 1,
            "expect": text,
            "registered_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "previous": previous,
        }
    )
    path = predictions_path(root)
    make_lock_folder(root, "predictions")
    try:  # a link in the file's place is refused, never written through
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as failure:
        reason = "a link" if failure.errno == errno.ELOOP else failure.strerror
        raise UsageError(f"{path}: cannot add the prediction ({reason}); it must be the file predict made") from None
    with os.fdopen(fd, "ab") as handle:
        handle.write(canonical.canonical_json(entry) + b"\n")
    return entry


def check_chain(entries: Sequence[dict[str, Any]]) -> list[PredictionStatus]:
    """Each prediction's own seal and its link to the one before it."""
    statuses: list[PredictionStatus] = []
    previous = ""
    for position, entry in enumerate(entries, start=1):
        problems: list[str] = []
        if "unreadable_line" in entry:
            problems.append(f"prediction {position} is no longer readable JSON")
            statuses.append(PredictionStatus(position, "?", "?", "", False, tuple(problems)))
            previous = ""
            continue
        if entry.get("schema") != PREDICTION_SCHEMA:
            problems.append(f"prediction {position} has the schema {entry.get('schema')!r}")
        if not canonical.seal_holds(entry):
            problems.append(f"prediction {position} was edited after it was sealed (its seal no longer holds)")
        if entry.get("index") != position:
            problems.append(f"prediction {position} carries the index {entry.get('index')!r}: one was removed or moved")
        if entry.get("previous", "") != previous:
            problems.append(f"prediction {position} no longer follows the one before it: an earlier one was edited")
        previous = canonical.seal_of(entry)
        statuses.append(
            PredictionStatus(
                index=position,
                expect=str(entry.get("expect", "")),
                registered_at=str(entry.get("registered_at", "")),
                seal=previous,
                intact=not problems,
                problems=tuple(problems),
            )
        )
    return statuses


def check_predictions(root: Path, recorded: Sequence[dict[str, Any]] = ()) -> list[PredictionStatus]:
    """The chain, checked against the lock's fingerprint of the file and the seals a run recorded."""
    statuses = check_chain(read_predictions(root))
    lock = read_lock(root)
    if lock is not None:
        locked_hash = lock.get("fingerprints", {}).get("predictions")
        path = predictions_path(root)
        now = "missing"
        if path.exists():
            import hashlib

            now = hashlib.sha256(path.read_bytes()).hexdigest()
        if locked_hash is not None and locked_hash != now:
            note = "the predictions file changed after the lock (a prediction was edited, added or removed)"
            statuses = [
                PredictionStatus(s.index, s.expect, s.registered_at, s.seal, False, (*s.problems, note))
                for s in statuses
            ] or [PredictionStatus(0, "", "", "", False, (note,))]
    by_index = {s.index: s for s in statuses}
    for entry in recorded:
        index = int(entry.get("index", 0))
        status = by_index.get(index)
        if status is None:
            statuses.append(
                PredictionStatus(
                    index, str(entry.get("expect", "")), "", "", False, (f"prediction {index} was removed",)
                )
            )
        elif status.seal != entry.get("seal"):
            edited = PredictionStatus(
                status.index,
                status.expect,
                status.registered_at,
                status.seal,
                False,
                (*status.problems, f"prediction {index} differs from the one the run recorded: edited after the run"),
            )
            statuses[statuses.index(status)] = edited
    return statuses


def recorded_form(statuses: Sequence[PredictionStatus]) -> list[dict[str, Any]]:
    """What a run records of the predictions it ran under (its text and seal)."""
    return [{"index": s.index, "expect": s.expect, "seal": s.seal, "intact": s.intact} for s in statuses]
