"""``certlab prove``: the families' and user tasks' proofs, on demand.

Certify proves and calibrates inside its own run (``certification``); this is the command that
proves the families and user tasks alone, each by its seeded defects and, with ``mutants``, by
every installed instrument proof (``instrument_proofs``: certlab-mutation's).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from attrs import frozen

from certlab_core._runtime.registry import Registry
from certlab_core.certify import lab
from certlab_core.certify.acceptance import open_held_out
from certlab_core.certify.certification import resolve_families
from certlab_core.certify.instrument import prove
from certlab_core.certify.instrument_proofs import (
    check_minimums,
    fixed_tree_checked,
    installed_proofs,
    measured,
    missing_proofs,
)
from certlab_core.certify.trial_runs import grading_needs_of, grading_services
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.instrument_proof import InstrumentProof, ProofRequest
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.grading import grader_chain


@frozen
class ProveReport:
    """What ``certlab prove`` found: lines to print, the survivors' diffs, warnings and refusals."""

    lines: tuple[str, ...]
    details: tuple[str, ...]
    warnings: tuple[str, ...]
    problems: tuple[str, ...]

    @classmethod
    def joined(cls, parts: Sequence[ProveReport]) -> ProveReport:
        """The reports of several families as one, each field's items in the families' order."""
        return cls(*(tuple(item for part in parts for item in getattr(part, f.name)) for f in attrs.fields(cls)))


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
    """The instrument's proof of each family (and user task), and with ``mutants`` each installed instrument proof.

    ``fixed`` is the fixed tree of the one user task given: its mutants are then made and
    graded against the task's own suite and held-out cases. The two minimums refuse as the
    mutation proof assesses them.
    """
    check_minimums(registry, min_mutation_score, min_visible_mutation_score)
    if fixed is not None and (len(tasks) != 1 or names):
        raise UsageError("--fixed DIR goes with exactly one --task DIR (and no --family): it is that task's fixed tree")
    instruments = installed_proofs(registry)
    if fixed is not None and not instruments:
        why = "; ".join(missing_proofs(registry).values())
        raise UsageError(f"--fixed DIR is the fixed tree the mutation proof makes mutants of: {why}")
    if mutants and not instruments:
        raise UsageError("--mutants needs the mutation proof: " + "; ".join(missing_proofs(registry).values()))
    installed = resolve_families(registry, names) if names or not tasks else []
    graders = tuple(grader_chain(registry))
    held_out = open_held_out(registry, installed, tasks)
    reports: list[ProveReport] = []
    try:
        lab.preload()
        # The harness grades uncontained: a task with an environment of its own gets warm servers in it once, for
        # its proof, its fixed tree and its mutants, as certify's harness gradings do.
        with grading_services(grading_needs_of(Containment(), held_out.families), graders, max(1, workers)):
            for family in held_out.families:
                lock = held_out.lock_for(family.name)
                proof = prove(family, graders, workers=workers, acceptance_lock=lock)
                request = ProofRequest(
                    family,
                    graders,
                    # graded against the tests expected of the tree as issued (the suite collects them when the
                    # proof left them open): a test that tree skips is not asked of a mutant either
                    proof.expected_tests,
                    workers=workers,
                    lock=lock,
                    minimum=min_mutation_score,
                    minimum_visible=min_visible_mutation_score,
                    fixed_tree=None if family.clean_tree else fixed,
                    scratch=str(held_out.scratch),
                )
                reports.append(_prove_family(proof, request, instruments, mutants))
        held_out.check("after the proof")
    finally:
        held_out.close()
    return ProveReport.joined(reports)


def _prove_family(
    proof: lab.SeededProof,
    request: ProofRequest,
    instruments: Sequence[InstrumentProof],
    mutants: bool,
) -> ProveReport:
    """What one family's proof showed, its fixed tree's check and, with ``mutants``, each instrument proof's
    measurement."""
    family, fixed = request.family, request.fixed_tree
    lines: list[str] = []
    details: list[str] = []
    warnings: list[str] = []
    problems: list[str] = []
    if proof.holds and family.clean_tree:
        lines.append(
            f"prove {family.name}: the clean tree passes {len(proof.expected_tests)} tests; "
            f"all {len(proof.seeded)} seeded defects are caught"
        )
    elif proof.holds:
        lines.append(f"prove {family.name}: the fixture as issued fails its grading")
    problems.extend(proof.problems)
    if proof.holds and not family.clean_tree and fixed is not None:
        for instrument in instruments:
            fixed_lines, fixed_problems = fixed_tree_checked(instrument, request)
            lines.extend(fixed_lines)
            problems.extend(fixed_problems)
    if mutants and proof.holds and not family.clean_tree and fixed is None:
        warnings.append(f"task {family.name}: no fixed tree is given (--fixed DIR), so no mutant is made of it")
    elif mutants and proof.holds:
        for instrument in instruments:
            outcome = measured(instrument, request)
            lines.extend(outcome.lines)
            details.extend(outcome.details)
            problems.extend(outcome.refusals)
            warnings.extend(outcome.warnings)
    return ProveReport(tuple(lines), tuple(details), tuple(warnings), tuple(problems))
