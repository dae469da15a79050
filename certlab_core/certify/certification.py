"""Certification: prove, calibrate, run the agent, write bundle and contract."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
from attrs import frozen

from certlab_core import __version__
from certlab_core._runtime.containment import choose_containment
from certlab_core._runtime.default_rule import exact_interval
from certlab_core._runtime.option_values import refuse_bad_seconds
from certlab_core._runtime.registry import Registry
from certlab_core.certify.acceptance import open_held_out
from certlab_core.certify.bundle_documents import (
    agent_details,
    environment_facts,
    family_facts,
    grader_facts,
    harness_commit,
    impossible_document,
    proof_document,
    summary_of,
    trial_document,
    usage_document,
)
from certlab_core.certify.contract import CONTRACT_ALPHA, REUSED
from certlab_core.certify.instrument import calibrate, constructed_agents, prove, proven_twins
from certlab_core.certify.instrument_proofs import (
    check_minimums,
    installed_proofs,
    measured,
    missing_proofs,
    not_measured_document,
    proof_names,
    said_as,
)
from certlab_core.certify.lab import (
    Progress,
    SeededProof,
    Task,
    TrialRecord,
    TrialSpec,
    answer_key_paths,
    log_to_stderr,
)
from certlab_core.certify.program_check import checked_agent
from certlab_core.certify.reuse import proof_line, reused_or_proven, reused_or_proven_twins, twins_line
from certlab_core.certify.trial_runs import grading_needs_of, grading_services, run_trials
from certlab_core.certify.twins import TWIN_KINDS, TwinKind, TwinProof
from certlab_core.plugin.errors import EXIT_ERROR, EXIT_OK, InstrumentError, UsageError
from certlab_core.plugin.types.agent import AgentAdapter
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import Grader
from certlab_core.plugin.types.held_out import HeldOutRun
from certlab_core.plugin.types.instrument_proof import ProofRequest
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.canonical import ShapeError, sealed, structure, unstructure
from certlab_core.sdk.deadline import plugin_call
from certlab_core.sdk.grading import grader_chain, scores_held_out
from certlab_core.sdk.model_boundary import model_plan_for
from certlab_core.sdk.safe_io import CERTIFICATION_SCHEMA

BUNDLE_SCHEMA = CERTIFICATION_SCHEMA
BUNDLE_FILE = "bundle.json"
CONTRACT_FILE = "CONTRACT.md"


@frozen
class CertifyOptions:
    families: tuple[str, ...]
    agent: str
    agent_args: tuple[str, ...] = ()
    agent_name: str | None = None
    agent_version: str = "unknown"
    agent_timeout_s: float = 600.0
    trials: int = 1
    workers: int = 2
    origin_note: str = ""
    tasks: tuple[str, ...] = ()  # experiment directories of users' own tasks (read by a task source)
    sandbox: str = "auto"  # --sandbox: auto, bwrap or none (certlab_core.plugin.types.sandbox)
    hidden: tuple[str, ...] = ()  # more paths the agent must not see (the output folder)
    mutants: bool = True  # each installed instrument proof of each family (the mutation proof), cached; False skips it
    min_mutation_score: float | None = None  # refuse a family whose mutants survive more than this allows
    # refuse a family whose visible suite alone kills less (None: with min_mutation_score, the family's visible
    # threshold or min_mutation_score, whichever is lower; certlab_mutation.engine.visible_minimum)
    min_visible_mutation_score: float | None = None
    journal: str | None = None  # journal each finished trial in this folder, resuming it (certify_journal)
    token_budget: int | None = None  # --token-budget: model tokens per trial, enforced at the model boundary
    # --impossible: each seeded defect's impossible twins (certlab_core.certify.twins) run beside the seeded tasks,
    # ``trials`` times each; --twins one-off,conflicting names the kinds (one-off alone by default)
    impossible: bool = False
    twin_kinds: tuple[TwinKind, ...] = ("one-off",)
    # --fresh-instrument: prove and calibrate again, reusing no proof or calibration trial from certlab's cache
    fresh_instrument: bool = False


@frozen
class CertifyResult:
    bundle: dict[str, Any]
    exit_code: int
    problems: tuple[str, ...]


def resolve_families(registry: Registry, names: Sequence[str]) -> list[TaskFamily]:
    if not names:
        raise UsageError("name a family with --family NAME (or --family all), or a task of your own with --task DIR")
    if "all" in names:
        families = list(registry.all("task_families").values())
        if not families:
            raise UsageError(f"no task family is installed; {registry.providers.install_line('task_families')}")
        return families
    return [registry.get("task_families", name) for name in dict.fromkeys(names)]


def held_out_notices(families: Sequence[TaskFamily], graders: Sequence[Grader], install: str = "") -> list[str]:
    """What the certification cannot claim with the graders installed: held-out cases nobody scores.

    ``install`` says what would score them (the provider lists' ``pip install ...``), when known.
    """
    if any(scores_held_out(grader) for grader in graders):
        return []
    unscored = [f.name for f in families if _has_cases(Path(f.cases_file))]
    if not unscored:
        return []
    what = f"{install}; " if install else ""
    return [
        f"held-out cases not scored: no installed grader declares the held-out role ({what}families with cases: "
        f"{', '.join(unscored)})"
    ]


def _has_cases(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


def settings_of(options: CertifyOptions) -> dict[str, Any]:
    """The bundle's ``settings``: trials per task, the agent's timeout, the token budget when one was set, and the
    twins' kinds in a run with impossible twins."""
    settings: dict[str, Any] = {"trials": options.trials, "agent_timeout_s": options.agent_timeout_s}
    if options.token_budget is not None:
        settings["token_budget"] = options.token_budget
    if options.impossible:
        settings["impossible"] = list(options.twin_kinds)
    return settings


#: The most runs of every task a certification schedules: a hundred million built every trial's record first, in
#: memory (4.6 GB before the first ran).
MAX_TRIALS_PER_TASK = 10_000


def certify(registry: Registry, options: CertifyOptions, progress: Progress) -> CertifyResult:
    """Prove every family, calibrate, run the agent on every task ``trials`` times, and build the bundle.

    Every family and user task is scored under a lock of its held-out cases
    (``certlab_held_out``: certlab-acceptance), checked before every arm and after the last trial.
    """
    if not 1 <= options.trials <= MAX_TRIALS_PER_TASK:
        raise UsageError(f"--trials must be 1 to {MAX_TRIALS_PER_TASK} (got {options.trials}): the runs of every task")
    refuse_bad_seconds("--agent-timeout", options.agent_timeout_s)
    if options.token_budget is not None and options.token_budget < 1:
        raise UsageError(f"--token-budget must be at least 1 (got {options.token_budget})")
    unknown = [k for k in options.twin_kinds if k not in TWIN_KINDS]
    if unknown or not options.twin_kinds:
        raise UsageError(
            f"--twins: unknown kind {', '.join(unknown) or '(none given)'}; choose from {', '.join(TWIN_KINDS)}"
        )
    check_minimums(registry, options.min_mutation_score, options.min_visible_mutation_score)
    # Two rules marking themselves the default are refused here, before any trial, and so is a default rule whose
    # interval breaks (raises, never returns, answers no interval): the contract and the twins' rates need it.
    interval = exact_interval(registry)
    if interval is not None:
        interval(1, 2, CONTRACT_ALPHA)
    if options.min_mutation_score is not None and not options.mutants:
        raise UsageError("--min-mutation-score needs the mutation proof: leave out --no-mutants")
    if options.min_visible_mutation_score is not None and not options.mutants:
        raise UsageError("--min-visible-mutation-score needs the mutation proof: leave out --no-mutants")
    installed = resolve_families(registry, options.families) if options.families or not options.tasks else []
    held_out = open_held_out(registry, installed, options.tasks)
    try:
        graders = grader_chain(registry)
        # The harness grades the proofs and the calibration uncontained: a task with an environment of its own
        # gets warm servers in it once, for all of them (and for the trials too, under --sandbox none).
        harness = grading_needs_of(Containment(), held_out.families)
        with grading_services(harness, graders, max(1, options.workers)):
            return _certify(registry, options, progress, held_out, graders)
    finally:
        held_out.close()


def certify_into(
    out: Path, resumed: bool, registry: Registry, options: CertifyOptions, progress: Progress
) -> CertifyResult:
    """Certify with a journal in ``out``: a new one (refused if one is there), or, ``resumed``, the one left there.

    A resumed certification takes every option from the journal but ``workers`` (the CLI's).
    """
    from certlab_core.certify.journal import TrialJournal

    journal = TrialJournal(out)
    if resumed:
        stored = journal.reopen()
        try:
            journalled: CertifyOptions = structure(stored, CertifyOptions, "options")
        except Exception as error:  # cattrs' exception groups for a wrong shape
            said = str(error) if isinstance(error, ShapeError) else type(error).__name__
            raise InstrumentError(
                f"{journal.path}: the journalled options are not certify's ({said}); start a new --out folder"
            ) from None
        options = attrs.evolve(journalled, workers=options.workers)
    else:
        journal.start()
    return certify(registry, attrs.evolve(options, journal=str(out)), progress)


def reported_version(
    registry: Registry, agent: AgentAdapter, options: CertifyOptions, progress: Progress
) -> str | None:
    """The version the agent's program reports (its adapter's ``version``), with a warning line when
    ``--agent-version`` says another; None when the adapter cannot tell."""
    if agent.version is None:
        return None
    whose = registry.part_of("agents", agent.name, "version")
    args = (tuple(options.agent_args), os.environ)
    reported: str | None = plugin_call(whose, agent.version, *args, seconds=registry.load_s, returns=(str, type(None)))
    if reported is not None and options.agent_version not in ("unknown", reported):
        progress(
            f"warning: --agent-version {options.agent_version} differs from the version {agent.name}'s program "
            f"reports ({reported}); both are recorded"
        )
    return reported


def _certify(
    registry: Registry, options: CertifyOptions, progress: Progress, held_out: HeldOutRun, graders: list[Grader]
) -> CertifyResult:
    families = held_out.families
    agent: AgentAdapter = registry.get("agents", options.agent)
    if agent.check_args is not None:
        whose = registry.part_of("agents", agent.name, "argument check")
        plugin_call(whose, agent.check_args, tuple(options.agent_args), seconds=registry.load_s)
    reported = reported_version(registry, agent, options, progress)
    # A real agent reaches its model API through the model boundary: every call recorded, no key in the CLI.
    model_boundary = (
        model_plan_for(registry, options.agent_args, max_tokens=options.token_budget)
        if agent.calibration is None
        else None
    )
    if options.token_budget is not None and model_boundary is None:
        raise UsageError(
            f"--token-budget is counted at the model boundary, and {options.agent} would run without one "
            "(a constructed agent, an adapter given --base-url, or no model boundary installed: "
            f"{registry.providers.install_line('model_boundaries')})"
        )
    hidden = [*answer_key_paths(families), str(held_out.scratch), *options.tasks, *options.hidden]
    containment = choose_containment(registry, options.sandbox, hidden, log_to_stderr)
    agent = checked_agent(agent, options.agent_args, containment, log_to_stderr)
    notices = held_out_notices(families, graders, registry.providers.install_line("held_out"))
    for notice in notices:
        progress(f"notice: {notice}")
    calibrators = constructed_agents(registry)
    if not calibrators:
        raise UsageError(
            "no constructed agents are installed to calibrate with (agents that declare their calibration); "
            "run 'certlab plugins' to see the installed agents"
        )
    started = time.monotonic()

    problems: list[str] = []
    proofs: list[SeededProof] = []
    reused_proofs: set[str] = set()
    for family in families:
        lock = held_out.lock_for(family.name)
        prove_now = functools.partial(prove, family, graders, workers=options.workers, acceptance_lock=lock)
        proof, reused = reused_or_proven(family, graders, lock, prove_now, fresh=options.fresh_instrument)
        if reused:
            reused_proofs.add(family.name)
        proofs.append(proof)
        if proof.holds:
            progress(proof_line(family, proof, reused))
        for problem in proof.problems:
            progress(f"prove {family.name}: REFUSED: {problem}")
        problems.extend(proof.problems)
    measured = (
        _instrument_proofs(registry, families, proofs, graders, options, held_out, progress) if not problems else {}
    )
    problems.extend(p for by_proof in measured.values() for record in by_proof.values() for p in record["refusals"])
    twin_proofs: list[TwinProof] = []
    reused_twins: set[str] = set()
    if options.impossible and not problems:
        for family in families:
            lock = held_out.lock_for(family.name)
            prove_twins_now = functools.partial(
                proven_twins, family, graders, options.twin_kinds, options.workers, lock
            )
            made, reused = reused_or_proven_twins(
                family, graders, lock, options.twin_kinds, None, prove_twins_now, fresh=options.fresh_instrument
            )
            if reused:
                reused_twins.add(family.name)
            twin_proofs.extend(made.proofs)
            for fallback in made.fallbacks:
                progress(f"twins {family.name}: {fallback}")
            refused = made.problems
            for problem in refused:
                progress(f"twins {family.name}: REFUSED: {problem}")
            if not refused:
                progress(twins_line(family, made, reused))
            problems.extend(refused)

    calibration_trials: list[tuple[str, TrialRecord]] = []
    reused_trials: list[tuple[str, TrialRecord]] = []
    trials: list[TrialRecord] = []
    if not problems:
        progress(
            f"calibrate: {', '.join(a.name for a in calibrators)} on {sum(len(f.defects) for f in families)} tasks"
        )
        held_out.check("before the calibration arm")
        calibration = calibrate(
            list(zip(families, proofs, strict=True)),
            calibrators,
            graders,
            workers=options.workers,
            locks=held_out.locks,
            twins=twin_proofs,
            cached=not options.fresh_instrument,
        )
        calibration_trials, calibration_problems = calibration.trials, calibration.problems
        reused_trials = [calibration.trials[index] for index in calibration.reused]
        if reused_trials:
            progress(
                f"calibrate: {len(reused_trials)} of {len(calibration.trials)} trials {REUSED} "
                "(--fresh-instrument measures them again)"
            )
        for problem in calibration_problems:
            progress(f"calibrate: FAILED: {problem}")
        problems.extend(calibration_problems)
        for calibrator in calibrators:
            mine = [t for name, t in calibration_trials if name == calibrator.name and t.twin is None]
            on_twins = [t.twin for name, t in calibration_trials if name == calibrator.name and t.twin is not None]
            twins_said = ""
            if on_twins:
                said = sorted({f"{j.outcome}" + (f" ({j.mechanism})" if j.mechanism else "") for j in on_twins})
                twins_said = f"; on {len(on_twins)} twins: {', '.join(said)}"
            if not mine:
                progress(
                    f"calibrate: {calibrator.name:<15} not run on the tasks (no fixed tree is known to check it on)"
                    + twins_said
                )
                continue
            progress(f"calibrate: {calibrator.name:<15} {_score_line(mine)}{twins_said}")
    if not problems:
        expected = {p.family: p.expected_tests for p in proofs}
        specs = [
            TrialSpec(
                task=Task(family, defect),
                agent=agent,
                repeat=repeat,
                agent_args=tuple(options.agent_args),
                agent_timeout_s=options.agent_timeout_s,
                expected_tests=expected[family.name],
                acceptance_lock=held_out.lock_for(family.name),
                containment=containment,
                model_boundary=model_boundary,
                agent_source=registry.installed_source(registry.plugin_name_of("agents", options.agent)),
            )
            for repeat in range(1, options.trials + 1)
            for family in families
            for defect in family.defects
        ]
        by_name = {f.name: f for f in families}
        specs += [
            TrialSpec(
                task=Task(by_name[twin.family], twin.twin.defect, twin.twin),
                agent=agent,
                repeat=repeat,
                agent_args=tuple(options.agent_args),
                agent_timeout_s=options.agent_timeout_s,
                expected_tests=twin.expected_tests,
                acceptance_lock=held_out.lock_for(twin.family),
                containment=containment,
                model_boundary=model_boundary,
                agent_source=registry.installed_source(registry.plugin_name_of("agents", options.agent)),
            )
            for repeat in range(1, options.trials + 1)
            for twin in twin_proofs
        ]
        if options.impossible:  # the honest way out and opaque ids for every task, seeded or twin alike
            specs = [attrs.evolve(spec, impossible=True) for spec in specs]
        progress(
            f"certify: {agent.name} on {len(specs)} trials"
            + (f" ({len(twin_proofs) * options.trials} on twins)" if twin_proofs else "")
        )
        held_out.check(f"before the arm of {agent.name}")
        if options.journal is not None:
            from certlab_core.certify.journal import TrialJournal, run_journalled

            journal = TrialJournal(Path(options.journal), attrs.evolve(options, journal=None))
            trials = run_journalled(specs, graders, options.workers, progress, journal)
        else:
            trials = run_trials(specs, graders, options.workers, progress)
        held_out.check("after the last trial")
        errors = [f"trial {t.id}: {t.grader_error}" for t in trials if t.grader_error]
        problems.extend(errors)

    twin_docs = [trial_document(t) for t in trials if t.twin is not None]
    trial_docs = [trial_document(t) for t in trials if t.twin is None]
    agent_plugin = registry.plugin_of("agents", agent.name)
    version = options.agent_version
    if version == "unknown":  # a constructed agent is versioned by the distribution that ships it, a CLI by itself
        version = agent_plugin.version if agent.calibration is not None else reported or version
    bundle: dict[str, Any] = {
        "schema": BUNDLE_SCHEMA,
        "origin": {
            "produced_by": f"certlab {__version__}",
            "command": "certlab " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "certlab",
            "produced_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "where": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
            "agent_kind": "constructed" if agent.calibration is not None else "external",
            "note": options.origin_note,
        },
        "agent": {
            "name": options.agent_name or agent.name,
            "adapter": agent.name,
            "distribution": agent_plugin.distribution,
            "version": version,
            # What the agent's own program says it is (``claude --version``), kept beside a --agent-version.
            "reported_version": reported,
            "adapter_version": agent_plugin.version,
            "args": list(options.agent_args),
        },
        "settings": settings_of(options),
        "containment": containment.document(),
        "families": [held_out.family_facts(f) or family_facts(registry, f) for f in families],
        "plugins": [{"name": p.name, "distribution": p.distribution, "version": p.version} for p in registry.plugins()],
        "environment": environment_facts(),
        "harness_commit": harness_commit(),
        "graders": grader_facts(registry),
        "instrument": [
            dict(
                proof_document(p),
                clean_tree=f.clean_tree,
                # measured earlier on the same inputs and reused from certlab's cache (certlab_core.certify.reuse)
                **({"reused": True} if f.name in reused_proofs else {}),
                **{name: measured.get(f.name, {}).get(name) for name in proof_names(registry)},
            )
            for f, p in zip(families, proofs, strict=True)
        ],
        "held_out": held_out.document(),
        "predictions": held_out.recorded_predictions(),
        "calibration": {
            "agents": [{"name": a.name, "expect": unstructure(a.calibration)} for a in calibrators],
            "trials": [dict(trial_document(t), agent=name) for name, t in calibration_trials],
            "problems": [p for p in problems if p.startswith("calibration")],
            # the calibration trials reused from certlab's cache (certlab_core.certify.reuse), when any
            **({"reused": [{"agent": name, "id": t.id} for name, t in reused_trials]} if reused_trials else {}),
        },
        "trials": trial_docs,
        "summary": summary_of(trial_docs),
        "usage": usage_document(trial_docs),
        "notices": notices,
        "agent_details": agent_details(trial_docs),
        "wall_s": round(time.monotonic() - started, 3),
    }
    if options.impossible:
        twin_calibration = [p for p in problems if p.startswith("calibration") and "on the twin" in p]
        bundle["impossible"] = impossible_document(
            registry, options.twin_kinds, twin_proofs, families, twin_docs, twin_calibration, reused_twins
        )
    bundle = sealed(bundle)
    unavailable = bundle["summary"]["unavailable"] + sum(1 for t in twin_docs if t["verdict"] == "unavailable")
    exit_code = EXIT_ERROR if problems or unavailable else EXIT_OK
    return CertifyResult(bundle=bundle, exit_code=exit_code, problems=tuple(problems))


def _instrument_proofs(
    registry: Registry,
    families: Sequence[TaskFamily],
    proofs: Sequence[SeededProof],
    graders: Sequence[Grader],
    options: CertifyOptions,
    held_out: HeldOutRun,
    progress: Progress,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Each installed instrument proof (the mutation proof) of every family with a clean tree, by family, then by
    proof; a proof not installed, and each with ``--no-mutants``, is recorded as not measured."""
    records: dict[str, dict[str, dict[str, Any]]] = {}
    installed = {instrument.name: instrument for instrument in installed_proofs(registry)}
    missing = missing_proofs(registry)
    for family, proof in zip(families, proofs, strict=True):
        if not family.clean_tree and family.answer_dir is not None:
            progress(
                f"mutants {family.name}: not made here (the task knows its answer: "
                "certlab prove --task DIR --fixed DIR/oracle --mutants scores them)"
            )
            continue
        if not family.clean_tree:
            progress(f"mutants {family.name}: not made (no fixed tree is known for a task of your own)")
            continue
        records[family.name] = by_proof = {}
        for name in proof_names(registry):
            why = "certify --no-mutants" if not options.mutants else missing.get(name)
            if why is not None:
                progress(
                    f"{said_as(name)} {family.name}: not measured ({'--no-mutants' if not options.mutants else why})"
                )
                by_proof[name] = dict(not_measured_document(why), warnings=[], refusals=[])
                continue
            instrument = installed[name]
            request = ProofRequest(
                family,
                tuple(graders),
                proof.expected_tests,
                workers=options.workers,
                lock=held_out.lock_for(family.name),
                minimum=options.min_mutation_score,
                minimum_visible=options.min_visible_mutation_score,
                reuse=True,
            )
            outcome = measured(instrument, request)
            for line in outcome.lines:
                progress(line)
            for warning in outcome.warnings:
                progress(f"{said_as(name)} {family.name}: WARNING: {warning}")
            for refusal in outcome.refusals:
                progress(f"{said_as(name)} {family.name}: REFUSED: {refusal}")
            by_proof[name] = dict(outcome.document, warnings=list(outcome.warnings), refusals=list(outcome.refusals))
    return records


def _score_line(records: Sequence[TrialRecord]) -> str:
    fixed = sum(1 for r in records if r.verdict == "fixed")
    modes = sorted({r.failure_mode for r in records if r.failure_mode})
    return f"{fixed}/{len(records)} fixed" + (f" ({', '.join(modes)})" if modes else "")


def bundle_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_json(path: Path, what: str) -> Any:
    """A bundle (or other document certify wrote) read as hostile input: ``plugin.safe_io``'s caps, exit 3."""
    from certlab_core.sdk.safe_io import MAX_BUNDLE_BYTES
    from certlab_core.sdk.safe_io import load_json as load_capped

    missing = f"{path}: no {what} there; give the folder certlab certify wrote"
    return load_capped(path, what, InstrumentError, missing, MAX_BUNDLE_BYTES)
