"""Tool worlds: the record, a trial's world, its oracle and its tools."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from attrs import field, frozen

from certlab_core.plugin.types.base import JsonObject, JsonValue, Record, Tool
from certlab_core.plugin.types.fields import json_map, tool_map


def _tuple(value: Sequence[Any] | None) -> tuple[Any, ...]:
    return tuple(value or ())


# --------------------------------------------------------------------------- tool worlds and faults


@frozen
class OracleVerdict(Record):
    """An oracle's judgement of a tool world's final state; the agent's own account never enters it."""

    passed: bool
    detail: str = ""


class Snapshot(Protocol):
    """A built world's final state, as JSON-like data for the oracle."""

    def __call__(self) -> JsonValue: ...


class DecisionModel(Protocol):
    """A world's answer on the decision channel: at least ``choice`` and ``confidence``."""

    def __call__(self, question: str, options: tuple[str, ...], rng: random.Random, /) -> JsonObject: ...


@frozen
class WorldInstance(Record):
    """One built world, for one trial: what the agent is told, its tools, and the state to judge.

    ``task`` is what the agent receives as its first argument (JSON-able); ``tools`` maps each
    tool name to a function called with keyword arguments (a refusal raises one of the
    boundary exceptions of ``certlab_core.gate.boundary``, e.g. ``ToolRejected``; any other
    exception means the world is broken); ``snapshot()`` returns the final state as JSON-able
    data for the oracle; ``model(question, options, rng)``, when given, answers the decision
    channel (``tools.decide``) with a mapping holding at least ``choice`` and ``confidence``.
    """

    task: JsonObject = field(converter=json_map)
    tools: Mapping[str, Tool] = field(converter=tool_map, eq=False, repr=False)
    snapshot: Snapshot = field(eq=False, repr=False)
    model: DecisionModel | None = field(default=None, eq=False, repr=False)


class Build(Protocol):
    """A world's ``build``: a fresh instance for one trial, deterministic in ``(task_input, seed)``."""

    def __call__(self, task_input: JsonObject, seed: int, /) -> WorldInstance: ...


class Oracle(Protocol):
    """A world's ``oracle``: judge the final state (never the agent's account), in its own process."""

    def __call__(self, task: JsonObject, snapshot: JsonValue, /) -> OracleVerdict: ...


class CheckInput(Protocol):
    """Refuse a bad task input by raising ``UsageError``."""

    def __call__(self, task_input: JsonObject, /) -> None: ...


@frozen
class ToolWorld(Record):
    """A tool world: ``build(task_input, seed) -> WorldInstance`` and ``oracle(task, snapshot) -> OracleVerdict``.

    ``tools`` names every tool a built instance offers (faults and contracts are checked
    against it before anything runs); ``decisions`` says whether instances answer the decision
    channel (the tool name ``decide``). ``check_input(task_input)``, when given, refuses a bad
    task input by raising UsageError. ``build`` must be deterministic in ``(task_input, seed)``.
    """

    name: str
    description: str
    tools: tuple[str, ...] = field(converter=_tuple)
    build: Build = field(eq=False, repr=False)
    oracle: Oracle = field(eq=False, repr=False)
    decisions: bool = False
    check_input: CheckInput | None = field(default=None, eq=False, repr=False)
