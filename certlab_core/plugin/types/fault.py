"""Faults: the record, where a fault fires and what it does to a call."""

from __future__ import annotations

import random
from typing import Literal, Protocol, get_args

from attrs import field, frozen

from certlab_core.plugin.types.base import JsonObject, JsonValue, Record
from certlab_core.plugin.types.fields import json_map, one_of

FaultTarget = Literal["tool", "decision", "model", "any"]
#: What a call crossing a boundary is: a world's tool, the decision channel, or a model API call.
CallKind = Literal["tool", "decision", "model"]
FAULT_TARGETS: tuple[FaultTarget, ...] = get_args(FaultTarget)
CALL_KINDS: tuple[CallKind, ...] = get_args(CallKind)


@frozen
class FaultContext(Record):
    """What a fault sees of one call crossing the tool boundary, before the call runs.

    ``kind`` is ``tool`` or ``decision``; ``call_number`` counts the calls to ``name`` in this
    trial (1-based, this one included); ``seq`` is the call's position among all events;
    ``fired`` is how many times this declared fault has already fired in this trial;
    ``params`` are the declaration's parameters; ``rng`` is a ``random.Random`` seeded from
    the trial's seed and the fault's position, so a fault that draws is reproducible.
    """

    kind: CallKind = field(validator=one_of(CALL_KINDS))
    name: str
    args: JsonObject = field(converter=json_map)
    seq: int
    call_number: int
    fired: int
    params: JsonObject = field(converter=json_map)
    rng: random.Random = field(eq=False, repr=False)


class Transform(Protocol):
    """What a fault makes of a call's result before the agent receives it."""

    def __call__(self, result: JsonValue, /) -> JsonValue: ...


@frozen
class FaultEffect(Record):
    """What a fault does to one call.

    - ``error``: raise this boundary exception to the agent (``ToolTimeout``, ``ToolError``,
      ``ToolRejected``, ``ToolUnavailable`` or ``ModelUnavailable``) with ``message``;
      with ``execute`` the real call runs first and its effect stands (a reply lost after
      the work was done), otherwise the real call never runs;
    - else the real call runs and ``transform(result)``, when given, replaces what the
      agent receives (an empty result, a low confidence);
    - ``delay_s``: wait this long before anything else (latency).
    """

    error: str | None = None
    message: str = ""
    execute: bool = False
    transform: Transform | None = field(default=None, eq=False, repr=False)
    delay_s: float = 0.0


class Inject(Protocol):
    """A fault's ``inject``: its effect on this call, or None when it does not fire."""

    def __call__(self, context: FaultContext, /) -> FaultEffect | None: ...


class CheckParams(Protocol):
    """Refuse a fault declaration's bad parameters by raising ``UsageError``."""

    def __call__(self, params: JsonObject, /) -> None: ...


@frozen
class Fault(Record):
    """An injectable fault: ``inject(context) -> FaultEffect | None`` (None: it does not fire on this call).

    ``target`` says which calls it may be declared on: ``tool`` (a world's tools),
    ``decision`` (the decision channel, ``decide``), ``model`` (an agent CLI's calls to its
    model API, through the model boundary) or ``any``. ``check_params(params)``,
    when given, refuses bad parameters by raising UsageError before anything runs.
    """

    name: str
    description: str
    inject: Inject = field(eq=False, repr=False)
    target: FaultTarget = field(default="tool", validator=one_of(FAULT_TARGETS))
    check_params: CheckParams | None = field(default=None, eq=False, repr=False)
