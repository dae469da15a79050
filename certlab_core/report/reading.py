"""Reading a run store for diagnosis: store, decision, one trial, the report.

Everything here goes through the gate's own reader and decision (``certlab_core.gate``), so
a report, a diff or a bundle sees exactly the seals and schedule checks the gate does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from certlab_core._runtime.default_rule import exact_interval
from certlab_core._runtime.registry import Registry
from certlab_core.plugin.errors import CertlabError, InstrumentError, UsageError
from certlab_core.plugin.types.rule import StatisticalRule
from certlab_core.sdk.canonical import pretty_json

if TYPE_CHECKING:
    from certlab_core.gate.store import RunStore
    from certlab_core.plugin.report import Report


def open_store(rundir: Path) -> RunStore:
    from certlab_core.gate.store import read_store

    return read_store(rundir)


def rule_of(store: RunStore, registry: Registry) -> StatisticalRule:
    """The store's sealed statistical rule, from the installed plugins (one clear line when it is not installed)."""
    name = store.manifest.rule.name
    try:
        rule: StatisticalRule = registry.get("statistical_rules", name)
    except UsageError as error:
        raise UsageError(f"{store.folder}: the run was decided by {error.message}") from None
    return rule


def recompute_decision(store: RunStore, registry: Registry) -> dict[str, Any]:
    """The decision document over the store's manifest and lines, computed afresh (the gate's own function)."""
    from certlab_core.gate.decision import decide_file
    from certlab_core.gate.store import TRIALS

    return decide_file(store.manifest, store.folder / TRIALS, rule_of(store, registry))


def decision_text(decision: dict[str, Any]) -> str:
    """decision.json's exact bytes (as text) for a decision document."""
    return pretty_json(decision)


def decision_file_state(store: RunStore, decision: dict[str, Any]) -> str:
    """``matches``, ``missing`` or ``differs``: the stored decision.json against the recomputed one, byte for byte."""
    return _decision_file_state(store.folder, decision)


def _decision_file_state(folder: Path, decision: dict[str, Any]) -> str:
    from certlab_core.gate.store import DECISION
    from certlab_core.sdk.safe_io import read_capped_bytes

    path = folder / DECISION
    if not (path.exists() or path.is_symlink()):
        return "missing"
    try:
        stored = read_capped_bytes(path, "decision")
    except CertlabError:  # a FIFO, a device, a folder or a huge file in its place: not the decision
        return "differs"
    return "matches" if stored == decision_text(decision).encode("utf-8") else "differs"


def trial_line(store: RunStore, trial_id: str, attempt: int | None = None) -> dict[str, Any]:
    """One trial's line (its last attempt unless ``attempt``), with its seal checked; one clear line if absent.

    The id is checked against the manifest before anything is read; trials.jsonl is then read
    as bytes, a line at a time, and only a line naming the trial is decoded.
    """
    from certlab_core.gate.schedule import key_of
    from certlab_core.gate.store import TRIALS, iter_raw_line_bytes, line_seal_holds

    if key_of(store.manifest, trial_id) is None:
        conditions = ", ".join(c.name for c in store.manifest.conditions)
        raise UsageError(
            f"{trial_id!r} is not a trial of {store.folder}; a trial id reads ARM/CONDITION/INDEX with ARM baseline "
            f"or candidate, CONDITION one of {conditions}, INDEX from 0 to {store.manifest.n_per_arm - 1}"
        )
    marker = f'"id":{json.dumps(trial_id)}'.encode()
    found: dict[str, Any] | None = None
    for number, raw_bytes in enumerate(iter_raw_line_bytes(store.folder / TRIALS), 1):
        if marker not in raw_bytes:
            continue
        try:
            raw = raw_bytes.decode("utf-8")
            line = json.loads(raw)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            continue
        if not isinstance(line, dict) or line.get("id") != trial_id:
            continue
        seal = line.get("seal")
        if not isinstance(seal, str) or not line_seal_holds(raw_bytes, seal):
            raise InstrumentError(
                f"{store.folder}/trials.jsonl line {number}: the seal of {trial_id} does not match its content; "
                "the record was edited after it was written"
            )
        if attempt is not None and line.get("attempt") != attempt:
            continue
        if found is None or _attempt_of(line) > _attempt_of(found):
            found = line
    if found is None:
        what = f"attempt {attempt} of {trial_id}" if attempt is not None else trial_id
        raise UsageError(f"{what} is not in {store.folder}/trials.jsonl; the run stopped before it or never ran it")
    return found


def _attempt_of(line: dict[str, Any]) -> int:
    attempt = line.get("attempt")
    return attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0


def load_report(rundir: Path, registry: Registry, pass_k: tuple[int, ...]) -> tuple[Report, StatisticalRule]:
    """The report of a run store, with the store's statistical rule (for reporters that plot its plan).

    trials.jsonl is read once: the gate's decision verifies each line (seal, schedule) and
    hands it to the report's accumulator in the same pass, so no line is held or parsed twice.
    The file is split at a newline and its parts read in forked workers, each with its own
    accumulator, merged back in file order (``certlab_core.gate.summaries.read_summaries``).
    """
    from certlab_core.gate.decision import decide_file
    from certlab_core.gate.manifest import manifest_document
    from certlab_core.gate.store import (
        EARLIER_SKIPPED,
        TRIALS,
        collector_paused,
        earlier_runs,
        open_manifest,
        summarise_earlier,
    )
    from certlab_core.plugin.report import EarlierRun
    from certlab_core.report.model import ReportAccumulator

    manifest = open_manifest(rundir)
    name = manifest.rule.name
    try:
        rule: StatisticalRule = registry.get("statistical_rules", name)
    except UsageError as error:
        raise UsageError(f"{rundir}: the run was decided by {error.message}") from None
    # Earlier runs are listed, never decided on: a damaged one is skipped with a note
    # (certlab_core.gate.store.summarise_earlier), so it never changes this report or its exit code.
    paths = earlier_runs(rundir, manifest)
    earlier = []
    for path, summary in zip(paths, summarise_earlier(paths), strict=True):
        verdict = summary[len(path.name) + 2 :]
        if verdict.startswith(EARLIER_SKIPPED):
            verdict = f"{EARLIER_SKIPPED}: its decision.json is damaged"
        earlier.append(EarlierRun(run=path.name, verdict=None if verdict == "no decision" else verdict))
    accumulator = ReportAccumulator(manifest_document(manifest), pass_k, exact_interval(registry))
    with collector_paused():
        decision = decide_file(manifest, rundir / TRIALS, rule, accumulator)
        report = accumulator.report(
            decision, run=rundir.name, decision_file=_decision_file_state(rundir, decision), earlier_runs=earlier
        )
    return report, rule
