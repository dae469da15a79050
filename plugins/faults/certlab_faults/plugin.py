"""The built-in faults: of the tools, of the model's decisions, of its API.

tool_timeout, tool_error_once, empty_result, latency, two faults of the model's decisions,
and four of a real agent's model API (declared with ``tool: model``, injected by the model boundary).

Each is a ``Fault`` record whose ``inject(context)`` returns a ``FaultEffect`` for the calls its
declaration matches (``tool`` and ``on_calls`` in the descriptor). Parameters are checked
before anything runs. A fault of one's own is any ``module:function`` with the same
signature as ``inject``, named directly in the descriptor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from certlab_core.plugin import Fault, FaultContext, FaultEffect, UsageError, hookimpl

MAX_LATENCY_S = 10.0
TOOL_ERRORS = ("ToolError", "ToolRejected", "ToolUnavailable")


def _checker(
    name: str, allowed: Mapping[str, Callable[[Any], bool]], what: Mapping[str, str]
) -> Callable[[Mapping[str, Any]], None]:
    def check(params: Mapping[str, Any]) -> None:
        for key, value in params.items():
            if key not in allowed:
                valid = ", ".join(allowed) or "none"
                raise UsageError(f"the fault {name} has no parameter {key!r}; its parameters: {valid}")
            if not allowed[key](value):
                raise UsageError(f"the fault {name}'s parameter {key} must be {what[key]}, got {value!r}")

    return check


def _number(context: FaultContext, key: str, default: float) -> float:
    """A declared numeric parameter (checked by the fault's ``check_params`` before anything ran), or its default."""
    value = context.params.get(key, default)
    return float(value) if isinstance(value, int | float) else default


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= MAX_LATENCY_S


def _is_rate(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= 1.0


# --------------------------------------------------------------------------- tool faults


def tool_timeout(context: FaultContext) -> FaultEffect:
    """The call times out. With ``executed: true`` the tool did the work first and only the reply was lost."""
    return FaultEffect(
        error="ToolTimeout",
        message=str(context.params.get("message", f"{context.name} timed out")),
        execute=bool(context.params.get("executed", False)),
    )


def tool_error_once(context: FaultContext) -> FaultEffect | None:
    """The first matching call fails (``error``: ToolError, ToolRejected or ToolUnavailable); later ones pass."""
    if context.fired:
        return None
    return FaultEffect(
        error=str(context.params.get("error", "ToolError")),
        message=str(context.params.get("message", f"{context.name} failed")),
    )


def empty_like(value: Any) -> Any:
    """An empty value of the same kind: [] for a list, {} for a mapping, "" for text, 0 for a number."""
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {}
    if isinstance(value, str):
        return ""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return 0
    return None


def empty_result(_context: FaultContext) -> FaultEffect:
    """The tool runs, but the agent receives an empty result of the same kind."""
    return FaultEffect(transform=empty_like)


def latency(context: FaultContext) -> FaultEffect:
    """The call is delayed by ``seconds`` (default 0.05) and otherwise untouched."""
    return FaultEffect(delay_s=_number(context, "seconds", 0.05))


# --------------------------------------------------------------------------- decision faults


def decision_low_confidence(context: FaultContext) -> FaultEffect:
    """The model answers, but with confidence ``confidence`` (default 0.2)."""
    confidence = _number(context, "confidence", 0.2)

    def lower(answer: Any) -> Any:
        return {**answer, "confidence": confidence} if isinstance(answer, dict) else answer

    return FaultEffect(transform=lower)


def decision_unavailable(context: FaultContext) -> FaultEffect:
    """The model does not answer (ModelUnavailable)."""
    return FaultEffect(error="ModelUnavailable", message=str(context.params.get("message", "the model is unavailable")))


# --------------------------------------------------------------------------- model API faults (the model boundary)


def model_rate_limit(context: FaultContext) -> FaultEffect:
    """The model API answers HTTP 429 (rate limited) instead of forwarding the call."""
    return FaultEffect(
        error="ModelRateLimited", message=str(context.params.get("message", "certlab: injected rate limit (429)"))
    )


def model_server_error(context: FaultContext) -> FaultEffect:
    """The model API answers HTTP 500 instead of forwarding the call."""
    return FaultEffect(
        error="ModelServerError", message=str(context.params.get("message", "certlab: injected server error (500)"))
    )


def model_timeout(context: FaultContext) -> FaultEffect:
    """The model API never answers: the connection is held ``seconds`` (default 1) and dropped."""
    return FaultEffect(error="ModelTimeout", delay_s=_number(context, "seconds", 1.0))


def model_truncated_stream(context: FaultContext) -> FaultEffect:
    """The upstream answers, but the agent receives only the first ``keep_events`` events (default 1), then the
    connection drops (the model boundary reads ``keep_events`` from the declaration)."""
    return FaultEffect(error="ModelStreamCut", execute=True, message="certlab: injected truncated stream")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10_000


FAULTS = (
    Fault(
        name="tool_timeout",
        description="the call times out (params: executed, message)",
        inject=tool_timeout,
        target="tool",
        check_params=_checker(
            "tool_timeout",
            {"executed": _is_bool, "message": _is_text},
            {"executed": "true or false", "message": "text"},
        ),
    ),
    Fault(
        name="tool_error_once",
        description="the first matching call fails (params: error, message)",
        inject=tool_error_once,
        target="tool",
        check_params=_checker(
            "tool_error_once",
            {"error": lambda v: v in TOOL_ERRORS, "message": _is_text},
            {"error": "one of " + ", ".join(TOOL_ERRORS), "message": "text"},
        ),
    ),
    Fault(
        name="empty_result",
        description="the tool runs but returns an empty result",
        inject=empty_result,
        target="tool",
        check_params=_checker("empty_result", {}, {}),
    ),
    Fault(
        name="latency",
        description="the call is delayed (params: seconds)",
        inject=latency,
        target="any",
        check_params=_checker("latency", {"seconds": _is_seconds}, {"seconds": f"seconds from 0 to {MAX_LATENCY_S:g}"}),
    ),
    Fault(
        name="decision_low_confidence",
        description="the model answers with low confidence (params: confidence)",
        inject=decision_low_confidence,
        target="decision",
        check_params=_checker(
            "decision_low_confidence", {"confidence": _is_rate}, {"confidence": "a number from 0 to 1"}
        ),
    ),
    Fault(
        name="decision_unavailable",
        description="the model does not answer (params: message)",
        inject=decision_unavailable,
        target="decision",
        check_params=_checker("decision_unavailable", {"message": _is_text}, {"message": "text"}),
    ),
    Fault(
        name="model_rate_limit",
        description="the model API answers 429 (params: message)",
        inject=model_rate_limit,
        target="model",
        check_params=_checker("model_rate_limit", {"message": _is_text}, {"message": "text"}),
    ),
    Fault(
        name="model_server_error",
        description="the model API answers 500 (params: message)",
        inject=model_server_error,
        target="model",
        check_params=_checker("model_server_error", {"message": _is_text}, {"message": "text"}),
    ),
    Fault(
        name="model_timeout",
        description="the model API never answers (params: seconds held before the connection drops)",
        inject=model_timeout,
        target="model",
        check_params=_checker(
            "model_timeout", {"seconds": _is_seconds}, {"seconds": f"seconds from 0 to {MAX_LATENCY_S:g}"}
        ),
    ),
    Fault(
        name="model_truncated_stream",
        description="the model's stream is cut (params: keep_events)",
        inject=model_truncated_stream,
        target="model",
        check_params=_checker(
            "model_truncated_stream", {"keep_events": _is_count}, {"keep_events": "a count from 0 to 10000"}
        ),
    ),
)


@hookimpl
def certlab_faults() -> list[Fault]:
    return list(FAULTS)
