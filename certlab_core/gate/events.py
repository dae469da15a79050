"""Recorded boundary events: their marks and a failed trial's fingerprint.

Events are the ``events`` of a trial line (see docs/run-store.md). Two events are the same
crossing when everything but their ``seq`` is equal as JSON values: the same call (kind,
name, arguments) and the same answer (status, result or error, and the fault that altered
it); their boundary marks are then equal. How two recordings part ways, event by event, is
certlab-diagnosis's (``certlab diff``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

END_OF_CALLS = "end of calls"


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (for records read from disk)."""
    return value if isinstance(value, Mapping) else {}


def listed(value: Any) -> list[Mapping[str, Any]]:
    """The mappings in ``value`` when it is a list, else none (for records read from disk)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def describe_event(trial: Mapping[str, Any], event: Mapping[str, Any] | None) -> str:
    """One short label for an event, without its arguments: ``reserve -> error ToolTimeout (injected)``.

    A fault is marked as ``injected`` but not named: when two faults alter the same call the
    record names only the first, and a fingerprint must not change with a harmless one.
    """
    if event is None:
        return END_OF_CALLS
    name = str(event.get("name"))
    answer = f"error {mapping(event.get('error')).get('type', '?')}" if event.get("status") == "error" else "ok"
    return f"{name} -> {answer}" + (" (injected)" if event.get("fault") is not None else "")


MARK_DIGEST = 16  # hex characters of an event's digest in its boundary mark
_ERROR_FLAG, _FAULT_FLAG, _NO_FLAG = "e", "f", "-"


def boundary_mark(event: Any) -> str:
    """An event's compact mark, as a line's ``_marks`` records it (docs/run-store.md).

    ``DIGEST`` (the first 16 hex of the sha256 of the event's canonical JSON without its
    ``seq``: equal marks mean the same crossing), one flag for the answer (``e`` an error,
    ``-`` ok), one for a fault (``f`` a fault altered it, ``-`` none), then the event's
    label (:func:`describe_event`). A failure's fingerprint is computed from marks alone.
    """
    event_map = event if isinstance(event, Mapping) else {}
    body = {k: v for k, v in event.items() if k != "seq"} if isinstance(event, Mapping) else event
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:MARK_DIGEST]
    error = _ERROR_FLAG if event_map.get("status") == "error" else _NO_FLAG
    fault = _FAULT_FLAG if event_map.get("fault") is not None else _NO_FLAG
    return f"{digest}{error}{fault}{describe_event(event_map, event_map)}"


def boundary_marks(events: Any) -> list[str]:
    """The marks of a recording's events, in order (none when ``events`` is not a list)."""
    return [boundary_mark(event) for event in events] if isinstance(events, list | tuple) else []


def well_formed_marks(marks: Any) -> bool:
    """Whether a summary's ``boundary`` value is a list of marks (else the line's events are read)."""
    # map() keeps the per-mark checks in C: this runs for every line of a pair that holds a failure.
    return isinstance(marks, list) and (
        not marks or (set(map(type, marks)) == {str} and min(map(len, marks)) > MARK_DIGEST + 1)
    )


def _mark_label(mark: str) -> str:
    return mark[MARK_DIGEST + 2 :]


def fingerprint_of_marks(
    failure_mode: Any, marks: Sequence[str], passing_twin: Sequence[str] | None
) -> tuple[str, str]:
    """A failed trial's fingerprint from its boundary marks and, when its twin succeeded, the twin's marks.

    The same as :func:`failure_fingerprint` of the lines the marks were made from.
    """
    if passing_twin is not None:
        split = 0
        for left, right in zip(marks, passing_twin, strict=False):
            if left != right:
                break
            split += 1
        label = f"vs passing twin: {_mark_label(marks[split]) if split < len(marks) else END_OF_CALLS}"
    else:
        split = next((p for p, mark in enumerate(marks) if mark[MARK_DIGEST] == _ERROR_FLAG), len(marks))
        if split < len(marks):
            label = f"first error: {_mark_label(marks[split])}"
        elif marks:
            label = f"no error; last call: {_mark_label(marks[-1])}"
        else:
            label = "no calls"
    if 0 < split <= len(marks) and marks[split - 1][MARK_DIGEST + 1] == _FAULT_FLAG:
        label += f", right after {_mark_label(marks[split - 1])}"
    mode = failure_mode or "unknown"
    return f"{mode} @ {label}", label


def failure_fingerprint(trial: Mapping[str, Any], twin: Mapping[str, Any] | None) -> tuple[str, str]:
    """A failed trial's fingerprint: its failure mode plus its first diverging event, as (fingerprint, event label).

    The first diverging event is where the trial parts ways with its twin (the other arm's
    trial of the same condition and index, which saw the same seed and faults) when the twin
    succeeded; otherwise the first event answered with an error, or the end of its calls.
    An injected fault on the event just before the split is noted, since it is usually the cause.
    Events are compared by their boundary marks (:func:`boundary_mark`), as the report does
    from the lines' summaries.
    """
    passing = twin is not None and twin.get("outcome") == "success"
    return fingerprint_of_marks(
        trial.get("failure_mode"),
        boundary_marks(trial.get("events") or []),
        boundary_marks(twin.get("events") or []) if passing and twin is not None else None,
    )
