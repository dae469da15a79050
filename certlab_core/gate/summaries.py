"""Reading trials.jsonl: every line verified, each trial's last attempt kept.

This is the byte-level fast path of the gate, behind one function, :func:`read_summaries`: the
file is mapped and read as bytes, split at a newline between this process and a forked worker;
a line's seal is checked over its bytes (``store.line_seal_holds``, the one checker of a line's
seal) and only its leading ``_gate`` summary is decoded. Every line must hold its seal, name a
scheduled trial, carry that trial's identity and the manifest's seal, and number its attempts
from 1; what does not is a problem, named with its line. The decision
(``certlab_core.gate.decision``) is a pure function of what this returns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from attrs import define, field, frozen

from certlab_core.gate.manifest import Manifest
from certlab_core.gate.schedule import Identities
from certlab_core.gate.store import GATE_PREFIX, TRIAL_SCHEMA, gate_summary, iter_raw_line_bytes, line_seal_holds
from certlab_core.plugin.errors import InstrumentError

Outcome = Literal["success", "failure", "error"]
OUTCOMES: tuple[Outcome, ...] = ("success", "failure", "error")
MAX_ATTEMPTS = 2 + 3  # one --retry-infra retry and three re-runs after a lost worker (integrity.py tells them apart)


@frozen(slots=True)
class TrialSummary:
    """What the decision reads of a trial's attempt: its outcome and what the report and the stopping rule need."""

    attempt: int
    outcome: Outcome
    error: str | None = None  # an infrastructure error's message
    failure_mode: str | None = None
    fired: tuple[bool, ...] = ()  # whether each declared fault fired
    violations: int = 0  # how many contract violations the candidate's trial recorded


@define
class Trials:
    """The verified trial lines of a store: each trial's last attempt, how many attempts, and the problems found."""

    latest: dict[str, TrialSummary] = field(factory=dict)
    attempts: int = 0
    problems: list[str] = field(factory=list)


_DECODER = json.JSONDecoder()
_SCHEMA_MARK_BYTES = f'"schema":"{TRIAL_SCHEMA}"'.encode()
_GATE_PREFIX_BYTES = GATE_PREFIX.encode()
_SUMMARY_WINDOW = 1024  # bytes decoded to read a line's leading summary (more only when it is longer)
_NOT_JSON = "not JSON; the store is damaged or was edited by hand"
_NOT_TRIAL = f"not a {TRIAL_SCHEMA} record"
_SEAL_BROKEN = "the seal does not match the content; the record was edited after it was written"

Observer = Callable[[int, "str | bytes", "dict[str, Any] | None"], None]
"""Called with each non-empty line's number, its raw text or bytes, and its verified summary (None when refused)."""


def read_summaries(
    manifest: Manifest,
    path: Path,
    observer: SplitObserver | None = None,
    workers: int = 2,
    least: int = 1 << 20,
    meanwhile: Callable[[], object] | None = None,
) -> Trials:
    """Every line of the trials.jsonl at ``path`` verified, and each trial's last attempt: the one way to read a store.

    The lines are split at a newline into ``workers`` parts of about even size: the first is
    read here, the others in forked children, each line by one process, and the parts are
    merged in file order; what spans them (duplicates, retries) is checked here. A store
    smaller than ``least`` bytes is read in one pass here, and so is any store when ``workers``
    is 1. ``observer`` sees the first part itself and each other part in a fresh copy
    (``fresh``), merged back in order (``absorb``). ``meanwhile``, when given, is called once
    the first part is read and before the others are awaited (work that would otherwise follow
    the read). A worker that fails is an instrument error.
    """
    from certlab_core.sdk.forking import ChildFailure, ForkPool

    ranges = _line_ranges(path, workers, least)
    if len(ranges) < 2:
        trials = verify_lines(manifest, iter_raw_line_bytes(path), None if observer is None else observer.observe)
        if meanwhile is not None:
            meanwhile()
        return trials

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


def verify_lines(manifest: Manifest, raw_lines: Iterable[str | bytes], observe: Observer | None = None) -> Trials:
    """:func:`read_summaries` over lines already in hand (text or bytes), in one pass here.

    Lines are read one at a time and only a typed summary of each is kept, so lines of any
    number are checked in little memory. A line given as bytes has its seal checked over
    those bytes and only its summary decoded.
    """
    problems, entries = _scan(manifest, raw_lines, observe, 1)
    return _collect(problems, entries)


def _summary_of_bytes(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """A line's ``_gate`` summary, its seal checked over its bytes: the leading summary, or derived from the whole line.

    A line written before lines led with their summary is decoded whole and its summary derived.
    """
    if not raw.startswith(_GATE_PREFIX_BYTES):
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return None, _NOT_JSON
        if not isinstance(line, dict) or line.get("schema") != TRIAL_SCHEMA:
            return None, _NOT_TRIAL
        seal = line.get("seal")
        if not isinstance(seal, str) or not line_seal_holds(raw, seal):
            return None, _SEAL_BROKEN
        return gate_summary(line), None
    if _SCHEMA_MARK_BYTES not in raw:
        return None, _NOT_TRIAL
    if not line_seal_holds(raw):
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
    """:func:`_summary_of_bytes` of a line given as text."""
    try:
        return _summary_of_bytes(raw.encode("utf-8"))
    except UnicodeEncodeError:
        return None, _NOT_JSON


def _kept(line: Mapping[str, Any], attempt: int, outcome: Outcome, shared: dict[Any, Any]) -> TrialSummary:
    """The typed summary of a verified line, one object for every line that summarises alike.

    A store holds few distinct summaries (an outcome, a failure mode, which faults fired), so
    sharing them builds few objects, and a worker's part pickles each once (pickle's memo sends
    the rest as references): sending 50,000 separate summaries cost more than reading the part.
    """
    mode, fired, error = line.get("failure_mode"), line.get("fired"), line.get("error")
    violations = line.get("violations")
    if not isinstance(violations, int) or isinstance(violations, bool):
        violations = int(bool(violations))  # a summary edited by hand: only whether there were any counts
    flags = tuple(flag is True for flag in fired) if isinstance(fired, list) else ()
    key = (
        attempt,
        outcome,
        None if error is None else str(error),
        mode if isinstance(mode, str) or mode is None else str(mode),
        flags,
        violations,
    )
    summary: TrialSummary | None = shared.get(key)
    if summary is None:
        summary = shared[key] = TrialSummary(*key)
    return summary


_Entry = tuple[int, str, int, TrialSummary]  # line number, trial id, attempt, its summary


def _scan(
    manifest: Manifest, raw_lines: Iterable[str | bytes], observe: Observer | None, first: int
) -> tuple[list[tuple[int, str]], list[_Entry]]:
    """The per-line checks of :func:`verify_lines` over lines numbered from ``first``: problems and kept attempts."""
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
        outcome = line.get("outcome")
        if outcome not in OUTCOMES:
            problems.append(
                (
                    number,
                    f"trials.jsonl line {number}: {trial_id}: outcome {line.get('outcome')!r} "
                    f"is not one of {', '.join(OUTCOMES)}",
                )
            )
            continue
        entries.append((number, trial_id, attempt, _kept(line, attempt, outcome, shared)))
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
    by_trial: dict[str, tuple[int, TrialSummary] | dict[int, TrialSummary]] = {}
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
            if seen[n].outcome != "error":
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
