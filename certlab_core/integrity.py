"""Verification of a run store's attempts: a record is written once, and a retry only follows an infrastructure error.

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from certlab_core.canonical import seal_of

TRIAL_SCHEMA = "certlab.trial/1"
MAX_ATTEMPTS = 2
INFRA_KINDS = (
    "world-broken:",
    "injector-broken:",
    "oracle-broken:",
    "infra-exit-code:",
    "runner-broken:",
    "grader-broken:",
)


def _parsed(raw_lines: Sequence[str]) -> list[tuple[int, dict[str, Any]]]:
    lines: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(document, dict) and document.get("schema") == TRIAL_SCHEMA:
            lines.append((number, document))
    return lines


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


def attempt_problems(raw_lines: Sequence[str], infra_exit_codes: Sequence[int] = (75,)) -> list[str]:
    """Every way the attempts of ``trials.jsonl`` break write-once and retry-only-after-error, one line each."""
    problems: list[str] = []
    by_trial: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
    for number, line in _parsed(raw_lines):
        where = f"trials.jsonl line {number}"
        if line.get("seal") != seal_of(line):
            problems.append(f"{where}: its seal does not hold: the record was changed after it was written")
            continue
        trial_id, attempt = line.get("id"), line.get("attempt")
        if not isinstance(trial_id, str) or not isinstance(attempt, int) or isinstance(attempt, bool):
            problems.append(f"{where}: no trial id or attempt number")
            continue
        by_trial.setdefault(trial_id, []).append((attempt, number, line))
    for trial_id, attempts in sorted(by_trial.items()):
        numbers = [attempt for attempt, _n, _l in attempts]
        duplicated = sorted({n for n in numbers if numbers.count(n) > 1})
        if duplicated:
            problems.append(f"{trial_id}: attempt {duplicated[0]} is written more than once; a record is written once")
            continue
        if sorted(numbers) != list(range(1, len(numbers) + 1)):
            problems.append(
                f"{trial_id}: attempts {sorted(numbers)} do not run 1, 2, ... without a gap: an attempt was removed"
            )
            continue
        if len(numbers) > MAX_ATTEMPTS:
            problems.append(f"{trial_id}: {len(numbers)} attempts; an infrastructure error is retried once at most")
        if numbers != sorted(numbers):
            problems.append(f"{trial_id}: attempt {sorted(numbers)[-1]} was written before the attempt it retries")
        ordered = sorted(attempts, key=lambda item: item[0])
        first = ordered[0][2]
        for attempt, number, line in ordered[1:]:
            if (line.get("identity"), line.get("seed")) != (first.get("identity"), first.get("seed")):
                problems.append(f"{trial_id}: attempt {attempt} (line {number}) is not the same trial as attempt 1")
        for attempt, number, line in ordered[:-1]:
            reason = _retry_reason(line, infra_exit_codes)
            if reason is not None:
                problems.append(
                    f"{trial_id}: attempt {attempt + 1} retried attempt {attempt} (line {number}), but {reason}; "
                    "a retry is allowed only after an infrastructure error"
                )
    return problems


def verify_store(folder: Path) -> list[str]:
    """The attempt problems of a run store folder (its manifest gives the infrastructure exit codes)."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        codes = [c for c in manifest.get("infra_exit_codes", [75]) if isinstance(c, int)]
    except (OSError, ValueError, AttributeError):
        return [f"{folder / 'manifest.json'}: unreadable; the store cannot be verified"]
    try:
        raw_lines = (folder / "trials.jsonl").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return [f"{folder / 'trials.jsonl'}: unreadable; the store cannot be verified"]
    return attempt_problems(raw_lines, codes)
