"""``certlab report``, ``diff``, ``rederive``, ``minimize``, ``bundle`` and ``replay``: from a verdict to its cause.

All of them read the run store through the gate's own reader; only ``minimize`` (and
``replay --live``) run the agent again, through the gate's runner.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from certlab_core.plugin.errors import EXIT_MISMATCH, EXIT_OK, UsageError
from certlab_core.plugin.registry import discover

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


def write_output(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--out {out}: cannot write ({error.strerror}); choose a writable path") from None


# --------------------------------------------------------------------------- report


def report_command(
    rundir: Path = RUNDIR_ARGUMENT,
    pass_k: str = typer.Option("1,2,4", "--pass-k", help="The k of pass^k (all k trials succeed), e.g. 1,2,4."),
    format_name: str = typer.Option(
        "", "--format", "-f", help="A reporter plugin (markdown, junit, html, ...); default: plain text."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the report to this file instead of stdout."),
    as_json: bool = typer.Option(False, "--json", help="Print the report model as JSON."),
) -> None:
    """Verdict and bounds per condition, per-arm success, failure clusters, faults, errors, cost and pass^k."""
    from certlab_core.plugin.canonical import unstructure
    from certlab_core.report.reading import load_report
    from certlab_core.report.text import render_text

    ks = parse_pass_k(pass_k)
    if as_json and format_name:
        raise UsageError("--json and --format are exclusive; choose one")
    registry = discover()
    reporter = registry.get("reporters", format_name) if format_name else None
    report, rule = load_report(rundir, registry, ks)
    if as_json:
        write_output(json.dumps(unstructure(report), indent=2, sort_keys=True) + "\n", out)
    elif reporter is not None:
        write_output(reporter.render(report, rule), out)
    else:
        write_output(render_text(report), out)
    if out is not None:
        typer.echo(f"report: {out} ({report.verdict})", err=True)


# --------------------------------------------------------------------------- diff


def diff_command(
    rundir: Path = RUNDIR_ARGUMENT,
    trial_a: str = typer.Argument(..., help="The first trial, ARM/CONDITION/INDEX (e.g. baseline/reserve-timeout/3)."),
    trial_b: str = typer.Argument(..., help="The second trial, ARM/CONDITION/INDEX."),
    all_steps: bool = typer.Option(False, "--all-steps", help="Show every event, not only the split."),
) -> None:
    """The first divergence of two trials' recorded boundary events, and the injected fault just before it."""
    from certlab_core.diagnosis.diff import diff_trials, render_diff
    from certlab_core.report.reading import open_store, trial_line

    store = open_store(rundir)
    first = trial_line(store, trial_a)
    second = trial_line(store, trial_b)
    typer.echo(render_diff(diff_trials(first, second), all_steps=all_steps), nl=False)


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
    from certlab_core.plugin.safe_io import read_capped_bytes

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


# --------------------------------------------------------------------------- minimize


def minimize_command(
    rundir: Path = RUNDIR_ARGUMENT,
    trial: str = typer.Argument(..., help="The failed trial, ARM/CONDITION/INDEX."),
    out: Path = typer.Option(..., "--out", "-o", help="Write the result (kept and removed faults) here, as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the result."),
) -> None:
    """ddmin over the trial's injected faults, re-running it; exit 0 minimised, 1 the failure did not reproduce."""
    from certlab_core.diagnosis.minimize import describe_fault, minimize, minimized_document
    from certlab_core.plugin.canonical import pretty_json
    from certlab_core.report.reading import open_store

    store = open_store(rundir)
    found = minimize(store, trial, discover(), (lambda _m: None) if quiet else (lambda m: typer.echo(m, err=True)))
    document = minimized_document(store, found)
    write_output(pretty_json(document), out)
    if found.result == "not-reproduced":
        typer.echo(f"minimize: not reproduced: {found.note}")
        raise typer.Exit(EXIT_MISMATCH)
    typer.echo(f"minimize: {trial}: {found.fingerprint}")
    for declaration in document["kept"]:
        typer.echo(f"  kept     {describe_fault(declaration)}")
    for declaration in document["removed"]:
        typer.echo(f"  removed  {describe_fault(declaration)}")
    typer.echo(f"minimize: {found.result} ({found.note}); {found.reruns} re-run(s); written to {out}")
    raise typer.Exit(EXIT_OK)


# --------------------------------------------------------------------------- bundle and replay


def bundle_command(
    rundir: Path = RUNDIR_ARGUMENT,
    trial: str = typer.Argument(..., help="The trial to carry away, ARM/CONDITION/INDEX."),
    out: Path = typer.Option(..., "--out", "-o", help="The reproducer file to write (JSON)."),
    include: list[Path] = typer.Option(
        [], "--include", help="Another Python file of the agent to include (repeatable); its module is replaced."
    ),
) -> None:
    """One portable, sealed file: the manifest slice, the trial's recorded boundary events and the agent's files."""
    from certlab_core.diagnosis.bundle import make_bundle, write_bundle
    from certlab_core.report.reading import open_store, trial_line

    store = open_store(rundir)
    line = trial_line(store, trial)
    bundle = make_bundle(store, line, discover(), include)
    write_bundle(out, bundle)
    files = ", ".join(entry["path"] for entry in bundle["files"])
    typer.echo(
        f"bundle: {out}: {trial} ({line['outcome']}{' ' + str(line['failure_mode']) if line['failure_mode'] else ''}), "
        f"{len(line.get('events') or ())} recorded events, files {files}"
    )


def replay_command(
    bundle_path: Path = typer.Argument(
        ..., help="A reproducer written by 'certlab bundle' (or, with --trial, a certification)."
    ),
    live: bool = typer.Option(False, "--live", help="Re-run the trial for real (same world, seed and faults)."),
    agent: str = typer.Option("", "--agent", help="With --live: run this agent (module:function) instead."),
    trial: str = typer.Option(
        "", "--trial", help="A trial of a certification folder: re-run its real agent against its recorded model calls."
    ),
    task: Path | None = typer.Option(None, "--task", help="With --trial: the experiment directory of a user task."),
    sandbox: str = typer.Option(
        "auto",
        "--sandbox",
        help="Run the code replayed (a reproducer's, or with --trial the certification's agent) in bwrap where it "
        "works (auto), only in bwrap, or none.",
    ),
) -> None:
    """Re-run the agent against the recorded boundary, no live tools: exit 0 reproduced, 1 not, 3 invalid."""
    from certlab_core.diagnosis.bundle import read_bundle
    from certlab_core.diagnosis.replay import replay, replay_certified_trial, replay_live
    from certlab_core.plugin.sandbox import SANDBOX_CHOICES

    if agent and not live:
        raise UsageError("--agent needs --live: the recording can only answer the agent that made it")
    if sandbox not in SANDBOX_CHOICES:
        raise UsageError(f"--sandbox {sandbox!r} is not one of {', '.join(SANDBOX_CHOICES)}")
    if trial:
        if live:
            raise UsageError("--trial replays a certification's recorded model calls; it takes no --live")
        registry = discover()
        if task is not None:
            from certlab_core.certify.acceptance import register_experiment_task

            register_experiment_task(registry, task)
        hidden = (str(task.resolve()),) if task is not None else ()
        result = replay_certified_trial(bundle_path, trial, registry, sandbox, hidden)
        for line in result.lines:
            typer.echo(line)
        raise typer.Exit(result.exit_code)
    bundle = read_bundle(bundle_path)
    result = replay_live(bundle, discover(), agent or None, sandbox) if live else replay(bundle, sandbox)
    for line in result.lines:
        typer.echo(line)
    raise typer.Exit(result.exit_code)


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
    app.command("diff")(diff_command)
    app.command("rederive")(rederive_command)
    app.command("minimize")(minimize_command)
    app.command("bundle")(bundle_command)
    app.command("replay")(replay_command)
