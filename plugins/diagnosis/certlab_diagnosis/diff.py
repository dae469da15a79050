"""Where two trials part: their first divergent event, the fault before it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from attrs import frozen

from certlab_core.sdk import canonical

RESULT_SHOWN = 160
END_OF_CALLS = "end of calls"


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (a trial line is read from disk)."""
    return value if isinstance(value, Mapping) else {}


def listed(value: Any) -> list[Mapping[str, Any]]:
    """The mappings in ``value`` when it is a list, else none (a trial line is read from disk)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def event_key(event: Mapping[str, Any]) -> bytes:
    """The canonical form of an event without its ``seq``: equal keys mean the same crossing."""
    return canonical.canonical_json({k: v for k, v in event.items() if k != "seq"})


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


def fault_name(trial: Mapping[str, Any], index: int | None) -> str | None:
    """The declared fault ``index`` of the trial's condition as ``fault on tool``, or None."""
    if index is None:
        return None
    for declared in listed(trial.get("faults")):
        if declared.get("index") == index:
            return f"{declared.get('fault')} on {declared.get('tool')}"
    return f"fault #{index}"


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


@frozen
class TrialDiff:
    """Two trials compared event by event.

    ``common_prefix`` is how many leading events they share; ``event_a`` and ``event_b`` are
    each side's event at the split (None where a recording ended there); ``fault_before`` is
    the injected fault nearest before the split on the first trial's side (the shared prefix
    is the same on both), if any.
    """

    trial_a: Mapping[str, Any]
    trial_b: Mapping[str, Any]
    common_prefix: int
    event_a: Mapping[str, Any] | None
    event_b: Mapping[str, Any] | None
    fault_before: FaultBefore | None

    @property
    def identical(self) -> bool:
        return self.event_a is None and self.event_b is None


def diff_trials(trial_a: Mapping[str, Any], trial_b: Mapping[str, Any]) -> TrialDiff:
    events_a = listed(trial_a.get("events"))
    events_b = listed(trial_b.get("events"))
    shared = common_prefix(events_a, events_b)
    return TrialDiff(
        trial_a=trial_a,
        trial_b=trial_b,
        common_prefix=shared,
        event_a=events_a[shared] if shared < len(events_a) else None,
        event_b=events_b[shared] if shared < len(events_b) else None,
        fault_before=fault_before(trial_a, events_a, shared),
    )


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= RESULT_SHOWN else text[: RESULT_SHOWN - 1] + "…"


def describe_crossing(trial: Mapping[str, Any], event: Mapping[str, Any] | None) -> str:
    """An event as call and answer (``reserve(order='o-1') -> error ToolTimeout: ...``); None: how the trial ended."""
    if event is None:
        agent = mapping(trial.get("agent"))
        ending = f"agent {agent.get('status', '?')}"
        if agent.get("detail"):
            ending += f": {agent['detail']}"
        return f"end of calls ({ending})"
    if event.get("status") == "error":
        error = mapping(event.get("error"))
        answer = f"error {error.get('type')}: {error.get('message')}"
    else:
        answer = f"ok {_short(event.get('result'))}"
    fault = fault_name(trial, event.get("fault"))
    return f"{describe_call(event)} -> {answer}" + (f"   [fault: {fault}]" if fault else "")


def _outcome(trial: Mapping[str, Any]) -> str:
    outcome = str(trial.get("outcome"))
    if outcome == "failure":
        return f"failure: {trial.get('failure_mode')}"
    if outcome == "error":
        return f"error: {trial.get('error')}"
    return outcome


def render_diff(diff: TrialDiff, all_steps: bool = False) -> str:
    a, b = diff.trial_a, diff.trial_b
    id_a, id_b = str(a.get("id")), str(b.get("id"))
    width = max(len(id_a), len(id_b))
    lines = [
        f"A {id_a} ({_outcome(a)}): {len(listed(a.get('events')))} events",
        f"B {id_b} ({_outcome(b)}): {len(listed(b.get('events')))} events",
        f"common prefix: {diff.common_prefix} event(s)",
    ]
    if all_steps:
        lines.append("")
        for position, event in enumerate(listed(a.get("events"))[: diff.common_prefix]):
            lines.append(f"  = #{position:<3} {describe_crossing(a, event)}")
    if diff.identical:
        lines.append("the two recordings are identical")
    else:
        lines.append(f"first divergence at event #{diff.common_prefix}:")
        lines.append(f"  A {id_a:<{width}}  {describe_crossing(a, diff.event_a)}")
        lines.append(f"  B {id_b:<{width}}  {describe_crossing(b, diff.event_b)}")
    # Identical recordings have no split: the fault named is the last one, counted back from their end.
    mark, split = ("last injected fault", "the end") if diff.identical else ("injected fault before it", "the split")
    if diff.fault_before is not None:
        before = diff.fault_before
        distance = (
            f"right before {split}"
            if before.events_before_split == 1
            else (f"{before.events_before_split} events before {split}")
        )
        lines.append(f"{mark}: {before.fault} at event #{before.seq} ({distance})")
    else:
        lines.append(f"{mark}: none")
    if all_steps and not diff.identical:
        for label, trial in (("A", a), ("B", b)):
            rest = listed(trial.get("events"))[diff.common_prefix :]
            lines.append(f"after the split, {label} {trial.get('id')}:")
            lines.extend(
                f"  {label} #{diff.common_prefix + i:<3} {describe_crossing(trial, e)}" for i, e in enumerate(rest)
            )
            lines.append(f"  {label} {describe_crossing(trial, None)}")
    return "\n".join(lines) + "\n"


def same_recording(events_a: Sequence[Mapping[str, Any]], events_b: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two event lists are the same crossings in the same order."""
    return len(events_a) == len(events_b) and all(
        event_key(x) == event_key(y) for x, y in zip(events_a, events_b, strict=True)
    )
