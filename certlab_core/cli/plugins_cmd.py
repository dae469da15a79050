"""``certlab plugins``: each plugin, what it provides, and what is wrong.

It always runs: a broken plugin is listed, not fatal. ``--check`` exits 1 when any plugin
is broken or has a warning (a misspelt hook, a hook without ``@hookimpl``, a name two
plugins provide), so plugin authors can put it in their CI.
"""

from __future__ import annotations

import json

import typer

from certlab_core._runtime.registry import KIND_LABELS, discover


def plugins(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    check: bool = typer.Option(False, "--check", help="Exit 1 when any plugin is broken or has a warning."),
) -> None:
    """List the installed certlab plugins and what each provides; name the broken ones."""
    registry = discover()
    infos = registry.plugins()
    warnings = registry.warnings()  # builds the index, so a hook that raises is among the failures below
    if as_json:
        from certlab_core.sdk.canonical import unstructure  # cattrs: only the JSON listing needs it

        payload = {
            "plugins": [unstructure(info) for info in infos],
            "failures": [unstructure(f) for f in registry.failures],
            "warnings": [unstructure(w) for w in warnings],
        }
        typer.echo(json.dumps(payload, indent=2, sort_keys=True))
        if check and (registry.failures or warnings):
            raise typer.Exit(1)
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
        typer.echo(failure.line(), err=True)
    for warning in warnings:
        typer.echo(warning.line(), err=True)
    if check and (registry.failures or warnings):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("plugins")(plugins)
