"""``certlab prove`` and ``regrade --mutants``: the proofs, on demand.

Certify proves and calibrates inside its own run (``certification``, with the mutation step
of ``mutation_cache``); these are the commands that prove the families and user tasks alone,
and re-earn the mutation proofs a bundle records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from certlab_core._runtime.registry import Registry
from certlab_core.certify.acceptance import open_held_out
from certlab_core.certify.certification import resolve_families
from certlab_core.certify.lab import preload, prove
from certlab_core.certify.mutation import (
    assessment,
    check_minimums,
    clean_run,
    fixed_family,
    percent,
    recheck,
    report_lines,
)
from certlab_core.certify.mutation_cache import measure_and_store
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock, Grader
from certlab_core.sdk.grading import grader_chain


@frozen
class ProveReport:
    """What ``certlab prove`` found: lines to print, the survivors' diffs, warnings and refusals."""

    lines: tuple[str, ...]
    details: tuple[str, ...]
    warnings: tuple[str, ...]
    problems: tuple[str, ...]


def _fixed_tree_passes(
    family: TaskFamily,
    fixed: Path,
    graders: Sequence[Grader],
    expected: tuple[str, ...],
    lock: AcceptanceLock | None,
    scratch: Path,
) -> tuple[list[str], list[str]]:
    """The fixed tree of a user task must pass the whole chain: the visible tests expected of the tree as
    issued (all it collects, when the proof left that open) and the held-out cases alike."""
    clean = clean_run(fixed_family(family, fixed, scratch / "fixed-check"), graders, expected, lock)
    if not clean.passed:
        return [], [
            f"task {family.name}: --fixed {fixed}: " + clean.problem.replace("the clean tree", "the fixed tree")
        ]
    line = f"prove {family.name}: the fixed tree passes {len(clean.collected)} visible tests and the held-out cases"
    return [line], []


def prove_families(
    registry: Registry,
    names: Sequence[str],
    tasks: Sequence[str],
    workers: int,
    mutants: bool = False,
    min_mutation_score: float | None = None,
    fixed: str | None = None,
    min_visible_mutation_score: float | None = None,
) -> ProveReport:
    """The instrument's proof of each family (and user task), and with ``mutants`` its mutation proof.

    ``fixed`` is the fixed tree of the one user task given: its mutants are then made and
    graded against the task's own suite and held-out cases (:func:`fixed_family`). The two
    minimums refuse as :func:`assessment` says.
    """
    check_minimums(min_mutation_score, min_visible_mutation_score)
    if fixed is not None and (len(tasks) != 1 or names):
        raise UsageError("--fixed DIR goes with exactly one --task DIR (and no --family): it is that task's fixed tree")
    installed = resolve_families(registry, names) if names or not tasks else []
    graders = grader_chain(registry)
    held_out = open_held_out(registry, installed, tasks)
    lines: list[str] = []
    details: list[str] = []
    warnings: list[str] = []
    problems: list[str] = []
    try:
        preload()
        for family in held_out.families:
            lock = held_out.lock_for(family.name)
            proof = prove(family, graders, workers=workers, acceptance_lock=lock)
            if proof.holds and family.clean_tree:
                lines.append(
                    f"prove {family.name}: the clean tree passes {len(proof.expected_tests)} tests; "
                    f"all {len(proof.seeded)} seeded defects are caught"
                )
            elif proof.holds:
                lines.append(f"prove {family.name}: the fixture as issued fails its grading")
            problems.extend(proof.problems)
            if proof.holds and not family.clean_tree and fixed is not None:
                fixed_line, fixed_problem = _fixed_tree_passes(
                    family, Path(fixed), graders, proof.expected_tests, lock, held_out.scratch
                )
                lines.extend(fixed_line)
                problems.extend(fixed_problem)
            if not mutants or not proof.holds:
                continue
            expected = proof.expected_tests
            if not family.clean_tree and fixed is None:
                warnings.append(f"task {family.name}: no fixed tree is given (--fixed DIR), so no mutant is made of it")
                continue
            if not family.clean_tree and fixed is not None:
                # graded against the tests expected of the tree as issued (the suite collects them when the
                # proof left them open): a test that tree skips is not asked of a mutant either
                family = fixed_family(family, Path(fixed), held_out.scratch / "fixed")
            mutation = measure_and_store(family, graders, expected, workers, lock)
            report = report_lines(family, mutation)
            lines.extend(line for line in report if line.startswith("mutants "))
            details.extend(line for line in report if not line.startswith("mutants "))
            refusals, warned = assessment(mutation, min_mutation_score, min_visible_mutation_score)
            problems.extend(refusals)
            warnings.extend(warned)
        held_out.check("after the proof")
    finally:
        held_out.close()
    return ProveReport(tuple(lines), tuple(details), tuple(warnings), tuple(problems))


def recheck_bundle(
    bundle: dict[str, Any],
    families: dict[str, TaskFamily],
    graders: Sequence[Grader],
    expected: dict[str, tuple[str, ...]],
    workers: int,
    progress: Callable[[str], None],
) -> tuple[list[str], list[str]]:
    """``regrade --mutants``: grade every recorded family's mutants again; ``(lines, mismatches)``."""
    lines: list[str] = []
    mismatches: list[str] = []
    for entry in bundle.get("instrument") or []:
        if not isinstance(entry, dict) or entry.get("family") not in families:
            continue
        name = str(entry["family"])
        recorded = entry.get("mutation")
        if not isinstance(recorded, dict) or recorded.get("measured") is False:
            why = f" (not measured: {recorded.get('why')})" if isinstance(recorded, dict) else ""
            lines.append(f"mutants {name}: the bundle records no mutation proof to re-check{why}")
            continue
        family = families[name]
        proof = measure_and_store(family, graders, expected[name], workers)
        differences = list(proof.problems) if proof.problems else recheck(family, recorded, proof)
        line = (
            f"mutants {name}: recorded {percent(_recorded_score(recorded))} of {recorded.get('mutants')} mutants, "
            f"re-earned {percent(proof.score)} of {proof.count}"
        )
        progress(("consistent " if not differences else "MISMATCH   ") + line)
        if differences:
            mismatches.extend(f"mutants {name}: {d}" for d in differences)
        else:
            lines.append(line)
    return lines, mismatches


def _recorded_score(recorded: dict[str, Any]) -> float | None:
    score = recorded.get("score")
    return float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None
