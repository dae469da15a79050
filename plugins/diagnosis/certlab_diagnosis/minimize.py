"""Shrink a failed trial's faults to those that matter: ddmin over re-runs.

Each test re-runs the trial (and its twin, the other arm's trial of the same condition and
index, when the twin passed) through the kernel's services with a subset of the condition's
fault declarations, and asks whether the failure keeps its fingerprint (failure mode plus
first diverging event, as the report clusters it). ddmin (Zeller and Hildebrandt) returns a
subset from which no single fault can be removed, provided the agent repeats itself; the
result is then checked with fresh re-runs of that subset and of each one-smaller subset:
when they agree with what ddmin saw, it is ``1-minimal``, otherwise only ``reduced``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from attrs import frozen

from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.sdk.canonical import sealed

if TYPE_CHECKING:
    from certlab_core.plugin import Services
    from certlab_core.plugin.types.services import StoreView

MINIMIZED_SCHEMA = "certlab.minimized/1"
Subset = tuple[int, ...]


def ddmin(items: Sequence[int], fails: Callable[[Subset], bool]) -> Subset:
    """The ddmin algorithm: a subset of ``items`` that still ``fails``, 1-minimal when ``fails`` is deterministic.

    ``fails(tuple(items))`` is assumed true; subsets keep the order of ``items``.
    """
    current = tuple(items)
    granularity = 2
    while len(current) >= 2:
        size = len(current)
        chunks = [current[size * i // granularity : size * (i + 1) // granularity] for i in range(granularity)]
        chunks = [chunk for chunk in chunks if chunk]
        reduced = False
        for chunk in chunks:
            if fails(chunk):
                current, granularity, reduced = chunk, 2, True
                break
        if not reduced:
            for chunk in chunks:
                complement = tuple(item for item in current if item not in chunk)
                if complement and fails(complement):
                    current, granularity, reduced = complement, max(granularity - 1, 2), True
                    break
        if not reduced:
            if granularity >= len(current):
                break
            granularity = min(len(current), 2 * granularity)
    return current


@frozen
class Check:
    """One re-run of the trial under a subset of its faults: did the failure keep its fingerprint?"""

    faults: Subset
    reproduced: bool
    fingerprint: str | None


@frozen
class Minimized:
    """The result: what was kept and removed, and whether it is 1-minimal, only reduced, or did not reproduce."""

    trial: str
    fingerprint: str
    declared: tuple[Mapping[str, Any], ...]
    kept: Subset
    removed: Subset
    result: str  # 1-minimal, reduced, not-reproduced
    note: str
    checks: tuple[Check, ...]

    @property
    def reruns(self) -> int:
        return len(self.checks)


class FaultTester:
    """Re-runs a trial (and its passing twin) under fault subsets, caching ddmin's answers and keeping every check."""

    def __init__(
        self, store: StoreView, trial: Mapping[str, Any], twin: Mapping[str, Any] | None, services: Services
    ) -> None:
        self.store = store
        self.trial = trial
        self.twin_id = str(twin["id"]) if twin is not None and twin.get("outcome") == "success" else None
        self.services = services
        condition = next(c for c in store.manifest["conditions"] if c["name"] == trial["condition"])
        self.declared: tuple[Mapping[str, Any], ...] = tuple(condition["faults"])
        self.target: str | None = None
        self.checks: list[Check] = []
        self._cache: dict[Subset, bool] = {}

    def fingerprint(self, subset: Subset) -> str | None:
        """The failure's fingerprint with only the faults ``subset``; None when the trial does not fail."""
        faults = [self.declared[i] for i in subset]
        manifest = self.store.manifest
        line = self.services.rerun_trial(manifest, str(self.trial["id"]), faults=faults)
        if line.get("outcome") == "error":
            raise InstrumentError(f"re-running {self.trial['id']} hit an infrastructure error: {line.get('error')}")
        if line.get("outcome") != "failure":
            return None
        twin = None
        if self.twin_id is not None:
            twin = self.services.rerun_trial(manifest, self.twin_id, faults=faults)
        return self.services.failure_fingerprint(line, twin)

    def check(self, subset: Subset) -> bool:
        """A fresh re-run (never cached), recorded in ``checks``."""
        found = self.fingerprint(subset)
        reproduced = found is not None and found == self.target
        self.checks.append(Check(subset, reproduced, found))
        return reproduced

    def fails(self, subset: Subset) -> bool:
        """ddmin's test, cached per subset."""
        if subset not in self._cache:
            self._cache[subset] = self.check(subset)
        return self._cache[subset]


def minimize(
    store: StoreView, trial_id: str, services: Services, progress: Callable[[str], None] = lambda _m: None
) -> Minimized:
    """Shrink the faults of the failed trial ``trial_id`` while its failure keeps its fingerprint."""
    trial = store.trial(trial_id)
    if trial.get("outcome") != "failure":
        raise UsageError(f"{trial_id} did not fail (its outcome is {trial.get('outcome')}); minimise a failed trial")
    if store.manifest["task"]["kind"] != "tool-world":
        raise UsageError(f"{trial_id} is a coding trial; faults, and so minimisation, exist only for tool worlds")
    other = "candidate" if trial["arm"] == "baseline" else "baseline"
    twin_id = f"{other}/{trial['condition']}/{trial['index']}"
    try:
        twin = store.trial(twin_id)
    except UsageError:
        twin = None
    tester = FaultTester(store, trial, twin, services)
    declared = tuple(dict(d) for d in tester.declared)
    if not declared:
        raise UsageError(
            f"{trial_id} ran under condition {trial['condition']}, which injects no faults; nothing to minimise"
        )
    recorded = services.failure_fingerprint(trial, twin)
    everything = tuple(range(len(declared)))
    tester.target = recorded
    progress(
        f"minimize: {trial_id} fails as '{recorded}' under {len(declared)} fault(s); re-running it under all of them"
    )
    if not tester.fails(everything):
        seen = tester.checks[-1].fingerprint or "no failure"
        return Minimized(
            trial=trial_id,
            fingerprint=recorded,
            declared=declared,
            kept=everything,
            removed=(),
            result="not-reproduced",
            note=f"re-run under all its faults, the trial gave '{seen}', not the recorded failure",
            checks=tuple(tester.checks),
        )
    if tester.fails(()):
        kept: Subset = ()
    else:
        kept = ddmin(everything, tester.fails)
    progress(f"minimize: ddmin kept {len(kept)} of {len(declared)} fault(s) after {len(tester.checks)} re-run(s)")
    # Fresh re-runs: the result again, and each one-smaller subset; they must agree with what ddmin saw.
    agree = tester.check(kept)
    smaller = [tuple(i for i in kept if i != drop) for drop in kept]
    agree = all([agree] + [not tester.check(subset) for subset in smaller])
    removed = tuple(i for i in everything if i not in kept)
    if agree and not kept:
        result, note = "1-minimal", "the failure does not need any of the injected faults (it fails without them)"
    elif agree:
        result, note = "1-minimal", "no single kept fault can be removed (checked by fresh re-runs)"
    else:
        result = "reduced"
        note = "fresh re-runs disagreed with earlier ones: the agent does not repeat itself, so this is only reduced"
    return Minimized(trial_id, recorded, declared, kept, removed, result, note, tuple(tester.checks))


def _declaration(declared: Sequence[Mapping[str, Any]], index: int) -> dict[str, Any]:
    return {"index": index, **dict(declared[index])}


def minimized_document(store: StoreView, found: Minimized) -> dict[str, Any]:
    """The sealed ``min.json`` document."""
    return sealed(
        {
            "schema": MINIMIZED_SCHEMA,
            "experiment": store.manifest["experiment"],
            "run": store.folder.name,
            "manifest_seal": store.manifest["seal"],
            "trial": found.trial,
            "fingerprint": found.fingerprint,
            "result": found.result,
            "note": found.note,
            "declared": [_declaration(found.declared, i) for i in range(len(found.declared))],
            "kept": [_declaration(found.declared, i) for i in found.kept],
            "removed": [_declaration(found.declared, i) for i in found.removed],
            "reruns": found.reruns,
            "checks": [
                {"faults": list(c.faults), "reproduced": c.reproduced, "fingerprint": c.fingerprint}
                for c in found.checks
            ],
        }
    )


def describe_fault(declaration: Mapping[str, Any]) -> str:
    calls = declaration.get("on_calls")
    which = "every call" if calls == "all" else f"call(s) {', '.join(str(c) for c in calls or ())}"
    return f"#{declaration['index']} {declaration['fault']} on {declaration['tool']} ({which})"
