"""``certlab plugins``: each plugin, its distribution and version, and what it provides."""

from __future__ import annotations

import json

import typer

from certlab_core.canonical import unstructure
from certlab_core.plugin.registry import KIND_LABELS, discover


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
    rows = [
        (
            info.name,
            f"{info.distribution} {info.version}",
            "; ".join(f"{KIND_LABELS[k]}: {', '.join(v)}" for k, v in sorted(info.provides.items())) or "(nothing)",
        )
        for info in infos
    ]
    width_name = max((len(r[0]) for r in rows), default=0)
    width_dist = max((len(r[1]) for r in rows), default=0)
    for name, dist, provided in rows:
        typer.echo(f"{name:<{width_name}}  {dist:<{width_dist}}  {provided}")
    for failure in registry.failures:
        typer.echo(
            f"broken plugin {failure.entry_point} ({failure.distribution}): {failure.error}",
            err=True,
        )


def register(app: typer.Typer) -> None:
    app.command("plugins")(plugins)
