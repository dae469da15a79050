"""The installed instrument proofs, as certify, prove and regrade reach them.

The kernel proves every family by its seeded defects itself; what a plugin measures beyond
that (certlab-mutation's mutation proof) comes through ``certlab_instrument_proofs``. A proof
an installed provider list names (certlab-all's names ``mutation``) that is not installed is
recorded as not measured, naming what to install, as ``--no-mutants`` records a skipped one,
so a bundle keeps the ``mutation`` record wherever certlab-all is installed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from certlab_core._runtime.registry import Registry
from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import Grader
from certlab_core.plugin.types.instrument_proof import InstrumentProof, ProofOutcome, ProofRecheck, ProofRequest
from certlab_core.sdk.deadline import PLUGIN_LOAD_ENV, plugin_wait_s, seconds_from_environment
from certlab_core.sdk.deadline import plugin_call as held_call

KIND = "instrument_proofs"
#: How long one family's ``measure`` may take (the mutation proof grades every mutant), unless ``CERTLAB_PROOF_S``
#: says otherwise: past it, the proof is named in one line and the instrument is not proven, never a hang.
PROOF_MEASURE_S = 3600.0
PROOF_ENV = "CERTLAB_PROOF_S"


def installed_proofs(registry: Registry) -> list[InstrumentProof]:
    """Every installed instrument proof, by name."""
    return [registry.get(InstrumentProof, name) for name in registry.names(InstrumentProof)]


def measured(proof: InstrumentProof, request: ProofRequest) -> ProofOutcome:
    """The proof's ``measure(request)``; one that raises, runs past ``CERTLAB_PROOF_S`` or returns anything but a
    ProofOutcome of texts and a JSON document is named in one line (an InstrumentError: the instrument is not
    proven), never a traceback or a hang."""
    outcome = plugin_call(proof, "measure", proof.measure, request)
    if not isinstance(outcome, ProofOutcome):
        raise InstrumentError(f"{said(proof, 'measure')} returned {type(outcome).__name__}, not a ProofOutcome")
    texts = (*outcome.lines, *outcome.details, *outcome.refusals, *outcome.warnings, *outcome.shortfalls.values())
    if not all(isinstance(text, str) for text in texts):
        raise InstrumentError(f"{said(proof, 'measure')} returned a ProofOutcome whose lines are not all texts")
    try:
        json.dumps(outcome.document, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InstrumentError(
            f"{said(proof, 'measure')} returned a document the bundle cannot hold ({error}); it must be JSON"
        ) from None
    return outcome


def rechecked(
    proof: InstrumentProof, family: TaskFamily, recorded: Mapping[str, Any], outcome: ProofOutcome
) -> ProofRecheck:
    """The proof's ``recheck``, held to a ProofRecheck whose line is text and differences are texts."""
    checked = plugin_call(proof, "recheck", proof.recheck, family, recorded, outcome)
    if not isinstance(checked, ProofRecheck):
        raise InstrumentError(f"{said(proof, 'recheck')} returned {type(checked).__name__}, not a ProofRecheck")
    return checked


def fixed_tree_checked(proof: InstrumentProof, request: ProofRequest) -> tuple[list[str], list[str]]:
    """The proof's ``check_fixed_tree``: ``(lines, problems)``, each a list of texts, or one line naming it."""
    answer = plugin_call(proof, "check_fixed_tree", proof.check_fixed_tree, request)
    if not (
        isinstance(answer, tuple)
        and len(answer) == 2
        and all(isinstance(part, list) and all(isinstance(text, str) for text in part) for part in answer)
    ):
        raise InstrumentError(
            f"{said(proof, 'check_fixed_tree')} returned {type(answer).__name__}, not two lists of texts"
        )
    lines, problems = answer
    return list(lines), list(problems)


def said(proof: InstrumentProof, method: str) -> str:
    """How a line about one of a proof's methods names it."""
    return f"the instrument proof {proof.name}'s {method}"


def plugin_call(proof: InstrumentProof, method: str, call: Callable[..., Any], *arguments: Any) -> Any:
    """``call(*arguments)``, a method of a plugin's proof, held to a deadline: ``CERTLAB_PROOF_S`` for what measures
    (``measure``, ``check_fixed_tree``), ``CERTLAB_PLUGIN_LOAD_S`` for the quick ones. A refusal it means (a
    UsageError) goes on as it is; anything else it raises, or running past the deadline, is named in one line (an
    InstrumentError), never a traceback or a hang."""
    if method in ("measure", "check_fixed_tree"):
        variable = PROOF_ENV
        seconds = seconds_from_environment(PROOF_ENV, PROOF_MEASURE_S, "an instrument proof may measure, e.g. 3600")
    else:
        variable, seconds = PLUGIN_LOAD_ENV, plugin_wait_s()
    return held_call(said(proof, method), call, *arguments, seconds=seconds, wait_variable=variable)


def said_as(name: str) -> str:
    """How a proof's lines begin: ``mutants`` for the mutation proof (as certlab has always said it), else its name."""
    return "mutants" if name == "mutation" else name


def not_measured_document(why: str) -> dict[str, Any]:
    """The bundle's record of a family's proof that was not measured, and why."""
    return {"measured": False, "why": why}


def missing_proofs(registry: Registry) -> dict[str, str]:
    """Each proof a provider list names that is not installed, with why it goes unmeasured (what to install)."""
    installed = set(registry.names(InstrumentProof))
    return {
        name: f"{' or '.join(distributions)} is not installed (pip install {' or '.join(distributions)})"
        for name, distributions in registry.providers.named(KIND).items()
        if name not in installed
    }


def check_minimums(registry: Registry, minimum: float | None, minimum_visible: float | None) -> None:
    """Refuse refusal floors before anything runs: out of range, or with no installed proof to use them."""
    proofs = installed_proofs(registry)
    for proof in proofs:
        plugin_call(proof, "check_minimums", proof.check_minimums, minimum, minimum_visible)
    floors = (("--min-mutation-score", minimum), ("--min-visible-mutation-score", minimum_visible))
    given = [flag for flag, value in floors if value is not None]
    if given and not proofs:
        why = "; ".join(missing_proofs(registry).values()) or "no instrument proof is installed"
        raise UsageError(f"{given[0]} needs the mutation proof: {why}")


def proof_names(registry: Registry) -> list[str]:
    """The keys every bundle's ``instrument`` entry holds: each installed proof and each a provider list names."""
    return sorted(set(registry.names(InstrumentProof)) | set(registry.providers.named(KIND)))


def recheck_bundle(
    registry: Registry,
    bundle: Mapping[str, Any],
    families: Mapping[str, TaskFamily],
    graders: Sequence[Grader],
    expected: Mapping[str, tuple[str, ...]],
    workers: int,
    progress: Callable[[str], None],
) -> tuple[list[str], list[str]]:
    """``regrade --mutants``: measure every recorded proof of every family again; ``(lines, mismatches)``."""
    lines: list[str] = []
    mismatches: list[str] = []
    proofs = {proof.name: proof for proof in installed_proofs(registry)}
    missing = missing_proofs(registry)
    for entry in bundle.get("instrument") or []:
        if not isinstance(entry, dict) or entry.get("family") not in families:
            continue
        name = str(entry["family"])
        # A proof the bundle records is re-checked, or refused, even where no installed list names it.
        recorded_proofs = {key for key, value in entry.items() if isinstance(value, dict)}
        for proof_name in sorted(set(proof_names(registry)) | recorded_proofs):
            recorded = entry.get(proof_name)
            label = said_as(proof_name)
            if not isinstance(recorded, dict) or recorded.get("measured") is False:
                why = f" (not measured: {recorded.get('why')})" if isinstance(recorded, dict) else ""
                lines.append(f"{label} {name}: the bundle records no {proof_name} proof to re-check{why}")
                continue
            if proof_name not in proofs:
                why = (
                    missing.get(proof_name)
                    or f"no plugin installed provides it ({registry.providers.install_line(KIND)})"
                )
                raise UsageError(f"{label} {name}: the bundle records a {proof_name} proof, and {why}")
            family = families[name]
            request = ProofRequest(family, tuple(graders), expected[name], workers=workers)
            outcome = measured(proofs[proof_name], request)
            checked = rechecked(proofs[proof_name], family, recorded, outcome)
            progress(("consistent " if not checked.differences else "MISMATCH   ") + checked.line)
            if checked.differences:
                mismatches.extend(f"{label} {name}: {d}" for d in checked.differences)
            else:
                lines.append(checked.line)
    return lines, mismatches
