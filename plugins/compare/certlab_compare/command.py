"""``certlab compare``: COMPARISON.md and registry.json from certifications."""

from __future__ import annotations

from pathlib import Path

import typer

from certlab_core.plugin.errors import EXIT_MISMATCH


def compare_command(
    folder: Path = typer.Argument(..., help="The folder holding one certification per subfolder."),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 if the committed files differ."),
) -> None:
    """Write COMPARISON.md and registry.json from the committed bundles (every number read from a bundle)."""
    from certlab_compare.publication import compile_publication, differences, write_publication

    publication = compile_publication(folder)
    if check:
        stale = differences(folder, publication)
        if stale:
            typer.echo(
                f"compare: {', '.join(stale)} in {folder} differ from what the bundles compile to; "
                "run 'certlab compare' (or 'make certifications') and commit the result",
                err=True,
            )
            raise typer.Exit(EXIT_MISMATCH)
        typer.echo(f"compare: {folder} is up to date")
        return
    write_publication(folder, publication)
    typer.echo(f"compare: wrote {folder / 'COMPARISON.md'} and {folder / 'registry.json'}")
