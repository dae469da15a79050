"""The kernel's own CLI commands, provided through the ``certlab_commands`` hook like any plugin's.

One module per command group, each with ``register(app)``. This module is the kernel's
built-in command plugin: the CLI registers it beside the installed plugins, so a plugin's
command that takes a kernel command's name is refused where it is used.
"""

from __future__ import annotations

import importlib

import typer

from certlab_core.plugin.hookspecs import hookimpl
from certlab_core.plugin.types.command import Command, RegisterCommand

# Each module defines ``register(app)``, which registers the commands listed beside it; a
# capability adds its module and its commands here, nowhere else. A command line loads only the
# module of its command (help and unknown commands load them all); tests/test_cli.py checks
# that each module registers exactly the commands listed.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "certlab_core.cli.plugins_cmd": ("plugins",),
    "certlab_core.cli.certify_cmd": ("certify", "regrade", "prove"),
    "certlab_core.cli.compare_cmd": ("compare",),
    "certlab_core.cli.stats_cmd": ("stats", "plan", "selfcheck"),
    "certlab_core.cli.gate_cmd": ("run", "gate", "schema", "init"),
    "certlab_core.cli.report_cmd": ("report", "rederive"),
    "certlab_core.cli.task_cmd": ("init-task",),
    "certlab_core.cli.signing_cmd": ("keygen", "sign", "verify"),
    "certlab_core.cli.preflight_cmd": ("preflight",),
}

_registered: set[str] = set()


def _registering(module_name: str) -> RegisterCommand:
    """Register every command of ``module_name`` once, however many of its commands are asked for."""

    def register(app: typer.Typer) -> None:
        if module_name not in _registered:
            _registered.add(module_name)
            importlib.import_module(module_name).register(app)

    return register


@hookimpl
def certlab_commands() -> list[Command]:
    return [
        Command(name=name, description=f"certlab {name} (the kernel)", register=_registering(module_name))
        for module_name, names in COMMAND_MODULES.items()
        for name in names
    ]
