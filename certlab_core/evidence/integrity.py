"""A run store's attempts checked: each written once, retried only after infra.

It reads the documented store format (``docs/run-store.md``) on its own: ``manifest.json``
for the infrastructure exit codes, and ``trials.jsonl`` line by line. For every trial the
attempts must be sealed, written once each, numbered 1, 2, ... without a gap, appended in
that order, at most :data:`MAX_ATTEMPTS`, and every attempt but the last must be an
infrastructure error that is one in fact (its error names a known kind, it carries no
failure mode, and it agrees with itself: an ``infra-exit-code`` error has an agent that
exited with one of the manifest's infrastructure codes, and a tool-world error other
than ``oracle-broken`` was not judged by the oracle). A store in which a failure was replaced by
a retry (the failure deleted, rewritten as an error, or the retry written before it) fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from certlab_core.sdk.canonical import seal_holds

TRIAL_SCHEMA = "certlab.trial/1"
MAX_ATTEMPTS = 2
WORKER_LOST = "worker-lost:"  # the machine running the attempt was lost: run again, not counted as its retry
MAX_WORKER_LOST = 3
INFRA_KINDS = (
    WORKER_LOST,
    "world-broken:",
    "injector-broken:",
    "oracle-broken:",
    "infra-exit-code:",
    "runner-broken:",
    "grader-broken:",
)


def _retry_reason(line: Mapping[str, Any], infra_exit_codes: Sequence[int]) -> str | None:
    """Why ``line`` cannot be an attempt that was retried (None when it is a true infrastructure error)."""
    if line.get("outcome") != "error":
        return f"it was a {line.get('outcome')!r}, not an infrastructure error"
    error = line.get("error")
    if not isinstance(error, str) or not error.startswith(INFRA_KINDS):
        return f"its error {error!r} names no infrastructure kind ({', '.join(k[:-1] for k in INFRA_KINDS)})"
    if line.get("failure_mode") is not None:
        return f"it also carries the failure mode {line.get('failure_mode')!r}"
    recorded_agent = line.get("agent")
    agent: Mapping[str, Any] = recorded_agent if isinstance(recorded_agent, dict) else {}
    if error.startswith("infra-exit-code:") and agent.get("exit_code") not in infra_exit_codes:
        return f"it claims an infrastructure exit code, but the agent exited with {agent.get('exit_code')!r}"
    # A tool-world trial judged by its oracle ran to the end (a coding arm's "oracle" is the grader
    # chain's summary, recorded even when a grader broke, so it proves nothing there).
    judged = isinstance(line.get("oracle"), dict) and "grades" not in line
    if judged and not error.startswith("oracle-broken:"):
        return "the oracle judged it, so it ran to the end: it was no infrastructure error"
    return None


_Attempt = tuple[int, int, Any, Any, str | None]  # attempt, line number, identity, seed, why it cannot be retried


def _parsed_line(raw: str | bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) and document.get("schema") == TRIAL_SCHEMA else None


class AttemptLedger:
    """The attempts of a store, taken one line at a time, kept as a few values per attempt (never the lines).

    ``add`` takes each line with, when the caller already verified it, its ``_gate`` summary
    (docs/run-store.md), whose seal was checked over the line's raw text: then only an
    infrastructure error's line is parsed (its retry needs the agent and the oracle). A line
    without a verified summary is parsed whole and its seal checked on its content.
    """

    def __init__(self, infra_exit_codes: Sequence[int] = (75,)) -> None:
        self.infra_exit_codes = tuple(infra_exit_codes)
        self.problems: list[str] = []
        self._by_trial: dict[str, list[_Attempt]] = {}
        self._lost: dict[str, int] = {}  # attempts lost with their worker, per trial

    def add(self, number: int, raw: str | bytes, summary: Mapping[str, Any] | None = None) -> None:
        where = f"trials.jsonl line {number}"
        line: Mapping[str, Any] | None = summary
        if line is None:
            document = _parsed_line(raw)
            if document is None:
                return
            if not seal_holds(document):
                self.problems.append(f"{where}: its seal does not hold: the record was changed after it was written")
                return
            line = document
        trial_id, attempt = line.get("id"), line.get("attempt")
        if not isinstance(trial_id, str) or not isinstance(attempt, int) or isinstance(attempt, bool):
            self.problems.append(f"{where}: no trial id or attempt number")
            return
        reason: str | None
        if line.get("outcome") != "error":
            reason = f"it was a {line.get('outcome')!r}, not an infrastructure error"
        else:
            whole = line if summary is None else _parsed_line(raw)
            reason = _retry_reason(whole if whole is not None else line, self.infra_exit_codes)
            if reason is None and str((whole or line).get("error")).startswith(WORKER_LOST):
                self._lost[trial_id] = self._lost.get(trial_id, 0) + 1
        entry = (attempt, number, line.get("identity"), line.get("seed"), reason)
        self._by_trial.setdefault(trial_id, []).append(entry)

    def observe(self, number: int, raw: str | bytes, summary: Mapping[str, Any] | None) -> None:
        """:meth:`add`, as an observer of the decision's pass (``certlab_core.gate.summaries.read_summaries``)."""
        self.add(number, raw, summary)

    def fresh(self) -> AttemptLedger:
        """An empty ledger with the same exit codes, for a part of the lines read elsewhere."""
        return AttemptLedger(self.infra_exit_codes)

    def absorb(self, other: AttemptLedger) -> None:
        """Take the attempts of a ledger that read the lines after those taken here."""
        self.problems.extend(other.problems)
        for trial_id, attempts in other._by_trial.items():
            self._by_trial.setdefault(trial_id, []).extend(attempts)
        for trial_id, lost in other._lost.items():
            self._lost[trial_id] = self._lost.get(trial_id, 0) + lost

    def finish(self) -> list[str]:
        """Every way the attempts taken break write-once and retry-only-after-error, one line each."""
        problems = list(self.problems)
        for trial_id, attempts in sorted(self._by_trial.items()):
            problems.extend(_trial_problems(trial_id, attempts, self._lost.get(trial_id, 0)))
        return problems


def _trial_problems(trial_id: str, attempts: list[_Attempt], lost: int = 0) -> list[str]:
    problems: list[str] = []
    numbers = [entry[0] for entry in attempts]
    if len(numbers) == 1 and numbers[0] == 1:
        return problems
    duplicated = sorted({n for n in numbers if numbers.count(n) > 1})
    if duplicated:
        return [f"{trial_id}: attempt {duplicated[0]} is written more than once; a record is written once"]
    if sorted(numbers) != list(range(1, len(numbers) + 1)):
        return [f"{trial_id}: attempts {sorted(numbers)} do not run 1, 2, ... without a gap: an attempt was removed"]
    if len(numbers) - min(lost, MAX_WORKER_LOST) > MAX_ATTEMPTS:  # a lost worker's attempts are not its retry
        problems.append(f"{trial_id}: {len(numbers)} attempts; an infrastructure error is retried once at most")
    if numbers != sorted(numbers):
        problems.append(f"{trial_id}: attempt {sorted(numbers)[-1]} was written before the attempt it retries")
    ordered = sorted(attempts, key=lambda item: item[0])
    first = ordered[0]
    for attempt, number, identity, seed, _reason in ordered[1:]:
        if (identity, seed) != (first[2], first[3]):
            problems.append(f"{trial_id}: attempt {attempt} (line {number}) is not the same trial as attempt 1")
    for attempt, number, _identity, _seed, reason in ordered[:-1]:
        if reason is not None:
            problems.append(
                f"{trial_id}: attempt {attempt + 1} retried attempt {attempt} (line {number}), but {reason}; "
                "a retry is allowed only after an infrastructure error"
            )
    return problems


def attempt_problems(raw_lines: Iterable[str | bytes], infra_exit_codes: Sequence[int] = (75,)) -> list[str]:
    """Every way the attempts of ``trials.jsonl`` break write-once and retry-only-after-error, one line each."""
    ledger = AttemptLedger(infra_exit_codes)
    for number, raw in enumerate(raw_lines, start=1):
        ledger.add(number, raw)
    return ledger.finish()


def infra_exit_codes_of(manifest: Mapping[str, Any]) -> list[int]:
    """The manifest document's infrastructure exit codes (75 when it names none)."""
    return [c for c in manifest.get("infra_exit_codes", [75]) if isinstance(c, int) and not isinstance(c, bool)]


def verify_store(folder: Path) -> list[str]:
    """The attempt problems of a run store folder (its manifest gives the infrastructure exit codes).

    trials.jsonl is streamed and split on newlines only (a record may hold U+2028 and kin).
    """
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        codes = infra_exit_codes_of(manifest)
    except (OSError, ValueError, AttributeError):
        return [f"{folder / 'manifest.json'}: unreadable; the store cannot be verified"]
    try:
        with (folder / "trials.jsonl").open("rb") as handle:
            return attempt_problems((raw[:-1] if raw.endswith(b"\n") else raw for raw in handle), codes)
    except OSError:
        return [f"{folder / 'trials.jsonl'}: unreadable; the store cannot be verified"]
