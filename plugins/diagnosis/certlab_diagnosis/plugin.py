"""The certlab-diagnosis plugin: its four commands, through the ``certlab_commands`` hook."""

from __future__ import annotations

from certlab_core.plugin import Command, hookimpl


@hookimpl
def certlab_commands() -> list[Command]:
    from certlab_diagnosis.commands import commands

    return commands()
