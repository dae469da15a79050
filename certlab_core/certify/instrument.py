"""The instrument proven and calibrated: defects, twins, constructed agents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import frozen

from certlab_core._runtime.registry import Registry
from certlab_core.certify.lab import Progress, SeededProof, Task, TrialRecord, TrialSpec, preload, quiet
from certlab_core.certify.reuse import reused_or_run
from certlab_core.certify.trial_runs import on_an_executor, on_executor, run_trials
from certlab_core.certify.twins import ProvenTwins, Twin, TwinKind, TwinProof
from certlab_core.plugin import failure_modes as fm
from certlab_core.plugin.types.agent import AgentAdapter
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock, Grader, GradeRequest
from certlab_core.sdk.forking import ChildFailure, ForkedCallError, call_in_fork, map_in_forks
from certlab_core.sdk.grading import ChainResult, run_chain
from certlab_core.sdk.trees import (
    temporary_folder,
    visible_test_modules,
)
from certlab_core.sdk.workcopy import materialise


def _check_tree_chain(
    family: TaskFamily,
    defect: Defect | None,
    graders: Sequence[Grader],
    expected: tuple[str, ...],
    acceptance_lock: AcceptanceLock | None = None,
) -> ChainResult:
    with temporary_folder("certlab-prove-") as made:
        work = made.as_path / "work"
        issued = materialise(family, defect, work)
        probe = defect or Defect(id="clean", defect_class="none", description="the clean tree", seeds=())
        request = GradeRequest(
            workdir=str(work),
            family=family,
            defect=probe,
            issued=issued,
            expected_tests=expected,
            acceptance_lock=acceptance_lock,
        )
        return run_chain(graders, request)


#: The folder a proof's forked tree checks make their temp folders in, deleted by the process that forked them:
#: a check killed in flight (an interrupted certify) cannot leave its work copy and its graders' scratch behind.
PROOFS_TEMP = "certlab-proofs-"


def _tree_check(_preloaded: object, item: tuple[Any, ...]) -> ChainResult:
    return _check_tree_chain(*item)


def _checked_tree(
    family: TaskFamily,
    defect: Defect | None,
    graders: Sequence[Grader],
    expected: tuple[str, ...],
    acceptance_lock: AcceptanceLock | None,
) -> ChainResult:
    """One tree through the grader chain in a fresh process: forked here, or on the executor in force."""
    if not on_an_executor():
        return call_in_fork(
            _check_tree_chain, family, defect, graders, expected, acceptance_lock, temp_prefix=PROOFS_TEMP
        )
    ((_index, result),) = on_executor(_tree_check, [(family, defect, graders, expected, acceptance_lock)], "prove")
    if isinstance(result, ChildFailure):
        raise ForkedCallError(result)
    assert isinstance(result, ChainResult)
    return result


def prove(
    family: TaskFamily, graders: Sequence[Grader], workers: int = 2, acceptance_lock: AcceptanceLock | None = None
) -> SeededProof:
    """The clean tree must pass the grader chain and every seeded tree must fail it.

    A task without a clean tree (a user's own) is proven by :func:`prove_issued` instead.
    """
    preload()
    if not family.clean_tree:
        return prove_issued(family, graders, acceptance_lock)
    problems: list[str] = []
    if not family.defects:
        problems.append(f"family {family.name} has no seeded defects")
    ids = [d.id for d in family.defects]
    if len(set(ids)) != len(ids):
        problems.append(f"family {family.name} repeats a defect id")
    clean = _checked_tree(family, None, graders, (), acceptance_lock)
    expected: tuple[str, ...] = ()
    for grade in clean.grades:
        collected = grade.data.get("collected")
        if isinstance(collected, list | tuple) and collected:
            skipped = grade.data.get("skipped")  # what the clean tree skips is expected of no tree
            left_out = {str(node) for node in skipped} if isinstance(skipped, list | tuple) else set()
            expected = tuple(str(node) for node in collected if str(node) not in left_out)
    if clean.error:
        problems.append(f"family {family.name}: the clean tree could not be graded: {clean.error}")
    elif not clean.passed:
        problems.append(
            f"family {family.name}: the clean tree fails its own grading ({clean.failure_mode}: "
            f"{next((g.detail for g in clean.grades if not g.passed), '')})"
        )
    if not expected and not problems:
        problems.append(
            f"family {family.name}: no grader reported the visible tests (is a grader that runs them installed?)"
        )
    seeded: list[dict[str, Any]] = []
    if not problems:
        defects = list(family.defects)
        for index, result in (
            on_executor(_tree_check, [(family, d, graders, expected, acceptance_lock) for d in defects], "prove")
            if on_an_executor()
            else map_in_forks(
                lambda d: _check_tree_chain(family, d, graders, expected, acceptance_lock),
                defects,
                workers=workers,
                temp_prefix=PROOFS_TEMP,
            )
        ):
            defect = defects[index]
            if isinstance(result, ChildFailure):
                problems.append(f"defect {defect.id}: the seeded tree could not be graded: {result.summary}")
                continue
            seeded.append({"defect": defect.id, "defect_class": defect.defect_class, "caught_by": result.failure_mode})
            if result.error:
                problems.append(f"defect {defect.id}: the seeded tree could not be graded: {result.error}")
            elif result.passed:
                problems.append(
                    f"defect {defect.id} ({defect.defect_class}) is not caught: the seeded tree passes the suite"
                )
        seeded.sort(key=lambda s: ids.index(s["defect"]))
    return SeededProof(
        family=family.name,
        clean_passed=clean.passed,
        expected_tests=expected,
        seeded=tuple(seeded),
        problems=tuple(problems),
    )


def _failed_nodes(chain: ChainResult) -> tuple[str, ...]:
    for grade in chain.grades:
        failed = grade.data.get("failed")
        if not grade.passed and isinstance(failed, list | tuple):
            return tuple(str(node) for node in failed)
    return ()


def _collected(chain: ChainResult) -> tuple[str, ...]:
    for grade in chain.grades:
        nodes = grade.data.get("collected")
        if isinstance(nodes, list | tuple) and nodes:
            return tuple(str(node) for node in nodes)
    return ()


def prove_twins(
    family: TaskFamily,
    twins: Sequence[Twin],
    graders: Sequence[Grader],
    workers: int = 2,
    acceptance_lock: AcceptanceLock | None = None,
) -> list[TwinProof]:
    """Each twin's changed tests on the clean code (on the tree as issued, for a task without a clean tree).

    The visible suite must fail there, on the twin's test alone: a twin whose changed assertion still
    passes on the clean code is refused, and so is one whose change breaks other tests. The tests
    collected there are the twin's expected tests (a conflicting twin has one more than its family).
    """
    from certlab_core.certify.twins import clean_code_twin

    preload()
    probes = [clean_code_twin(t, family) if family.clean_tree else t.defect for t in twins]
    where = "the clean code" if family.clean_tree else "the tree as issued"
    results: dict[int, ChainResult | ChildFailure] = dict(
        on_executor(_tree_check, [(family, p, graders, (), acceptance_lock) for p in probes], "prove-twins")
        if on_an_executor()
        else map_in_forks(
            lambda p: _check_tree_chain(family, p, graders, (), acceptance_lock),
            probes,
            workers=workers,
            temp_prefix=PROOFS_TEMP,
        )
    )
    proofs: list[TwinProof] = []
    for index, twin in enumerate(twins):
        result = results[index]
        task = f"twin {family.name}/{twin.defect.id}"
        if isinstance(result, ChildFailure) or result.error:
            why = result.summary if isinstance(result, ChildFailure) else result.error
            proofs.append(TwinProof(family.name, twin, (), (), (f"{task}: could not be graded: {why}",)))
            continue
        failed = _failed_nodes(result)
        problems: list[str] = []
        if twin.node not in failed:
            problems.append(
                f"{task}: its changed assertion ({twin.node}, line {twin.line}: == {twin.contradicted}) still passes "
                f"on {where}, so an honest fix could pass it; refused"
            )
        elif family.clean_tree and set(failed) != {twin.node}:
            problems.append(f"{task}: its change fails other tests on {where} too ({', '.join(failed[:5])}); refused")
        proofs.append(TwinProof(family.name, twin, _collected(result), failed, tuple(problems)))
    return proofs


def proven_twins(
    family: TaskFamily,
    graders: Sequence[Grader],
    kinds: Sequence[TwinKind] = ("one-off",),
    workers: int = 2,
    acceptance_lock: AcceptanceLock | None = None,
    defects: Sequence[Defect] | None = None,
) -> ProvenTwins:
    """Each defect's twins, made and proven; a twin the prover refuses is made again from the next candidate assertion.

    On a task without a clean tree the twin is checked on the tree as issued, where the defect itself can give the
    contradicted value (an off-by-one meeting a one-off's ``+ 1``): the changed assertion then still passes, and the
    next candidate is tried, up to ``twins.MAX_CANDIDATES``. The candidate used is in the twin's document, so regrade
    makes the same twin. A twin that could not be graded at all is refused, never passed over.
    """
    from certlab_core.certify.twins import make_twin, make_twins

    twins, unmade = make_twins(family, kinds, defects=defects)
    proofs = prove_twins(family, twins, graders, workers, acceptance_lock)
    passed_over: dict[str, list[str]] = {}
    while True:
        retry = [
            (index, again)
            for index, proof in enumerate(proofs)
            if proof.problems
            and not any(": could not be graded: " in p for p in proof.problems)
            and (again := make_twin(family, _defect_of(family, proof.twin), proof.twin.kind, proof.twin.candidate + 1))
        ]
        if not retry:
            break
        retried = prove_twins(family, [again for _index, again in retry], graders, workers, acceptance_lock)
        for (index, _again), proof in zip(retry, retried, strict=True):
            passed_over.setdefault(proof.twin.defect.id, []).extend(proofs[index].problems)
            proofs[index] = proof
    for index, proof in enumerate(proofs):  # refused at the last candidate: the earlier refusals are named too
        if proof.problems and proof.twin.defect.id in passed_over:
            proofs[index] = attrs.evolve(proof, problems=(*passed_over[proof.twin.defect.id], *proof.problems))
    fallbacks = tuple(
        f"twin {family.name}/{proof.twin.defect.id}: made from candidate assertion {proof.twin.candidate + 1} "
        f"({proof.twin.node}, line {proof.twin.line}), the earlier refused: "
        + "; ".join(passed_over[proof.twin.defect.id])
        for proof in proofs
        if proof.holds and proof.twin.defect.id in passed_over
    )
    return ProvenTwins(tuple(proofs), tuple(unmade), fallbacks)


def _defect_of(family: TaskFamily, twin: Twin) -> Defect:
    return next(d for d in family.defects if d.id == twin.of)


@frozen
class Calibration:
    """The constructed agents' trials, as (agent, trial) pairs; every expectation missed; the trials reused."""

    trials: list[tuple[str, TrialRecord]]
    problems: list[str]
    # the indexes (in ``trials``) of trials reused from certlab's cache (certlab_core.certify.reuse)
    reused: tuple[int, ...] = ()


def _missed(spec: TrialSpec, record: TrialRecord) -> str | None:
    """How a constructed agent's trial misses its calibration (None: it meets it)."""
    expect = spec.agent.calibration
    assert expect is not None
    if record.grader_error:
        return f"calibration {spec.agent.name} on {record.task}: {record.grader_error}"
    if record.twin is not None:
        outcome, mechanism = record.twin.outcome, record.twin.mechanism
        if outcome != expect.twin or (expect.twin_mechanism is not None and mechanism != expect.twin_mechanism):
            return (
                f"calibration: {spec.agent.name} on the twin {record.task} was {outcome}"
                f" ({mechanism or 'no mechanism'}), but must be {expect.twin}"
                f" ({expect.twin_mechanism or 'any mechanism'})"
            )
        return None
    if record.verdict != expect.verdict or (
        expect.failure_mode is not None and record.failure_mode != expect.failure_mode
    ):
        return (
            f"calibration: {spec.agent.name} on {record.task} scored {record.verdict}"
            f" ({record.failure_mode or 'no failure'}), but must score {expect.verdict}"
            f" ({expect.failure_mode or 'any failure mode'})"
        )
    return None


def calibrate(
    families: Sequence[tuple[TaskFamily, SeededProof]],
    agents: Sequence[AgentAdapter],
    graders: Sequence[Grader],
    workers: int = 2,
    progress: Progress = quiet,
    locks: Mapping[str, AcceptanceLock] | None = None,
    twins: Sequence[TwinProof] = (),
    cached: bool = False,
) -> Calibration:
    """Run every constructed agent on every task once: its trials and every expectation missed.

    An agent that must fix the task (the oracle) is not run on a task without a clean tree or a
    known answer (``TaskFamily.answer_dir``): no fix is known to restore there. With ``twins`` (a run
    with impossible twins), every task offers the honest way out, and each agent runs on every twin
    too, where it must have the outcome (and the cheating mechanism) its calibration names.
    With ``cached``, a trial measured earlier on the same inputs is reused
    (``certlab_core.certify.reuse``).
    """
    impossible = bool(twins)
    by_family = {family.name: family for family, _proof in families}
    specs = [
        TrialSpec(
            task=Task(family, defect),
            agent=agent,
            repeat=1,
            expected_tests=proof.expected_tests,
            acceptance_lock=(locks or {}).get(family.name),
            impossible=impossible,
        )
        for agent in agents
        if agent.calibration is None or not agent.calibration.twins_only
        for family, proof in families
        for defect in family.defects
        if family.clean_tree
        or family.answer_dir is not None
        or agent.calibration is None
        or agent.calibration.verdict != "fixed"
    ]
    specs += [
        TrialSpec(
            task=Task(by_family[twin.family], twin.twin.defect, twin.twin),
            agent=agent,
            repeat=1,
            expected_tests=twin.expected_tests,
            acceptance_lock=(locks or {}).get(twin.family),
            impossible=True,
        )
        for agent in agents
        if agent.calibration is not None and agent.calibration.twin is not None
        for twin in twins
        # A cheat that needs the code fixed first (special-casing one input of a working module) has nothing to
        # build on where no fixed tree is known: it is calibrated on the families' twins.
        if by_family[twin.family].clean_tree or agent.calibration.twin_mechanism != "special-cased-inputs"
    ]

    def run(pending: Sequence[TrialSpec]) -> list[TrialRecord]:
        return run_trials(pending, graders, workers, progress) if pending else []

    if cached:
        records, reused = reused_or_run(specs, graders, run, _missed)
    else:
        records, reused = run(specs), []
    problems = [p for p in (_missed(spec, record) for spec, record in zip(specs, records, strict=True)) if p]
    return Calibration(
        [(spec.agent.name, record) for spec, record in zip(specs, records, strict=True)], problems, tuple(reused)
    )


def prove_issued(
    family: TaskFamily, graders: Sequence[Grader], acceptance_lock: AcceptanceLock | None = None
) -> SeededProof:
    """A task without a clean tree: the tree as issued must fail its grading (suite or held-out cases).

    The visible tests collected on the issued tree become the expected tests when every test
    module collected; when some did not (a test imports what the task asks for), each graded
    tree must pass every test collected on it instead.
    """
    problems: list[str] = []
    if len(family.defects) != 1:
        problems.append(f"task {family.name} must be issued as exactly one task (it has {len(family.defects)})")
        return SeededProof(family=family.name, clean_passed=False, expected_tests=(), problems=tuple(problems))
    defect = family.defects[0]
    issued = _checked_tree(family, defect, graders, (), acceptance_lock)
    collected: tuple[str, ...] = ()
    left_out: set[str] = set()
    for grade in issued.grades:
        nodes = grade.data.get("collected")
        if isinstance(nodes, list | tuple):
            # a test the tree as issued skips (a skipif marker for another Python) is not expected of any tree
            skipped = grade.data.get("skipped")
            left_out = {str(node) for node in skipped} if isinstance(skipped, list | tuple) else set()
            collected = tuple(str(node) for node in nodes if str(node) not in left_out)
    modules = visible_test_modules(Path(family.tree_dir), family.test_paths)
    complete = bool(collected) and all(any(c.startswith(m + "::") for c in collected) for m in modules)
    if left_out and complete and issued.failure_mode == fm.SUITE_FAILED:
        # the suite failed the tree only by what it skips: what catches its defect is graded without them
        issued = _checked_tree(family, defect, graders, collected, acceptance_lock)
    if issued.error:
        problems.append(f"task {family.name}: the tree as issued could not be graded: {issued.error}")
    elif issued.passed:
        problems.append(
            f"task {family.name}: the fixture as issued already passes its visible tests and every held-out case; "
            "there is nothing to fix, so nothing can be certified on it"
        )
    seeded = {
        "defect": defect.id,
        "defect_class": defect.defect_class,
        "caught_by": issued.failure_mode,
        "tests_collected": len(collected),
        "collection": "complete" if complete else "partial",
    }
    return SeededProof(
        family=family.name,
        clean_passed=False,
        expected_tests=collected if complete else (),
        seeded=(seeded,),
        problems=tuple(problems),
    )


def constructed_agents(registry: Registry) -> list[AgentAdapter]:
    return [a for a in registry.all("agents").values() if a.calibration is not None]
