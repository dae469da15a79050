"""certlab-faults: each built-in fault at a real tool boundary, and its parameter checks."""

from __future__ import annotations

import random
from typing import Any

import pytest

from certlab_core._runtime.registry import discover
from certlab_core.gate.boundary import Boundary, DeclaredFault, Tools
from certlab_core.plugin import ModelUnavailable, ToolError, ToolTimeout, ToolUnavailable
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.fault import Fault
from certlab_core.plugin.types.tool_world import WorldInstance

NAMES = {
    "tool_timeout",
    "tool_error_once",
    "empty_result",
    "latency",
    "decision_low_confidence",
    "decision_unavailable",
    "model_rate_limit",
    "model_server_error",
    "model_timeout",
    "model_truncated_stream",
}


@pytest.fixture(scope="module")
def faults() -> dict[str, Fault]:
    return discover(only=["faults"]).all("faults")


def world() -> tuple[WorldInstance, dict[str, Any]]:
    state: dict[str, Any] = {"writes": 0}

    def write() -> dict[str, int]:
        state["writes"] += 1
        return {"writes": state["writes"]}

    def listing() -> list[int]:
        return [1, 2, 3]

    def model(question: str, options: tuple[str, ...], rng: Any) -> dict[str, Any]:
        return {"choice": options[0], "confidence": 0.95}

    return WorldInstance(task={}, tools={"write": write, "list": listing}, snapshot=lambda: state, model=model), state


def boundary_with(
    fault: Fault, tool: str, params: dict[str, Any] | None = None, on_calls: Any = (1,)
) -> tuple[Tools, Boundary, dict[str, Any]]:
    instance, state = world()
    declared = DeclaredFault(
        index=0, name=fault.name, fault=fault, tool=tool, on_calls=on_calls, params=params or {}, rng=random.Random(3)
    )
    boundary = Boundary(instance, [declared])
    return Tools.over(boundary), boundary, state


def test_the_plugin_provides_the_six_faults(faults: dict[str, Fault]) -> None:
    assert set(faults) == NAMES
    assert {faults[n].target for n in ("decision_low_confidence", "decision_unavailable")} == {"decision"}


def test_tool_timeout_before_and_after_the_work(faults: dict[str, Fault]) -> None:
    tools, _boundary, state = boundary_with(faults["tool_timeout"], "write")
    with pytest.raises(ToolTimeout):
        tools.call("write")
    assert state["writes"] == 0
    tools, _boundary, state = boundary_with(faults["tool_timeout"], "write", {"executed": True})
    with pytest.raises(ToolTimeout):
        tools.call("write")
    assert state["writes"] == 1


def test_tool_error_once_fires_once_even_on_every_call(faults: dict[str, Fault]) -> None:
    tools, boundary, _state = boundary_with(
        faults["tool_error_once"], "write", {"error": "ToolUnavailable"}, on_calls=None
    )
    with pytest.raises(ToolUnavailable):
        tools.call("write")
    assert tools.call("write") == {"writes": 1}
    assert boundary.fault_summaries()[0]["fired_at"] == [0]
    tools, _boundary, _state = boundary_with(faults["tool_error_once"], "write")
    with pytest.raises(ToolError):
        tools.call("write")


def test_empty_result_runs_the_tool_and_empties_what_comes_back(faults: dict[str, Fault]) -> None:
    tools, _boundary, state = boundary_with(faults["empty_result"], "write")
    assert tools.call("write") == {}
    assert state["writes"] == 1
    tools, _boundary, _state = boundary_with(faults["empty_result"], "list")
    assert tools.call("list") == []


def test_latency_delays_and_changes_nothing_else(faults: dict[str, Fault]) -> None:
    import time

    tools, boundary, _state = boundary_with(faults["latency"], "write", {"seconds": 0.05})
    started = time.monotonic()
    assert tools.call("write") == {"writes": 1}
    assert time.monotonic() - started >= 0.05
    assert boundary.events[0]["fault"] == 0 and boundary.events[0]["status"] == "ok"


def test_decision_faults(faults: dict[str, Fault]) -> None:
    tools, _boundary, _state = boundary_with(faults["decision_low_confidence"], "decide", {"confidence": 0.1})
    assert tools.decide("go?", ["yes", "no"]) == {"choice": "yes", "confidence": 0.1}
    tools, _boundary, _state = boundary_with(faults["decision_unavailable"], "decide")
    with pytest.raises(ModelUnavailable):
        tools.decide("go?", ["yes", "no"])


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("tool_timeout", {"executed": "yes"}, "parameter executed must be true or false"),
        (
            "tool_error_once",
            {"error": "Boom"},
            "parameter error must be one of ToolError, ToolRejected, ToolUnavailable",
        ),
        ("empty_result", {"what": 1}, "the fault empty_result has no parameter 'what'"),
        ("latency", {"seconds": 60}, "parameter seconds must be seconds from 0 to 10"),
        ("decision_low_confidence", {"confidence": 2}, "must be a number from 0 to 1"),
    ],
)
def test_bad_parameters_are_refused_in_one_line(
    faults: dict[str, Fault], name: str, params: dict[str, Any], message: str
) -> None:
    check = faults[name].check_params
    assert check is not None
    with pytest.raises(UsageError, match=message):
        check(params)
