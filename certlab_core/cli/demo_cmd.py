"""``certlab demo``: the guided tour on built-in agents, every step checked."""

from __future__ import annotations

from pathlib import Path

import typer


def demo_command(
    keep: Path = typer.Option(
        None, "--keep", help="Work in this folder and keep it (default: a new temporary folder)."
    ),
) -> None:
    """Run the demo: certify, regrade (and later, gate) on built-in agents; exit 0 when every step held."""
    from certlab_core.demo import run_demo

    raise typer.Exit(run_demo(keep))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
