"""What a model boundary's recording means: statuses, budgets, a run's plan.

:func:`judged_status` is the one rule for what a model error means. The recording keeps a
status for every model call (``call_statuses``: ``ok``, ``upstream-429``, ``upstream-unreachable``,
``injected``, ``refused``, ``boundary-error``). An error of the real upstream (401, 429, 5xx,
unreachable) is infrastructure, but it costs the trial only when the run ended because of it:
the last model call failed, or the adapter says the CLI gave up on the API (``unavailable``).
Then the run is ``unavailable``. An agent that met upstream errors and went on (its CLI
retried) is judged by what it left, and the detail says how many errors it recovered from
(:func:`upstream_errors`, :func:`recovered_upstream_errors`). The boundary failing itself (a
call without the trial's token, a broken fault, a broken boundary), or a recording that keeps
no status per call, makes the run ``unavailable`` whatever the adapter said. An error the
boundary injected as a declared fault is the condition under test, so an adapter's
``unavailable`` becomes ``completed`` and the run is judged by what it left. A call the
boundary refused because a budget was spent (``budget_exceeded``: :data:`CALLS_BUDGET` or
:data:`TOKENS_BUDGET`) is the agent's own doing: an adapter's ``unavailable`` becomes
``completed``, and the trial ends as ``budget-exceeded``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, cast

import attrs
from attrs import field, frozen

from certlab_core.plugin.types.agent import AgentOutcome, AgentRequest, AgentStatus
from certlab_core.plugin.types.base import JsonObject
from certlab_core.plugin.types.model_boundary import (
    CALL_BOUNDARY_ERROR,
    CALLS_BUDGET,
    TOKENS_BUDGET,
    UPSTREAM_ERROR,
    ModelBoundary,
    ModelFaultPlan,
    ModelRun,
    ModelSession,
)
from certlab_core.sdk.deadline import plugin_call, plugin_wait_s


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value or ())


def _joined(note: str, detail: str) -> str:
    return f"{note}; {detail}" if detail else note


@frozen
class ModelBoundaryPlan:
    """What a trial runs its agent behind: the boundary, the condition's model faults and the model budgets."""

    boundary: ModelBoundary
    faults: tuple[ModelFaultPlan, ...] = field(converter=_tuple, default=())
    max_calls: int | None = None
    max_tokens: int | None = None
    seed: int = 0
    replay: tuple[JsonObject, ...] | None = None  # a recording to answer from, with no upstream

    def open(self, request: AgentRequest) -> ModelSession:
        """Open the boundary for the agent run ``request`` describes (in the trial's process).

        Under the plugin wait: a boundary whose ``open`` raises or does not return within
        ``CERTLAB_PLUGIN_LOAD_S`` is one line naming it (an InstrumentError), never a hung trial.
        """
        run = ModelRun(
            env={**os.environ, **request.env},  # the upstream and its key are the harness's, never the agent's
            workdir=request.workdir,
            seed=self.seed,
            faults=self.faults,
            max_calls=self.max_calls,
            max_tokens=self.max_tokens,
            replay=self.replay,
        )
        whose = f"the model boundary {self.boundary.name}'s open"
        session: ModelSession = plugin_call(whose, self.boundary.open, run, seconds=plugin_wait_s())
        return session


def upstream_errors(recording: Mapping[str, Any] | None) -> list[str]:
    """The upstream errors a run met, one per failed call in order (``upstream-429``...); [] when none or not kept."""
    calls = (recording or {}).get("call_statuses")
    if not isinstance(calls, list):
        return []
    return [c for c in calls if isinstance(c, str) and c.startswith(UPSTREAM_ERROR)]


def recovered_upstream_errors(recording: Mapping[str, Any] | None, verdict: str) -> int:
    """How many upstream errors a trial met and got past: its upstream errors, unless it ended ``unavailable``."""
    return 0 if verdict == "unavailable" else len(upstream_errors(recording))


def describe_upstream_errors(errors: Sequence[str]) -> str:
    """``1 upstream error (HTTP 429)``, ``3 upstream errors (HTTP 429 ×2, unreachable)``."""
    counts: dict[str, int] = {}
    for error in errors:
        what = error[len(UPSTREAM_ERROR) :]
        label = f"HTTP {what}" if what.isdigit() else what
        counts[label] = counts.get(label, 0) + 1
    kinds = ", ".join(f"{label} ×{n}" if n > 1 else label for label, n in counts.items())
    return f"{len(errors)} upstream error{'s' if len(errors) != 1 else ''} ({kinds})"


def judged_status(status: str, detail: str, recording: Mapping[str, Any] | None) -> tuple[str, str]:
    """The run's status and detail once its model traffic is known (see the module's docstring)."""
    if not recording:
        return status, detail
    infra = recording.get("infra_error")
    calls = recording.get("call_statuses")
    upstream = upstream_errors(recording)
    if infra and (not isinstance(calls, list) or CALL_BOUNDARY_ERROR in calls or not upstream):
        # The boundary failed itself (or the recording keeps no status per call): infrastructure, whatever was said.
        if status == "unavailable":  # the adapter saw it too: its own account first, the boundary's after
            return status, f"{detail} [model boundary: {infra}]" if detail else str(infra)
        return "unavailable", _joined(str(infra), detail)
    spent = spent_budget(recording)
    fired = any(fault.get("fired") for fault in recording.get("faults") or ())
    if upstream:
        met = describe_upstream_errors(upstream)
        if isinstance(calls, list) and calls and str(calls[-1]).startswith(UPSTREAM_ERROR):
            note = f"{infra or 'the model upstream failed'}; the run ended on it: its last model call failed ({met})"
            return "unavailable", _joined(
                note, detail
            ) if status != "unavailable" else f"{detail} [model boundary: {note}]"
        if status == "unavailable" and spent is None and not fired:  # the CLI says it gave up on the API
            return status, f"{detail} [model boundary: {met}; the last model call was answered]"
        detail = _joined(f"recovered from {met}", detail)
    if spent is not None:
        note = f"the model boundary refused a call past the trial's {spent} budget"
        return "completed" if status == "unavailable" else status, _joined(note, detail)
    if status == "unavailable" and fired:
        note = "the model error was the declared fault under test, so the run is judged by what it left"
        return "completed", _joined(note, detail)
    return status, detail


def spent_budget(recording: Mapping[str, Any] | None) -> str | None:
    """The budget the boundary refused a call for (:data:`CALLS_BUDGET`, :data:`TOKENS_BUDGET`), or None."""
    spent = (recording or {}).get("budget_exceeded")
    return str(spent) if spent in (CALLS_BUDGET, TOKENS_BUDGET) else None


def judged_outcome(outcome: AgentOutcome, recording: Mapping[str, Any] | None) -> AgentOutcome:
    """``outcome`` with the status :func:`judged_status` gives it."""
    status, detail = judged_status(outcome.status, outcome.detail, recording)
    if (status, detail) == (outcome.status, outcome.detail):
        return outcome
    return attrs.evolve(outcome, status=cast(AgentStatus, status), detail=detail)


def default_model_plan(registry: Any) -> ModelBoundaryPlan | None:
    """The first installed model boundary (by name), with no fault and no budget; None when none is installed."""
    boundaries = registry.all("model_boundaries")
    return ModelBoundaryPlan(boundaries[sorted(boundaries)[0]]) if boundaries else None


def model_plan_for(registry: Any, agent_args: Sequence[str], max_tokens: int | None = None) -> ModelBoundaryPlan | None:
    """A real agent's plan in a certification: the installed boundary, unless the adapter is given ``--base-url``.

    An explicit ``--base-url`` points the CLI at that upstream itself, past the boundary; the run
    then keeps the adapter's own account only (and the key the harness gave it reaches the CLI).
    ``max_tokens`` is the token budget of each trial (``certlab certify --token-budget``).
    """
    if any(arg == "--base-url" or arg.startswith("--base-url=") for arg in agent_args):
        return None
    plan = default_model_plan(registry)
    return attrs.evolve(plan, max_tokens=max_tokens) if plan is not None else None
