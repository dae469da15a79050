"""``certlab report`` and ``rederive``: a verdict explained and re-derived.

Both read the run store through the gate's own reader. Going from a verdict to its cause
(``diff``, ``minimize``, ``bundle``, ``replay``) is the certlab-diagnosis plugin's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from certlab_core._runtime.registry import discover
from certlab_core.plugin.errors import EXIT_MISMATCH, EXIT_OK, UsageError

RUNDIR_ARGUMENT = typer.Argument(..., help="A run store: the folder 'certlab run' printed as 'run: RUNDIR'.")


def parse_pass_k(text: str) -> tuple[int, ...]:
    """``1,2,4`` as (1, 2, 4); anything else is one clear line."""
    values: list[int] = []
    for part in text.split(","):
        piece = part.strip()
        if not piece.isdigit() or int(piece) < 1:
            raise UsageError(f"--pass-k {text!r}: {piece!r} is not a whole number of at least 1; write it like 1,2,4")
        values.append(int(piece))
    return tuple(dict.fromkeys(values))


def emit(text: str, out: Path | None, rundir: Path) -> None:
    """``text`` to stdout, or to the file ``out`` (``safe_io.write_output``: one line when it cannot be written,
    or when it is in the run store ``rundir``)."""
    if out is None:
        sys.stdout.write(text)
        return
    from certlab_core.sdk.safe_io import write_output

    write_output(out, text, records=rundir)


# --------------------------------------------------------------------------- report


def report_command(
    rundir: Path = RUNDIR_ARGUMENT,
    pass_k: str = typer.Option("1,2,4", "--pass-k", help="The k of pass^k (all k trials succeed), e.g. 1,2,4."),
    format_name: str | None = typer.Option(
        None, "--format", "-f", help="A reporter plugin (text, markdown, junit, html, ...); default: text."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the report to this file instead of stdout."),
    as_json: bool = typer.Option(False, "--json", help="Print the report model as JSON."),
) -> None:
    """Verdict and bounds per condition, per-arm success, failure clusters, faults, errors, cost and pass^k."""
    from certlab_core.plugin.types.reporter import DEFAULT_REPORTER
    from certlab_core.report.reading import load_report
    from certlab_core.sdk.canonical import unstructure
    from certlab_core.sdk.safe_io import refuse_output_inside

    ks = parse_pass_k(pass_k)
    if as_json and format_name is not None:
        raise UsageError("--json and --format are exclusive; choose one")
    if out is not None:
        refuse_output_inside(out, rundir)
    registry = discover()
    reporter = None if as_json else registry.get("reporters", format_name or DEFAULT_REPORTER)
    report, rule = load_report(rundir, registry, ks)
    if reporter is None:
        emit(json.dumps(unstructure(report), indent=2, sort_keys=True) + "\n", out, rundir)
    else:
        from certlab_core.report.files import rendered

        emit(rendered(registry, format_name or DEFAULT_REPORTER, report, rule), out, rundir)
    if out is not None:
        typer.echo(f"report: {out} ({report.verdict})", err=True)


# --------------------------------------------------------------------------- rederive


def rederive_command(
    rundir: Path = RUNDIR_ARGUMENT,
    write: bool = typer.Option(False, "--write", help="Overwrite a decision.json that differs."),
) -> None:
    """Regenerate decision.json from the manifest and the trials; exit 0 identical (or written), 1 differs."""
    from certlab_core.gate.store import DECISION, write_decision
    from certlab_core.report.reading import decision_file_state, decision_text, open_store, recompute_decision

    store = open_store(rundir)
    decision = recompute_decision(store, discover())
    state = decision_file_state(store, decision)
    path = store.folder / DECISION
    if state == "matches":
        typer.echo(f"rederive: {path} re-derived byte for byte ({decision['verdict']})")
        raise typer.Exit(EXIT_OK)
    if state == "missing" or write:
        write_decision(store.folder, decision)
        typer.echo(f"rederive: wrote {path} ({decision['verdict']})")
        raise typer.Exit(EXIT_OK)
    from certlab_core.plugin.errors import CertlabError
    from certlab_core.sdk.safe_io import read_capped_bytes

    try:
        stored = read_capped_bytes(path, "decision").decode("utf-8", errors="replace").splitlines()
    except CertlabError as error:  # a FIFO, a device, a folder or a huge file in its place
        stored = [error.message]
    derived = decision_text(decision).splitlines()
    where = next(
        (i for i, (x, y) in enumerate(zip(stored, derived, strict=False)) if x != y), min(len(stored), len(derived))
    )
    typer.echo(f"rederive: {path} differs from the decision re-derived from the store ({decision['verdict']})")
    typer.echo(f"  first difference at line {where + 1}:")
    typer.echo(f"  stored:     {stored[where] if where < len(stored) else '(end of file)'}")
    typer.echo(f"  re-derived: {derived[where] if where < len(derived) else '(end of file)'}")
    typer.echo("  run again with --write to replace it")
    raise typer.Exit(EXIT_MISMATCH)


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
    app.command("rederive")(rederive_command)
