"""``certlab plugins``: each plugin, its distribution and version, and what it provides."""

from __future__ import annotations

import json

import typer

from certlab_core.canonical import unstructure
from certlab_core.registry import KIND_LABELS, discover


def plugins(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the installed certlab plugins and what each provides."""
    registry = discover()
    infos = registry.plugins()
    if as_json:
        payload = {
            "plugins": [unstructure(info) for info in infos],
            "failures": [unstructure(f) for f in registry.failures],
        }
        typer.echo(json.dumps(payload, indent=2, sort_keys=True))
        return
    for info in infos:
        provided = "; ".join(f"{KIND_LABELS[k]}: {', '.join(v)}" for k, v in sorted(info.provides.items()))
        typer.echo(f"{info.name:<18} {info.distribution} {info.version:<8} {provided or '(nothing)'}")
    for failure in registry.failures:
        typer.echo(
            f"broken plugin {failure.entry_point} ({failure.distribution}): {failure.error}",
            err=True,
        )


def register(app: typer.Typer) -> None:
    app.command("plugins")(plugins)
