"""``certlab run``, ``gate``, ``schema`` and ``init``: the A/B reliability gate.

``run`` validates and seals a descriptor, runs its trials into a new run store and exits
with the verdict (PASS 0, BLOCK 1, INCONCLUSIVE 2, ERROR 3; usage errors 4); ``gate``
recomputes the verdict from a run store alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import typer

from certlab_core.plugin.errors import EXIT_ERROR, InstrumentError, UsageError
from certlab_core.plugin.types.sandbox import Containment  # loaded with the contract already

if TYPE_CHECKING:
    from certlab_core._runtime.registry import Registry
    from certlab_core.gate.manifest import Manifest

SCHEMA_DOCUMENTS = ("descriptor", "manifest", "trial", "decision")


def _echo_decision(decision: dict[str, Any], folder: Path, earlier: list[str]) -> None:
    for condition in decision["conditions"]:
        counts = condition["counts"]
        bounds = condition["bounds"]
        interval = f"[{bounds['lower']:.4f}, {bounds['upper']:.4f}]" if bounds else "[-]"
        gate = "" if condition["gating"] else ", reported, never gated"
        said = f" (the rule alone: {condition['rule_verdict']})" if condition.get("rule_verdict") else ""
        typer.echo(
            f"condition {condition['name']} ({condition['bucket']}{gate}): "
            f"baseline {counts['baseline']['successes']}/{counts['baseline']['trials']}, "
            f"candidate {counts['candidate']['successes']}/{counts['candidate']['trials']}, "
            f"candidate - baseline {interval}: {condition['verdict']}{said}"
            + (": nothing was tested" if condition.get("untested") else "")
        )
    for warning in decision.get("warnings") or ():
        typer.echo(f"warning: {warning}")
    for problem in decision.get("problems") or ():
        typer.echo(f"problem: {problem}")
    if earlier:
        typer.echo(f"earlier runs of {decision['experiment']} (not part of this decision):")
        for line in earlier:
            typer.echo(f"  {line}")
    typer.echo(verdict_line(decision))


def verdict_line(decision: dict[str, Any]) -> str:
    """``verdict: PASS``; when a gating condition's baseline succeeded in (nearly) none of its trials, the line says
    that nothing was tested there, and why (the Action reads it from this line)."""
    verdict = decision["verdict"]
    untested = [c for c in decision["conditions"] if c.get("untested")]
    if not untested:
        return f"verdict: {verdict}"
    by_why: dict[str, list[str]] = {}
    for condition in untested:
        by_why.setdefault(condition["untested"], []).append(condition["name"])
    why = "; ".join(f"{', '.join(names)}: {text}" for text, names in by_why.items())
    joint = ":" if verdict == "ERROR" else ", but"
    return f"verdict: {verdict}{joint} nothing was tested: {why}"


def _write_reports(folder: Path, registry: Registry, junit: Path | None, markdown: Path | None) -> None:
    """Write the JUnit and Markdown reports asked for, through the ``junit`` and ``markdown`` reporter plugins."""
    if junit is None and markdown is None:
        return
    from certlab_core.report import files as reports

    for path, name in ((junit, "junit"), (markdown, "markdown")):
        if path is not None:
            reports.write_report(folder, name, path, registry)


def _check_reporters(registry: Registry, junit: Path | None, markdown: Path | None, rundir: Path | None = None) -> None:
    """Refuse ``--junit`` or ``--markdown`` without its reporter plugin, or in the run store ``rundir``,
    before anything runs."""
    if junit is None and markdown is None:
        return
    from certlab_core.report import files as reports
    from certlab_core.sdk.safe_io import refuse_output_inside

    reports.check_reporters(registry, {"junit": junit, "markdown": markdown})
    for path, name in ((junit, "junit"), (markdown, "markdown")):
        if path is not None and rundir is not None:
            refuse_output_inside(path, rundir, f"--{name}")


def run_command(
    descriptor: Path = typer.Argument(None, help="The experiment descriptor (certlab.yaml); none with --resume."),
    workers: int = typer.Option(0, "--workers", "-w", help="Trials at once (default: the number of CPUs)."),
    out: Path = typer.Option(Path("runs"), "--out", "-o", help="Folder that receives the new run store."),
    retry_infra: bool = typer.Option(False, "--retry-infra", help="Retry an infrastructure ERROR once."),
    junit: Path = typer.Option(None, "--junit", help="Also write a JUnit XML report here."),
    markdown: Path = typer.Option(None, "--markdown", help="Also write a Markdown report here."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    executor: str = typer.Option(
        "local", "--executor", help="Where trials run: local (forked processes here) or a plugin's, such as dask."
    ),
    scheduler: str = typer.Option(
        "", "--scheduler", help="With --executor dask: the scheduler, tcp://HOST:PORT (none: a local cluster)."
    ),
    sign_key: Path = typer.Option(None, "--sign-key", help="Sign the run store when it is written (certlab keygen)."),
    resume: Path = typer.Option(None, "--resume", help="Complete the run store RUNDIR that a kill or Ctrl-C stopped."),
    sandbox: str = typer.Option(
        "auto",
        "--sandbox",
        help="Contain coding arms' agents and their code: auto (the first installed sandbox that works, bwrap; else "
        "uncontained with a warning), a sandbox's name (refuse without it) or none. Recorded in the manifest.",
    ),
) -> None:
    """Run an A/B experiment; the exit code is the verdict (PASS 0, BLOCK 1, INCONCLUSIVE 2, ERROR 3)."""
    from certlab_core._runtime.option_values import workers_or_cpus
    from certlab_core._runtime.registry import discover, refuse_broken
    from certlab_core.cli.sign_key import check_key_reach, check_sign_key, sign_evidence
    from certlab_core.gate.descriptor import load_descriptor
    from certlab_core.gate.executor_sessions import ExecutorBroke, open_executor
    from certlab_core.gate.manifest import build_manifest
    from certlab_core.gate.progress import ProgressLine
    from certlab_core.gate.runner import plan_run, run_distributions, run_experiment
    from certlab_core.gate.store import create_run, earlier_lines

    workers = workers_or_cpus(workers, "trials")
    from certlab_core.certify.heartbeat import heartbeat_interval

    heartbeat_interval()  # a CERTLAB_HEARTBEAT_S that is no number is refused before anything runs
    registry = discover()
    refuse_broken(registry, "run")  # before any trial: never a verdict from less than is installed
    key = check_sign_key(registry, sign_key)  # read once, now, and held by the harness alone
    _check_reporters(registry, junit, markdown, resume)  # a new store's folder is not made yet: checked on writing
    from certlab_core.certify.acceptance import refuse_unread_family, register_experiment_task  # a user's own task
    from certlab_core.evidence.record_file import raise_if_interrupted, where_it_stands
    from certlab_core.gate.resume import notice_interrupt, open_for_resume, scheduled_trials
    from certlab_core.gate.store import TRIALS

    if resume is not None:
        manifest = open_for_resume(resume, descriptor)
        register_experiment_task(registry, Path(manifest.descriptor_dir))
    else:
        if descriptor is None:
            raise UsageError("give the experiment descriptor (certlab run certlab.yaml), or --resume RUNDIR")
        spec = load_descriptor(descriptor)
        if register_experiment_task(registry, descriptor.resolve().parent) is None:
            refuse_unread_family(registry, descriptor.resolve().parent, spec.task.family)
        manifest = build_manifest(spec, descriptor, registry)
        if manifest.task.kind == "family":  # the arms run external programs: seal the containment they get
            from certlab_core._runtime.containment import choose_containment
            from certlab_core.gate.manifest import seal_manifest

            used = choose_containment(registry, sandbox, [], lambda line: print(line, file=sys.stderr)).name
            manifest = seal_manifest(attrs.evolve(manifest, sandbox=used))
    if key is not None:  # refused before the first trial when a trial could read it
        check_key_reach(key, _arms_containment(registry, manifest), lambda line: print(line, file=sys.stderr), resume)
    plan = plan_run(manifest, registry)
    with open_executor(registry, executor, workers, scheduler or None, run_distributions(manifest)) as session:
        folder = resume if resume is not None else create_run(out, manifest)
        print(f"certlab: running {manifest.experiment} into {folder}", file=sys.stderr, flush=True)
        notice_interrupt(folder, manifest)
        total = scheduled_trials(manifest)
        progress = ProgressLine(total, enabled=not quiet)
        try:
            outcome = run_experiment(plan, folder, session, retry_infra, progress)
        except ExecutorBroke as broke:  # what ran is recorded: how far it got, and how to go on
            stands = where_it_stands(folder / TRIALS, total, f"certlab run --resume {folder}")
            raise InstrumentError(f"{broke.message}; stopped{stands}") from None
        raise_if_interrupted()  # a Ctrl-C whose exception Python dropped (during a fork) still stops the run
        decision = _decide_and_write(folder, registry)  # before the executor stops (a cluster takes seconds)
    typer.echo(f"run: {folder}")
    if outcome.stopped and decision["verdict"] != "ERROR" and not quiet:
        print(f"certlab: {outcome.stopped}", file=sys.stderr)
    _echo_decision(decision, folder, earlier_lines(folder, manifest))
    _write_reports(folder, registry, junit, markdown)
    if key is not None:
        typer.echo(sign_evidence(folder, key))
    raise typer.Exit(int(decision["exit_code"]))


def _arms_containment(registry: Registry, manifest: Manifest) -> Containment:
    """The containment of the run's arms: the sealed ``--sandbox`` for a family's coding arms; a tool world's agents
    run in the harness's own processes, uncontained."""
    from certlab_core._runtime.containment import choose_containment

    if manifest.task.kind != "family":
        return Containment()
    return choose_containment(registry, manifest.sandbox, [], lambda _line: None)


def _decide_and_write(folder: Path, registry: Registry) -> dict[str, Any]:
    from certlab_core.gate.decision import decide
    from certlab_core.gate.store import TRIALS, iter_raw_lines, open_manifest, write_decision

    manifest = open_manifest(folder)
    rule = registry.get("statistical_rules", manifest.rule.name)
    decision = decide(manifest, iter_raw_lines(folder / TRIALS), rule)
    write_decision(folder, decision)
    return decision


def gate_command(
    rundir: Path = typer.Argument(..., help="A run store made by 'certlab run'."),
    junit: Path = typer.Option(None, "--junit", help="Also write a JUnit XML report here."),
    markdown: Path = typer.Option(None, "--markdown", help="Also write a Markdown report here."),
    as_json: bool = typer.Option(False, "--json", help="Print the decision document instead of text."),
) -> None:
    """Recompute the verdict from a run store alone; the exit code is the verdict."""
    from certlab_core._runtime.registry import discover
    from certlab_core.evidence.integrity import AttemptLedger
    from certlab_core.gate.decision import decide_file
    from certlab_core.gate.store import (
        DECISION,
        TRIALS,
        collector_paused,
        earlier_lines,
        open_manifest,
    )
    from certlab_core.sdk.canonical import pretty_json, seal_holds

    registry = discover()
    _check_reporters(registry, junit, markdown, rundir)
    manifest = open_manifest(rundir)
    rule = registry.get("statistical_rules", manifest.rule.name)
    # One pass over trials.jsonl: the decision's seal and schedule checks, and the retries'
    # (certlab_core.evidence.integrity: each record written once, a retry only after an infrastructure error).
    ledger = AttemptLedger(manifest.infra_exit_codes)
    with collector_paused():
        decision = decide_file(manifest, rundir / TRIALS, rule, ledger)
    stored_path = rundir / DECISION
    if stored_path.exists() or stored_path.is_symlink():
        from certlab_core.plugin.errors import CertlabError
        from certlab_core.sdk.safe_io import parse_json, read_capped_bytes

        try:
            stored_text = read_capped_bytes(stored_path, "decision").decode("utf-8", errors="replace")
        except CertlabError as error:  # a FIFO, a device, a folder or a huge file in its place
            stored_text = error.message
        if stored_text != pretty_json(decision):
            try:
                stored = parse_json(stored_text, str(stored_path))
                tampered = not (isinstance(stored, dict) and seal_holds(stored))
            except (CertlabError, ValueError):
                tampered = True
            note = (
                "decision.json was edited by hand (its seal does not hold)"
                if tampered
                else "decision.json differs from the decision its manifest and trials give"
            )
            decision = dict(decision)
            decision["problems"] = [*decision["problems"], f"{note}; the verdict above is recomputed"]
            decision["verdict"], decision["exit_code"] = "ERROR", EXIT_ERROR
    forged = [problem for problem in ledger.finish() if problem not in decision["problems"]]
    if forged:
        decision = dict(decision, problems=[*decision["problems"], *forged], verdict="ERROR", exit_code=EXIT_ERROR)
    if as_json:
        typer.echo(pretty_json(decision), nl=False)
    else:
        typer.echo(f"run: {rundir}")
        _echo_decision(decision, rundir, earlier_lines(rundir, manifest))
    _write_reports(rundir, registry, junit, markdown)
    raise typer.Exit(int(decision["exit_code"]))


def schema_command(
    document: str = typer.Argument(
        "descriptor",
        help="Which document: descriptor (certlab.yaml), manifest, trial (a trials.jsonl line) or decision.",
    ),
) -> None:
    """Print a JSON Schema generated from the code (default: the experiment descriptor)."""
    from certlab_core.gate import schemas

    if document not in SCHEMA_DOCUMENTS:
        raise UsageError(f"no schema for {document!r}; choose one of {', '.join(SCHEMA_DOCUMENTS)}")
    typer.echo(json.dumps(schemas.schema_of(document), indent=2, sort_keys=False))


def init_command(
    name: str = typer.Argument(..., help="The experiment id."),
    baseline: str = typer.Option(..., "--baseline", help="module:function of the baseline agent."),
    candidate: str = typer.Option(..., "--candidate", help="module:function of the candidate agent."),
    toolset: str = typer.Option(..., "--toolset", help="module:function building the tools: build(task_input, seed)."),
    oracle: str = typer.Option(
        ..., "--oracle", help="module:function judging the final state: oracle(task, snapshot)."
    ),
    fault: list[str] = typer.Option([], "--fault", help="NAME:TOOL, a fault on the first call of a tool (repeatable)."),
    out: Path = typer.Option(Path("certlab.yaml"), "--out", "-o", help="The descriptor to write."),
    n_per_arm: int = typer.Option(20, "--n", help="Trials per arm of the smoke experiment."),
) -> None:
    """Check the references in a child process and write a small smoke descriptor."""
    from certlab_core.gate.scaffold import write_smoke_descriptor

    path = write_smoke_descriptor(name, baseline, candidate, toolset, oracle, fault, out, n_per_arm)
    typer.echo(f"wrote {path}; run it with: certlab run {path}")


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("gate")(gate_command)
    app.command("schema")(schema_command)
    app.command("init")(init_command)
