"""The installed plugins, default rule and containment, for a plugin's command.

A command a plugin adds (``certlab lock``, ``certlab task from-commit``) may need what the
kernel's engines get from the private runtime: the installed plugins, the default statistical
rule, and the containment ``--sandbox`` chooses. It asks here. The runtime,
``certlab_core._runtime``, provides them when it is imported (the ``certlab`` command line always
imports it); a plugin never imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from certlab_core.plugin.types.rule import StatisticalRule
from certlab_core.plugin.types.sandbox import Containment, ResourceLimits


class InstalledPlugins(Protocol):
    """What a plugin's command may read of the installed plugins: names and records by kind, and their modules."""

    def names(self, kind: str, /) -> list[str]: ...

    def get(self, kind: str, name: str, /) -> Any: ...

    def all(self, kind: str, /) -> dict[str, Any]: ...

    def module_of(self, kind: str, name: str, /) -> object | None: ...

    def add_plugin(self, module: object, name: str, distribution: str, version: str, /) -> None: ...

    # How a line names a record's callable: "the statistical rule newcombe's plan (certlab-newcombe)".
    def part_of(self, kind: str, name: str, part: str, /) -> str: ...


class RuntimeServices(Protocol):
    """What the runtime provides (``provide``): not the command services, ``certlab_core.plugin.Services``."""

    def installed(self) -> InstalledPlugins: ...

    def containment(
        self,
        choice: str,
        hidden: Iterable[str],
        warn: Callable[[str], None],
        limits: ResourceLimits | None = None,
    ) -> Containment: ...

    def check_sandbox(self, choice: str, /) -> None: ...

    def default_rule(self, needed_by: str, /) -> StatisticalRule: ...


_provided: list[RuntimeServices] = []
RUNTIME = "certlab_core._runtime"


def provide(services: RuntimeServices) -> None:
    """Called by the runtime when it is imported: the one implementation of these services."""
    _provided[:] = [services]


def _services() -> RuntimeServices:
    if not _provided:
        importlib.import_module(RUNTIME)  # it calls provide(); loaded by name, as a plugin would never import it
    return _provided[0]


def installed_plugins() -> InstalledPlugins:
    """The installed plugins, discovered in one scan (``CERTLAB_PLUGINS`` applies), broken ones left out."""
    return _services().installed()


def choose_containment(
    choice: str, hidden: Iterable[str], warn: Callable[[str], None], limits: ResourceLimits | None = None
) -> Containment:
    """The containment for ``--sandbox CHOICE`` (auto, a sandbox's name, or none), hiding ``hidden``; ``warn`` gets
    one line."""
    return _services().containment(choice, hidden, warn, limits)


def check_sandbox_choice(choice: str) -> None:
    """Refuse in one line (UsageError) a ``--sandbox`` that is neither auto, none nor an installed sandbox's name."""
    _services().check_sandbox(choice)


def default_rule(needed_by: str) -> StatisticalRule:
    """The one installed statistical rule that marks itself the default (``StatisticalRule.default``); none or two
    are refused in one line (UsageError) that ``needed_by`` opens, such as ``"--rule is not given"``."""
    return _services().default_rule(needed_by)
