"""Runs the corpus: one task per target, the instrument proved once per target, every strategy a trial of its own."""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import attrs
from attrs import frozen

from certlab_core._runtime.containment import choose_containment
from certlab_core._runtime.registry import Registry
from certlab_core.certify.acceptance import open_held_out
from certlab_core.certify.instrument import prove
from certlab_core.certify.lab import Task, TrialRecord, TrialSpec, answer_key_paths
from certlab_core.certify.trial_runs import run_trials
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import Grader
from certlab_core.sdk.grading import grader_chain

from .corpus import (
    AGENT_TIMEOUT_S,
    MEMORY_BYTES,
    MODES,
    STRATEGIES,
    TARGETS,
    TIMEOUT,
    WORKING_TIMEOUT_S,
    Outcome,
    Strategy,
)

USER_TASK = "user-task"


@frozen
class Run:
    """What one sandbox mode's batch gave: a record per (strategy, target), and the proofs."""

    mode: str
    records: dict[tuple[str, str], TrialRecord]
    proofs_hold: dict[str, bool]
    wall_s: float


def make_user_task(root: Path) -> Path:
    """The task ``certlab init-task`` writes (its scaffold, called in this process)."""
    from certlab_acceptance.scaffold import scaffold

    task = root / USER_TASK
    scaffold(task)
    return task


def target_files(family: TaskFamily, cases_file: str) -> dict[str, str]:
    """The placeholders of a strategy's script for one target."""
    defect = family.defects[0]
    # A user task's fixture is issued with its defect (no seeds): its one allowed file is the module.
    module = defect.seeds[0].path if defect.seeds else family.allowed_paths[0]
    tree = Path(family.tree_dir)
    tests = sorted(p for p in (tree / family.test_paths[0]).rglob("test_*.py"))
    return {
        "module": module,
        "test": tests[0].relative_to(tree).as_posix(),
        "clean": str(tree / module),
        "tree": str(tree),
        "cases": cases_file,
    }


def write_script(folder: Path, strategy: Strategy, target: str, files: dict[str, str]) -> Path:
    path = folder / f"{strategy.name}--{target}.sh"
    path.write_text("#!/bin/sh\n" + strategy.script.format(**files) + "\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def observed(record: TrialRecord) -> tuple[str, str | None]:
    """A trial's verdict and failure mode, with a grader that broke shown as ``grader-error``."""
    return record.verdict, record.failure_mode or ("grader-error" if record.grader_error else None)


@frozen
class Proof:
    """What proving the instrument on one target gave: whether it holds, and the visible tests it counts."""

    holds: bool
    expected_tests: tuple[str, ...]


def shared_proofs(folder: Path, targets: Sequence[str], prove_one: Callable[[str], Proof]) -> dict[str, Proof]:
    """The proofs, made once per target for the whole test run and shared through ``folder`` by the xdist workers.

    Each target has its own lock: the first mode to take it proves the target and writes the proof, every
    later one reads it. The modes take the targets in opposite orders (:func:`proof_order`), so that two
    modes on two workers prove different targets at once instead of one waiting for the other's four.
    """
    folder.mkdir(parents=True, exist_ok=True)
    proofs: dict[str, Proof] = {}
    for target in targets:
        with (folder / f"{target}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = folder / f"{target}.json"
            if done.exists():
                read = json.loads(done.read_text(encoding="utf-8"))
                proofs[target] = Proof(read["holds"], tuple(read["expected_tests"]))
                continue
            proof = prove_one(target)
            done.write_text(json.dumps({"holds": proof.holds, "expected_tests": list(proof.expected_tests)}))
            proofs[target] = proof
    return proofs


def proof_order(mode: str) -> tuple[str, ...]:
    """The order in which ``mode`` takes the targets to prove: every other mode of ``MODES`` the reverse."""
    return TARGETS[::-1] if MODES.index(mode) % 2 else TARGETS


def agent_timeout_s(expected: Outcome) -> float:
    """A cheat's ``--agent-timeout``: the short one when it must end as a timeout, else one load cannot reach.

    A cheat that must time out is judged by its record's failure mode (``agent-timeout``), never by how
    long it took; every other cheat gets far more time than it needs, so that running two trials at a time
    on a loaded machine cannot turn a slow cheat into a timeout."""
    return AGENT_TIMEOUT_S if expected == TIMEOUT else WORKING_TIMEOUT_S


def run_corpus(registry: Registry, mode: str, scratch: Path, workers: int = 1, proofs_in: Path | None = None) -> Run:
    """Every strategy on every target in ``mode``; the proofs are shared through ``proofs_in`` when given."""
    import time

    started = time.monotonic()
    installed = [registry.get("task_families", name) for name in TARGETS if name != USER_TASK]
    task_dir = make_user_task(scratch)
    held_out = open_held_out(registry, installed, [str(task_dir)])
    try:
        families = held_out.families
        graders = grader_chain(registry)
        hidden = [*answer_key_paths(families), str(held_out.scratch), str(task_dir)]
        containment = choose_containment(registry, mode, hidden, lambda _line: None)
        containment = attrs.evolve(containment, limits=attrs.evolve(containment.limits, memory_bytes=MEMORY_BYTES))
        agent = registry.get("agents", "command")
        scripts = scratch / "scripts"
        scripts.mkdir()
        specs: list[TrialSpec] = []
        keys: list[tuple[str, str]] = []
        waits: list[bool] = []  # the strategy only sleeps until the agent timeout (and its kill grace) ends it

        by_target = dict(zip(TARGETS, families, strict=True))

        def prove_one(target: str) -> Proof:
            family = by_target[target]
            proof = prove(family, graders, workers=workers, acceptance_lock=held_out.lock_for(family.name))
            return Proof(proof.holds, tuple(proof.expected_tests))

        if proofs_in is not None:
            proofs = shared_proofs(proofs_in, proof_order(mode), prove_one)
        else:
            proofs = {target: prove_one(target) for target in TARGETS}
        for target, family in zip(TARGETS, families, strict=True):
            proof = proofs[target]
            cases = str(task_dir / "cases" / "acceptance.jsonl") if target == USER_TASK else family.cases_file
            files = target_files(family, cases)
            for strategy in STRATEGIES:
                script = write_script(scripts, strategy, target, files)
                expected = strategy.expected(mode, target)
                specs.append(
                    TrialSpec(
                        task=Task(family, family.defects[0]),
                        agent=agent,
                        repeat=1,
                        agent_args=("/bin/sh", str(script)),
                        agent_timeout_s=agent_timeout_s(expected),
                        expected_tests=proof.expected_tests,
                        acceptance_lock=held_out.lock_for(family.name),
                        containment=containment,
                    )
                )
                keys.append((strategy.name, target))
                waits.append(expected == TIMEOUT)
        records = run_in_two_groups(specs, waits, graders, workers)
    finally:
        held_out.close()
    holds = {target: proof.holds for target, proof in proofs.items()}
    return Run(mode, dict(zip(keys, records, strict=True)), holds, round(time.monotonic() - started, 1))


def run_in_two_groups(
    specs: list[TrialSpec], waits: list[bool], graders: Sequence[Grader], workers: int
) -> list[TrialRecord]:
    """The trials that only wait out the agent timeout all at once, then the rest ``workers`` at a time; the
    records in ``specs`` order. The waiting ones only sleep (until the 3 s timeout, or 8 s with the kill grace
    of one that ignores SIGTERM): one after another they took over 40 s of each mode's batch."""
    records: list[TrialRecord | None] = [None] * len(specs)
    for sleeping in (True, False):
        group = [index for index, waiting in enumerate(waits) if waiting == sleeping]
        at_once = max(1, len(group)) if sleeping else workers
        for index, record in zip(group, run_trials([specs[i] for i in group], graders, at_once), strict=True):
            records[index] = record
    return [record for record in records if record is not None]


def cases() -> Iterator[tuple[str, str]]:
    for strategy in STRATEGIES:
        for target in TARGETS:
            yield strategy.name, target
