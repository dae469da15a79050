"""The mutation proof as an instrument proof: measured, rechecked, said."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from certlab_core.plugin import JsonValue, TaskFamily
from certlab_core.plugin.types.instrument_proof import ProofOutcome, ProofRecheck, ProofRequest
from certlab_mutation import cache, engine
from certlab_mutation.engine import MutationProof


def _scratch(request: ProofRequest) -> Path:
    return Path(request.scratch) if request.scratch else Path(tempfile.mkdtemp(prefix="certlab-mutation-"))


def _family_of(request: ProofRequest) -> TaskFamily:
    """The family whose mutants are made: a user task's fixed tree with its visible tests, when one is given."""
    if request.fixed_tree is None or request.family.clean_tree:
        return request.family
    return engine.fixed_family(request.family, Path(request.fixed_tree), _scratch(request) / "fixed")


def _shortfalls(family: TaskFamily, proof: MutationProof) -> dict[str, str]:
    """Each threshold the family declares that the proof misses (by its TaskFamily field), with what to write."""
    if not proof.count:
        missing = f"family {family.name}: no mutant could be made of its clean tree"
        return {"mutation_threshold": missing, "visible_mutation_threshold": missing}
    found: dict[str, str] = {}
    if proof.below(proof.threshold):
        found["mutation_threshold"] = (
            f"family {family.name}: the suite and held-out cases kill less than its threshold "
            f"{proof.threshold:.0%} of its mutants; write a test or held-out case that kills each survivor:\n"
            + "\n".join(engine.report_lines(family, proof))
        )
    if proof.suite_below(proof.visible_threshold):
        let_through = ", ".join(m.id for m in proof.suite_survivors)
        found["visible_mutation_threshold"] = (
            f"family {family.name}: the visible suite alone kills {engine.percent(proof.suite_score)} of its "
            f"{proof.count} mutants, less than its visible threshold {engine.percent(proof.visible_threshold)}: "
            "plausible wrong fixes pass the tests an agent sees. Write a visible test that kills each of: "
            f"{let_through}\n" + "\n".join(engine.report_lines(family, proof, diffs=False))
        )
    return found


def measure(request: ProofRequest) -> ProofOutcome:
    """The family's mutation proof: from certlab's cache when ``reuse`` and nothing that decides it moved, else
    graded now (and kept)."""
    family = _family_of(request)
    graders, expected = list(request.graders), request.expected_tests
    key: str | None = None
    cached = False
    if request.reuse:
        proof, key, cached = cache.measured_proof(family, graders, expected, request.workers, request.lock)
    else:
        proof = cache.measure_and_store(family, graders, expected, request.workers, request.lock)
    said = f" (measured earlier on the same inputs: cache {key[:12]})" if cached and key else ""
    report = engine.report_lines(family, proof)
    refusals, warnings = engine.assessment(proof, request.minimum, request.minimum_visible)
    return ProofOutcome(
        document=engine.mutation_document(family, proof, request.minimum, key, cached, request.minimum_visible),
        lines=tuple(line + said for line in report if line.startswith("mutants ")),
        details=tuple(line for line in report if not line.startswith("mutants ")),
        refusals=tuple(refusals),
        warnings=tuple(warnings),
        shortfalls=_shortfalls(family, proof),
        measurement=proof,
    )


def _recorded_score(recorded: Mapping[str, JsonValue]) -> float | None:
    score = recorded.get("score")
    return float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None


def recheck(family: TaskFamily, recorded: Mapping[str, JsonValue], outcome: ProofOutcome) -> ProofRecheck:
    """``regrade --mutants``: the recorded proof against a fresh one, mutant by mutant."""
    proof = outcome.measurement
    if not isinstance(proof, MutationProof):
        return ProofRecheck(f"mutants {family.name}: no fresh measurement to compare", ("no fresh measurement",))
    differences = list(proof.problems) if proof.problems else engine.recheck(family, dict(recorded), proof)
    line = (
        f"mutants {family.name}: recorded {engine.percent(_recorded_score(recorded))} of {recorded.get('mutants')} "
        f"mutants, re-earned {engine.percent(proof.score)} of {proof.count}"
    )
    return ProofRecheck(line, tuple(differences))


def check_fixed_tree(request: ProofRequest) -> tuple[list[str], list[str]]:
    """The fixed tree of a user task must pass the whole chain: the visible tests expected of the tree as
    issued (all it collects, when the proof left that open) and the held-out cases alike."""
    family, fixed = request.family, request.fixed_tree
    if fixed is None:
        return [], []
    checked = engine.fixed_family(family, Path(fixed), _scratch(request) / "fixed-check")
    clean = engine.clean_run(checked, list(request.graders), request.expected_tests, request.lock)
    if not clean.passed:
        return [], [
            f"task {family.name}: --fixed {fixed}: " + clean.problem.replace("the clean tree", "the fixed tree")
        ]
    line = f"prove {family.name}: the fixed tree passes {len(clean.collected)} visible tests and the held-out cases"
    return [line], []
