"""Proofs and calibration trials measured earlier, reused while nothing moved.

The proof of a family (its clean tree passes the grader chain, each seeded tree fails it), the
proofs of its impossible twins and a constructed agent's calibration trial are functions of the
task (the family's tree, prompt, cases, seeds and twin), the graders' code, the agent's code, the
held-out lock, the kernel and the interpreter, all uncontained (the harness grades them itself).
So certify keeps each proof that holds and each calibration trial that met its agent's
expectation in certlab's cache (``certlab_core.sdk.measured_cache``, under ``proofs/`` and
``calibration/``), keyed by a digest of all of those (:func:`proof_key`, :func:`twins_key`,
:func:`trial_key`), and reuses it while none moved: a changed byte of any input is a new key. A
kept proof is reused only while it holds (a twin only while it is the twin made now), and a kept
trial only while it meets its agent's expectation, so the cache can never make the instrument
fail or hide a proof or a calibration that does not hold; the bundle marks what was reused and
``certify --fresh-instrument`` measures everything again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

import certlab_core
from certlab_core.certify.contract import REUSED
from certlab_core.certify.lab import SeededProof, TrialRecord, TrialSpec
from certlab_core.certify.twins import ProvenTwins, TwinKind, make_twin
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock, Grader
from certlab_core.sdk.canonical import structure, unstructure
from certlab_core.sdk.measured_cache import code_digest, folder_digest, read_entry, write_entry
from certlab_core.sdk.workcopy import taskset_sha256

KIND = "calibration"
SCHEMA = "certlab.calibration-cache/1"
PROOF_KIND = "proofs"
PROOF_SCHEMA = "certlab.proof-cache/1"
TWINS_SCHEMA = "certlab.twins-proof-cache/1"  # kept beside the proofs (``PROOF_KIND``)
#: a digest of a thing, made once for the keys of one certification (``_digests``)
DigestOf = Callable[[object, Callable[[], str | None]], str | None]


@functools.cache
def _fixed_inputs() -> str:
    """What every key shares: the kernel's code, the interpreter and pytest (the graders' runner)."""
    try:
        pytest_version = metadata.version("pytest")
    except metadata.PackageNotFoundError:
        pytest_version = "none"
    return "\n".join(
        (
            "kernel " + folder_digest(Path(certlab_core.__file__).parent),
            "python " + sys.version + " " + platform.python_implementation(),
            "pytest " + pytest_version,
        )
    )


def trial_key(
    spec: TrialSpec,
    graders: Sequence[Grader],
    digests: DigestOf | None = None,
) -> str | None:
    """The digest of everything that decides a calibration trial; None when it cannot be keyed.

    A trial in a sandbox, behind a model boundary or with a seed is never keyed: only the
    harness's own uncontained calibration is. ``digests`` (made by ``_digests``) keeps the
    tasksets and code digests already made, for the keys of one calibration.
    """
    if spec.containment is not None or spec.model_boundary is not None or spec.seed is not None:
        return None
    digest_of = _digests() if digests is None else digests
    family = spec.task.family
    agent = spec.agent
    agent_code = digest_of(agent.run, lambda: code_digest(agent.run))
    graded = _graded_parts(family, graders, spec.acceptance_lock, digest_of)
    if agent_code is None or agent.calibration is None or graded is None:
        return None
    parts = [
        SCHEMA,
        *graded,
        "defect " + json.dumps(unstructure(spec.task.defect), sort_keys=True),
        "twin " + json.dumps(unstructure(spec.task.twin), sort_keys=True),
        "agent " + json.dumps([agent.name, unstructure(agent.calibration), list(spec.agent_args)], sort_keys=True),
        "agent code " + agent_code,
        "trial "
        + json.dumps(
            [spec.repeat, spec.agent_timeout_s, list(spec.expected_tests), spec.impossible, spec.way_out],
        ),
        "caps " + json.dumps(unstructure(spec.work_caps), sort_keys=True),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _graded_parts(
    family: TaskFamily,
    graders: Sequence[Grader],
    lock: AcceptanceLock | None,
    digest_of: DigestOf,
) -> list[str] | None:
    """What decides how a family's trees grade: the family, the graders' code, the held-out lock and the rest."""
    parts = [
        _fixed_inputs(),
        "family " + json.dumps([family.name, family.version, family.clean_tree, family.answer_dir is not None]),
        "taskset " + str(digest_of(family, lambda: taskset_sha256(family))),
        "paths " + json.dumps([list(family.allowed_paths), list(family.test_paths), list(family.module_names)]),
        "defects " + json.dumps([unstructure(defect) for defect in family.defects], sort_keys=True),
    ]
    if lock is not None:
        parts.append("held-out " + lock.cases_sha256 + " " + " ".join(sorted(lock.fingerprints.values())))
    for grader in graders:
        grader_code = digest_of(grader.grade, functools.partial(code_digest, grader.grade))
        if grader_code is None:
            return None
        parts.append(f"grader {grader.name} {grader.order} {grader_code}")
    return parts


def _digests() -> DigestOf:
    made: dict[int, str | None] = {}

    def digest_of(thing: object, make: Callable[[], str | None]) -> str | None:
        if id(thing) not in made:
            made[id(thing)] = make()
        return made[id(thing)]

    return digest_of


def proof_key(family: TaskFamily, graders: Sequence[Grader], lock: AcceptanceLock | None) -> str | None:
    """The digest of everything that decides the family's proof; None when it cannot be keyed."""
    graded = _graded_parts(family, graders, lock, _digests())
    return None if graded is None else hashlib.sha256("\n".join([PROOF_SCHEMA, *graded]).encode()).hexdigest()


def _kept_proof(key: str, family: TaskFamily) -> SeededProof | None:
    """The proof kept under ``key``, or None: there is none, it is not one, not this family's, or it does not hold."""
    kept = _read_kept(PROOF_KIND, PROOF_SCHEMA, key, "proof", SeededProof)
    if not isinstance(kept, SeededProof):
        return None
    defects = [seeded.get("defect") for seeded in kept.seeded]
    same = kept.family == family.name and defects == [defect.id for defect in family.defects]
    return kept if same and kept.holds else None


def _read_kept(kind: str, schema: str, key: str, field: str, cls: type) -> object | None:
    """The ``cls`` record kept under ``key`` (in its entry's ``field``), or None: no entry, another schema or key, a
    value of another kind than its field's (``structure`` refuses it), or not exactly what certlab keeps of one (it
    must unstructure back to what is there: no field left to its default, no key the record does not have)."""
    document = read_entry(kind, key)
    if not isinstance(document, dict) or document.get("schema") != schema or document.get("key") != key:
        return None
    data = document.get(field)
    try:
        record = structure(data, cls)
    except Exception:  # cattrs raises its own exception groups for a wrong shape
        return None
    return record if unstructure(record) == data else None


def _keep(kind: str, schema: str, key: str, field: str, record: object) -> None:
    write_entry(kind, key, {"schema": schema, "key": key, field: unstructure(record)})


def reused_or_proven(
    family: TaskFamily,
    graders: Sequence[Grader],
    lock: AcceptanceLock | None,
    prove_now: Callable[[], SeededProof],
    fresh: bool = False,
) -> tuple[SeededProof, bool]:
    """The family's proof, kept or made now by ``prove_now``; and whether it was kept (a proof that holds is kept).

    ``fresh`` (``--fresh-instrument``): made now, and the cache neither read nor written."""
    if fresh:
        return prove_now(), False
    key = proof_key(family, graders, lock)
    kept = _kept_proof(key, family) if key is not None else None
    if kept is not None:
        return kept, True
    proof = prove_now()
    if key is not None and proof.holds:
        _keep(PROOF_KIND, PROOF_SCHEMA, key, "proof", proof)
    return proof, False


def proof_line(family: TaskFamily, proof: SeededProof, reused: bool) -> str:
    """The progress line of a proof that holds, as certify and run say it: what it showed, and whether it was kept."""
    again = f" ({REUSED})" if reused else ""
    if not family.clean_tree:
        seeded = proof.seeded[0]
        return (
            f"prove {family.name}: the fixture as issued fails its grading ({seeded['caught_by']}); "
            f"{seeded['tests_collected']} visible tests collected on it{again}"
        )
    return (
        f"prove {family.name}: the clean tree passes {len(proof.expected_tests)} tests; "
        f"all {len(proof.seeded)} seeded defects are caught{again}"
    )


def twins_line(family: TaskFamily, made: ProvenTwins, reused: bool) -> str:
    """The progress line of twins made and proven, as certify and run say it, and whether they were kept."""
    where = "the clean code" if family.clean_tree else "the tree as issued"
    again = f" ({REUSED})" if reused else ""
    return f"twins {family.name}: {len(made.proofs)} twin(s) made; {where} fails each on its changed test{again}"


def twins_key(
    family: TaskFamily,
    graders: Sequence[Grader],
    lock: AcceptanceLock | None,
    kinds: Sequence[TwinKind],
    defects: Sequence[Defect] | None,
) -> str | None:
    """The digest of everything that decides the family's impossible twins and their proofs; None when unkeyable."""
    graded = _graded_parts(family, graders, lock, _digests())
    if graded is None:
        return None
    chosen = None if defects is None else [defect.id for defect in defects]
    parts = [TWINS_SCHEMA, *graded, "kinds " + json.dumps(list(kinds)), "of " + json.dumps(chosen)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _kept_twins(
    key: str, family: TaskFamily, kinds: Sequence[TwinKind], defects: Sequence[Defect] | None
) -> ProvenTwins | None:
    """The twins' proofs kept under ``key``, or None unless each holds and each twin is exactly the one made now.

    The twins themselves are never taken from the cache: each kept twin must be the twin the family
    makes now from its defect, kind and candidate assertion, and there must be one per defect and kind.
    """
    kept = _read_kept(PROOF_KIND, TWINS_SCHEMA, key, "twins", ProvenTwins)
    if not isinstance(kept, ProvenTwins) or kept.problems:
        return None
    by_id = {defect.id: defect for defect in family.defects}
    wanted = sorted((defect.id, kind) for defect in (defects or family.defects) for kind in kinds)
    if sorted((proof.twin.of, proof.twin.kind) for proof in kept.proofs) != wanted:
        return None
    for proof in kept.proofs:
        made = make_twin(family, by_id[proof.twin.of], proof.twin.kind, proof.twin.candidate)
        if proof.family != family.name or made != proof.twin:
            return None
    return kept


def reused_or_proven_twins(
    family: TaskFamily,
    graders: Sequence[Grader],
    lock: AcceptanceLock | None,
    kinds: Sequence[TwinKind],
    defects: Sequence[Defect] | None,
    prove_now: Callable[[], ProvenTwins],
    fresh: bool = False,
) -> tuple[ProvenTwins, bool]:
    """The family's twins and their proofs, kept or made now; and whether kept (only twins that all hold are kept).

    ``fresh`` (``--fresh-instrument``): made now, and the cache neither read nor written."""
    if fresh:
        return prove_now(), False
    key = twins_key(family, graders, lock, kinds, defects)
    kept = _kept_twins(key, family, kinds, defects) if key is not None else None
    if kept is not None:
        return kept, True
    made = prove_now()
    if key is not None and not made.problems:
        _keep(PROOF_KIND, TWINS_SCHEMA, key, "twins", made)
    return made, False


def _kept(key: str, spec: TrialSpec) -> TrialRecord | None:
    """The trial kept under ``key``, or None when there is none or it is not this spec's trial record."""
    record = _read_kept(KIND, SCHEMA, key, "trial", TrialRecord)
    if not isinstance(record, TrialRecord):
        return None
    same_trial = record.id == spec.id and record.family == spec.task.family.name and record.repeat == spec.repeat
    return record if same_trial and record.grader_error is None else None


def reused_or_run(
    specs: Sequence[TrialSpec],
    graders: Sequence[Grader],
    run: Callable[[Sequence[TrialSpec]], list[TrialRecord]],
    missed: Callable[[TrialSpec, TrialRecord], str | None],
) -> tuple[list[TrialRecord], list[int]]:
    """Every spec's trial, in order: kept ones reused, the others run; and the indexes of those reused.

    ``missed(spec, record)`` says how a trial misses its agent's expectation (None: it meets it):
    a kept trial that misses is run again, and only a run trial that meets it is kept.
    """
    digests = _digests()
    keys = [trial_key(spec, graders, digests) for spec in specs]
    found: dict[int, TrialRecord] = {}
    for index, (spec, key) in enumerate(zip(specs, keys, strict=True)):
        record = _kept(key, spec) if key is not None else None
        if record is not None and missed(spec, record) is None:
            found[index] = record
    pending = [index for index in range(len(specs)) if index not in found]
    measured = run([specs[index] for index in pending])
    for index, record in zip(pending, measured, strict=True):
        key = keys[index]
        found[index] = record
        if key is not None and record.grader_error is None and missed(specs[index], record) is None:
            _keep(KIND, SCHEMA, key, "trial", record)
    reused = sorted(set(range(len(specs))) - set(pending))
    return [found[index] for index in range(len(specs))], reused
