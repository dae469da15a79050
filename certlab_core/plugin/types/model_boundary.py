"""The model boundary's seam: its record, what a run hands it, its words.

A model boundary stands between an agent's CLI and its model API for one agent run. The
kernel opens a session (``ModelBoundary.open(ModelRun)``) before the adapter runs, gives the
adapter the environment the session returns (``agent_env``: the CLI's base URLs point at the
boundary, its API keys are a per-run token), and closes the session when the agent is done;
``recording()`` is what the trial's record keeps of the model traffic: every call (request,
answer, tokens), the declared faults and where they fired, the budgets spent, and whether the
real upstream failed (``infra_error``). The built-in boundary is ``certlab-model-boundary``'s
loopback proxy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from attrs import field, frozen

from certlab_core.plugin.types.base import JsonObject, Record
from certlab_core.plugin.types.fault import Fault
from certlab_core.plugin.types.fields import json_map, text_map

#: The ``tool`` a descriptor's fault names to act at the model boundary.
MODEL_TOOL = "model"
#: The budgets a model boundary enforces, as its recording's ``budget_exceeded`` names them.
CALLS_BUDGET = "model_calls"
TOKENS_BUDGET = "model_tokens"
#: Each model call's status in a recording's ``call_statuses``, in call order. An upstream error is
#: ``upstream-`` and what the upstream did: its HTTP status (``upstream-429``), ``unreachable`` or ``oversized``.
CALL_OK = "ok"
CALL_INJECTED = "injected"  # a declared model fault answered it (or cut its stream)
CALL_REFUSED = "refused"  # the boundary refused it as the agent's own doing: a budget, a cap, a malformed request
CALL_BOUNDARY_ERROR = "boundary-error"  # the boundary itself failed: no trial token, a broken fault, a broken boundary
UPSTREAM_ERROR = "upstream-"


class ModelCall:
    """A model call's status words as one namespace (``ModelCall.REFUSED``); an upstream error starts ``UPSTREAM``."""

    OK: Final = CALL_OK
    INJECTED: Final = CALL_INJECTED
    REFUSED: Final = CALL_REFUSED
    BOUNDARY_ERROR: Final = CALL_BOUNDARY_ERROR
    UPSTREAM: Final = UPSTREAM_ERROR


class Budget:
    """The budgets a model boundary enforces, as one namespace (``Budget.CALLS``), as a recording names them."""

    CALLS: Final = CALLS_BUDGET
    TOKENS: Final = TOKENS_BUDGET


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value or ())


@frozen
class ModelFaultPlan(Record):
    """One model fault a condition declares, resolved: the fault, the model calls it acts on (None: every one)."""

    index: int
    fault: Fault
    on_calls: tuple[int, ...] | None = None
    params: JsonObject = field(factory=dict, converter=json_map)


@frozen
class ModelRun(Record):
    """What a model boundary is given for one agent run.

    ``env`` is the harness's environment (where the upstream is: ``ANTHROPIC_BASE_URL``,
    ``OPENAI_BASE_URL``, ``OPENAI_API_BASE``; and the real keys, which never leave the
    boundary); ``workdir`` the run's work copy (written ``$WORKDIR`` when calls are compared);
    ``seed`` seeds the faults that draw; ``max_calls`` and ``max_tokens`` are the budgets
    (None: none); ``replay``, when given, is a recording to answer from instead of the upstream.
    """

    env: Mapping[str, str] = field(converter=text_map, repr=False)
    workdir: str
    seed: int = 0
    faults: tuple[ModelFaultPlan, ...] = field(converter=_tuple, default=())
    max_calls: int | None = None
    max_tokens: int | None = None
    replay: tuple[JsonObject, ...] | None = None


class ModelSession(Protocol):
    """An open model boundary for one run."""

    def agent_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` pointed at the boundary, with a per-run token as every API key."""
        ...

    def recording(self) -> dict[str, Any]:
        """The run's model traffic as JSON-able data (``events``, ``faults``, ``counts``, ``infra_error``...)."""
        ...

    def close(self) -> None: ...


class OpenSession(Protocol):
    def __call__(self, run: ModelRun, /) -> ModelSession: ...


@frozen
class ModelBoundary(Record):
    """A model boundary: ``open(run) -> ModelSession``, one session per agent run."""

    name: str
    description: str
    open: OpenSession = field(eq=False, repr=False)
