"""A manifest's schedule: trial ids, seeds, the interleaved order, hashes.

A trial id reads ``ARM/CONDITION/INDEX``; index ``i`` runs with seed ``seed + i`` in both arms
and every condition; the order interleaves arms (for each look, each index, each condition:
baseline then candidate). A trial's identity is the sha256 of the canonical JSON of what it
binds: the task, its arm, its condition, its index and seed, the rule and its parameters,
the budgets, the contract and the plugin versions (see docs/run-store.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from certlab_core.gate.manifest import ARMS, Manifest
from certlab_core.gate.trial import TrialKey
from certlab_core.sdk.canonical import canonical_json, unstructure


def trial_seed(manifest: Manifest, index: int) -> int:
    return manifest.seed + index


def parse_trial_id(trial_id: str) -> tuple[str, str, int] | None:
    """``(arm, condition, index)`` of an id, or None when it does not read ``ARM/CONDITION/INDEX``."""
    parts = trial_id.split("/")
    if len(parts) != 3 or parts[0] not in ARMS or not _plain_index(parts[2]):
        return None
    return parts[0], parts[1], int(parts[2])


def _plain_index(text: str) -> bool:
    """Whether ``text`` is an index as the schedule writes it: ASCII digits, no leading zero."""
    return text.isascii() and text.isdigit() and (text == "0" or text[0] != "0")


_NAMES: dict[int, tuple[Manifest, frozenset[str]]] = {}


def _condition_names(manifest: Manifest) -> frozenset[str]:
    cached = _NAMES.get(id(manifest))
    if cached is None or cached[0] is not manifest:
        cached = (manifest, frozenset(c.name for c in manifest.conditions))
        _NAMES.clear()
        _NAMES[id(manifest)] = cached
    return cached[1]


def key_of(manifest: Manifest, trial_id: str) -> TrialKey | None:
    """The scheduled trial ``trial_id`` names, or None when the manifest schedules no such trial."""
    parsed = parse_trial_id(trial_id)
    if parsed is None:
        return None
    arm, condition, index = parsed
    if index >= manifest.n_per_arm or condition not in _condition_names(manifest):
        return None
    return TrialKey(arm, condition, index, trial_seed(manifest, index))


def look_order(manifest: Manifest, look: int, conditions: list[str] | None = None) -> Iterator[TrialKey]:
    """The trials of one look (1-based), interleaved: each index, each condition, baseline then candidate."""
    sizes = manifest.schedule.look_sizes
    start = 0 if look == 1 else sizes[look - 2]
    names = [c.name for c in manifest.conditions] if conditions is None else conditions
    for index in range(start, sizes[look - 1]):
        for condition in names:
            for arm in ARMS:
                yield TrialKey(arm, condition, index, trial_seed(manifest, index))


def full_order(manifest: Manifest) -> Iterator[TrialKey]:
    for look in range(1, len(manifest.schedule.look_sizes) + 1):
        yield from look_order(manifest, look)


def _bound_budgets(budgets: Any) -> dict[str, Any]:
    """The budgets a trial's identity binds: the token budget only when set, so a store sealed before it existed
    keeps the identities it was run with."""
    body: dict[str, Any] = unstructure(budgets)
    if body.get("tokens") is None:
        body.pop("tokens", None)
    return body


def _bound_condition(condition: Any) -> dict[str, Any]:
    """The condition a trial's identity binds: its minimum baseline success only when set, so a store sealed before
    it existed keeps the identities it was run with."""
    body: dict[str, Any] = unstructure(condition)
    if body.get("min_baseline_success") is None:
        body.pop("min_baseline_success", None)
    return body


def _bound_arm(arm: Any) -> dict[str, Any]:
    """The arm a trial's identity binds: the version its program reported only when one was read, so a store sealed
    before arms carried it keeps the identities it was run with."""
    body: dict[str, Any] = unstructure(arm)
    if body.get("agent_version") is None:
        body.pop("agent_version", None)
    if body.get("honest_way_out") is True:  # bound only where an arm takes it away, as arms sealed before it were
        body.pop("honest_way_out", None)
    return body


def _bound_task(task: Any) -> dict[str, Any]:
    """The task a trial's identity binds: the twins' kind only when twins run, so older stores keep their ids."""
    body: dict[str, Any] = unstructure(task)
    if body.get("twins") is None:
        body.pop("twins", None)
    return body


def identity_body(manifest: Manifest, key: TrialKey) -> dict[str, Any]:
    """What a trial's identity binds."""
    return {
        "experiment": manifest.experiment,
        "task": _bound_task(manifest.task),
        "oracle": manifest.oracle,
        "arm": key.arm,
        "agent": _bound_arm(manifest.arms[key.arm]),
        "condition": _bound_condition(manifest.condition(key.condition)),
        "index": key.index,
        "seed": key.seed,
        "rule": unstructure(manifest.rule),
        "n_per_arm": manifest.n_per_arm,
        "budgets": _bound_budgets(manifest.budgets),
        "contract": unstructure(manifest.contract),
        "infra_exit_codes": list(manifest.infra_exit_codes),
        "plugins": dict(manifest.plugins),
    }


def trial_identity(manifest: Manifest, key: TrialKey) -> str:
    """The identity hash of one scheduled trial."""
    return hashlib.sha256(canonical_json(identity_body(manifest, key))).hexdigest()


class Identities:
    """Identity hashes of a manifest's trials, fast: the canonical body is spliced around index and seed.

    Equal to :func:`trial_identity` (tested); ``index`` and ``seed`` are the only per-trial
    values, and canonical JSON writes integers plainly, so the body's bytes can be cut there.
    """

    _INDEX = 987654321012345
    _SEED = 123456789098765

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self._parts: dict[tuple[str, str], tuple[bytes, bytes, bytes] | None] = {}
        self._heads: dict[tuple[str, str], Any] = {}  # the sha256 state after each template's head
        self._conditions = frozenset(c.name for c in manifest.conditions)

    def _template(self, arm: str, condition: str) -> tuple[bytes, bytes, bytes] | None:
        if (arm, condition) not in self._parts:
            probe = TrialKey(arm, condition, self._INDEX, self._SEED)
            body = canonical_json(identity_body(self.manifest, probe))
            index, seed = str(self._INDEX).encode(), str(self._SEED).encode()
            parts: tuple[bytes, bytes, bytes] | None = None
            if body.count(index) == 1 and body.count(seed) == 1 and body.index(index) < body.index(seed):
                head, _, rest = body.partition(index)
                middle, _, tail = rest.partition(seed)
                parts = (head, middle, tail)
            self._parts[(arm, condition)] = parts
        return self._parts[(arm, condition)]

    def of(self, key: TrialKey) -> str:
        return self._identity(key.arm, key.condition, key.index, key.seed)

    def _identity(self, arm: str, condition: str, index: int, seed: int) -> str:
        parts = self._template(arm, condition)
        if parts is None:  # the probe numbers occur elsewhere in the body: no splicing
            return trial_identity(self.manifest, TrialKey(arm, condition, index, seed))
        head = self._heads.get((arm, condition))
        if head is None:
            head = self._heads[(arm, condition)] = hashlib.sha256(parts[0])
        digest = head.copy()
        digest.update(b"%d%s%d%s" % (index, parts[1], seed, parts[2]))
        return str(digest.hexdigest())

    def of_id(self, trial_id: str) -> tuple[int, str] | None:
        """The seed and identity of the trial ``trial_id`` names (as :func:`key_of` reads it), None when unscheduled.

        The gate calls this once per stored line, so it builds no ``TrialKey``.
        """
        parts = trial_id.split("/")
        if len(parts) != 3 or parts[0] not in ARMS or parts[1] not in self._conditions or not _plain_index(parts[2]):
            return None
        index = int(parts[2])
        if index >= self.manifest.n_per_arm:
            return None
        seed = trial_seed(self.manifest, index)
        return seed, self._identity(parts[0], parts[1], index, seed)
