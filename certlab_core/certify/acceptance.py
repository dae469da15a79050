"""Held-out acceptance as the kernel reaches it: a plugin's, or cases unscored.

The kernel knows no lock, no leak scan and no prediction: a plugin (certlab-acceptance)
returns them as a ``HeldOutAcceptance`` record. Without one, a certification runs with no
lock and says that held-out cases went unscored (``certification.held_out_notices``), and a
task of the user's own, which is proven and scored by its held-out cases, is refused naming
what to install.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attrs import define, field

from certlab_core._runtime.registry import Registry
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.base import JsonValue
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock
from certlab_core.plugin.types.held_out import HeldOutAcceptance, HeldOutRun
from certlab_core.sdk.trees import MadeFolder, make_temp_folder, remove_made
from certlab_core.sdk.user_task import holds_user_task

PROVIDER = "certlab-acceptance"


def held_out_of(registry: Registry) -> HeldOutAcceptance | None:
    """The installed held-out acceptance (None when no plugin provides it); two providers are refused."""
    found = registry.all(HeldOutAcceptance)
    if len(found) > 1:
        named = ", ".join(
            f"{name} ({registry.describe_source(registry.plugin_name_of(HeldOutAcceptance, name))})"
            for name in sorted(found)
        )
        raise UsageError(f"two plugins provide held-out acceptance: {named}; leave one out with CERTLAB_PLUGINS")
    return next(iter(found.values()), None)


def _not_installed(what: str) -> UsageError:
    return UsageError(
        f"{what}: a task of your own is proven and scored by its held-out cases, and {PROVIDER} is not installed "
        f"(pip install {PROVIDER})"
    )


@define
class Unscored:
    """A certification's held-out setup when no plugin provides held-out acceptance: no lock, nothing recorded."""

    families: list[TaskFamily]
    made: MadeFolder = field(factory=lambda: make_temp_folder("certlab-certify-"))
    locks: dict[str, AcceptanceLock] = field(factory=dict)

    @property
    def scratch(self) -> Path:
        return self.made.as_path

    def lock_for(self, name: str) -> AcceptanceLock | None:
        return None

    def check(self, moment: str) -> None:
        return None

    def family_facts(self, family: TaskFamily) -> dict[str, JsonValue] | None:
        return None

    def document(self) -> dict[str, JsonValue]:
        return {"locks": []}

    def recorded_predictions(self) -> list[dict[str, JsonValue]]:
        return []

    def close(self) -> None:
        remove_made(self.made)


def open_held_out(registry: Registry, families: Sequence[TaskFamily], task_dirs: Sequence[str]) -> HeldOutRun:
    """The locks of a certification (the plugin's ``open``), or :class:`Unscored` when none is installed."""
    provider = held_out_of(registry)
    if provider is not None:
        return provider.open(registry, families, task_dirs)
    if task_dirs:
        raise _not_installed(f"--task {task_dirs[0]}")
    return Unscored(list(families))


def register_experiment_task(registry: Registry, directory: Path) -> TaskFamily | None:
    """Make the user task in an experiment directory a family of ``registry``; None when the folder holds none."""
    provider = held_out_of(registry)
    if provider is not None:
        return provider.register_experiment_task(registry, directory)
    if holds_user_task(directory):
        raise _not_installed(str(directory))
    return None


def experiment_lock(registry: Registry, family_name: str) -> AcceptanceLock | None:
    """The lock of a user task registered in this process by :func:`register_experiment_task` (None otherwise)."""
    provider = held_out_of(registry)
    return provider.experiment_lock(family_name) if provider is not None else None
