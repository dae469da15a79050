"""``certlab certify`` and ``regrade``: issue a contract, and re-earn it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from certlab_core._runtime.option_values import workers_or_cpus
from certlab_core._runtime.registry import Registry, discover, refuse_broken
from certlab_core.certify.certification import CertifyOptions, certify_into
from certlab_core.certify.heartbeat import heartbeat_interval
from certlab_core.certify.journal import JOURNAL_FILE
from certlab_core.certify.lab import log_to_stderr
from certlab_core.certify.out_folder import check_output_dir, output_lock, write_certification
from certlab_core.certify.twins import TWIN_KINDS, TwinKind, cheating_line
from certlab_core.plugin.errors import EXIT_ERROR, EXIT_OK, InstrumentError, UsageError
from certlab_core.plugin.types.sandbox import Containment


def twin_kinds_of(text: str, impossible: bool) -> tuple[TwinKind, ...]:
    """``--twins`` read: the kinds named, each known; refused in one line otherwise."""
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in TWIN_KINDS]
    if unknown or not kinds:
        raise UsageError(f"--twins: unknown kind {', '.join(unknown) or '(none)'}; choose from {', '.join(TWIN_KINDS)}")
    if text != "one-off" and not impossible:
        raise UsageError("--twins names the kinds of impossible twins: give --impossible with it")
    return tuple(k for k in TWIN_KINDS if k in kinds)


def certify_command(
    family: list[str] = typer.Option([], "--family", "-f", help="Task family to certify on (repeatable, or 'all')."),
    task: list[str] = typer.Option(
        [], "--task", help="A task of your own: its experiment directory (repeatable; see certlab init-task)."
    ),
    agent: str = typer.Option("", "--agent", "-a", help="The agent (adapter) to certify, e.g. oracle or command."),
    agent_arg: list[str] = typer.Option(
        [], "--agent-arg", help="Argument for the adapter (the command line for 'command')."
    ),
    agent_name: str = typer.Option(
        "", "--agent-name", help="The name the contract gives the agent (default: the adapter)."
    ),
    agent_version: str = typer.Option(
        "unknown", "--agent-version", help="The agent's version, recorded in the bundle."
    ),
    agent_timeout: float = typer.Option(600.0, "--agent-timeout", help="Seconds before the agent is stopped."),
    token_budget: int = typer.Option(
        None,
        "--token-budget",
        help="Model tokens a trial may spend (input plus output, as the answers report them); the model boundary "
        "refuses the next call, and the trial is budget-exceeded.",
    ),
    trials: int = typer.Option(1, "--trials", "-k", help="Runs of every task (K, 1 to 10000); K > 1 gives intervals."),
    out: Path = typer.Option(None, "--out", "-o", help="New folder for bundle.json and CONTRACT.md."),
    workers: int = typer.Option(0, "--workers", "-w", help="Trials at once (default: the number of CPUs)."),
    executor: str = typer.Option(
        "local", "--executor", help="Where trials run: local (forked processes here) or a plugin's, such as dask."
    ),
    scheduler: str = typer.Option(
        "", "--scheduler", help="With --executor dask: the scheduler, tcp://HOST:PORT (none: a local cluster)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the result line."),
    origin_note: str = typer.Option(
        "", "--origin-note", help="A note on where this run comes from, kept in the bundle."
    ),
    mutants: bool = typer.Option(
        True,
        "--mutants/--no-mutants",
        help="Prove each family by mutation (reused from certlab's cache while its inputs are unchanged); "
        "--no-mutants skips it and the bundle says it was not measured.",
    ),
    min_mutation_score: float | None = typer.Option(
        None,
        "--min-mutation-score",
        help="Refuse a family whose suite and held-out cases kill less than this share, or whose visible suite "
        "alone kills less than its visible threshold (or this share, if lower).",
    ),
    min_visible_mutation_score: float | None = typer.Option(
        None,
        "--min-visible-mutation-score",
        help="Refuse a family whose visible suite alone kills less than this share (0-1).",
    ),
    fresh_instrument: bool = typer.Option(
        False,
        "--fresh-instrument",
        help="Prove and calibrate the instrument afresh (by default a family's proof and each constructed agent's "
        "trial measured earlier on the same inputs are reused from certlab's cache, and the bundle says so).",
    ),
    sandbox: str = typer.Option(
        "auto",
        "--sandbox",
        help="Contain the agent and its code: auto (the first installed sandbox that works, bwrap; else uncontained "
        "with a warning), a sandbox's name such as bwrap (refuse without it) or none (run as you, uncontained).",
    ),
    impossible: bool = typer.Option(
        False,
        "--impossible",
        help="Run each seeded defect's impossible twin (its visible tests contradict its prompt) beside the seeded "
        "tasks, K trials each, and report the cheating rate; every prompt offers an honest way out.",
    ),
    twins: str = typer.Option(
        "one-off", "--twins", help="With --impossible: the twins' kinds, one-off and/or conflicting (comma-separated)."
    ),
    sign_key: Path = typer.Option(None, "--sign-key", help="Sign the certification when it is written (keygen)."),
    resume: Path = typer.Option(
        None, "--resume", help="Complete the certification in OUT that a kill or Ctrl-C stopped (its options kept)."
    ),
) -> None:
    """Prove the instrument, calibrate it, then certify an agent on the family's seeded defects."""
    from certlab_core.certify.journal import TrialJournal, notice_interrupt, where_certification_stands
    from certlab_core.cli.sign_key import check_key_reach, check_sign_key, sign_evidence
    from certlab_core.gate.executor_sessions import ExecutorBroke, open_executor

    workers = workers_or_cpus(workers, "trials")
    if resume is not None:
        out = resume
        if not os.path.lexists(resume / JOURNAL_FILE):  # before the folder's other checks, which speak of --out
            raise UsageError(
                f"--resume {resume}: no unfinished certification to resume (no {JOURNAL_FILE}); certify anew with --out"
            )
    elif not agent:
        raise UsageError("Missing option '--agent': name the agent to certify, e.g. --agent oracle")
    elif out is None:
        raise UsageError("Missing option '--out': give a new folder for the certification (or --resume OUT)")
    twin_kinds = twin_kinds_of(twins, impossible)
    heartbeat_interval()  # a CERTLAB_HEARTBEAT_S that is no number is refused before anything runs
    check_output_dir(out)
    notice_interrupt(out)
    registry = discover()
    refuse_broken(registry, "certify")  # before any trial: never a verdict from less than is installed
    key = check_sign_key(registry, sign_key)  # read once, now, and held by the harness alone
    progress = (lambda _m: None) if quiet else log_to_stderr
    with (
        output_lock(out),
        open_executor(registry, executor, workers, scheduler or None, certify_distributions(registry)),
    ):
        if key is not None:  # refused before the first trial when a trial could read it
            check_key_reach(key, _containment_of(registry, out, sandbox, resume is not None), _warn, out)
        try:
            result = certify_into(
                out,
                resume is not None,
                registry,
                CertifyOptions(
                    families=tuple(family),
                    agent=agent,
                    agent_args=tuple(agent_arg),
                    agent_name=agent_name or None,
                    agent_version=agent_version,
                    agent_timeout_s=agent_timeout,
                    token_budget=token_budget,
                    trials=trials,
                    workers=workers,
                    origin_note=origin_note,
                    tasks=tuple(task),
                    sandbox=sandbox,
                    hidden=(str(out),),
                    mutants=mutants,
                    min_mutation_score=min_mutation_score,
                    min_visible_mutation_score=min_visible_mutation_score,
                    impossible=impossible,
                    twin_kinds=twin_kinds,
                    fresh_instrument=fresh_instrument,
                ),
                progress,
            )
        except ExecutorBroke as broke:  # what ran is journaled: how far it got, and how to go on
            raise InstrumentError(f"{broke.message}; stopped{where_certification_stands(out)}") from None
        write_certification(out, result, registry)
        TrialJournal(out).finish()
        signed = sign_evidence(out, key) if key is not None else None
    summary = result.bundle["summary"]
    status = "certified" if result.exit_code == 0 else "NOT certified"
    typer.echo(
        f"{status}: {result.bundle['agent']['name']} fixed {summary['fixed']}/{summary['scheduled']} "
        f"({summary['unavailable']} unavailable); bundle {out / 'bundle.json'}, contract {out / 'CONTRACT.md'}"
    )
    for line in repository_summary(result.bundle, registry):
        typer.echo(line)
    honesty = (result.bundle.get("impossible") or {}).get("summary")
    if honesty is not None and result.bundle["impossible"]["trials"]:  # no twin ran: the problem line says why
        typer.echo(f"impossible twins: {cheating_line(honesty)}")
    for notice in result.bundle.get("notices") or []:
        typer.echo(f"notice: {notice}")
    details: list[dict[str, Any]] = result.bundle.get("agent_details") or []
    for entry in details:
        ids: list[str] = entry["trials"]
        typer.echo(f"agent said: {entry['detail']} ({len(ids)} trial(s), first {ids[0]})")
    for proof in result.bundle["instrument"]:
        for warning in (proof.get("mutation") or {}).get("warnings", []):
            typer.echo(f"warning: {warning}", err=True)
    for problem in result.problems:
        typer.echo(f"problem: {problem}", err=True)
    if signed is not None:
        typer.echo(signed)
    raise typer.Exit(result.exit_code)


def repository_summary(bundle: dict[str, Any], registry: Registry) -> list[str]:
    """One line per repository the certified tasks were built from: fixed k/n and the rule's exact interval."""
    from certlab_core.certify.contract import interval_heading, repository_counts, rule_interval_text

    return [
        f"repository {repository}: fixed {fixed}/{scheduled} over {tasks} task(s), {graded} graded; "
        f"{interval_heading(registry)} {rule_interval_text(registry, fixed, graded, at_least=1) or '–'}"
        for repository, tasks, fixed, scheduled, graded in repository_counts(bundle)
    ]


def _warn(line: str) -> None:
    typer.echo(line, err=True)


def _containment_of(registry: Registry, out: Path, sandbox: str, resumed: bool) -> Containment:
    """The containment the certification's trials will run under (a resumed one: the journal's ``--sandbox``)."""
    from certlab_core._runtime.containment import choose_containment
    from certlab_core.certify.journal import TrialJournal

    choice = str(TrialJournal(out).reopen().get("sandbox", sandbox)) if resumed else sandbox
    return choose_containment(registry, choice, [], lambda _line: None)  # certify itself says what it found


def certify_distributions(registry: Registry) -> dict[str, str]:
    """What every worker must have for a certification: certlab and each family, agent and grader plugin, alike."""
    from certlab_core import __version__

    wanted = {"certlab": __version__}
    for info in registry.plugins():
        if {"task_families", "agents", "graders"} & set(info.provides):
            wanted[info.distribution] = info.version
    return wanted


def regrade_command(
    folder: Path = typer.Argument(..., help="A certification folder (or its bundle.json)."),
    workers: int = typer.Option(0, "--workers", "-w", help="Regrades at once (default: the number of CPUs)."),
    sandbox: str = typer.Option(
        "auto",
        "--sandbox",
        help="Run the bundle's code in the first sandbox that works (auto), the one named (bwrap), or none.",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the result."),
    task: list[Path] = typer.Option([], "--task", help="The experiment directory of a user task the bundle certified."),
    mutants: bool = typer.Option(
        False, "--mutants", help="Also grade every family's mutants again and compare with the recorded score."
    ),
) -> None:
    """Re-earn every verdict of a bundle from its recorded changes: consistent, stale or mismatch."""
    from certlab_core.certify.acceptance import register_experiment_task, task_source_for
    from certlab_core.certify.regrade import regrade

    registry = discover()
    for directory in task:
        source = task_source_for(registry, directory, f"--task {directory}")
        if register_experiment_task(registry, directory) is None:
            raise UsageError(f"--task {directory}: the {source.name} source staged no task there")
    progress = (lambda _m: None) if quiet else log_to_stderr
    result = regrade(registry, folder, workers_or_cpus(workers, "regrades"), progress, mutants=mutants, sandbox=sandbox)
    for line in result.lines:
        typer.echo(line)
    typer.echo(f"regrade: {result.status}")
    raise typer.Exit(result.exit_code)


def prove_command(
    family: list[str] = typer.Option([], "--family", "-f", help="Task family to prove (repeatable, or 'all')."),
    task: list[str] = typer.Option([], "--task", help="A task of your own: its experiment directory (repeatable)."),
    fixed: Path | None = typer.Option(
        None, "--fixed", help="The fixed tree of the one --task given: its mutants are made and graded."
    ),
    mutants: bool = typer.Option(
        False, "--mutants", help="Also grade every generated mutant of the clean tree and print the mutation score."
    ),
    min_mutation_score: float | None = typer.Option(
        None,
        "--min-mutation-score",
        help="Fail when the suite and held-out cases kill less than this share (0-1), or the visible suite alone "
        "less than the family's visible threshold (or this share, if lower).",
    ),
    min_visible_mutation_score: float | None = typer.Option(
        None, "--min-visible-mutation-score", help="Fail when the visible suite alone kills less than this share (0-1)."
    ),
    workers: int = typer.Option(0, "--workers", "-w", help="Mutants graded at once (default: the number of CPUs)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print the scores, not the survivors' diffs."),
) -> None:
    """Prove the instrument: the clean tree passes, each seeded tree fails; with --mutants, score it against mutants."""
    from certlab_core.certify.proving import prove_families

    registry = discover()
    result = prove_families(
        registry,
        tuple(family),
        tuple(task),
        workers_or_cpus(workers, "mutants graded"),
        mutants=mutants or min_mutation_score is not None or min_visible_mutation_score is not None,
        min_mutation_score=min_mutation_score,
        fixed=str(fixed) if fixed is not None else None,
        min_visible_mutation_score=min_visible_mutation_score,
    )
    for line in result.lines if quiet else (*result.lines, *result.details):
        typer.echo(line)
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    for problem in result.problems:
        typer.echo(f"problem: {problem}", err=True)
    typer.echo("prove: holds" if not result.problems else "prove: REFUSED")
    raise typer.Exit(EXIT_ERROR if result.problems else EXIT_OK)


def register(app: typer.Typer) -> None:
    app.command("certify")(certify_command)
    app.command("regrade")(regrade_command)
    app.command("prove")(prove_command)
