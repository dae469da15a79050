"""The contract: hook specs, records on one base, errors, the report model.

``from certlab_core.plugin import hookimpl, TaskFamily, ...`` gives a plugin author what the
hooks exchange with the kernel; what a plugin calls (``run_command``, the work-copy helpers,
the safe readers and writers, canonical JSON, ...) is the SDK, ``certlab_core.sdk``, and the
kernel's runtime (discovery, the registry, the choice of containment) is private,
``certlab_core._runtime``: no plugin imports it (tests/test_author_api.py).

What this package exports, by one rule:

- ``hookimpl`` and ``Record``, the base of every record;
- the record each hook returns, one per kind of plugin: ``TaskFamily``, ``AgentAdapter``,
  ``Grader``, ``StatisticalRule``, ``Reporter``, ``ToolWorld``, ``Fault``, ``Executor``,
  ``Sandbox``, ``ModelBoundary``, ``Command``, ``HeldOutAcceptance``, ``TaskSource``, ``InstrumentProof``;
- the values a kind's main callable is given and gives back (``AgentRequest`` and
  ``AgentOutcome`` for an adapter's ``run``, ``GradeRequest`` and ``GradeResult`` for a
  grader's ``grade``, ``Services`` for a command's ``register``, ...), and the ``Defect`` and
  ``Seed`` a family is made of;
- the errors, the tool boundary's exceptions, and the report model with every type it holds;
- one namespace per family of constants: ``ExitCode``, ``ModelCall`` (a model call's status),
  ``Budget`` (a model boundary's budgets) and ``failure_modes`` (the kernel's failure modes);
- ``JsonValue`` and ``JsonObject``.

Everything else a kind defines (the protocols of its callables, its ``Literal`` word sets, its
secondary records) is imported from its kind module, ``certlab_core.plugin.types.<kind>``:
``family``, ``agent``, ``grader``, ``rule``, ``reporter``, ``tool_world``, ``fault``,
``executor``, ``sandbox``, ``model_boundary``, ``command``, ``held_out``, ``task_source``,
``instrument_proof``, ``services`` (and ``base``, ``fields``, ``discovery``). The hook specs,
each with a complete example plugin, are in ``certlab_core.plugin.hookspecs``. Everything here
is imported eagerly, and no module of the contract imports another part of the kernel, nor, at
any depth, itself again.

May import: nothing else of the kernel.
"""

from __future__ import annotations

from certlab_core.plugin import failure_modes
from certlab_core.plugin.errors import CertlabError, ExitCode, InstrumentError, UsageError
from certlab_core.plugin.exceptions import (
    BoundaryBroken,
    BudgetExceeded,
    ModelUnavailable,
    ToolError,
    ToolRejected,
    ToolTimeout,
    ToolUnavailable,
)
from certlab_core.plugin.hookspecs import hookimpl
from certlab_core.plugin.report import (
    ArmSummary,
    ArmUsage,
    ConditionReport,
    EarlierRun,
    FailureCluster,
    FaultFiring,
    InfraError,
    PassK,
    Report,
)
from certlab_core.plugin.types.agent import AgentAdapter, AgentOutcome, AgentRequest
from certlab_core.plugin.types.base import JsonObject, JsonValue, Record
from certlab_core.plugin.types.command import Command
from certlab_core.plugin.types.evidence_signer import EvidenceSigner
from certlab_core.plugin.types.executor import Executor, ExecutorOptions, Stage, Work, WorkDone
from certlab_core.plugin.types.family import Defect, Seed, TaskFamily
from certlab_core.plugin.types.fault import Fault, FaultContext, FaultEffect
from certlab_core.plugin.types.grader import Grader, GradeRequest, GradeResult
from certlab_core.plugin.types.held_out import HeldOutAcceptance
from certlab_core.plugin.types.instrument_proof import InstrumentProof
from certlab_core.plugin.types.model_boundary import Budget, ModelBoundary, ModelCall, ModelRun
from certlab_core.plugin.types.reporter import Reporter
from certlab_core.plugin.types.rule import Bounds, StatisticalRule
from certlab_core.plugin.types.sandbox import Sandbox, SandboxLaunch, SandboxRequest
from certlab_core.plugin.types.services import Services
from certlab_core.plugin.types.task_source import TaskSource
from certlab_core.plugin.types.tool_world import ToolWorld, WorldInstance

__all__ = [
    "AgentAdapter",
    "AgentOutcome",
    "AgentRequest",
    "ArmSummary",
    "ArmUsage",
    "BoundaryBroken",
    "Bounds",
    "Budget",
    "BudgetExceeded",
    "CertlabError",
    "Command",
    "ConditionReport",
    "Defect",
    "EarlierRun",
    "EvidenceSigner",
    "Executor",
    "ExecutorOptions",
    "ExitCode",
    "FailureCluster",
    "Fault",
    "FaultContext",
    "FaultEffect",
    "FaultFiring",
    "GradeRequest",
    "GradeResult",
    "Grader",
    "HeldOutAcceptance",
    "InfraError",
    "InstrumentError",
    "InstrumentProof",
    "JsonObject",
    "JsonValue",
    "ModelBoundary",
    "ModelCall",
    "ModelRun",
    "ModelUnavailable",
    "PassK",
    "Record",
    "Report",
    "Reporter",
    "Sandbox",
    "SandboxLaunch",
    "SandboxRequest",
    "Seed",
    "Services",
    "Stage",
    "StatisticalRule",
    "TaskFamily",
    "TaskSource",
    "ToolError",
    "ToolRejected",
    "ToolTimeout",
    "ToolUnavailable",
    "ToolWorld",
    "UsageError",
    "Work",
    "WorkDone",
    "WorldInstance",
    "failure_modes",
    "hookimpl",
]
