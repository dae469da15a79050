"""Measured mutation proofs, cached and reused while no input of them moved.

The mutants are a function of the tree, and each mutant's verdict a function of the tree,
the visible suite, the held-out cases, the graders and the interpreter. So a certification
need not grade them again when none of those moved: ``measured_proof`` looks the proof up
under a digest of all of them (:func:`proof_key`) and grades the mutants only on a miss,
storing what it measured (``mutation_step`` is that look-up as certify's step, said, assessed
and recorded). A changed byte of any input is a new key, so a stale score is never
served. ``certlab prove --mutants``, ``regrade --mutants`` and ``FamilyConformance`` always
grade afresh (and store what they measured).

The cache is a folder of JSON files, one per key: ``$CERTLAB_CACHE_DIR`` when set, else
``$XDG_CACHE_HOME/certlab`` (``~/.cache/certlab``), under ``mutation/``. Anyone who can write
there can change what a certification records; the bundle says that its score came from the
cache and under which key, and ``regrade --mutants`` re-earns it. An unreadable or foreign
file is a miss, never an error. Processes that want the same key at once wait for the first
to measure it (a lock file beside it), so parallel certifications grade each family once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs

from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock, Grader
from certlab_core.sdk import measured_cache
from certlab_core.sdk.workcopy import sha256_file, taskset_sha256
from certlab_mutation import engine as mutation
from certlab_mutation.engine import Mutant, MutantResult, MutationProof, mutants_sha256

SCHEMA = "certlab.mutation-cache/1"
KIND = "mutation"
LOCK_WAIT_S = 900.0  # how long a process waits for another that is measuring the same key
LOCK_POLL_S = 0.1


def cache_dir() -> Path:
    """Where measured mutation proofs are kept: ``$CERTLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/certlab``, under it."""
    return measured_cache.cache_dir(KIND)


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def proof_key(
    family: TaskFamily, graders: Sequence[Grader], expected: Sequence[str], lock: AcceptanceLock | None
) -> str | None:
    """The digest of everything that decides the family's mutation proof; None when it cannot be keyed."""
    parts: list[str] = [
        SCHEMA,
        mutation.MUTATOR,
        "runner " + _file_digest(Path(mutation.__file__)),
        "taskset " + taskset_sha256(family),
        "paths " + json.dumps([list(family.allowed_paths), list(family.test_paths), list(family.module_names)]),
        "expected " + json.dumps(list(expected)),
        # the cases scored: the locked copy's hash equals its source's, so a locked and an unlocked run share a key
        "cases " + (sha256_file(Path(family.cases_file)) if lock is None else lock.cases_sha256),
        "python " + sys.version + " " + platform.python_implementation(),
        "pytest " + metadata.version("pytest"),
    ]
    for grader in graders:
        source = measured_cache.code_digest(grader.grade)
        if source is None:
            return None
        parts.append(f"grader {grader.name} {grader.order} {source}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _document(proof: MutationProof) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "family": proof.family,
        "mutants_sha256": mutants_sha256(proof.mutants),
        "mutants": [attrs.asdict(m) for m in proof.mutants],
        "results": [
            {"mutant": r.mutant, "outcome": r.outcome, "grader": r.grader, "failure_mode": r.failure_mode}
            for r in proof.results
        ],
        "stage_timeouts_s": [list(item) for item in proof.stage_timeouts_s],
        "stage_cpu_limits_s": [list(item) for item in proof.stage_cpu_limits_s],
        "wall_s": proof.wall_s,
        "held_out_graders": list(proof.held_out_graders),
    }


def _proof_of(document: Any, family: TaskFamily) -> MutationProof | None:
    """The proof a cache file holds; None when it is not one.

    Its mutants are those stored (the key covers the tree, the mutator and this runner, so they
    are the ones the tree makes; making them again costs more than the rest of a hit).
    """
    try:
        if document["schema"] != SCHEMA or document["family"] != family.name:
            return None
        mutants = tuple(Mutant(**m) for m in document["mutants"])
        for mutant in mutants:
            for field in attrs.fields(Mutant):
                if type(getattr(mutant, field.name)) is not (int if field.type in ("int", int) else str):
                    return None
        if document["mutants_sha256"] != mutants_sha256(mutants):
            return None
        results = tuple(
            MutantResult(str(r["mutant"]), r["outcome"], r["grader"], r["failure_mode"]) for r in document["results"]
        )
        if [r.mutant for r in results] != [m.id for m in mutants] or any(
            r.outcome not in ("survived", "failed", "timeout") for r in results
        ):
            return None
        return MutationProof(
            family=family.name,
            mutants=mutants,
            results=results,
            threshold=mutation.family_threshold(family),
            visible_threshold=mutation.family_visible_threshold(family),
            stage_timeouts_s=tuple((str(n), float(s)) for n, s in document["stage_timeouts_s"]),
            stage_cpu_limits_s=tuple((str(n), int(s)) for n, s in document["stage_cpu_limits_s"]),
            wall_s=float(document["wall_s"]),
            held_out_graders=tuple(str(name) for name in document["held_out_graders"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def load(key: str, family: TaskFamily) -> MutationProof | None:
    """The proof kept under ``key``; None when there is none, or the file is not one (a FIFO or a link included)."""
    return _proof_of(measured_cache.read_entry(KIND, key), family)


def store(key: str, proof: MutationProof) -> None:
    """Keep a measured proof under ``key`` (a proof with a problem is not kept); a cache that cannot be written is
    skipped."""
    if proof.problems or not proof.mutants:
        return
    measured_cache.write_entry(KIND, key, _document(proof))


@contextlib.contextmanager
def _locked(key: str) -> Iterator[None]:
    """Hold the key's lock file while measuring it, so that another process wanting it waits, then reads it.

    A holder that does not finish within LOCK_WAIT_S (stopped, say) is not waited for longer: the proof is
    then measured without the lock.
    """
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        fd = os.open(cache_dir() / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)


def measured_proof(
    family: TaskFamily,
    graders: Sequence[Grader],
    expected: tuple[str, ...],
    workers: int,
    lock: AcceptanceLock | None,
) -> tuple[MutationProof, str | None, bool]:
    """The family's mutation proof from the cache when it holds this key, else graded now and stored.

    Returns ``(proof, key, from_cache)``; ``key`` is None when the graders cannot be keyed (then it is always graded).
    """
    key = proof_key(family, graders, expected, lock)
    if key is None:
        return mutation.prove_by_mutation(family, graders, expected, workers=workers, acceptance_lock=lock), None, False
    cached = load(key, family)
    if cached is not None:
        return cached, key, True
    with _locked(key):
        cached = load(key, family)  # measured by another process while this one waited
        if cached is not None:
            return cached, key, True
        proof = mutation.prove_by_mutation(family, graders, expected, workers=workers, acceptance_lock=lock)
        store(key, proof)
    return proof, key, False


def measure_and_store(
    family: TaskFamily,
    graders: Sequence[Grader],
    expected: tuple[str, ...],
    workers: int,
    lock: AcceptanceLock | None = None,
) -> MutationProof:
    """Grade the family's mutants now (as prove, regrade and the conformance suite do) and keep the measurement."""
    proof = mutation.prove_by_mutation(family, graders, expected, workers=workers, acceptance_lock=lock)
    key = proof_key(family, graders, expected, lock)
    if key is not None:
        store(key, proof)
    return proof


def mutation_step(
    family: TaskFamily,
    graders: Sequence[Grader],
    expected: tuple[str, ...],
    workers: int,
    lock: AcceptanceLock | None,
    minimum: float | None,
    progress: Callable[[str], None],
    minimum_visible: float | None = None,
) -> tuple[dict[str, Any], list[str], list[str]]:
    """Certify's step: the family's mutation proof (from the cache when nothing that decides it changed, else
    graded now), said through ``progress``; ``(bundle record, refusals, warnings)``."""
    proof, key, cached = measured_proof(family, graders, expected, workers, lock)
    for line in mutation.report_lines(family, proof, diffs=False):
        progress(line + (f" (measured earlier on the same inputs: cache {key[:12]})" if cached and key else ""))
    refusals, warnings = mutation.assessment(proof, minimum, minimum_visible)
    document = mutation.mutation_document(family, proof, minimum, key, cached, minimum_visible)
    return document, refusals, warnings
