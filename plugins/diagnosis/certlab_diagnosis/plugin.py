"""The certlab-diagnosis plugin: its four commands (``certlab_commands``).

Each ``register`` takes the kernel's services as its second parameter, which the commands work through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certlab_core.plugin import Command, hookimpl

if TYPE_CHECKING:
    import typer

    from certlab_core.plugin import Services

# Each command's one line for ``certlab --help``, which lists them without importing certlab_diagnosis.commands.
DESCRIPTIONS = {
    "diff": "where two trials' recorded boundary events part, and the fault just before",
    "minimize": "the fewest of a failed trial's injected faults that still make it fail",
    "bundle": "a trial as one sealed, portable reproducer file",
    "replay": "a reproducer, or a certification's trial, re-run against its recording",
}


def _registering(name: str) -> Command:
    """The record of the command ``name``: its function is imported only when a command line needs it."""

    def register(app: typer.Typer, services: Services, /) -> None:
        from certlab_diagnosis.commands import commands

        app.command(name)(commands(services)[name])

    return Command(name=name, description=DESCRIPTIONS[name], register=register)


@hookimpl
def certlab_commands() -> list[Command]:
    return [_registering(name) for name in DESCRIPTIONS]
