"""``certlab init-task``: scaffold a working task of a user's own.

Its lock, leak scan and predictions are the acceptance plugin's commands (certlab-acceptance).
"""

from __future__ import annotations

from pathlib import Path

import typer


def init_task_command(
    directory: Path = typer.Argument(..., help="A new (or empty) folder for the task."),
    name: str = typer.Option("", "--name", help="The task's name (default: the folder's name)."),
) -> None:
    """Scaffold a small working task of your own: fixture, visible tests, prompt, held-out cases."""
    from certlab_core.certify.scaffold import scaffold

    written = scaffold(directory, name or None)
    for path in written:
        typer.echo(f"wrote {path}")
    typer.echo(f"next: certlab lock {directory}, then certlab certify --task {directory} --agent ... --out DIR")


def register(app: typer.Typer) -> None:
    app.command("init-task")(init_task_command)
