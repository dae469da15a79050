"""One attempt's outcome: success, failure with its mode, or error, and why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from certlab_core.gate.manifest import Manifest
from certlab_core.gate.trial import DETAIL_LIMIT, blank_outcome
from certlab_core.plugin import failure_modes as fm
from certlab_core.plugin.types.executor import WorkFailure
from certlab_core.sdk.forking import ChildFailure

WORKER_LOST = "worker-lost"


def needs_oracle(outcome: Mapping[str, Any]) -> bool:
    """The oracle judges only a trial whose agent completed within budget on a working world."""
    return (
        outcome.get("error") is None
        and outcome["agent"]["status"] in ("completed", "exited")
        and not outcome.get("budget_exceeded")
        and (outcome["agent"]["status"] == "completed" or outcome["agent"]["exit_code"] == 0)
    )


def classify(
    manifest: Manifest, outcome: Mapping[str, Any], oracle: Mapping[str, Any] | None, oracle_error: str | None
) -> tuple[str, str | None, str | None]:
    """``(outcome, failure_mode, error)`` of one attempt, from what the child and the oracle reported."""
    agent = outcome["agent"]
    if outcome.get("error"):
        return "error", None, str(outcome["error"])
    if "family_failure_mode" in outcome:  # a coding arm: the grader chain took the oracle's place
        if agent["status"] == "timeout":
            return "failure", fm.AGENT_TIMEOUT, None
        if agent["status"] == "unavailable":
            return "failure", fm.AGENT_UNAVAILABLE, None
        if oracle is not None and oracle["passed"]:
            return "success", None, None
        return "failure", outcome["family_failure_mode"], None
    if agent["status"] == "exited" and agent["exit_code"] in manifest.infra_exit_codes:
        return (
            "error",
            None,
            f"infra-exit-code: the agent exited with {agent['exit_code']}, an infrastructure exit code",
        )
    if agent["status"] == "timeout" or outcome.get("budget_exceeded") == "seconds":
        return "failure", fm.AGENT_TIMEOUT, None
    if outcome.get("budget_exceeded"):
        return "failure", fm.BUDGET_EXCEEDED, None
    if agent["status"] == "crashed":
        return "failure", (fm.TOOL_FAULT_UNCAUGHT if outcome.get("uncaught_tool_error") else fm.AGENT_CRASHED), None
    if agent["status"] == "exited" and agent["exit_code"] != 0:
        return "failure", fm.AGENT_CRASHED, None
    if oracle_error is not None:
        return "error", None, f"oracle-broken: {oracle_error}"
    if oracle is None:
        return "error", None, "runner-broken: the trial was not judged"
    if oracle["passed"]:
        return "success", None, None
    return "failure", fm.ORACLE_REJECTED, None


def child_failure_outcome(
    failure: ChildFailure | WorkFailure, manifest: Manifest, agent_held_inside: bool = False
) -> dict[str, Any]:
    """What a trial child that did not report stands for: killed at its deadline, died, lost with its worker, broken.

    ``agent_held_inside``: the child holds its agent to the seconds budget itself and grades after it (a coding
    trial), so its own deadline is a backstop: past it the harness hung (a grader, the boundary), not the agent.
    """
    outcome = blank_outcome("crashed", failure.summary[:DETAIL_LIMIT])
    if failure.kind == WORKER_LOST:
        outcome["error"] = f"{WORKER_LOST}: {failure.summary[:DETAIL_LIMIT]}"
    elif failure.kind == "timeout" and agent_held_inside:
        outcome["error"] = (
            "runner-broken: the trial ran past its agent's budget and every grader's limit and was killed: "
            "a part of the harness hung (a grader, the model boundary), not the agent"
        )
    elif failure.kind == "timeout":
        outcome["agent"]["status"] = "timeout"
        outcome["budget_exceeded"] = "seconds"
    elif failure.kind == "died":
        if failure.exit_code is not None:
            outcome["agent"].update(status="exited", exit_code=failure.exit_code)
            if failure.exit_code == 0:
                outcome["agent"]["status"] = "crashed"  # left without reporting: not a completed run
    else:
        outcome["error"] = f"runner-broken: {failure.summary[:DETAIL_LIMIT]}"
    return outcome
