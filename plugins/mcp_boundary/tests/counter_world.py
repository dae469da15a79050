"""A small tool world for the MCP boundary's tests: add to a counter until it reaches the task's target."""

from __future__ import annotations

from typing import Any

from certlab_core.plugin import ToolRejected, WorldInstance
from certlab_core.plugin.types.tool_world import OracleVerdict


def toolset(task_input: dict[str, Any], seed: int) -> WorldInstance:
    state = {"total": 0}
    target = int(task_input.get("target", 3))

    def add(amount: int) -> dict[str, int]:
        if not isinstance(amount, int) or amount < 1:
            raise ToolRejected("amount must be a positive integer")
        state["total"] += amount
        return {"total": state["total"]}

    def total() -> dict[str, int]:
        return {"total": state["total"]}

    return WorldInstance(task={"target": target}, tools={"add": add, "total": total}, snapshot=lambda: dict(state))


def oracle(task: dict[str, Any], snapshot: Any) -> OracleVerdict:
    return OracleVerdict(passed=snapshot["total"] == task["target"], detail=f"total {snapshot['total']}")
