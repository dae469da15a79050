"""``certlab diff``, ``minimize``, ``bundle``, ``replay``: a verdict's cause.

Each reads the run store through the kernel's services (``certlab_core.plugin.Services``),
which the command's ``register(app, services)`` is given; only ``minimize`` (and ``replay
--live`` or ``--trial``) run the agent again, through the same services. Each command imports
what it runs inside it, so ``certlab --help`` stays quick.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from certlab_core.plugin import UsageError
from certlab_core.plugin.errors import EXIT_MISMATCH, EXIT_OK
from certlab_core.sdk import safe_io

if TYPE_CHECKING:
    from certlab_core.plugin import Services

RUNDIR_ARGUMENT = typer.Argument(..., help="A run store: the folder 'certlab run' printed as 'run: RUNDIR'.")


def commands(services: Services) -> dict[str, Callable[..., None]]:
    """The function of each command, working through ``services``; certlab_diagnosis.plugin holds their records."""

    # ----------------------------------------------------------------------- diff

    def diff_command(
        rundir: Path = RUNDIR_ARGUMENT,
        trial_a: str = typer.Argument(
            ..., help="The first trial, ARM/CONDITION/INDEX (e.g. baseline/reserve-timeout/3)."
        ),
        trial_b: str = typer.Argument(..., help="The second trial, ARM/CONDITION/INDEX."),
        all_steps: bool = typer.Option(False, "--all-steps", help="Show every event, not only the split."),
    ) -> None:
        """The first divergence of two trials' recorded boundary events, and the injected fault just before it."""
        from certlab_diagnosis.diff import diff_trials, render_diff

        store = services.open_store(rundir)
        first = store.trial(trial_a)
        second = store.trial(trial_b)
        typer.echo(render_diff(diff_trials(first, second), all_steps=all_steps), nl=False)

    # ----------------------------------------------------------------------- minimize

    def minimize_command(
        rundir: Path = RUNDIR_ARGUMENT,
        trial: str = typer.Argument(..., help="The failed trial, ARM/CONDITION/INDEX."),
        out: Path = typer.Option(..., "--out", "-o", help="Write the result (kept and removed faults) here, as JSON."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the result."),
    ) -> None:
        """ddmin over the trial's injected faults, re-running it; exit 0 minimised, 1 the failure did not reproduce."""
        from certlab_core.sdk.canonical import pretty_json
        from certlab_diagnosis.minimize import describe_fault, minimize, minimized_document

        safe_io.refuse_output_inside(out, rundir)  # before the trial is re-run, not after
        store = services.open_store(rundir)
        found = minimize(store, trial, services, (lambda _m: None) if quiet else (lambda m: typer.echo(m, err=True)))
        document = minimized_document(store, found)
        safe_io.write_output(out, pretty_json(document), records=rundir)
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

    # ----------------------------------------------------------------------- bundle and replay

    def bundle_command(
        rundir: Path = RUNDIR_ARGUMENT,
        trial: str = typer.Argument(..., help="The trial to carry away, ARM/CONDITION/INDEX."),
        out: Path = typer.Option(..., "--out", "-o", help="The reproducer file to write (JSON)."),
        include: list[Path] = typer.Option(
            [], "--include", help="Another Python file of the agent to include (repeatable); its module is replaced."
        ),
    ) -> None:
        """One portable, sealed file: the manifest slice, the trial's recorded boundary events and the agent's files."""
        from certlab_diagnosis.bundle import make_bundle, write_bundle

        safe_io.refuse_output_inside(out, rundir)
        store = services.open_store(rundir)
        line = store.trial(trial)
        bundle = make_bundle(store, line, services, include)
        write_bundle(out, bundle, rundir)
        files = ", ".join(entry["path"] for entry in bundle["files"])
        mode = " " + str(line["failure_mode"]) if line["failure_mode"] else ""
        typer.echo(
            f"bundle: {out}: {trial} ({line['outcome']}{mode}), "
            f"{len(line.get('events') or ())} recorded events, files {files}"
        )

    def replay_command(
        bundle_path: Path = typer.Argument(
            ..., help="A reproducer written by 'certlab bundle' (or, with --trial, a certification)."
        ),
        live: bool = typer.Option(False, "--live", help="Re-run the trial for real (same world, seed and faults)."),
        agent: str = typer.Option("", "--agent", help="With --live: run this agent (module:function) instead."),
        trial: str = typer.Option(
            "",
            "--trial",
            help="A trial of a certification folder: re-run its real agent against its recorded model calls.",
        ),
        task: Path | None = typer.Option(None, "--task", help="With --trial: the experiment directory of a user task."),
        sandbox: str = typer.Option(
            "auto",
            "--sandbox",
            help="Run the code replayed (a reproducer's, or with --trial the certification's agent) in the first "
            "sandbox that works (auto), the one named (bwrap), or none.",
        ),
    ) -> None:
        """Re-run the agent against the recorded boundary, no live tools: exit 0 reproduced, 1 not, 3 invalid."""
        from certlab_core.sdk.services import check_sandbox_choice
        from certlab_diagnosis.bundle import read_bundle
        from certlab_diagnosis.replay import replay, replay_certified_trial, replay_live

        if agent and not live:
            raise UsageError("--agent needs --live: the recording can only answer the agent that made it")
        check_sandbox_choice(sandbox)
        if trial:
            if live:
                raise UsageError("--trial replays a certification's recorded model calls; it takes no --live")
            if task is not None:
                services.register_task(task)
            hidden = (str(task.resolve()),) if task is not None else ()
            result = replay_certified_trial(bundle_path, trial, services, sandbox, hidden)
            for line in result.lines:
                typer.echo(line)
            raise typer.Exit(result.exit_code)
        bundle = read_bundle(bundle_path, services)
        result = replay_live(bundle, services, agent or None, sandbox) if live else replay(bundle, services, sandbox)
        for line in result.lines:
            typer.echo(line)
        raise typer.Exit(result.exit_code)

    return {
        "diff": diff_command,
        "minimize": minimize_command,
        "bundle": bundle_command,
        "replay": replay_command,
    }
