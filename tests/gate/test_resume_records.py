"""What a resumed run reads of the trials already recorded: each trial's last attempt, numbered as recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from certlab_core.gate.resume import pending_jobs, recorded_trials
from certlab_core.gate.store import TRIALS, open_manifest, seal_line
from certlab_core.gate.trial import Job, TrialKey

ARCHIVED = Path(__file__).resolve().parent.parent / "archived_stores"


def _retried_twice(tmp_path: Path) -> tuple[Path, str]:
    """An archived store whose first trial failed for infrastructure on attempt 1 and again on its retry, attempt 2."""
    folder = tmp_path / "store"
    shutil.copytree(ARCHIVED / "block", folder)
    lines = (folder / TRIALS).read_text().splitlines()
    first = json.loads(lines[0])
    errors = [
        seal_line({**first, "attempt": attempt, "outcome": "error", "error": f"infra {attempt}"}) for attempt in (1, 2)
    ]
    (folder / TRIALS).write_text("".join(errors) + "".join(line + "\n" for line in lines[1:]))
    return folder, first["id"]


def test_a_trial_retried_once_is_recorded_at_its_second_attempt(tmp_path: Path) -> None:
    folder, trial_id = _retried_twice(tmp_path)
    recorded = recorded_trials(folder / TRIALS, open_manifest(folder))
    assert recorded[trial_id].attempt == 2 and recorded[trial_id].outcome == "error"


def test_resuming_never_retries_a_trial_whose_retry_already_failed(tmp_path: Path) -> None:
    # Its retry was its one --retry-infra retry: running attempt 2 again would record it twice (an ERROR store).
    folder, trial_id = _retried_twice(tmp_path)
    manifest = open_manifest(folder)
    recorded = recorded_trials(folder / TRIALS, manifest)
    arm, condition, index = trial_id.split("/")
    job = Job(TrialKey(arm, condition, int(index), seed=0), 1, "identity")
    pending, stopped = pending_jobs([job], recorded, retry_infra=True)
    assert pending == [] and stopped is not None and trial_id in stopped
