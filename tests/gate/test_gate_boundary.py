"""The tool boundary: every call recorded, budgets applied, faults injected and their firing recorded."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest

from certlab_core.gate.boundary import (
    Boundary,
    BoundaryBroken,
    BudgetExceeded,
    Budgets,
    DeclaredFault,
    ModelUnavailable,
    ToolRejected,
    Tools,
    ToolTimeout,
    contract_violations,
)
from certlab_core.plugin.types.fault import Fault, FaultContext, FaultEffect
from certlab_core.plugin.types.tool_world import WorldInstance


def counter_world() -> tuple[WorldInstance, dict[str, Any]]:
    state: dict[str, Any] = {"count": 0, "items": [1, 2]}

    def bump(by: int = 1) -> dict[str, int]:
        state["count"] += by
        return {"count": state["count"]}

    def items() -> list[int]:
        return state["items"]

    def refuse() -> None:
        raise ToolRejected("never")

    def broken() -> None:
        raise KeyError("a bug in the world")

    def model(question: str, options: tuple[str, ...], rng: Any) -> dict[str, Any]:
        return {"choice": options[0], "confidence": 0.9}

    world = WorldInstance(
        task={"goal": 3},
        tools={"bump": bump, "items": items, "refuse": refuse, "broken": broken},
        snapshot=lambda: dict(state),
        model=model,
    )
    return world, state


def declared(inject: Any, tool: str, on_calls: tuple[int, ...] | None = (1,), index: int = 0) -> DeclaredFault:
    fault = Fault(name=f"f{index}", description="test", inject=inject, target="any")
    return DeclaredFault(
        index=index, name=fault.name, fault=fault, tool=tool, on_calls=on_calls, params={}, rng=random.Random(1)
    )


def test_every_call_is_recorded_with_its_result_or_error() -> None:
    world, _state = counter_world()
    boundary = Boundary(world)
    tools = Tools.over(boundary)
    assert tools.call("bump", by=2) == {"count": 2}
    with pytest.raises(ToolRejected, match="never"):
        tools.call("refuse")
    with pytest.raises(ToolRejected, match="no tool named 'nope'"):
        tools.call("nope")
    with pytest.raises(ToolRejected, match="bad arguments for bump"):
        tools.call("bump", size=1)
    assert tools.decide("which?", ["x", "y"]) == {"choice": "x", "confidence": 0.9}
    kinds = [(e["seq"], e["kind"], e["name"], e["status"]) for e in boundary.events]
    assert kinds == [
        (0, "tool", "bump", "ok"),
        (1, "tool", "refuse", "error"),
        (2, "tool", "nope", "error"),
        (3, "tool", "bump", "error"),
        (4, "decision", "decide", "ok"),
    ]
    assert boundary.events[1]["error"] == {"type": "ToolRejected", "message": "never"}
    assert boundary.counts() == {
        "tool_calls": 4,
        "model_steps": 1,
        "by_tool": {"bump": 2, "decide": 1, "nope": 1, "refuse": 1},
    }


def test_results_cross_as_copies() -> None:
    world, state = counter_world()
    tools = Tools.over(Boundary(world))
    received = tools.call("items")
    received.append(99)
    assert state["items"] == [1, 2]


def test_a_tool_call_budget_fails_the_trial_even_if_the_agent_swallows_it() -> None:
    world, _state = counter_world()
    boundary = Boundary(world, budgets=Budgets(tool_calls=2))
    tools = Tools.over(boundary)
    tools.call("bump")
    tools.call("bump")
    with pytest.raises(BudgetExceeded):
        tools.call("bump")
    with contextlib.suppress(BaseException):  # an agent that swallows everything
        tools.call("bump")
    assert boundary.budget_exceeded == "tool_calls"
    assert boundary.events[-1]["error"]["type"] == "BudgetExceeded" and boundary.events[-1]["executed"] is False


def test_the_budget_exception_passes_an_agents_except_exception() -> None:
    assert not issubclass(BudgetExceeded, Exception)
    assert not issubclass(BoundaryBroken, Exception)


def test_model_steps_and_seconds_budgets() -> None:
    world, _state = counter_world()
    boundary = Boundary(world, budgets=Budgets(model_steps=1))
    tools = Tools.over(boundary)
    tools.decide("q", ["a"])
    with pytest.raises(BudgetExceeded):
        tools.decide("q", ["a"])
    clock = iter([0.0, 5.0, 11.0])
    boundary = Boundary(world, budgets=Budgets(seconds=10.0), clock=lambda: next(clock))
    tools = Tools.over(boundary)
    tools.call("bump")
    with pytest.raises(BudgetExceeded, match="seconds"):
        tools.call("bump")
    assert boundary.budget_exceeded == "seconds"


def timeout(context: FaultContext) -> FaultEffect:
    return FaultEffect(error="ToolTimeout", message="late", execute=bool(context.params.get("executed")))


def test_a_fault_replaces_the_call_and_records_that_it_fired() -> None:
    world, state = counter_world()
    boundary = Boundary(world, [declared(timeout, "bump")])
    tools = Tools.over(boundary)
    with pytest.raises(ToolTimeout, match="late"):
        tools.call("bump")
    assert state["count"] == 0  # the call never reached the tool
    assert tools.call("bump") == {"count": 1}  # only the first call
    assert boundary.events[0]["fault"] == 0 and boundary.events[0]["executed"] is False
    assert boundary.events[1]["fault"] is None
    assert boundary.fault_summaries() == [{"index": 0, "fault": "f0", "tool": "bump", "fired": True, "fired_at": [0]}]


def test_a_timeout_after_the_work_was_done() -> None:
    world, state = counter_world()
    fault = declared(timeout, "bump")
    fault.params = {"executed": True}
    boundary = Boundary(world, [fault])
    with pytest.raises(ToolTimeout):
        Tools.over(boundary).call("bump")
    assert state["count"] == 1
    assert "executed" not in boundary.events[0]


def test_a_fault_that_never_matches_is_recorded_as_not_fired() -> None:
    world, _state = counter_world()
    boundary = Boundary(world, [declared(timeout, "bump", on_calls=(5,))])
    Tools.over(boundary).call("bump")
    assert boundary.fault_summaries()[0]["fired"] is False


def test_transform_and_latency() -> None:
    world, _state = counter_world()

    def empty(context: FaultContext) -> FaultEffect:
        return FaultEffect(transform=lambda result: [], delay_s=0.001)

    boundary = Boundary(world, [declared(empty, "items", on_calls=None)])
    assert Tools.over(boundary).call("items") == []
    assert boundary.events[0]["result"] == [] and boundary.events[0]["fault"] == 0


def test_a_decision_fault() -> None:
    world, _state = counter_world()

    def down(context: FaultContext) -> FaultEffect:
        return FaultEffect(error="ModelUnavailable", message="no model")

    boundary = Boundary(world, [declared(down, "decide")])
    with pytest.raises(ModelUnavailable):
        Tools.over(boundary).decide("q", ["a"])
    assert boundary.model_steps == 1


def test_a_broken_world_is_not_the_agents_failure() -> None:
    world, _state = counter_world()
    boundary = Boundary(world)
    tools = Tools.over(boundary)
    with pytest.raises(BoundaryBroken):
        tools.call("broken")
    assert boundary.broken == "world-broken: tool broken raised KeyError: 'a bug in the world'"
    with pytest.raises(BoundaryBroken):  # stays broken
        tools.call("bump")


@pytest.mark.parametrize(
    ("inject", "expected"),
    [
        (lambda c: 1 / 0, "injector-broken: fault f0 raised ZeroDivisionError"),
        (lambda c: "timeout", "injector-broken: fault f0 returned str, not FaultEffect or None"),
        (lambda c: FaultEffect(error="Boom"), "injector-broken: fault f0 asks for error 'Boom'"),
    ],
)
def test_a_broken_injector_is_an_infrastructure_error(inject: Any, expected: str) -> None:
    world, _state = counter_world()
    boundary = Boundary(world, [declared(inject, "bump")])
    with pytest.raises(BoundaryBroken):
        Tools.over(boundary).call("bump")
    assert boundary.broken is not None and boundary.broken.startswith(expected)


def test_contract_violations_are_observed_from_events() -> None:
    events = [{"kind": "tool", "name": "bump"}] * 3 + [{"kind": "tool", "name": "refuse"}]
    contract = {
        "max_tool_calls": 3,
        "forbidden_tools": ["refuse"],
        "required_tools": ["items"],
        "max_calls_per_tool": {"bump": 2},
    }
    rules = [v["rule"] for v in contract_violations(contract, events)]
    assert rules == ["max_tool_calls", "forbidden_tools", "required_tools", "max_calls_per_tool"]
    assert [v["rule"] for v in contract_violations(contract, events, completed=False)] == [
        "max_tool_calls",
        "forbidden_tools",
        "max_calls_per_tool",
    ]
