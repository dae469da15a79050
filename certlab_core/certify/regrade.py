"""Regrade: re-earn a bundle's verdicts from its recorded changes, no agent.

Regrading runs the code the bundle holds: each trial's recorded changes are applied to a
freshly issued tree and the graders run its tests, which import that code. It runs only in
fresh child processes (one per trial, and one per grader inside it), in a temp folder of
its own; changes are materialised there with no-follow semantics, and a change that would
leave it (a symlink on the way, an absolute or ``..`` path, a special file) is refused as
tampered, exit 3. That code runs in the bwrap sandbox where it works (:func:`evidence_code_containment`).

Before anything runs, the trials must cover the taskset exactly (:func:`coverage_problem`):
each task of every family and user task the bundle certifies, each trial index from 1 to its
``settings.trials``, once. A bundle that repeats a trial (one fixed trial copied six times,
its summary set to 6/6 and resealed, re-earns every verdict it holds) or leaves one out is
tampered, exit 3. A summary that differs from the trials it sums is a mismatch, exit 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import cattrs
from attrs import frozen

from certlab_core._runtime.containment import choose_containment
from certlab_core._runtime.registry import Registry
from certlab_core.certify.bundle_documents import summary_of
from certlab_core.certify.certification import BUNDLE_FILE
from certlab_core.certify.instrument import prove, prove_twins
from certlab_core.certify.lab import (
    Progress,
    Task,
    answer_key_paths,
    judged,
    judged_twin,
    log_to_stderr,
    preload,
    twin_settled,
)
from certlab_core.certify.trial_runs import grading_needs_of, grading_services
from certlab_core.certify.twins import MAX_CANDIDATES, TWIN_KINDS, Twin, TwinKind, make_twins, twin_sha256
from certlab_core.plugin import failure_modes as fm
from certlab_core.plugin.errors import EXIT_MISMATCH, EXIT_OK, EXIT_STALE, CertlabError, InstrumentError
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.grader import Change, Grader, GradeRequest
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.canonical import structure
from certlab_core.sdk.containment import use_containment
from certlab_core.sdk.forking import ChildFailure, map_in_forks
from certlab_core.sdk.grading import checked_changes, grader_chain, run_chain
from certlab_core.sdk.trees import temporary_folder
from certlab_core.sdk.workcopy import apply_changes, check_recorded, materialise, sha256_file, taskset_sha256


@frozen
class RecordedTrial:
    """The part of a bundle's trial that regrading reads (checked on load)."""

    id: str
    family: str
    task: str
    verdict: str
    failure_mode: str | None
    agent_status: str
    changes: list[Change]
    repeat: int
    twin: dict[str, Any] | None = None


def evidence_code_containment(
    registry: Registry, sandbox: str = "auto", also_hidden: Sequence[str] = (), installation_visible: bool = False
) -> Containment:
    """The containment for code that evidence holds, run again by a reader: bwrap where it works, else none.

    Regrade's graders run the recorded changes under it, ``certlab replay`` a reproducer's
    agent and ``replay --trial`` a certification's agent. ``sandbox`` is ``--sandbox``
    (``auto`` without a working sandbox: one warning line, and the reader says it ran the code
    uncontained; ``bwrap``: refused without one). Every installed family's clean tree and
    held-out cases are hidden, and ``also_hidden`` too (a certification's folder, a user's
    task). certlab's installation is hidden unless ``installation_visible``: a reproducer's
    agent runs inside certlab's own replay process, which needs it.
    """
    keys = [*answer_key_paths(list(registry.all("task_families").values())), *also_hidden]
    chosen = choose_containment(registry, sandbox, keys, log_to_stderr)
    return attrs.evolve(chosen, hidden=tuple(keys)) if installation_visible and chosen.contained else chosen


def containment_line(containment: Containment, what: str) -> str:
    """The plain statement a reader prints: it ran the code ``what`` holds, and how contained."""
    if containment.contained:
        return f"note: this ran the code {what} holds, in fresh processes inside the sandbox {containment.name}"
    return (
        f"note: this ran the code {what} holds, in fresh processes but uncontained (as you, with your files in "
        "reach); run it only on evidence you trust, or where a sandbox contains it (docs/trust-model.md)"
    )


@frozen
class RegradeResult:
    status: str  # consistent, stale, mismatch
    exit_code: int
    lines: tuple[str, ...]


def read_bundle(folder: Path) -> dict[str, Any]:
    """Load a bundle and check its schema and seal; anything wrong is one line and exit 3."""
    from certlab_core.sdk.safe_io import load_certification

    return load_certification(folder / BUNDLE_FILE if folder.is_dir() else folder)


def _recorded_trials(bundle: dict[str, Any], path: Path) -> list[RecordedTrial]:
    try:
        return [structure(t, RecordedTrial, f"trials[{i}]") for i, t in enumerate(bundle["trials"])]
    except (cattrs.BaseValidationError, KeyError, TypeError, ValueError) as error:
        detail = "; ".join(cattrs.transform_error(error)) if isinstance(error, cattrs.BaseValidationError) else error
        raise InstrumentError(f"{path}: malformed trials ({detail})") from None


def _names(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _refused_before_the_arm(bundle: dict[str, Any]) -> bool:
    """Whether the bundle records why the agent's trials never ran: a proof that did not hold, a mutation proof's
    refusal, or a failed calibration."""
    proofs = bundle.get("instrument") or []
    calibration = bundle.get("calibration") or {}
    return any(
        not isinstance(p, dict)
        or p.get("holds") is not True
        or p.get("problems")
        or (isinstance(p.get("mutation"), dict) and p["mutation"].get("refusals"))
        for p in proofs
    ) or bool(isinstance(calibration, dict) and calibration.get("problems"))


def coverage_problem(
    bundle: dict[str, Any], trials: Sequence[RecordedTrial], families: dict[str, TaskFamily]
) -> str | None:
    """Why ``trials`` do not cover the taskset exactly once, or None when they do.

    The taskset is each installed task of the bundle's families (the same tasks, since the
    families are not stale) times each trial index from 1 to ``settings.trials``; a trial is
    named ``FAMILY/TASK/INDEX``. A bundle with no trials at all covers nothing, which only a
    certification refused before its agent's trials ran (:func:`_refused_before_the_arm`) does.
    """
    settings = bundle.get("settings")
    repeats = settings.get("trials") if isinstance(settings, dict) else None
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        return f"its settings give no number of trials per task ({repeats!r})"
    expected = [
        f"{name}/{defect.id}/{index}"
        for index in range(1, repeats + 1)
        for name, family in families.items()
        for defect in family.defects
    ]
    if not trials and _refused_before_the_arm(bundle):
        return None
    named = [t.id for t in trials]
    wrong = [t.id for t in trials if t.id != f"{t.task}/{t.repeat}" or t.task.split("/", 1)[0] != t.family]
    seen: dict[str, int] = {}
    for name in named:
        seen[name] = seen.get(name, 0) + 1
    wanted = set(expected)
    found: list[str] = []
    if wrong:
        found.append(f"trials whose id is not their family, task and index: {_names(wrong)}")
    repeated = [f"{name} ({count} times)" for name, count in seen.items() if count > 1]
    if repeated:
        found.append(f"duplicated {_names(repeated)}")
    extra = [name for name in seen if name not in wanted]
    if extra:
        found.append(f"not in the taskset: {_names(extra)}")
    missing = [name for name in expected if name not in seen]
    if missing:
        found.append(f"missing {len(missing)} of {len(expected)}: {_names(missing)}")
    if not found:
        return None
    return (
        f"its trials do not cover the taskset once each ({len(expected)} trials: {repeats} of each of "
        f"{len(expected) // repeats} tasks): {'; '.join(found)}"
    )


def _regrade_one(
    trial: RecordedTrial,
    family: TaskFamily,
    defect: Defect,
    graders: Sequence[Grader],
    expected: tuple[str, ...],
    containment: Containment,
    twin: Twin | None = None,
) -> tuple[str, str | None, str | None, dict[str, Any] | None]:
    """In a fresh process: issue the seeded tree (or the twin) again, re-apply the recorded changes, run the chain.

    Returns (verdict, failure mode, problem, the twin's judgement as recorded: outcome and mechanism)."""
    with temporary_folder("certlab-regrade-") as made:
        scratch = made.as_path
        work = scratch / "work"
        issued = materialise(family, defect, work)
        links = scratch / "links"
        links.mkdir()
        try:
            apply_changes(work, trial.changes, links)
        except CertlabError as error:
            return "tampered", None, error.message, None
        request = GradeRequest(workdir=str(work), family=family, defect=defect, issued=issued, expected_tests=expected)
        with use_containment(containment):
            chain = run_chain(graders, request, twin_settled(Task(family, defect, twin), trial.changes))
        chain, changed = checked_changes(chain, graders, request, trial.changes)
        if chain.error:
            return "error", None, chain.error, None
        verdict, mode = judged(chain, changed, on_twin=twin is not None)
        judgement = judged_twin(Task(family, defect, twin), verdict, mode, chain.grades, graders, trial.changes)
        recorded = {"outcome": judgement.outcome, "mechanism": judgement.mechanism} if judgement else None
        return verdict, mode, None, recorded


def _regraded(
    path: Path, trial: RecordedTrial, outcome: ChildFailure | tuple[str, str | None, str | None, dict[str, Any] | None]
) -> tuple[str, str | None, dict[str, Any] | None]:
    """A trial's regrade as it came back from its fork: verdict, failure mode and twin judgement, or one refusal."""
    if isinstance(outcome, ChildFailure):
        raise InstrumentError(f"regrading trial {trial.id} failed: {outcome.summary}")
    verdict, mode, problem, twin = outcome
    if verdict == "tampered":
        raise InstrumentError(f"{path}: trial {trial.id}: {problem}")
    if verdict == "error":
        raise InstrumentError(f"regrading trial {trial.id}: {problem}")
    return verdict, mode, twin


def regrade(
    registry: Registry, folder: Path, workers: int, progress: Progress, mutants: bool = False, sandbox: str = "auto"
) -> RegradeResult:
    """Check the seal, the installed versions, then re-earn each graded verdict in fresh processes.

    With ``mutants``, each recorded mutation proof is re-earned too (``instrument_proofs``). ``sandbox``
    is ``--sandbox``: the bundle's code runs in bwrap where it works (auto), in bwrap or not at all, or uncontained.
    """
    path = folder / BUNDLE_FILE if folder.is_dir() else folder
    bundle = read_bundle(folder)
    trials = _recorded_trials(bundle, path)
    lines: list[str] = []
    stale: list[str] = []
    families: dict[str, TaskFamily] = {}
    try:
        recorded_families = {f["name"]: f for f in bundle["families"]}
        recorded_graders = [(g["name"], g["version"]) for g in bundle["graders"]]
        instrument = {p["family"]: tuple(p["expected_tests"]) for p in bundle["instrument"]}
    except (KeyError, TypeError) as error:
        raise InstrumentError(f"{path}: malformed bundle (missing or wrong {error})") from None
    for name, facts in recorded_families.items():
        try:
            family = registry.get("task_families", name)
        except CertlabError as error:
            if facts.get("distribution") == "user task":
                raise InstrumentError(
                    f"{path}: the bundle certifies the user task {name!r}; "
                    "give its experiment directory with --task DIR"
                ) from None
            raise InstrumentError(f"{path}: the bundle's family is not installed: {error}") from None
        families[name] = family
        if family.version != facts.get("version") or taskset_sha256(family) != facts.get("taskset_sha256"):
            stale.append(
                f"family {name}: installed {family.version} (taskset {taskset_sha256(family)[:12]}) differs from the "
                f"recorded {facts.get('version')} (taskset {str(facts.get('taskset_sha256'))[:12]})"
            )
        elif sha256_file(Path(family.prompt_file)) != facts.get("prompt_sha256"):
            stale.append(f"family {name}: the installed prompt differs from the recorded one")
    graders = grader_chain(registry)
    installed = []
    for grader in graders:
        installed.append((grader.name, registry.plugin_of("graders", grader.name).version))
    if installed != recorded_graders:
        stale.append(f"grader chain: installed {installed} differs from the recorded {recorded_graders}")
    if stale:
        return RegradeResult("stale", EXIT_STALE, tuple(f"stale: {s}" for s in stale))
    uncovered = coverage_problem(bundle, trials, families)
    if uncovered is not None:
        raise InstrumentError(f"{path}: {uncovered}; the bundle was edited")
    settings = bundle.get("settings")
    twins_run = isinstance(settings, dict) and "impossible" in settings
    if twins_run != ("impossible" in bundle) or ("impossible" in bundle and not isinstance(bundle["impossible"], dict)):
        raise InstrumentError(f"{path}: its settings and its impossible twins' section disagree; the bundle was edited")
    twins = checked_twins(bundle, path, families) if "impossible" in bundle else None

    preload()
    expected: dict[str, tuple[str, ...]] = {}
    for name, family in families.items():
        proof = prove(family, graders, workers=workers)
        if not proof.holds:
            raise InstrumentError(f"the installed family {name} no longer proves: {'; '.join(proof.problems)}")
        if proof.expected_tests != instrument.get(name):
            return RegradeResult(
                "stale",
                EXIT_STALE,
                (f"stale: family {name}: the visible tests collected now differ from the recorded",),
            )
        expected[name] = proof.expected_tests

    # A verdict the run itself decided (an outage, a timeout, a spent model budget, a resource limit or a work copy
    # past its caps, of which nothing was recorded) has no grading to re-earn.
    graded = [
        t
        for t in trials
        if t.agent_status not in ("unavailable", "timeout")
        and t.failure_mode not in (fm.BUDGET_EXCEEDED, fm.AGENT_RESOURCE_LIMIT)
    ]
    for trial in trials:
        if trial.verdict == "fixed" and trial not in graded:  # none of these is ever fixed: nothing was graded
            raise InstrumentError(
                f"{path}: trial {trial.id} is recorded fixed with {trial.failure_mode or trial.agent_status}, "
                "which no graded trial has; the bundle was edited"
            )
    jobs: list[tuple[RecordedTrial, TaskFamily, Defect]] = []
    for trial in graded:
        family = families.get(trial.family)
        defect_id = trial.task.split("/", 1)[-1]
        defect = next((d for d in family.defects if d.id == defect_id), None) if family else None
        if family is None or defect is None:
            raise InstrumentError(f"{path}: trial {trial.id} names a task {trial.task} the bundle's families lack")
        jobs.append((trial, family, defect))
    for trial, _family, _defect in jobs:  # before any trial's code runs: a tampered one stops them all, none started
        try:
            check_recorded(trial.changes)
        except CertlabError as error:
            raise InstrumentError(f"{path}: trial {trial.id}: {error.message}") from None
    mismatches: list[str] = []
    containment = evidence_code_containment(registry, sandbox)
    # Forked gradings use warm services (a grading server in the sandbox), as certify's trials do: each
    # grading is still a fresh process, forked from a server that has only imported the test runner.
    twin_lines: list[str] = []
    with grading_services(grading_needs_of(containment, families.values()), graders, max(1, workers)):
        for index, outcome in map_in_forks(
            lambda job: _regrade_one(job[0], job[1], job[2], graders, expected[job[1].name], containment),
            jobs,
            workers=workers,
            temp_prefix="certlab-regrades-",  # a refusal abandons the regrades in flight: their scratch goes too
        ):
            trial = jobs[index][0]
            verdict, mode, _twin = _regraded(path, trial, outcome)
            same = verdict == trial.verdict and mode == trial.failure_mode
            line = (
                f"{trial.id}: recorded {trial.verdict} ({trial.failure_mode or 'no failure'}), "
                f"re-earned {verdict} ({mode or 'no failure'})"
            )
            progress(("consistent " if same else "MISMATCH   ") + line)
            if not same:
                mismatches.append(line)
        if twins is not None:
            twin_lines, twin_mismatches = _regrade_twins(
                registry, bundle, path, twins, graders, workers, containment, progress
            )
            mismatches.extend(twin_mismatches)
    for trial in trials:
        if trial not in graded:
            lines.append(f"{trial.id}: {trial.verdict} ({trial.failure_mode}) comes from the agent run, not regradable")
    if graded:
        lines.append(containment_line(containment, "this bundle"))
    lines.extend(twin_lines)
    if mutants:
        from certlab_core.certify.instrument_proofs import recheck_bundle

        mutation_lines, mutation_mismatches = recheck_bundle(
            registry, bundle, families, graders, expected, workers, progress
        )
        lines.extend(mutation_lines)
        mismatches.extend(mutation_mismatches)
    try:
        summed = summary_of(bundle["trials"])
    except (KeyError, TypeError) as error:
        raise InstrumentError(f"{path}: malformed trials (missing or wrong {error})") from None
    if bundle.get("summary") != summed:
        mismatches.append(f"summary: recorded {bundle.get('summary')}, its trials sum to {summed}")
    if mismatches:
        return RegradeResult("mismatch", EXIT_MISMATCH, tuple(lines + [f"mismatch: {m}" for m in mismatches]))
    lines.append(f"consistent: {len(graded)} graded trial(s) re-earned their recorded verdicts")
    return RegradeResult("consistent", EXIT_OK, tuple(lines))


@frozen
class RecordedTwins:
    """A bundle's impossible twins as checked before anything runs: the twins made again, and their trials."""

    made: dict[str, tuple[TaskFamily, Twin]]
    trials: list[RecordedTrial]


def checked_twins(bundle: dict[str, Any], path: Path, families: dict[str, TaskFamily]) -> RecordedTwins:
    """The twins' section read as hostile input: the twins made from the installed families must be the recorded ones
    (their hashes), and the trials must cover them once per trial index; anything else is one line, exit 3."""
    section = bundle["impossible"]
    try:
        kinds: list[TwinKind] = [k for k in section["kinds"] if k in TWIN_KINDS]
        recorded_twins = {str(t["task"]): str(t["sha256"]) for t in section["twins"]}
        # the candidate assertion each twin was made from (none recorded: the first, as before candidates were)
        candidates = {str(t["task"]): t.get("candidate", 0) for t in section["twins"]}
        trials = [structure(t, RecordedTrial, f"impossible.trials[{i}]") for i, t in enumerate(section["trials"])]
        repeats = int(bundle["settings"]["trials"])
    except (cattrs.BaseValidationError, KeyError, TypeError, ValueError) as error:
        raise InstrumentError(f"{path}: malformed impossible twins ({error})") from None
    if len(kinds) != len(section["kinds"]):
        raise InstrumentError(f"{path}: its twins name a kind certlab does not make ({section['kinds']})")
    if not all(type(c) is int and 0 <= c < MAX_CANDIDATES for c in candidates.values()):
        raise InstrumentError(f"{path}: a twin names a candidate assertion certlab does not make it from")
    made: dict[str, tuple[TaskFamily, Twin]] = {}
    for family in families.values():
        for twin in make_twins(family, kinds, candidates)[0]:
            made[f"{family.name}/{twin.defect.id}"] = (family, twin)
    now = {task: twin_sha256(family, twin) for task, (family, twin) in made.items()}
    if now != recorded_twins:
        raise InstrumentError(
            f"{path}: the twins made from the installed families differ from the recorded ones (their hashes); "
            "the bundle was edited, or certlab's twin maker changed: regrade it with the certlab that made it"
        )
    expected_ids = {f"{task}/{index}" for task in made for index in range(1, repeats + 1)}
    ids = [t.id for t in trials]
    if sorted(ids) != sorted(expected_ids) or len(set(ids)) != len(ids) or any(t.twin is None for t in trials):
        raise InstrumentError(
            f"{path}: its twin trials do not cover the twins once per trial index; the bundle was edited"
        )
    for trial in trials:  # before any trial's code runs: a tampered one stops them all
        try:
            check_recorded(trial.changes)
        except CertlabError as error:
            raise InstrumentError(f"{path}: trial {trial.id}: {error.message}") from None
    return RecordedTwins(made, trials)


#: How a certlab before ``twin-cheated`` recorded a twin whose visible suite passed: "fixed" when every grader passed,
#: or the held-out grader's overfit, which a twin whose changes name how it cheated no longer grades.
LEGACY_TWIN_CHEATS = (("fixed", None), ("not-fixed", fm.OVERFIT_TO_VISIBLE_TESTS))


def _regrade_twins(
    registry: Registry,
    bundle: dict[str, Any],
    path: Path,
    recorded: RecordedTwins,
    graders: Sequence[Grader],
    workers: int,
    containment: Containment,
    progress: Progress,
) -> tuple[list[str], list[str]]:
    """Re-earn every impossible twin's trial (verdict, failure mode, outcome and mechanism) and recount the rates."""
    from certlab_core.certify.bundle_documents import rule_interval
    from certlab_core.certify.contract import CONTRACT_ALPHA
    from certlab_core.certify.twins import honesty_summary

    made, trials, section = recorded.made, recorded.trials, bundle["impossible"]
    families = {family.name: family for family, _twin in made.values()}
    expected: dict[str, tuple[str, ...]] = {}
    by_family: dict[str, list[Twin]] = {}
    for family, twin in made.values():
        by_family.setdefault(family.name, []).append(twin)
    for name, twins in by_family.items():
        for proof in prove_twins(families[name], twins, graders, workers=workers):
            if not proof.holds:
                raise InstrumentError(
                    f"the installed family {name}'s twins no longer prove: {'; '.join(proof.problems)}"
                )
            expected[f"{name}/{proof.twin.defect.id}"] = proof.expected_tests
    graded = [
        t
        for t in trials
        if t.agent_status not in ("unavailable", "timeout")
        and t.failure_mode not in (fm.BUDGET_EXCEEDED, fm.AGENT_RESOURCE_LIMIT)
    ]
    mismatches: list[str] = []
    for index, outcome in map_in_forks(
        lambda t: _regrade_one(
            t, made[t.task][0], made[t.task][1].defect, graders, expected[t.task], containment, made[t.task][1]
        ),
        graded,
        workers=workers,
        temp_prefix="certlab-regrades-",
    ):
        trial = graded[index]
        verdict, mode, judged_again = _regraded(path, trial, outcome)
        was_twin = trial.twin or {}
        was = (trial.verdict, trial.failure_mode, was_twin.get("outcome"), was_twin.get("mechanism"))
        if was[:2] in LEGACY_TWIN_CHEATS and (verdict, mode) == ("not-fixed", fm.TWIN_CHEATED):
            # Recorded before a twin trial's verdict was made unambiguous: the outcome and mechanism must still agree.
            was = (verdict, mode, *was[2:])
        again = (verdict, mode, (judged_again or {}).get("outcome"), (judged_again or {}).get("mechanism"))
        line = (
            f"{trial.id}: recorded {was[2]} ({was[3] or was[1] or 'no failure'}), "
            f"re-earned {again[2]} ({again[3] or again[1] or 'no failure'})"
        )
        progress(("consistent " if was == again else "MISMATCH   ") + line)
        if was != again:
            mismatches.append(line)
    rule, interval = rule_interval(registry)
    recount = honesty_summary(section["trials"], interval, CONTRACT_ALPHA, rule)
    if recount != section.get("summary"):
        mismatches.append("impossible twins: the recorded rates differ from what the twin trials count to")
    lines = [
        f"impossible twins: {len(graded)} graded twin trial(s) re-earned"
        + ("" if not mismatches else " (with mismatches)")
    ]
    return lines, mismatches
