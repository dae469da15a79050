"""certlab's demo: ``certlab demo``, a guided tour on built-in agents.

The tour (``tour``) runs real certlab commands as processes, chapter by chapter: certify
(``chapter_certify``), a user's own task with held-out cases (``chapter_acceptance``), the gate's
story from a first look to a confirmatory run (``chapter_gate``), and diagnosis of a failure
(``chapter_diagnosis``). Its example files ship with it, so it runs from an installed wheel.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from certlab_core.plugin import Command, hookimpl

if TYPE_CHECKING:
    import typer


def register(app: typer.Typer) -> None:
    """Add ``certlab demo`` to the command line."""
    import typer

    @app.command("demo")
    def demo(
        keep: Path = typer.Option(
            None, "--keep", help="Work in this new or empty folder and keep it (default: a new temporary folder)."
        ),
        jobs: int = typer.Option(
            None,
            "--jobs",
            min=1,
            help="Run up to this many steps at once, each once the steps it reads have held (default: one per CPU); "
            "the output is printed in step order either way.",
        ),
    ) -> None:
        """Run the demo: certify, your own task, the gate and diagnosis on built-in agents; exit 0 when all held."""
        from certlab_demo.tour import run_demo

        raise typer.Exit(run_demo(keep, jobs))


@hookimpl
def certlab_commands() -> list[Command]:
    return [
        Command(name="demo", description="the guided tour on built-in agents, every step checked", register=register)
    ]
