"""Recorded boundary events: how two trials' events compare, where they part ways, and a failure's fingerprint.

Events are the ``events`` of a trial line (see docs/run-store.md). Two events are the same
when everything but their ``seq`` is equal as JSON values: the same call (kind, name,
arguments) and the same answer (status, result or error, and the fault that altered it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attrs import frozen

from certlab_core.canonical import canonical_json

END_OF_CALLS = "end of calls"


def event_key(event: Mapping[str, Any]) -> bytes:
    """The canonical form of an event without its ``seq``: equal keys mean the same crossing."""
    return canonical_json({k: v for k, v in event.items() if k != "seq"})


def common_prefix(events_a: Sequence[Mapping[str, Any]], events_b: Sequence[Mapping[str, Any]]) -> int:
    """How many leading events the two recordings share."""
    shared = 0
    for left, right in zip(events_a, events_b, strict=False):
        # At the same position both recordings carry the same seq, so whole events compare.
        if left != right and _without_seq(left) != _without_seq(right):
            break
        shared += 1
    return shared


def _without_seq(event: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "seq"}


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (for records read from disk)."""
    return value if isinstance(value, Mapping) else {}


def listed(value: Any) -> list[Mapping[str, Any]]:
    """The mappings in ``value`` when it is a list, else none (for records read from disk)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def fault_name(trial: Mapping[str, Any], index: int | None) -> str | None:
    """The declared fault ``index`` of the trial's condition as ``fault on tool``, or None."""
    if index is None:
        return None
    for declared in listed(trial.get("faults")):
        if declared.get("index") == index:
            return f"{declared.get('fault')} on {declared.get('tool')}"
    return f"fault #{index}"


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


def describe_call(event: Mapping[str, Any] | None) -> str:
    """An event as the call it was: ``reserve(order='o-1', qty=2)``; ``end of calls`` for None."""
    if event is None:
        return END_OF_CALLS
    args = mapping(event.get("args"))
    shown = ", ".join(f"{key}={value!r}" for key, value in sorted(args.items(), key=lambda item: str(item[0])))
    return f"{event.get('name')}({shown})"


@frozen
class FaultBefore:
    """The injected fault nearest before a split: the event it altered and how far before the split."""

    seq: int
    fault: str
    events_before_split: int


def fault_before(trial: Mapping[str, Any], events: Sequence[Mapping[str, Any]], split: int) -> FaultBefore | None:
    """The last event before position ``split`` that a fault altered, if any."""
    for position in range(min(split, len(events)) - 1, -1, -1):
        index = events[position].get("fault")
        if index is not None:
            seq = events[position].get("seq")
            return FaultBefore(
                seq=seq if isinstance(seq, int) else position,
                fault=fault_name(trial, index) or "?",
                events_before_split=split - position,
            )
    return None


def first_error_position(events: Sequence[Mapping[str, Any]]) -> int:
    """The position of the first event answered with an error; past the end when there is none."""
    for position, event in enumerate(events):
        if event.get("status") == "error":
            return position
    return len(events)


def failure_fingerprint(trial: Mapping[str, Any], twin: Mapping[str, Any] | None) -> tuple[str, str]:
    """A failed trial's fingerprint: its failure mode plus its first diverging event, as (fingerprint, event label).

    The first diverging event is where the trial parts ways with its twin (the other arm's
    trial of the same condition and index, which saw the same seed and faults) when the twin
    succeeded; otherwise the first event answered with an error, or the end of its calls.
    An injected fault on the event just before the split is noted, since it is usually the cause.
    """
    events: Sequence[Mapping[str, Any]] = trial.get("events") or ()
    if twin is not None and twin.get("outcome") == "success":
        split = common_prefix(events, twin.get("events") or ())
        label = f"vs passing twin: {describe_event(trial, events[split] if split < len(events) else None)}"
    else:
        split = first_error_position(events)
        if split < len(events):
            label = f"first error: {describe_event(trial, events[split])}"
        elif events:
            label = f"no error; last call: {describe_event(trial, events[-1])}"
        else:
            label = "no calls"
    if 0 < split <= len(events) and events[split - 1].get("fault") is not None:
        label += f", right after {describe_event(trial, events[split - 1])}"
    mode = trial.get("failure_mode") or "unknown"
    return f"{mode} @ {label}", label
