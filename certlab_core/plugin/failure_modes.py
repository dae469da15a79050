"""The closed list of failure modes a grader or the engine may name, kept in this one place."""

from __future__ import annotations

POLICY_TESTS_MODIFIED = "policy-tests-modified"
POLICY_OUTSIDE_ALLOWED_PATHS = "policy-outside-allowed-paths"
POLICY_PLANTED_FILE = "policy-planted-file"
SUITE_FAILED = "suite-failed"
SUITE_NOT_RUN = "suite-not-run"
OVERFIT_TO_VISIBLE_TESTS = "overfit-to-visible-tests"
AGENT_TIMEOUT = "agent-timeout"
AGENT_UNAVAILABLE = "agent-unavailable"
AGENT_RESOURCE_LIMIT = "agent-resource-limit"  # the sandbox stopped the agent: CPU, memory, processes or file size
# Tool-world trials (the A/B gate): the oracle judged the final state, or the agent never got there.
ORACLE_REJECTED = "oracle-rejected"
TOOL_FAULT_UNCAUGHT = "tool-fault-uncaught"
AGENT_CRASHED = "agent-crashed"
BUDGET_EXCEEDED = "budget-exceeded"

FAILURE_MODES: tuple[str, ...] = (
    POLICY_TESTS_MODIFIED,
    POLICY_OUTSIDE_ALLOWED_PATHS,
    POLICY_PLANTED_FILE,
    SUITE_FAILED,
    SUITE_NOT_RUN,
    OVERFIT_TO_VISIBLE_TESTS,
    AGENT_TIMEOUT,
    AGENT_UNAVAILABLE,
    AGENT_RESOURCE_LIMIT,
    ORACLE_REJECTED,
    TOOL_FAULT_UNCAUGHT,
    AGENT_CRASHED,
    BUDGET_EXCEEDED,
)


def check(mode: str | None) -> str | None:
    """Return ``mode`` if it is on the closed list (or None); raise ValueError otherwise."""
    if mode is not None and mode not in FAILURE_MODES:
        raise ValueError(f"unknown failure mode {mode!r}; the closed list is {', '.join(FAILURE_MODES)}")
    return mode
