"""Agents: the adapter record, the request it runs, the outcome it returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, get_args

import attrs
from attrs import field, frozen

from certlab_core.plugin.types.base import Record
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.fields import one_of, text_map


def _tuple(value: Sequence[Any] | None) -> tuple[Any, ...]:
    return tuple(value or ())


# --------------------------------------------------------------------------- agents


@frozen
class Usage(Record):
    """What an agent reported of its own consumption; every field is optional.

    ``cost_source`` says whose figure the dollars are (``client-estimate`` for a CLI's
    own price table); ``shape`` names the report it was parsed from (``claude-json``,
    ``codex-jsonl``, ``aider-text``, ...), so that unlike shapes are never compared.
    """

    shape: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    cost_usd: float | None = None
    cost_source: str | None = None


AgentStatus = Literal["completed", "timeout", "unavailable", "crashed"]
AGENT_STATUSES: tuple[AgentStatus, ...] = get_args(AgentStatus)
#: A certification trial's verdict.
TrialVerdict = Literal["fixed", "not-fixed", "unavailable"]
TRIAL_VERDICTS: tuple[TrialVerdict, ...] = get_args(TrialVerdict)
#: A gate's verdict at one look, and a statistical rule's.
#: What an agent did on an impossible twin (``certlab_core.certify.twins``).
TwinOutcome = Literal["cheated", "gave-up-honestly", "left-failing"]
TWIN_OUTCOMES: tuple[TwinOutcome, ...] = get_args(TwinOutcome)


class TaskHandle(Protocol):
    """What a constructed (calibration) agent may read of its task: the family and the seeded defect."""

    @property
    def id(self) -> str: ...
    @property
    def family(self) -> TaskFamily: ...
    @property
    def defect(self) -> Defect: ...


@frozen
class AgentRequest(Record):
    """What an adapter is given to run an agent once.

    ``task`` is the kernel's task handle; only constructed (calibration) agents may
    look at it, a real agent sees the prompt and the work directory alone.
    """

    workdir: str
    prompt: str
    prompt_file: str
    task_id: str
    timeout_s: float
    env: Mapping[str, str] = field(converter=text_map)
    agent_args: tuple[str, ...] = field(converter=_tuple, default=())
    task: TaskHandle | None = field(default=None, eq=False, repr=False)


@frozen
class AgentOutcome(Record):
    """What an adapter returns: the adapter hook's contract. Only ``status`` is required.

    ``unavailable`` says the agent's own infrastructure failed (an API error, a CLI that
    cannot start): an infrastructure error, never a capability finding. ``detail`` is one
    line for people ("fixbot is not on PATH"); it goes into the evidence, the console and
    the contract. ``wall_s`` is the agent's own wall time, for the record.
    """

    status: AgentStatus = field(validator=one_of(AGENT_STATUSES))
    exit_code: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0
    usage: Usage | None = None
    leftover_processes: tuple[str, ...] = field(converter=_tuple, default=())
    detail: str = ""


class AgentRun(Protocol):
    """An adapter's ``run``: run the agent once for ``request``; raising means it could not be run at all."""

    def __call__(self, request: AgentRequest, /) -> AgentOutcome: ...


class CheckArgs(Protocol):
    """Refuse bad ``--agent-arg`` values by raising ``UsageError``, before anything runs."""

    def __call__(self, agent_args: tuple[str, ...], /) -> None: ...


@frozen
class CalibrationExpectation(Record):
    """What a constructed agent must score on every task: its verdict and failure mode; on every impossible twin,
    its outcome (``twin``: cheated, gave-up-honestly or left-failing; None: not checked) and, when it cheats, how."""

    verdict: TrialVerdict = field(validator=one_of(TRIAL_VERDICTS))
    failure_mode: str | None = None  # None: any failure mode (or none, when fixed)
    twin: TwinOutcome | None = field(default=None, validator=attrs.validators.optional(one_of(TWIN_OUTCOMES)))
    twin_mechanism: str | None = None  # None: any mechanism (or none, when it did not cheat)
    # Calibrated on the impossible twins only (a run with --impossible), never on the seeded tasks.
    twins_only: bool = False


def _variable_names(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(name) for name in names)


@frozen
class AgentAdapter(Record):
    """An agent certlab can run: ``run(request) -> AgentOutcome``.

    A constructed agent (one of the instrument's own, like ``oracle``) carries the
    ``calibration`` result it must produce on every task; certification checks it.
    ``check_args(agent_args)``, when given, refuses bad arguments (raising UsageError)
    before anything runs. ``preflight(agent_args, environment)``, when given, checks what a
    live run needs (the binary, its version, credentials or base URL) for ``certlab
    preflight``, which then makes one smoke call through ``run``.

    ``environment`` names the harness's variables the agent gets besides the kernel's
    allow-list (``PASSED_VARIABLES``); every other variable of the harness is dropped.
    ``programs(agent_args)``, when given, names the programs ``run`` will start (a path or
    a name on ``PATH``): before the first trial, certify and run check each, and a script's
    interpreter, inside the containment, and a program the sandbox cannot show makes every
    trial ``agent-unavailable`` with one line naming it, never a failed fix.
    ``version(agent_args, environment)``, when given, is the version the agent's program
    reports of itself (``claude --version``), read before the first trial (None: it cannot
    tell); certify records it beside ``--agent-version`` and ``certlab run`` seals it with the arm.
    """

    name: str
    description: str
    run: AgentRun = field(eq=False, repr=False)
    calibration: CalibrationExpectation | None = None
    check_args: CheckArgs | None = field(default=None, eq=False, repr=False)
    preflight: Callable[[tuple[str, ...], Mapping[str, str]], Sequence[PreflightCheck]] | None = field(
        default=None, eq=False, repr=False
    )
    environment: tuple[str, ...] = field(default=(), converter=_variable_names)
    programs: Callable[[tuple[str, ...]], Sequence[str]] | None = field(default=None, eq=False, repr=False)
    version: Callable[[tuple[str, ...], Mapping[str, str]], str | None] | None = field(
        default=None, eq=False, repr=False
    )


@frozen
class PreflightCheck(Record):
    """One check ``certlab preflight`` reports: what was checked, whether it holds, what was found."""

    name: str
    ok: bool
    detail: str = ""
