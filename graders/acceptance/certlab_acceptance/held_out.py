"""Held-out acceptance in a certification: one lock per task, checked per arm.

The kernel reaches it through the ``certlab_held_out`` hook (``certlab_core.plugin.types.held_out``):
:func:`open_held_out` is the record's ``open``, :func:`register_experiment_task` and
:func:`experiment_lock` its operations for the user task of an A/B experiment. A user task is
this plugin's own (``user_task``, the ``user-task`` source) or another installed task source's
(``certlab_task_sources``): that one stages the folder, and its cases are locked when the run starts.

A certification runs under one lock per task: a user task's own lock (``certlab lock``)
when it has one, else a lock taken when the certification starts (for an installed family,
and for a user task that was never locked, after the same refusals ``certlab lock``
applies). Every lock is checked before every arm (the calibration, the agent) and after
the last trial; the acceptance grader checks it again before and after each scoring.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attrs import define, field

from certlab_acceptance.fingerprints import check_unmoved
from certlab_acceptance.lock import (
    LockRefused,
    lock_refusals,
    open_lock,
    read_task_cases,
    scratch_folder,
    staged_refusals,
    take_lock,
)
from certlab_acceptance.prediction import check_predictions, recorded_form
from certlab_acceptance.user_task import SOURCE_NAME, UserTask, holds_user_task, load_user_task, stage_family
from certlab_core.plugin import TaskFamily, UsageError, hookimpl
from certlab_core.plugin.types.grader import AcceptanceLock
from certlab_core.plugin.types.held_out import HeldOutIndex
from certlab_core.plugin.types.task_source import TaskSource
from certlab_core.sdk import trees
from certlab_core.sdk.workcopy import sha256_file, taskset_sha256

SOURCE_FILE = "source.json"
MAX_SOURCE_BYTES = 1 << 20


def recorded_repository(task: UserTask) -> str | None:
    """The repository a task built from a commit or an instance says it came from (``cases/source.json``), or None.

    The file is the task's own, so read as hostile: anything but a small JSON object naming the
    repository in one short printable line is no repository, and the task is summarised alone.
    """
    source = task.cases.parent / SOURCE_FILE
    try:
        if not source.is_file() or source.is_symlink() or source.stat().st_size > MAX_SOURCE_BYTES:
            return None
        document = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    name = document.get("repository") if isinstance(document, dict) else None
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or not name.isprintable():
        return None
    return name.strip()


def other_source(registry: HeldOutIndex, directory: Path) -> TaskSource | None:
    """The installed task source other than this plugin's that recognises ``directory`` (None: none, or ours)."""
    if holds_user_task(directory):
        return None
    for name in sorted(registry.names("task_sources")):
        source = registry.get("task_sources", name)
        if name != SOURCE_NAME and source.recognises(directory):
            return source  # type: ignore[no-any-return]
    return None


@define
class HeldOut:
    """The locks of one certification and the user tasks it staged; ``close()`` removes the scratch."""

    made: trees.MadeFolder
    families: list[TaskFamily] = field(factory=list)
    user_tasks: dict[str, UserTask | None] = field(factory=dict)  # None: a task another source staged
    locks: dict[str, AcceptanceLock] = field(factory=dict)
    lock_kinds: dict[str, str] = field(factory=dict)
    predictions: dict[str, list[dict[str, Any]]] = field(factory=dict)

    def lock_for(self, name: str) -> AcceptanceLock | None:
        return self.locks.get(name)

    def check(self, moment: str) -> None:
        """Raise InstrumentError (ERROR) naming what moved since any lock."""
        for name, lock in self.locks.items():
            check_unmoved(lock, f"{moment} ({name})")

    def family_facts(self, family: TaskFamily) -> dict[str, Any] | None:
        """The bundle's ``families`` entry of a user task (None for an installed family)."""
        if family.name not in self.user_tasks:
            return None
        task = self.user_tasks[family.name]
        return {
            "name": family.name,
            "version": family.version,
            "distribution": "user task",
            "distribution_version": family.version,
            "taskset_sha256": taskset_sha256(family),
            "prompt_sha256": sha256_file(Path(family.prompt_file)),
            "tasks": [d.id for d in family.defects],
            **({"repository": repository} if task and (repository := recorded_repository(task)) else {}),
        }

    def document(self) -> dict[str, Any]:
        """What the bundle records of the held-out setup: each lock's seal and where it came from."""
        return {
            "locks": [
                {
                    "task": name,
                    "kind": self.lock_kinds[name],
                    "seal": lock.seal,
                    "cases_sha256": lock.cases_sha256,
                    "fingerprinted_files": len(lock.fingerprints),
                }
                for name, lock in sorted(self.locks.items())
            ],
        }

    def recorded_predictions(self) -> list[dict[str, Any]]:
        return [dict(entry, task=name) for name, entries in sorted(self.predictions.items()) for entry in entries]

    @property
    def scratch(self) -> Path:
        return self.made.as_path

    def close(self) -> None:
        trees.remove_made(self.made)


def open_held_out(registry: HeldOutIndex, families: Sequence[TaskFamily], task_dirs: Sequence[str]) -> HeldOut:
    """Stage every user task, then open or take a lock for it and for every installed family."""
    held_out = HeldOut(made=scratch_folder("certlab-certify-"))
    try:
        names = {family.name for family in families}
        for number, directory in enumerate(task_dirs):
            source = other_source(registry, Path(directory))
            if source is not None:
                staged = source.stage(Path(directory), held_out.scratch / f"task-{number}")
                refused = staged_refusals(staged, source.name)
                if refused:
                    raise LockRefused(refused)
                if staged.name in names:
                    raise_duplicate(staged.name)
                names.add(staged.name)
                held_out.user_tasks[staged.name] = None
                held_out.families.append(staged)
                scratch = held_out.scratch / f"lock-{number}"
                held_out.locks[staged.name] = take_lock(Path(staged.cases_file), registry, scratch, Path(directory))
                held_out.lock_kinds[staged.name] = f"taken when the certification started (a {source.name} task)"
                held_out.predictions[staged.name] = recorded_form(check_predictions(Path(directory)))
                continue
            task = load_user_task(Path(directory))
            if task.name in names:
                raise_duplicate(task.name)
            names.add(task.name)
            family = stage_family(task, held_out.scratch / f"task-{number}")
            held_out.user_tasks[task.name] = task
            held_out.families.append(family)
            lock = open_lock(task, registry, held_out.scratch / f"lock-{number}")
            if lock is None:
                problems = lock_refusals(task, read_task_cases(task))
                if problems:
                    raise LockRefused(problems)
                lock = take_lock(task.cases, registry, held_out.scratch / f"lock-{number}", task.root, task.oracle)
                held_out.lock_kinds[task.name] = "taken when the certification started (the task is not locked)"
            else:
                held_out.lock_kinds[task.name] = "the task's lock (certlab lock)"
            held_out.locks[task.name] = lock
            if family.environment_dir is not None:  # the task's own environment: the one it was built and sealed with
                from certlab_acceptance.task_env import check_unchanged

                cases = Path(lock.cases_file).read_bytes()
                check_unchanged(task.name, family.environment_dir, task.cases.parent / SOURCE_FILE, cases)
            held_out.predictions[task.name] = recorded_form(check_predictions(task.root))
        for number, family in enumerate(families):
            held_out.locks[family.name] = take_lock(
                Path(family.cases_file), registry, held_out.scratch / f"family-lock-{number}"
            )
            held_out.lock_kinds[family.name] = "taken when the certification started"
        held_out.families = [*families, *held_out.families]
    except BaseException:
        held_out.close()
        raise
    return held_out


def raise_duplicate(name: str) -> None:
    raise UsageError(f"two tasks are named {name!r}; give each user task its own task.name in certlab.yaml")


# ----------------------------------------------------------------------------- a user task in an A/B experiment

_EXPERIMENT_LOCKS: dict[str, AcceptanceLock] = {}


def register_experiment_task(registry: HeldOutIndex, directory: Path) -> TaskFamily | None:
    """Make the user task in an experiment directory a task family of ``registry`` (None when there is none).

    The gate's descriptor then names it as ``task: {family: NAME}``. The task is staged (its
    tree lives until this process exits), proven like any family, and its lock (``certlab
    lock``, or one taken now after the same refusals) is kept for :func:`experiment_lock`.
    """
    import atexit
    import types

    source = other_source(registry, directory)
    if source is None and not holds_user_task(directory):
        return None
    made = scratch_folder("certlab-experiment-")
    atexit.register(trees.remove_made, made)
    scratch = made.as_path
    if source is not None:
        family = source.stage(directory, scratch / "task")
        refused = staged_refusals(family, source.name)
        if refused:
            raise LockRefused(refused)
        lock = take_lock(Path(family.cases_file), registry, scratch / "lock", directory)
    else:
        task = load_user_task(directory)
        family = stage_family(task, scratch / "task")
        found = open_lock(task, registry, scratch / "lock")
        if found is None:
            problems = lock_refusals(task, read_task_cases(task))
            if problems:
                raise LockRefused(problems)
            found = take_lock(task.cases, registry, scratch / "lock", task.root, task.oracle)
        lock = found
    _EXPERIMENT_LOCKS[family.name] = lock

    module = types.ModuleType(f"certlab_user_task_{family.name.replace('-', '_').replace('.', '_')}")

    @hookimpl
    def certlab_task_families() -> list[TaskFamily]:
        return [family]

    module.certlab_task_families = certlab_task_families  # type: ignore[attr-defined]
    registry.add_plugin(module, f"user-task:{family.name}", "user task", family.version)
    return family


def experiment_lock(family_name: str) -> AcceptanceLock | None:
    """The lock of a user task registered by :func:`register_experiment_task` in this process."""
    return _EXPERIMENT_LOCKS.get(family_name)
