"""Exceptions: a tool world's refusal of a call, the boundary's end of a trial.

A world's tool raises one of the ``ToolError`` family to refuse or fail a call; the agent
receives it through the tool boundary. ``BudgetExceeded`` and ``BoundaryBroken`` are the
boundary's own: an agent cannot catch them as tool errors.
"""

from __future__ import annotations


class ToolError(Exception):
    """A tool refused or failed; the base of every exception an agent may receive from a tool."""


class ToolRejected(ToolError):
    """The tool refused the request (a business rule, a bad argument, an unknown tool)."""


class ToolTimeout(ToolError):
    """The call timed out; whether the work was done is not known to the agent."""


class ToolUnavailable(ToolError):
    """The tool is temporarily unavailable; trying again may work."""


class ModelUnavailable(ToolError):
    """The decision channel (the model) did not answer."""


class BudgetExceeded(BaseException):
    """A budget (tool calls, model steps, seconds) ran out; the trial is a failure whatever follows."""


class BoundaryBroken(BaseException):
    """The world or a fault injector misbehaved: the trial is an infrastructure error, not the agent's failure."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line
