"""The tool boundary, an agent's only way to tools: records, budgets, faults.

An agent receives a :class:`Tools` and calls ``tools.call(name, **args)`` (and, when the world
has a decision channel, ``tools.decide(question, options)``). Each crossing becomes one event
(see docs/run-store.md); results cross as JSON copies, so an agent never holds a reference
into the world's state. The exceptions below are the closed set an agent may receive.
"""

from __future__ import annotations

import inspect
import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attrs import define, field

from certlab_core.plugin.exceptions import (
    BoundaryBroken,
    BudgetExceeded,
    ModelUnavailable,
    ToolError,
    ToolRejected,
    ToolTimeout,
    ToolUnavailable,
)
from certlab_core.plugin.types.fault import CallKind, Fault, FaultContext, FaultEffect
from certlab_core.plugin.types.tool_world import WorldInstance

BOUNDARY_ERRORS: dict[str, type[BaseException]] = {
    cls.__name__: cls
    for cls in (ToolError, ToolRejected, ToolTimeout, ToolUnavailable, ModelUnavailable, BudgetExceeded)
}
FAULT_ERRORS = ("ToolError", "ToolRejected", "ToolTimeout", "ToolUnavailable", "ModelUnavailable")
DECIDE = "decide"
MAX_TEXT = 2000


def to_json(value: Any, depth: int = 0) -> Any:
    """A JSON-able copy of ``value``: tuples become lists, keys strings, anything else its ``repr``."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > 50:
        return repr(value)[:MAX_TEXT]
    if isinstance(value, Mapping):
        return {str(k): to_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v, depth + 1) for v in value]
    return repr(value)[:MAX_TEXT]


def _copy(value: Any) -> Any:
    """A deep, JSON-shaped copy (what the agent receives, exactly what is recorded)."""
    return json.loads(json.dumps(value))


def error_type_name(error: BaseException) -> str:
    """The closed-set name for a tool's exception: its own class if listed, else its nearest listed base."""
    for cls in type(error).__mro__:
        if cls.__name__ in BOUNDARY_ERRORS and BOUNDARY_ERRORS[cls.__name__] is cls:
            return cls.__name__
    return "ToolError"


_SIGNATURES: dict[Any, inspect.Signature | None] = {}


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    """A tool's signature, cached by its code and defaults (a world builds new closures for every trial)."""
    code = getattr(fn, "__code__", None)
    key = (code, getattr(fn, "__defaults__", None), repr(getattr(fn, "__kwdefaults__", None))) if code else None
    if key is not None and key in _SIGNATURES:
        return _SIGNATURES[key]
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    if key is not None:
        _SIGNATURES[key] = signature
    return signature


@define
class DeclaredFault:
    """One fault declaration of a condition, live in one trial: what it targets and where it fired."""

    index: int
    name: str
    fault: Fault
    tool: str
    on_calls: tuple[int, ...] | None  # None: every call
    params: Mapping[str, Any]
    rng: random.Random
    fired_at: list[int] = field(factory=list)

    def matches(self, name: str, call_number: int) -> bool:
        return self.tool == name and (self.on_calls is None or call_number in self.on_calls)

    def summary(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "fault": self.name,
            "tool": self.tool,
            "fired": bool(self.fired_at),
            "fired_at": list(self.fired_at),
        }


@define
class Budgets:
    """The limits of one trial: tool calls, model steps and seconds (None: no limit)."""

    tool_calls: int | None = None
    model_steps: int | None = None
    seconds: float | None = None


class Boundary:
    """Records, limits and perturbs every call an agent makes to one world instance."""

    def __init__(
        self,
        world: WorldInstance,
        faults: Sequence[DeclaredFault] = (),
        budgets: Budgets | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.world = world
        self.faults = list(faults)
        self.budgets = budgets or Budgets()
        self.clock = clock
        self.started = clock()
        self.model_rng = random.Random(f"{seed}/model")
        self.events: list[dict[str, Any]] = []
        self.by_tool: dict[str, int] = {}
        self.tool_calls = 0
        self.model_steps = 0
        self.budget_exceeded: str | None = None
        self.broken: str | None = None
        self._signatures: dict[str, inspect.Signature | None] = {}

    # ------------------------------------------------------------------ the record

    def counts(self) -> dict[str, Any]:
        return {
            "tool_calls": self.tool_calls,
            "model_steps": self.model_steps,
            "by_tool": dict(sorted(self.by_tool.items())),
        }

    def fault_summaries(self) -> list[dict[str, Any]]:
        return [fault.summary() for fault in self.faults]

    def _event(
        self,
        kind: str,
        name: str,
        args: Any,
        result: Any = None,
        error: tuple[str, str] | None = None,
        fault: int | None = None,
        executed: bool = True,
    ) -> dict[str, Any]:
        event: dict[str, Any] = {
            "seq": len(self.events),
            "kind": kind,
            "name": name,
            "args": args,
            "status": "ok" if error is None else "error",
            "result": result if error is None else None,
            "error": None if error is None else {"type": error[0], "message": error[1]},
            "fault": fault,
        }
        if not executed:
            event["executed"] = False
        self.events.append(event)
        return event

    def _broken(self, line: str) -> BoundaryBroken:
        self.broken = self.broken or line
        return BoundaryBroken(self.broken)

    # ------------------------------------------------------------------ budgets

    def _over_budget(self, kind: str) -> str | None:
        if self.budgets.seconds is not None and self.clock() - self.started > self.budgets.seconds:
            return "seconds"
        if kind == "tool" and self.budgets.tool_calls is not None and self.tool_calls >= self.budgets.tool_calls:
            return "tool_calls"
        if kind == "decision" and self.budgets.model_steps is not None and self.model_steps >= self.budgets.model_steps:
            return "model_steps"
        return None

    # ------------------------------------------------------------------ crossing

    def _check_arguments(self, name: str, fn: Callable[..., Any], args: Mapping[str, Any]) -> str | None:
        if name not in self._signatures:
            self._signatures[name] = _signature(fn)
        signature = self._signatures[name]
        if signature is None:
            return None
        try:
            signature.bind(**args)
        except TypeError as error:
            return f"bad arguments for {name}: {error}"
        return None

    def _effects(
        self, kind: CallKind, name: str, args: Any, seq: int, call_number: int
    ) -> list[tuple[int, FaultEffect]]:
        fired: list[tuple[int, FaultEffect]] = []
        for declared in self.faults:
            if not declared.matches(name, call_number):
                continue
            context = FaultContext(
                kind=kind,
                name=name,
                args=args,
                seq=seq,
                call_number=call_number,
                fired=len(declared.fired_at),
                params=declared.params,
                rng=declared.rng,
            )
            try:
                effect = declared.fault.inject(context)
            except Exception as error:
                raise self._broken(
                    f"injector-broken: fault {declared.name} raised {type(error).__name__}: {error}"
                ) from None
            if effect is None:
                continue
            if not isinstance(effect, FaultEffect):
                raise self._broken(
                    f"injector-broken: fault {declared.name} returned {type(effect).__name__}, not FaultEffect or None"
                )
            if effect.error is not None and effect.error not in FAULT_ERRORS:
                raise self._broken(
                    f"injector-broken: fault {declared.name} asks for error {effect.error!r}; "
                    f"use one of {', '.join(FAULT_ERRORS)}"
                )
            declared.fired_at.append(seq)
            fired.append((declared.index, effect))
        return fired

    def cross(self, kind: CallKind, name: str, raw_args: Mapping[str, Any], run: Callable[[], Any]) -> Any:
        """One call: budgets, faults, the real call (``run``), the record; returns what the agent receives."""
        if self.broken:
            raise BoundaryBroken(self.broken)
        args = to_json(raw_args)
        over = self._over_budget(kind)
        if over is not None:
            self.budget_exceeded = self.budget_exceeded or over
            message = f"the {over.replace('_', ' ')} budget is spent"
            self._event(kind, name, args, error=("BudgetExceeded", message), executed=False)
            raise BudgetExceeded(message)
        seq = len(self.events)
        if kind == "tool":
            self.tool_calls += 1
        else:
            self.model_steps += 1
        call_number = self.by_tool.get(name, 0) + 1
        self.by_tool[name] = call_number
        fired = self._effects(kind, name, args, seq, call_number)
        first_fault = fired[0][0] if fired else None
        delay = sum(effect.delay_s for _i, effect in fired)
        if delay > 0:
            time.sleep(delay)
        raising = next((effect for _i, effect in fired if effect.error is not None), None)
        if raising is not None and not raising.execute:
            assert raising.error is not None
            message = raising.message or f"{name}: {raising.error}"
            self._event(kind, name, args, error=(raising.error, message), fault=first_fault, executed=False)
            raise BOUNDARY_ERRORS[raising.error](message)
        try:
            result = to_json(run())
        except ToolError as error:
            if raising is not None:
                result = None  # the injected error is what the agent sees
            else:
                kind_name = error_type_name(error)
                message = str(error)[:MAX_TEXT]
                self._event(kind, name, args, error=(kind_name, message), fault=first_fault)
                raise BOUNDARY_ERRORS[kind_name](message) from None
        except (BoundaryBroken, BudgetExceeded):
            raise
        except Exception as error:
            raise self._broken(
                f"world-broken: tool {name} raised {type(error).__name__}: {str(error)[:MAX_TEXT]}"
            ) from None
        if raising is not None:
            assert raising.error is not None
            message = raising.message or f"{name}: {raising.error}"
            self._event(kind, name, args, error=(raising.error, message), fault=first_fault)
            raise BOUNDARY_ERRORS[raising.error](message)
        for _index, effect in fired:
            if effect.transform is not None:
                try:
                    result = to_json(effect.transform(_copy(result)))
                except Exception as error:
                    raise self._broken(
                        f"injector-broken: a fault's transform raised {type(error).__name__}: {error}"
                    ) from None
        self._event(kind, name, args, result=result, fault=first_fault)
        return _copy(result)

    def call_tool(self, name: str, args: Mapping[str, Any]) -> Any:
        fn = self.world.tools.get(name)
        if fn is None:

            def refuse() -> Any:
                raise ToolRejected(f"no tool named {name!r}; the tools are {', '.join(sorted(self.world.tools))}")

            return self.cross("tool", name, args, refuse)
        bad = self._check_arguments(name, fn, args)
        if bad is not None:

            def refuse_arguments() -> Any:
                raise ToolRejected(bad)

            return self.cross("tool", name, args, refuse_arguments)
        return self.cross("tool", name, args, lambda: fn(**args))

    def decide(self, question: str, options: Sequence[str]) -> Any:
        model = self.world.model
        choices = tuple(str(option) for option in options)
        if model is None:

            def no_model() -> Any:
                raise ToolRejected("this world has no decision channel")

            return self.cross("decision", DECIDE, {"question": question, "options": list(choices)}, no_model)

        def ask() -> Any:
            answer = model(str(question), choices, self.model_rng)
            if not isinstance(answer, Mapping) or "choice" not in answer or "confidence" not in answer:
                raise self._broken("world-broken: the model's answer lacks 'choice' and 'confidence'")
            return answer

        return self.cross("decision", DECIDE, {"question": question, "options": list(choices)}, ask)


class Tools:
    """What an agent receives: ``call(name, **args)``, ``decide(question, options)``, ``names``, and the exceptions."""

    __slots__ = ("_call", "_decide", "names")

    ToolError = ToolError
    ToolRejected = ToolRejected
    ToolTimeout = ToolTimeout
    ToolUnavailable = ToolUnavailable
    ModelUnavailable = ModelUnavailable
    BudgetExceeded = BudgetExceeded

    def __init__(
        self,
        call: Callable[[str, Mapping[str, Any]], Any],
        decide: Callable[[str, Sequence[str]], Any],
        names: Sequence[str],
    ) -> None:
        self._call = call
        self._decide = decide
        self.names = tuple(sorted(names))

    @classmethod
    def over(cls, boundary: Boundary) -> Tools:
        return cls(boundary.call_tool, boundary.decide, tuple(boundary.world.tools))

    def call(self, name: str, /, **args: Any) -> Any:
        """Call the tool ``name`` with keyword arguments; returns a JSON copy of its result."""
        return self._call(name, args)

    def decide(self, question: str, options: Sequence[str]) -> Any:
        """Ask the world's model (one model step); returns a mapping with ``choice`` and ``confidence``."""
        return self._decide(question, options)


def contract_violations(
    contract: Mapping[str, Any], events: Sequence[Mapping[str, Any]], completed: bool = True
) -> list[dict[str, str]]:
    """The behaviour contract's violations, observed from the recorded events alone.

    ``required_tools`` binds only a trial whose agent completed: an agent that crashed or ran
    out of budget has already failed, and did not reach the calls it would have made.
    """
    violations: list[dict[str, str]] = []
    tool_events = [e for e in events if e.get("kind") == "tool"]
    per_tool: dict[str, int] = {}
    for event in events:
        per_tool[event["name"]] = per_tool.get(event["name"], 0) + 1
    limit = contract.get("max_tool_calls")
    if limit is not None and len(tool_events) > limit:
        violations.append({"rule": "max_tool_calls", "detail": f"{len(tool_events)} tool calls, at most {limit}"})
    for name in contract.get("forbidden_tools") or ():
        if per_tool.get(name):
            violations.append({"rule": "forbidden_tools", "detail": f"called {name} {per_tool[name]} time(s)"})
    for name in contract.get("required_tools") or ():
        if completed and not per_tool.get(name):
            violations.append({"rule": "required_tools", "detail": f"never called {name}"})
    for name, most in sorted((contract.get("max_calls_per_tool") or {}).items()):
        if per_tool.get(name, 0) > most:
            violations.append(
                {"rule": "max_calls_per_tool", "detail": f"called {name} {per_tool[name]} times, at most {most}"}
            )
    return violations
