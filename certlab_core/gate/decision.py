"""The gate's decision: a pure function of the sealed manifest and the raw lines of trials.jsonl.

Every line must hold its seal, name a scheduled trial, carry that trial's identity and the
manifest's seal; the trials present must be exactly those the stopping rule calls for (each
condition stops at its first decisive look; the run stops after a look at which a gating
condition blocked or the candidate broke its contract). Anything else is ERROR, and so is a
trial whose last attempt is an infrastructure error. Otherwise: BLOCK if a gating condition
blocks or the candidate broke its contract, PASS if every gating condition passes, else
INCONCLUSIVE. The statistical rule is the manifest's, from the registry; the arithmetic is the
rule's own (scipy is imported there, when the verdict is computed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from attrs import define, field

from certlab_core.evidence.canonical import sealed
from certlab_core.gate.manifest import ARMS, Manifest, SealedCondition
from certlab_core.gate.schedule import Identities
from certlab_core.gate.store import (
    DECISION_SCHEMA,
    GATE_PREFIX,
    TRIAL_SCHEMA,
    gate_summary,
    iter_raw_line_bytes,
    line_seal_holds,
)
from certlab_core.plugin.errors import EXIT_BLOCK, EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_PASS, InstrumentError
from certlab_core.plugin.records import Bounds, StatisticalRule

OUTCOMES = ("success", "failure", "error")
EXIT_CODES = {"PASS": EXIT_PASS, "BLOCK": EXIT_BLOCK, "INCONCLUSIVE": EXIT_INCONCLUSIVE, "ERROR": EXIT_ERROR}
MAX_ATTEMPTS = 2 + 3  # one --retry-infra retry and three re-runs after a lost worker (integrity.py tells them apart)
PROBLEMS_SHOWN = 20

Decide = Callable[..., Bounds]


@define
class ConditionState:
    """A condition as the stopping rule walks the looks."""

    condition: SealedCondition
    verdict: str | None = None
    look: int | None = None
    looks_run: int = 0
    size: int = 0
    bounds: Bounds | None = None
    counts: dict[str, dict[str, int]] = field(factory=dict)


@define
class Trials:
    """The verified trial lines of a store: each trial's last attempt (as its ``_gate`` summary), and the problems."""

    latest: dict[str, dict[str, Any]] = field(factory=dict)
    attempts: int = 0
    problems: list[str] = field(factory=list)


_DECODER = json.JSONDecoder()
_SCHEMA_MARK = f'"schema":"{TRIAL_SCHEMA}"'
_SCHEMA_MARK_BYTES = _SCHEMA_MARK.encode()
_GATE_PREFIX_BYTES = GATE_PREFIX.encode()
_SEAL_KEY = b',"seal":"'
_SUMMARY_WINDOW = 1024  # bytes decoded to read a line's leading summary (more only when it is longer)
_NOT_JSON = "not JSON; the store is damaged or was edited by hand"
_NOT_TRIAL = f"not a {TRIAL_SCHEMA} record"
_SEAL_BROKEN = "the seal does not match the content; the record was edited after it was written"

Observer = Callable[[int, "str | bytes", "dict[str, Any] | None"], None]
"""Called with each non-empty line's number, its raw text or bytes, and its verified summary (None when refused)."""


def _raw_seal_holds(raw: bytes) -> bool:
    """Whether a line's seal is the sha256 of its raw bytes without the seal field (docs/run-store.md)."""
    at = raw.rfind(_SEAL_KEY)
    if at < 0:
        return False
    end = at + len(_SEAL_KEY) + 64
    seal = raw[at + len(_SEAL_KEY) : end]
    if raw[end : end + 1] != b'"' or raw.count(raw[at : end + 1]) != 1:
        return False
    digest = hashlib.sha256(memoryview(raw)[:at])
    digest.update(memoryview(raw)[end + 1 :])
    return digest.hexdigest().encode() == seal


def _summary_of_bytes(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The leading ``_gate`` summary of a line read as bytes, its seal checked over those bytes."""
    if not raw.startswith(_GATE_PREFIX_BYTES):
        try:
            return _summary(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return None, _NOT_JSON
    if _SCHEMA_MARK_BYTES not in raw:
        return None, _NOT_TRIAL
    if not _raw_seal_holds(raw):
        return None, _SEAL_BROKEN
    # Only the head is decoded: the summary comes first, and is short unless it holds a long error.
    try:
        head = raw[:_SUMMARY_WINDOW].decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < _SUMMARY_WINDOW - 3 or len(raw) <= _SUMMARY_WINDOW:
            return None, _NOT_JSON  # not UTF-8 text (a character cut at the window's end is not an error)
        head = raw[: error.start].decode("utf-8")
    try:
        summary, _end = _DECODER.raw_decode(head, len(GATE_PREFIX))
    except (ValueError, RecursionError):
        if len(raw) <= _SUMMARY_WINDOW:
            return None, _NOT_JSON
        try:
            summary, _end = _DECODER.raw_decode(raw.decode("utf-8"), len(GATE_PREFIX))
        except (ValueError, RecursionError, UnicodeDecodeError):
            return None, _NOT_JSON
    if not isinstance(summary, dict):
        return None, _NOT_TRIAL
    return summary, None


def _summary(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """A line's gate summary and seal check: read from its leading ``_gate`` object, or from the whole line."""
    if raw.startswith(GATE_PREFIX):
        try:
            summary, _end = _DECODER.raw_decode(raw, len(GATE_PREFIX))
        except (ValueError, RecursionError):
            return None, _NOT_JSON
        at = raw.rfind(',"seal":"')
        seal = raw[at + 9 : at + 9 + 64] if at >= 0 else ""
        if _SCHEMA_MARK not in raw or not isinstance(summary, dict):
            return None, _NOT_TRIAL
        if not line_seal_holds(raw, {"seal": seal}):
            return None, _SEAL_BROKEN
        return summary, None
    try:
        line = json.loads(raw)
    except (ValueError, RecursionError):
        return None, _NOT_JSON
    if not isinstance(line, dict) or line.get("schema") != TRIAL_SCHEMA:
        return None, _NOT_TRIAL
    if not line_seal_holds(raw, line):
        return None, _SEAL_BROKEN
    return gate_summary(line), None


def _kept(line: Mapping[str, Any], shared: dict[Any, Any]) -> dict[str, Any]:
    """What the decision keeps of a verified summary; repeated values (outcomes, modes, fired flags) are shared."""
    outcome, mode, fired = line.get("outcome"), line.get("failure_mode"), line.get("fired")
    if isinstance(fired, list):
        with contextlib.suppress(TypeError):  # a summary edited to hold something unhashable: kept as it is
            fired = shared.setdefault(tuple(fired), tuple(fired))
    return {
        "outcome": shared.setdefault(outcome, outcome),
        "error": line.get("error"),
        "failure_mode": shared.setdefault(mode, mode) if isinstance(mode, str) else mode,
        "fired": fired,
        "violations": line.get("violations"),
    }


def read_lines(manifest: Manifest, raw_lines: Iterable[str | bytes], observe: Observer | None = None) -> Trials:
    """Verify each line (seal, schedule, identity, manifest seal, attempts) and keep each trial's last attempt.

    Lines are read one at a time and only what the decision needs of their summaries is
    kept, so a store of any size is checked in little memory. A line given as bytes has its
    seal checked over those bytes and only its summary decoded. ``observe``, when given,
    sees every non-empty line with its verified summary (or None), in the same pass.
    """
    problems, entries = _scan(manifest, raw_lines, observe, 1)
    return _collect(problems, entries)


_Entry = tuple[int, str, int, dict[str, Any]]  # line number, trial id, attempt, what the decision keeps


def _scan(
    manifest: Manifest, raw_lines: Iterable[str | bytes], observe: Observer | None, first: int
) -> tuple[list[tuple[int, str]], list[_Entry]]:
    """The per-line checks of :func:`read_lines` over lines numbered from ``first``: problems and kept attempts."""
    identities = Identities(manifest)
    manifest_seal = manifest.seal
    shared: dict[Any, Any] = {}
    problems: list[tuple[int, str]] = []
    entries: list[_Entry] = []
    for number, raw in enumerate(raw_lines, first):
        if not raw.strip():
            problems.append((number, f"trials.jsonl line {number}: empty line; the store was edited by hand"))
            continue
        line, wrong = _summary_of_bytes(raw) if isinstance(raw, bytes) else _summary(raw)
        if observe is not None:
            observe(number, raw, line)
        if line is None:
            problems.append((number, f"trials.jsonl line {number}: {wrong}"))
            continue
        trial_id = line.get("id")
        scheduled = identities.of_id(trial_id) if isinstance(trial_id, str) else None
        if (
            scheduled is None
            or not isinstance(trial_id, str)
            or line.get("seed") != scheduled[0]
            or line.get("identity") != scheduled[1]
            or line.get("manifest_seal") != manifest_seal
        ):
            problems.append((number, _schedule_problem(f"trials.jsonl line {number}", trial_id, line, scheduled)))
            continue
        attempt = line.get("attempt")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or not 1 <= attempt <= MAX_ATTEMPTS:
            problems.append(
                (number, f"trials.jsonl line {number}: {trial_id}: attempt {attempt!r} is not 1..{MAX_ATTEMPTS}")
            )
            continue
        if line.get("outcome") not in OUTCOMES:
            problems.append(
                (
                    number,
                    f"trials.jsonl line {number}: {trial_id}: outcome {line.get('outcome')!r} "
                    f"is not one of {', '.join(OUTCOMES)}",
                )
            )
            continue
        entries.append((number, trial_id, attempt, _kept(line, shared)))
    return problems, entries


def _schedule_problem(where: str, trial_id: Any, line: Mapping[str, Any], scheduled: tuple[int, str] | None) -> str:
    """Why a line's id, seed, identity or manifest seal does not fit the manifest's schedule (the first that fails)."""
    if scheduled is None:
        return f"{where}: {trial_id!r} is not a trial this manifest schedules"
    if line.get("seed") != scheduled[0]:
        return f"{where}: {trial_id}: its seed disagrees with its index and the manifest"
    if line.get("identity") != scheduled[1]:
        return (
            f"{where}: {trial_id}: its identity does not match the manifest "
            "(the manifest was resealed with other parameters after the trial ran)"
        )
    return f"{where}: {trial_id} was recorded under another manifest (its manifest_seal differs)"


def _collect(line_problems: list[tuple[int, str]], entries: Iterable[_Entry]) -> Trials:
    """The trials from the per-line checks of every line, in file order: duplicates and retries checked here.

    Most trials have one attempt; it is kept as a pair ``(attempt, kept)`` until a second one
    turns it into a dictionary by attempt, so the common case builds nothing per trial.
    """
    trials = Trials()
    by_trial: dict[str, tuple[int, dict[str, Any]] | dict[int, dict[str, Any]]] = {}
    found = list(line_problems)
    attempts = 0
    for number, trial_id, attempt, kept in entries:
        seen = by_trial.get(trial_id)
        if seen is None:
            by_trial[trial_id] = (attempt, kept)
            attempts += 1
            continue
        if isinstance(seen, tuple):
            seen = by_trial[trial_id] = {seen[0]: seen[1]}
        if attempt in seen:
            found.append((number, f"trials.jsonl line {number}: {trial_id} attempt {attempt} is recorded twice"))
            continue
        seen[attempt] = kept
        attempts += 1
    trials.attempts = attempts
    found.sort(key=lambda item: item[0])  # one problem at most per line: the order of a single pass
    trials.problems = [text for _number, text in found]
    latest = trials.latest
    for trial_id, seen in by_trial.items():
        if isinstance(seen, tuple):
            if seen[0] == 1:
                latest[trial_id] = seen[1]
            else:
                trials.problems.append(f"{trial_id}: attempts {[seen[0]]} are not numbered from 1 without gaps")
            continue
        numbers = sorted(seen)
        if numbers != list(range(1, len(numbers) + 1)):
            trials.problems.append(f"{trial_id}: attempts {numbers} are not numbered from 1 without gaps")
            continue
        for n in numbers[:-1]:
            if seen[n]["outcome"] != "error":
                trials.problems.append(
                    f"{trial_id}: attempt {n + 1} retried an attempt that was not an infrastructure error"
                )
        latest[trial_id] = seen[numbers[-1]]
    return trials


class SplitObserver(Protocol):
    """An observer of the lines that can watch part of the file in a forked worker and be merged back."""

    def observe(self, number: int, raw: str | bytes, summary: dict[str, Any] | None) -> None: ...

    def fresh(self) -> SplitObserver: ...

    def absorb(self, other: Any) -> None: ...


_Part = tuple[list[tuple[int, str]], list[_Entry], Any]


def read_file(
    manifest: Manifest,
    path: Path,
    observer: SplitObserver | None = None,
    workers: int = 2,
    least: int = 1 << 20,
    meanwhile: Callable[[], object] | None = None,
) -> Trials:
    """:func:`read_lines` over trials.jsonl at ``path``, its lines split at a newline into parts read in forked workers.

    Every line is still checked, each by one process (seal, summary, schedule, identity): the
    first part here, the others in forked children; the parts are merged in file order and
    what spans them (duplicates, retries) is checked here. ``observer`` sees the first part
    itself and each other part in a fresh copy (``fresh``), merged back in order (``absorb``).
    A store smaller than ``least`` bytes is read in one pass here; a worker that fails is an
    instrument error. ``meanwhile``, when given, is called once the first part is read and
    before the others are awaited (work that would otherwise follow the read).
    """
    from certlab_core.plugin.forking import ChildFailure, ForkPool

    ranges = _line_ranges(path, workers, least)
    if len(ranges) < 2:
        return read_lines(manifest, iter_raw_line_bytes(path), None if observer is None else observer.observe)

    def part(bounds: tuple[int, int, int]) -> _Part:
        start, end, first = bounds
        watcher = None if observer is None else observer.fresh()
        found, entries = _scan(
            manifest,
            iter_raw_line_bytes(path, start=start, end=end),
            None if watcher is None else watcher.observe,
            first,
        )
        return found, entries, watcher

    parts: dict[int, _Part] = {}
    with ForkPool(len(ranges) - 1) as pool:
        for index in range(1, len(ranges)):
            pool.submit(part, ranges[index], index)
        # The first part is read here meanwhile, by the observer itself (nothing to send back).
        start, end, first = ranges[0]
        problems, entries = _scan(
            manifest,
            iter_raw_line_bytes(path, start=start, end=end),
            None if observer is None else observer.observe,
            first,
        )
        if meanwhile is not None:
            meanwhile()
        while pool.busy():
            for index, result in pool.wait():
                if isinstance(result, ChildFailure):
                    raise InstrumentError(
                        f"{path}: a worker reading part of it failed ({result.kind}: {result.summary})"
                    )
                parts[index] = result
    for index in range(1, len(ranges)):
        found, kept, watcher = parts.pop(index)
        problems.extend(found)
        entries.extend(kept)
        if observer is not None:
            observer.absorb(watcher)
    return _collect(problems, entries)


def _line_ranges(path: Path, workers: int, least: int) -> list[tuple[int, int, int]]:
    """``workers`` byte ranges of about even size, each starting after a newline, with the number of its first line.

    The parent's part is no smaller than a child's: while a child pickles what it kept, the
    parent warms the rule up (measured with bench/store.py).
    """
    try:
        size = path.stat().st_size
    except OSError:
        return []
    if workers < 2 or size < least:
        return []
    ranges: list[tuple[int, int, int]] = []
    start, first = 0, 1
    with path.open("rb") as handle:
        for share in range(1, workers):
            aim = max(start, size * share // workers)
            handle.seek(aim)
            handle.readline()
            cut = handle.tell()
            if cut >= size:  # the aim fell in the last line: cut at the newline before it instead
                handle.seek(start)
                cut = start + handle.read(aim - start).rfind(b"\n") + 1
            if cut >= size or cut <= start:
                break
            handle.seek(start)
            lines = 0
            left = cut - start
            while left:
                block = handle.read(min(left, 1 << 22))
                lines += block.count(b"\n")
                left -= len(block)
            ranges.append((start, cut, first))
            start, first = cut, first + lines
    ranges.append((start, size, first))
    return ranges if len(ranges) > 1 else []


Groups = dict[tuple[str, str], dict[int, Mapping[str, Any]]]
"""Each trial's last attempt by arm and condition, then by index (see :func:`grouped`)."""


def grouped(latest: Mapping[str, Mapping[str, Any]]) -> Groups:
    """The trials of ``latest`` by (arm, condition), then by index: one pass, so the looks never build ids."""
    groups: Groups = {}
    for trial_id, line in latest.items():
        arm, condition, index = trial_id.split("/")
        group = groups.get((arm, condition))
        if group is None:
            group = groups[(arm, condition)] = {}
        group[int(index)] = line
    return groups


def _first(groups: Groups, arm: str, condition: str, size: int) -> list[Mapping[str, Any]]:
    """The last attempts of trials 0..size-1 of one arm in one condition (those present)."""
    group = groups.get((arm, condition)) or {}
    return [line for index, line in group.items() if index < size]


def _count(groups: Groups, arm: str, condition: str, size: int) -> dict[str, int]:
    counts = {"successes": 0, "failures": 0, "errors": 0, "trials": size}
    for line in _first(groups, arm, condition, size):
        outcome = line["outcome"]
        counts["successes" if outcome == "success" else "failures" if outcome == "failure" else "errors"] += 1
    return counts


def _violated(line: Mapping[str, Any]) -> bool:
    return bool(line.get("violations"))


@define
class Walk:
    """The stopping rule walked over the trials present: where each condition stands, and what is still due."""

    states: list[ConditionState]
    required: set[str] = field(factory=set)
    problems: list[str] = field(factory=list)
    reasons: list[str] = field(factory=list)
    due_look: int | None = None  # the look whose trials are missing, if any
    due_conditions: list[str] = field(factory=list)


def walk(
    manifest: Manifest, latest: Mapping[str, Mapping[str, Any]], rule: StatisticalRule, groups: Groups | None = None
) -> Walk:
    """Evaluate look after look until a look's trials are missing or every condition has stopped.

    ``groups`` is :func:`grouped` of ``latest``, when the caller has it already.
    """
    if groups is None:
        groups = grouped(latest)
    sizes = manifest.schedule.look_sizes
    looks = len(sizes)
    k = manifest.schedule.gating_conditions
    result = Walk(states=[ConditionState(c) for c in manifest.conditions])
    active = list(result.states)
    violated = {tid for tid, line in latest.items() if tid.startswith("candidate/") and _violated(line)}
    for look in range(1, looks + 1):
        size = sizes[look - 1]
        present = {
            (arm, s.condition.name): len(_first(groups, arm, s.condition.name, size)) for s in active for arm in ARMS
        }
        if any(count < size for count in present.values()):
            result.due_look = look
            result.due_conditions = [s.condition.name for s in active]
            result.required |= {
                f"{arm}/{s.condition.name}/{i}"
                for s in active
                for arm in ARMS
                for i in range(size)
                if f"{arm}/{s.condition.name}/{i}" in latest
            }
            return result
        result.required |= {f"{arm}/{s.condition.name}/{i}" for s in active for arm in ARMS for i in range(size)}
        for state in active:
            name = state.condition.name
            state.looks_run, state.size = look, size
            state.counts = {arm: _count(groups, arm, name, size) for arm in ARMS}
            base, cand = state.counts["baseline"], state.counts["candidate"]
            try:
                bounds = rule.decide(
                    base["successes"], size, cand["successes"], size,
                    manifest.rule.alpha, manifest.rule.delta, k, looks,
                )  # fmt: skip
            except Exception as error:  # a broken rule invalidates the decision
                result.problems.append(f"the rule {rule.name} raised {type(error).__name__}: {error}")
                return result
            if not isinstance(bounds, Bounds) or bounds.verdict not in ("PASS", "BLOCK", "INCONCLUSIVE"):
                result.problems.append(f"the rule {rule.name} returned {bounds!r}, not Bounds with a verdict")
                return result
            state.bounds = bounds
            if bounds.verdict in ("PASS", "BLOCK") or look == looks:
                state.verdict, state.look = bounds.verdict, look
        violation = any(tid in result.required for tid in violated)
        blocked = any(s.verdict == "BLOCK" and s.condition.gating for s in result.states)
        active = [s for s in active if s.verdict is None]
        if (blocked or violation) and active:
            why = "a gating condition blocked" if blocked else "the candidate broke its contract"
            for state in active:
                state.verdict, state.look = "STOPPED", look
                result.reasons.append(f"{state.condition.name}: stopped at look {look} because {why}")
            active = []
        if not active:
            break
    return result


def decide(
    manifest: Manifest, raw_lines: Iterable[str | bytes], rule: StatisticalRule, observe: Observer | None = None
) -> dict[str, Any]:
    """The decision document (docs/run-store.md) for a manifest and the raw lines of its trials.jsonl.

    ``observe`` (see :func:`read_lines`) lets a caller read the same lines in the same pass.
    """
    return decision_of(manifest, read_lines(manifest, raw_lines, observe), rule)


def decide_file(
    manifest: Manifest, path: Path, rule: StatisticalRule, observer: SplitObserver | None = None, workers: int = 2
) -> dict[str, Any]:
    """:func:`decide` over the trials.jsonl at ``path``, its lines checked in forked workers (:func:`read_file`).

    While the workers finish, the rule is warmed up (:func:`warm_up`).
    """
    return decision_of(manifest, read_file(manifest, path, observer, workers, meanwhile=lambda: warm_up(rule)), rule)


def warm_up(rule: StatisticalRule) -> None:
    """Call the rule once on made-up counts and discard the answer, so that what it imports is loaded.

    A rule is a pure function of counts (``certlab_core.plugin.records.StatisticalRule``); scipy,
    which the exact rules import lazily, takes a third of a second to load. Anything the
    made-up call raises is ignored here: the real call reports it.
    """
    with contextlib.suppress(Exception):
        rule.decide(1, 2, 1, 2, 0.05, 0.1, 1, 1)


def decision_of(manifest: Manifest, trials: Trials, rule: StatisticalRule) -> dict[str, Any]:
    """The decision document for the verified lines of a store (:func:`read_lines`)."""
    problems = list(trials.problems)
    latest = trials.latest
    k = manifest.schedule.gating_conditions
    errors = sorted((tid for tid, line in latest.items() if line["outcome"] == "error"), key=_order_key)
    for trial_id in errors:
        problems.append(f"{trial_id}: {latest[trial_id].get('error') or 'infrastructure error'}")
    walked = Walk(states=[ConditionState(c) for c in manifest.conditions])
    groups = grouped(latest)
    if not problems:
        walked = walk(manifest, latest, rule, groups)
        problems.extend(walked.problems)
        if not problems and walked.due_look is not None:
            missing = sorted(
                (
                    f"{arm}/{name}/{i}"
                    for name in walked.due_conditions
                    for arm in ARMS
                    for i in range(manifest.schedule.look_sizes[walked.due_look - 1])
                    if f"{arm}/{name}/{i}" not in latest
                ),
                key=_order_key,
            )
            problems.append(
                f"{len(missing)} trial(s) the schedule calls for at look {walked.due_look} are missing "
                f"(first: {missing[0]}); the run was interrupted"
            )
        if not problems:
            extra = sorted((tid for tid in latest if tid not in walked.required), key=_order_key)
            if extra:
                problems.append(
                    f"{len(extra)} trial(s) ran past a decisive look (first: {extra[0]}); "
                    "the store does not follow its stopping rule"
                )
    states = walked.states
    reasons = [] if problems else list(walked.reasons)
    for state in states:
        if state.verdict is None:
            state.verdict = "ERROR" if problems else "INCONCLUSIVE"
    conditions = [_condition_document(state, groups, problems) for state in states]
    violations = {arm: sum(1 for (of, _c), group in groups.items() if of == arm for line in group.values()
                           if _violated(line)) for arm in ARMS}  # fmt: skip
    gating = [s for s in states if s.condition.gating]
    if problems:
        verdict = "ERROR"
    elif any(s.verdict == "BLOCK" for s in gating) or violations["candidate"]:
        verdict = "BLOCK"
    elif all(s.verdict == "PASS" for s in gating):
        verdict = "PASS"
    else:
        verdict = "INCONCLUSIVE"
    if not problems:
        if violations["candidate"]:
            reasons.append(f"the candidate broke its behaviour contract in {violations['candidate']} trial(s): BLOCK")
        for state in states:
            if state.bounds is not None and state.verdict in ("PASS", "BLOCK", "INCONCLUSIVE"):
                reasons.append(_reason(state, manifest.rule.delta))
    shown = problems[:PROBLEMS_SHOWN]
    if len(problems) > PROBLEMS_SHOWN:
        shown.append(f"... and {len(problems) - PROBLEMS_SHOWN} more problem(s)")
    document = {
        "schema": DECISION_SCHEMA,
        "experiment": manifest.experiment,
        "manifest_seal": manifest.seal,
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "rule": {
            "name": manifest.rule.name,
            "alpha": manifest.rule.alpha,
            "delta": manifest.rule.delta,
            "looks": manifest.rule.looks,
            "conditions": k,
        },
        "conditions": conditions,
        "contract_violations": violations,
        "trials": {
            "scheduled": len(walked.required) if not problems else 2 * manifest.n_per_arm * len(manifest.conditions),
            "run": len(latest),
            "attempts": trials.attempts,
            "errors": len(errors),
        },
        "problems": shown,
        "reasons": reasons,
        "warnings": _fault_warnings(conditions),
    }
    return sealed(document)


def _order_key(trial_id: str) -> tuple[int, str, str]:
    arm, condition, index = trial_id.split("/")
    return int(index), condition, arm


def _reason(state: ConditionState, delta: float) -> str:
    bounds = state.bounds
    assert bounds is not None
    head = f"{state.condition.name} ({state.condition.bucket}): {state.verdict} at look {state.look}"
    if state.verdict == "PASS":
        why = f"lower bound {bounds.lower:.4f} > -delta {-delta:.4f}"
    elif state.verdict == "BLOCK":
        why = f"upper bound {bounds.upper:.4f} < -delta {-delta:.4f}"
    else:
        why = f"the bounds [{bounds.lower:.4f}, {bounds.upper:.4f}] contain -delta {-delta:.4f}"
    suffix = "" if state.condition.gating else " (ceiling: reported, never gated)"
    return f"{head}: {why}{suffix}"


def _condition_document(state: ConditionState, groups: Groups, problems: list[str]) -> dict[str, Any]:
    condition = state.condition
    name = condition.name
    size = state.size
    if not size:  # never evaluated: count what is there
        size = max((max(group) + 1 for (_arm, of), group in groups.items() if of == name and group), default=0)
        state.counts = {arm: _count(groups, arm, name, size) for arm in ARMS}
    lines = {arm: _first(groups, arm, name, size) for arm in ARMS}
    fired: list[dict[str, Any]] = []
    for index, declared in enumerate(condition.faults):
        per_arm = {arm: 0 for arm in ARMS}
        for arm in ARMS:
            for line in lines[arm]:
                fired_flags = line.get("fired") or []
                if index < len(fired_flags) and fired_flags[index] is True:
                    per_arm[arm] += 1
        fired.append(
            {
                "index": index,
                "fault": declared.fault,
                "tool": declared.tool,
                "fired": per_arm,
                "never_fired": size > 0 and not any(per_arm.values()),
            }
        )
    modes: dict[str, dict[str, int]] = {arm: {} for arm in ARMS}
    for arm in ARMS:
        for line in lines[arm]:
            if line.get("outcome") == "failure":
                mode = str(line.get("failure_mode") or "unknown")
                modes[arm][mode] = modes[arm].get(mode, 0) + 1
        modes[arm] = dict(sorted(modes[arm].items()))
    verdict = "ERROR" if problems else state.verdict
    return {
        "name": condition.name,
        "bucket": condition.bucket,
        "gating": condition.gating,
        "counts": {
            arm: {"successes": state.counts[arm]["successes"], "trials": state.counts[arm]["trials"]} for arm in ARMS
        },
        "bounds": None
        if state.bounds is None or problems
        else {"lower": state.bounds.lower, "upper": state.bounds.upper},
        "verdict": verdict,
        "look": None if problems else state.look,
        "looks_run": state.looks_run,
        "faults": fired,
        "failure_modes": modes,
    }


def _fault_warnings(conditions: Sequence[Mapping[str, Any]]) -> list[str]:
    warnings = []
    for condition in conditions:
        for fault in condition["faults"]:
            if fault["never_fired"]:
                warnings.append(
                    f"{condition['name']}: fault {fault['index']} ({fault['fault']} on {fault['tool']}) never fired; "
                    "this condition did not test what it names"
                )
            elif not all(fault["fired"].values()):
                silent = [arm for arm, n in fault["fired"].items() if not n]
                warnings.append(
                    f"{condition['name']}: fault {fault['index']} ({fault['fault']} on {fault['tool']}) "
                    f"never fired in the {' and '.join(silent)} arm"
                )
    return warnings
