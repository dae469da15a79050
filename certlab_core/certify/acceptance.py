"""Held-out acceptance and user tasks, as the kernel reaches them in plugins.

The kernel knows no lock, no leak scan, no prediction and no layout of a user's task: a
plugin returns held-out acceptance as a ``HeldOutAcceptance`` record, and each kind of user
task as a ``TaskSource`` that recognises its experiment directory. Without held-out
acceptance, a certification runs with no lock and says that held-out cases went unscored
(``certification.held_out_notices``); a task of the user's own, which is proven and scored by
its held-out cases, is refused in one line naming what to install.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attrs import define, field

from certlab_core._runtime.registry import Registry
from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.plugin.types.base import JsonValue
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock
from certlab_core.plugin.types.held_out import HeldOutAcceptance, HeldOutRun
from certlab_core.plugin.types.task_source import TaskSource
from certlab_core.sdk.trees import MadeFolder, make_temp_folder, remove_made


def _install(registry: Registry, kind: str) -> str:
    """What to install for ``kind``, from the installed provider lists (``pip install ...``, or where to look)."""
    return registry.providers.install_line(kind)


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


def recognising_source(registry: Registry, directory: Path) -> TaskSource | None:
    """The installed task source that recognises ``directory`` (None when none does); two are refused."""
    found = [source for _, source in sorted(registry.all(TaskSource).items()) if _recognises(source, directory)]
    if len(found) > 1:
        named = ", ".join(source.name for source in found)
        raise UsageError(
            f"{directory}: more than one task source reads this folder ({named}); leave one out with CERTLAB_PLUGINS"
        )
    return found[0] if found else None


def _recognises(source: TaskSource, directory: Path) -> bool:
    """The source's ``recognises(directory)`` (it only looks: held to ``CERTLAB_PLUGIN_LOAD_S``); one that raises,
    runs past that or answers anything but a bool is named in one line."""
    from certlab_core.sdk.deadline import plugin_call, plugin_wait_s

    whose = f"{directory}: the task source {source.name}'s recognises"
    answer = plugin_call(whose, source.recognises, directory, seconds=plugin_wait_s())
    if not isinstance(answer, bool):
        raise InstrumentError(
            f"{directory}: the task source {source.name}'s recognises returned {type(answer).__name__}, not a bool"
        )
    return answer


def task_source_for(registry: Registry, directory: Path, what: str) -> TaskSource:
    """The task source that reads ``directory``; ``what`` names it in the one line that refuses a folder none reads."""
    if not directory.is_dir():
        raise UsageError(f"{what}: no such experiment directory" if not directory.exists() else f"{what}: not a folder")
    source = recognising_source(registry, directory)
    if source is not None:
        return source
    installed = sorted(registry.all(TaskSource))
    if not installed:
        raise UsageError(
            f"{what}: no task source is installed to read a task of your own ({_install(registry, 'task_sources')})"
        )
    raise UsageError(f"{what}: no installed task source recognises this folder (installed: {', '.join(installed)})")


def _not_installed(registry: Registry, what: str) -> UsageError:
    listed = " or ".join(registry.providers.distributions("held_out"))
    missing = f"{listed} is not installed" if listed else "no plugin of held-out acceptance is installed"
    return UsageError(
        f"{what}: a task of your own is proven and scored by its held-out cases, and {missing} "
        f"({_install(registry, 'held_out')})"
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
    """The locks of a certification (the plugin's ``open``), or :class:`Unscored` when none is installed.

    Every ``--task`` folder must be one an installed task source reads, before anything is staged.
    """
    for directory in task_dirs:
        task_source_for(registry, Path(directory), f"--task {directory}")
    provider = held_out_of(registry)
    if provider is not None:
        return provider.open(registry, families, task_dirs)
    if task_dirs:
        raise _not_installed(registry, f"--task {task_dirs[0]}")
    return Unscored(list(families))


def register_experiment_task(registry: Registry, directory: Path) -> TaskFamily | None:
    """Make the user task in an experiment directory a family of ``registry``; None when no source reads the folder."""
    if recognising_source(registry, directory) is None:
        return None
    provider = held_out_of(registry)
    if provider is None:
        raise _not_installed(registry, str(directory))
    return provider.register_experiment_task(registry, directory)


def refuse_unread_family(registry: Registry, directory: Path, family_name: str | None) -> None:
    """Refuse an experiment whose task family is neither installed nor known, while no task source is installed.

    The family may be the experiment directory's own task, which only a task source reads: the one line says
    what to install, where the registry would only list the installed families.
    """
    known = family_name is None or bool(registry.providers.of("task_families", family_name))
    if known or family_name in registry.all(TaskFamily) or registry.all(TaskSource):
        return
    raise UsageError(
        f"{directory}: task.family {family_name!r} is not installed, and no task source is installed to read a "
        f"task of your own there ({_install(registry, 'task_sources')})"
    )


def experiment_lock(registry: Registry, family_name: str) -> AcceptanceLock | None:
    """The lock of a user task registered in this process by :func:`register_experiment_task` (None otherwise)."""
    provider = held_out_of(registry)
    return provider.experiment_lock(family_name) if provider is not None else None


def check_lock(registry: Registry, lock: AcceptanceLock, moment: str) -> None:
    """Raise InstrumentError (ERROR) naming what moved since ``lock``, through the plugin that took it."""
    provider = held_out_of(registry)
    if provider is None:  # a lock exists only where a provider took it: its absence now is a changed installation
        raise _not_installed(registry, f"{moment}: the lock of {lock.experiment_dir or lock.cases_file}")
    provider.check_lock(lock, moment)
