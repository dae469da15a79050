"""Held-out acceptance as the kernel sees it: ``certlab_held_out``'s operations.

The kernel scores the held-out cases of a family or a user task under a lock: a copy of the
cases and the fingerprints of what decides the score, taken before the first arm and checked
before every arm and after the last trial. It knows none of that itself; the plugin that
returns a :class:`HeldOutAcceptance` (certlab-acceptance) opens the locks of a certification
(``open``), stages and locks the user task of an A/B experiment (``register_experiment_task``,
``experiment_lock``), and checks a lock (``check_lock``). It stages a user task through the
task source that recognises its folder (``certlab_core.plugin.types.task_source``). Without
one, held-out cases are unscored and the certification says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from attrs import field, frozen

from certlab_core.plugin.types.base import JsonValue, Record
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock


class HeldOutIndex(Protocol):
    """What held-out acceptance may use of the installed plugins (the kernel's registry, narrowed).

    It reads the installed graders, each one's plugin module (the scorer it fingerprints), and
    adds a staged user task as a plugin of its own.
    """

    def names(self, kind: str, /) -> list[str]: ...

    def get(self, kind: str, name: str, /) -> Any: ...

    def module_of(self, kind: str, name: str, /) -> object | None: ...

    def add_plugin(self, module: object, name: str, distribution: str, version: str, /) -> None: ...


class HeldOutRun(Protocol):
    """The locks of one certification and the user tasks it staged; ``close()`` removes its scratch folder."""

    @property
    def families(self) -> Sequence[TaskFamily]:
        """The installed families first, then each user task staged as a family."""
        ...

    @property
    def scratch(self) -> Path:
        """The folder holding the staged tasks and the locked copies of the cases (hidden from the agent)."""
        ...

    @property
    def locks(self) -> Mapping[str, AcceptanceLock]:
        """The lock of every family and user task, by name."""
        ...

    def lock_for(self, name: str) -> AcceptanceLock | None:
        """The lock of one family or user task (None when it has none)."""
        ...

    def check(self, moment: str) -> None:
        """Raise InstrumentError (ERROR) naming what moved since any lock; ``moment`` says when it was checked."""
        ...

    def family_facts(self, family: TaskFamily) -> dict[str, JsonValue] | None:
        """The bundle's ``families`` entry of a user task (None for an installed family)."""
        ...

    def document(self) -> dict[str, JsonValue]:
        """What the bundle records of the held-out setup (its ``held_out``)."""
        ...

    def recorded_predictions(self) -> list[dict[str, JsonValue]]:
        """The predictions the run was made under (the bundle's ``predictions``)."""
        ...

    def close(self) -> None: ...


class OpenHeldOut(Protocol):
    """Stage every user task (an experiment directory), then open or take a lock for it and for every family."""

    def __call__(
        self, registry: HeldOutIndex, families: Sequence[TaskFamily], task_dirs: Sequence[str], /
    ) -> HeldOutRun: ...


class RegisterExperimentTask(Protocol):
    """Make the user task in an experiment directory a task family of ``registry`` (None when there is none)."""

    def __call__(self, registry: HeldOutIndex, directory: Path, /) -> TaskFamily | None: ...


class ExperimentLock(Protocol):
    """The lock of a user task that ``register_experiment_task`` registered in this process (None otherwise)."""

    def __call__(self, family_name: str, /) -> AcceptanceLock | None: ...


class CheckLock(Protocol):
    """Raise InstrumentError (ERROR) naming what moved since ``lock`` was taken; ``moment`` says when it was checked."""

    def __call__(self, lock: AcceptanceLock, moment: str, /) -> None: ...


@frozen
class HeldOutAcceptance(Record):
    """Held-out acceptance for certification and for the A/B gate's user tasks (one plugin provides it)."""

    name: str
    description: str
    open: OpenHeldOut = field(eq=False, repr=False)
    register_experiment_task: RegisterExperimentTask = field(eq=False, repr=False)
    experiment_lock: ExperimentLock = field(eq=False, repr=False)
    check_lock: CheckLock = field(eq=False, repr=False)
