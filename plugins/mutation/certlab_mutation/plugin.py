"""The plugin providing the ``mutation`` instrument proof (nothing heavy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from certlab_core.plugin import InstrumentProof, JsonValue, TaskFamily, hookimpl

if TYPE_CHECKING:
    from certlab_core.plugin.types.instrument_proof import ProofOutcome, ProofRecheck, ProofRequest


def _measure(request: ProofRequest) -> ProofOutcome:
    from certlab_mutation import proof

    return proof.measure(request)


def _recheck(family: TaskFamily, recorded: Mapping[str, JsonValue], outcome: ProofOutcome) -> ProofRecheck:
    from certlab_mutation import proof

    return proof.recheck(family, recorded, outcome)


def _check_minimums(minimum: float | None, minimum_visible: float | None) -> None:
    from certlab_mutation import engine

    engine.check_minimums(minimum, minimum_visible)


def _check_fixed_tree(request: ProofRequest) -> tuple[list[str], list[str]]:
    from certlab_mutation import proof

    return proof.check_fixed_tree(request)


@hookimpl
def certlab_instrument_proofs() -> list[InstrumentProof]:
    return [
        InstrumentProof(
            name="mutation",
            description=(
                "grade every mutant of the clean tree: the share the visible suite kills, and with the "
                "held-out cases (cached while no input moves)"
            ),
            measure=_measure,
            recheck=_recheck,
            check_minimums=_check_minimums,
            check_fixed_tree=_check_fixed_tree,
        )
    ]
