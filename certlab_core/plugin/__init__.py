"""The author API: the one module a certlab plugin imports.

``from certlab_core.plugin import hookimpl, TaskFamily, ...`` gives a plugin author every
record a hook returns, the errors and the tool boundary's exceptions, the report model a
reporter renders, and the SDK helpers (``run_command`` for adapters, work-copy and
held-out-case helpers for graders, the alpha split over looks for rules). The hook specs
themselves, each with a complete example plugin, are in ``certlab_core.plugin.hookspecs``.

This package imports nothing else of the kernel: the kernel is built on it, not the other
way round (a test checks the direction).
"""

from __future__ import annotations

from certlab_core.plugin import failure_modes, report_format
from certlab_core.plugin.cases import HeldOutCase, check_modules, read_cases, read_cases_bytes
from certlab_core.plugin.command import run_command
from certlab_core.plugin.errors import (
    EXIT_BLOCK,
    EXIT_ERROR,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    EXIT_PASS,
    EXIT_USAGE,
    CertlabError,
    InstrumentError,
    UsageError,
)
from certlab_core.plugin.exceptions import (
    BoundaryBroken,
    BudgetExceeded,
    ModelUnavailable,
    ToolError,
    ToolRejected,
    ToolTimeout,
    ToolUnavailable,
)
from certlab_core.plugin.fingerprints import check_unmoved
from certlab_core.plugin.forking import ForkedCallError, call_in_fork
from certlab_core.plugin.hookspecs import hookimpl
from certlab_core.plugin.looks import look_alpha, look_sizes
from certlab_core.plugin.records import (
    AcceptanceLock,
    AgentAdapter,
    AgentOutcome,
    AgentRequest,
    Bounds,
    CalibrationExpectation,
    Defect,
    Fault,
    FaultContext,
    FaultEffect,
    Grader,
    GradeRequest,
    GradeResult,
    OracleVerdict,
    PluginFailure,
    PluginInfo,
    PreflightCheck,
    Reporter,
    Seed,
    StatisticalRule,
    TaskFamily,
    ToolWorld,
    Usage,
    WorldInstance,
)
from certlab_core.plugin.report import ArmSummary, ArmUsage, ConditionReport, FailureCluster, FaultFiring, Report
from certlab_core.plugin.workcopy import Change, copy_tree, materialise, record_changes, sha256_file

__all__ = [
    "EXIT_BLOCK",
    "EXIT_ERROR",
    "EXIT_INCONCLUSIVE",
    "EXIT_OK",
    "EXIT_PASS",
    "EXIT_USAGE",
    "AcceptanceLock",
    "AgentAdapter",
    "AgentOutcome",
    "AgentRequest",
    "ArmSummary",
    "ArmUsage",
    "BoundaryBroken",
    "Bounds",
    "BudgetExceeded",
    "CalibrationExpectation",
    "CertlabError",
    "Change",
    "ConditionReport",
    "Defect",
    "FailureCluster",
    "Fault",
    "FaultContext",
    "FaultEffect",
    "FaultFiring",
    "ForkedCallError",
    "GradeRequest",
    "GradeResult",
    "Grader",
    "HeldOutCase",
    "InstrumentError",
    "ModelUnavailable",
    "OracleVerdict",
    "PluginFailure",
    "PluginInfo",
    "PreflightCheck",
    "Report",
    "Reporter",
    "Seed",
    "StatisticalRule",
    "TaskFamily",
    "ToolError",
    "ToolRejected",
    "ToolTimeout",
    "ToolUnavailable",
    "ToolWorld",
    "Usage",
    "UsageError",
    "WorldInstance",
    "call_in_fork",
    "check_modules",
    "check_unmoved",
    "copy_tree",
    "failure_modes",
    "hookimpl",
    "look_alpha",
    "look_sizes",
    "materialise",
    "read_cases",
    "read_cases_bytes",
    "record_changes",
    "report_format",
    "run_command",
    "sha256_file",
]
