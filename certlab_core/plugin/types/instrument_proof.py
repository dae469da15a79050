"""Instrument proofs beyond the seeded defects: ``certlab_instrument_proofs``.

The kernel proves every family itself: the clean tree passes, each seeded tree fails. A
plugin may measure more of the instrument, as certlab-mutation does with the family's
mutants. The kernel names none: it asks the registry for the installed proofs, gives each
family's measurement to each (``measure``), records the document it returns under the
proof's ``name`` in the bundle's ``instrument`` entry, and gives a recorded document back to
``recheck`` when ``regrade --mutants`` re-earns it. A proof that is not installed is recorded
as not measured (``{"measured": false, "why": ...}``), as ``--no-mutants`` records it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from attrs import field, frozen

from certlab_core.plugin.types.base import JsonValue, Record
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock, Grader


@frozen
class ProofRequest(Record):
    """One family's proof to measure: the grader chain, the tests its clean tree passes, and the floors in force.

    ``minimum`` and ``minimum_visible`` are the refusal floors the user gave (``--min-mutation-score``,
    ``--min-visible-mutation-score``; None: below the family's own thresholds only warns). ``reuse``
    lets a measurement of the very same inputs be reused (certify); otherwise the proof is measured
    afresh (prove, regrade, the testing kit). ``fixed_tree`` is the fixed tree of a user task
    (``prove --fixed DIR``), ``scratch`` a folder the proof may write in.
    """

    family: TaskFamily
    graders: Sequence[Grader]
    expected_tests: tuple[str, ...]
    workers: int = 2
    lock: AcceptanceLock | None = None
    minimum: float | None = None
    minimum_visible: float | None = None
    reuse: bool = False
    fixed_tree: str | None = None
    scratch: str | None = None


@frozen
class ProofOutcome(Record):
    """What a proof measured of one family.

    ``document`` is the bundle's record of it; ``lines`` what prove and certify print of it (the
    scores), ``details`` what prove prints after them (a survivor's diff, say). ``refusals`` refuse
    the certification, ``warnings`` do not. ``shortfalls`` names each threshold the family declares
    (by its ``TaskFamily`` field, ``mutation_threshold`` say) that the measurement misses, with what
    to write: the testing kit fails on each. ``measurement`` is the proof's own, for ``recheck``.
    """

    document: Mapping[str, JsonValue]
    lines: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    refusals: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    shortfalls: Mapping[str, str] = field(factory=dict)
    measurement: object = field(default=None, eq=False, repr=False)


@frozen
class ProofRecheck(Record):
    """A recorded proof against a fresh measurement: one line saying both, and each difference (none: re-earned)."""

    line: str
    differences: tuple[str, ...] = ()


class MeasureProof(Protocol):
    """Measure one family's proof (reusing an earlier measurement of the same inputs only with ``request.reuse``)."""

    def __call__(self, request: ProofRequest, /) -> ProofOutcome: ...


class RecheckProof(Protocol):
    """Compare the proof a bundle records of ``family`` with a fresh ``outcome`` of ``measure``."""

    def __call__(
        self, family: TaskFamily, recorded: Mapping[str, JsonValue], outcome: ProofOutcome, /
    ) -> ProofRecheck: ...


class CheckMinimums(Protocol):
    """Refuse (UsageError, naming the flag) refusal floors the proof cannot use, before anything runs."""

    def __call__(self, minimum: float | None, minimum_visible: float | None, /) -> None: ...


class CheckFixedTree(Protocol):
    """``prove --task DIR --fixed DIR``: whether the user task's fixed tree passes its grading: (lines, problems)."""

    def __call__(self, request: ProofRequest, /) -> tuple[list[str], list[str]]: ...


@frozen
class InstrumentProof(Record):
    """A proof of the instrument a plugin measures for every family with a clean tree (certlab-mutation's, say).

    ``name`` is also the key of its record in the bundle's ``instrument`` entries (``mutation``).
    """

    name: str
    description: str
    measure: MeasureProof = field(eq=False, repr=False)
    recheck: RecheckProof = field(eq=False, repr=False)
    check_minimums: CheckMinimums = field(eq=False, repr=False)
    check_fixed_tree: CheckFixedTree = field(eq=False, repr=False)
