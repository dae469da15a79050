"""The certlab plugin that provides the ``compare`` command."""

from __future__ import annotations

from typing import TYPE_CHECKING

from certlab_core.plugin import Command, hookimpl

if TYPE_CHECKING:
    import typer


def register(app: typer.Typer) -> None:
    """Add ``compare``; its module is imported only when the command is asked for."""
    from certlab_compare.command import compare_command

    app.command("compare")(compare_command)


@hookimpl
def certlab_commands() -> list[Command]:
    return [
        Command(
            name="compare",
            description="Write COMPARISON.md and registry.json from the committed bundles (every number read from "
            "a bundle).",
            register=register,
        )
    ]
