"""The run store's trial and decision records, and the gate's JSON Schemas.

The runner and the decision build plain dicts for speed; the tests parse every line and
decision they produce with these records (``certlab_core.gate.typed.parse``), so the
schemas printed by ``certlab schema`` are the shapes actually written.
"""

from __future__ import annotations

from typing import Any, Literal

from attrs import field, frozen

from certlab_core.gate.descriptor import descriptor_schema
from certlab_core.gate.manifest import manifest_schema
from certlab_core.gate.typed import DOC, json_schema


def _doc(text: str) -> dict[str, str]:
    return {DOC: text}


@frozen(kw_only=True)
class EventError:
    """The exception the agent received at the boundary."""

    type: Literal["ToolError", "ToolRejected", "ToolTimeout", "ToolUnavailable", "ModelUnavailable", "BudgetExceeded"]
    message: str


@frozen(kw_only=True)
class Event:
    """One crossing of the tool boundary."""

    seq: int
    kind: Literal["tool", "decision"]
    name: str
    args: dict[str, Any]
    status: Literal["ok", "error"]
    result: Any = None
    error: EventError | None = None
    fault: int | None = field(default=None, metadata=_doc("index of the declared fault that altered this call"))
    executed: bool = field(default=True, metadata=_doc("false when the real tool did not run"))


@frozen(kw_only=True)
class FaultFired:
    """Whether one declared fault fired in this trial, and at which events."""

    index: int
    fault: str
    tool: str
    fired: bool
    fired_at: tuple[int, ...]


@frozen(kw_only=True)
class AgentReport:
    """How the agent ended (its own words decide nothing)."""

    status: str = field(metadata=_doc("completed, crashed, timeout, budget, exited, or an adapter's status"))
    exit_code: int | None
    detail: str
    returned: Any = None
    leftover_processes: tuple[str, ...] = field(
        default=(), metadata=_doc("processes the agent left running, each killed and named (coding arms)")
    )


@frozen(kw_only=True)
class OracleReport:
    """The oracle's (or the grader chain's) judgement of the final state."""

    passed: bool
    detail: str


@frozen(kw_only=True)
class Counts:
    """Calls made in the trial."""

    tool_calls: int
    model_steps: int
    by_tool: dict[str, int]


@frozen(kw_only=True)
class Violation:
    """One breach of the behaviour contract."""

    rule: Literal["max_tool_calls", "forbidden_tools", "required_tools", "max_calls_per_tool"]
    detail: str


@frozen(kw_only=True)
class GateSummary:
    """What the gate reads of a line, derived from the line when it is sealed; it sorts first, so the gate reads
    it without parsing the events."""

    attempt: int
    error: str | None
    failure_mode: str | None
    fired: tuple[bool, ...] = field(metadata=_doc("whether each declared fault fired, in order"))
    id: str
    identity: str
    manifest_seal: str
    outcome: Literal["success", "failure", "error"]
    seed: int
    violations: int = field(metadata=_doc("how many contract violations the line records"))
    upstream_errors: int = field(
        default=0, metadata=_doc("present when the run met errors of the real model upstream: how many")
    )


@frozen(kw_only=True)
class TrialLine:
    """One attempt of one trial: a sealed line of trials.jsonl."""

    _gate: GateSummary = field(alias="_gate", metadata=_doc("the summary the gate reads (see GateSummary)"))
    _marks: tuple[str, ...] = field(
        alias="_marks",
        metadata=_doc(
            "each event's boundary mark, in order: 16 hex of the sha256 of the event's canonical JSON without "
            "seq, a flag e (error) or -, a flag f (a fault altered it) or -, then its label"
        ),
    )
    schema: Literal["certlab.trial/1"]
    id: str = field(metadata=_doc("ARM/CONDITION/INDEX"))
    arm: Literal["baseline", "candidate"]
    condition: str
    index: int
    seed: int
    attempt: int
    identity: str
    manifest_seal: str
    outcome: Literal["success", "failure", "error"]
    failure_mode: str | None
    error: str | None
    agent: AgentReport
    oracle: OracleReport | None
    events: tuple[Event, ...]
    faults: tuple[FaultFired, ...]
    counts: Counts
    budget_exceeded: Literal["tool_calls", "model_steps", "tokens", "seconds"] | None
    contract_violations: tuple[Violation, ...]
    usage: dict[str, Any] | None
    timings: dict[str, float]
    grades: tuple[dict[str, Any], ...] = field(default=(), metadata=_doc("a coding arm's grader results"))
    changes: tuple[dict[str, Any], ...] = field(default=(), metadata=_doc("a coding arm's changed files"))
    upstream_errors: tuple[str, ...] = field(
        default=(),
        metadata=_doc(
            "a coding arm's model calls the real upstream failed, in order (upstream-429, upstream-unreachable): "
            "present when there were any; recovered from unless the trial is an agent-unavailable ERROR"
        ),
    )
    seal: str


@frozen(kw_only=True)
class ArmCount:
    successes: int
    trials: int


@frozen(kw_only=True)
class BoundsDocument:
    lower: float
    upper: float


@frozen(kw_only=True)
class FaultFiring:
    """In how many trials of each arm a declared fault fired."""

    index: int
    fault: str
    tool: str
    fired: dict[str, int]
    never_fired: bool


@frozen(kw_only=True)
class ConditionDecision:
    """One condition's counts, bounds and verdict at the look that decided it."""

    name: str
    bucket: Literal["falsify", "benign", "ceiling"]
    gating: bool
    counts: dict[str, ArmCount]
    bounds: BoundsDocument | None
    verdict: Literal["PASS", "BLOCK", "INCONCLUSIVE", "STOPPED", "ERROR"]
    look: int | None
    looks_run: int
    faults: tuple[FaultFiring, ...]
    failure_modes: dict[str, dict[str, int]]
    untested: str | None = field(
        default=None,
        metadata=_doc(
            "present when the baseline succeeded in too few trials for the condition to have tested anything "
            "(below its min_baseline_success, or at most delta): why, with how both arms failed"
        ),
    )
    rule_verdict: Literal["PASS", "BLOCK", "INCONCLUSIVE", "STOPPED"] | None = field(
        default=None,
        metadata=_doc("present when the condition is ERROR for its baseline's minimum: what the rule alone said"),
    )


@frozen(kw_only=True)
class DecisionRule:
    name: str
    alpha: float
    delta: float
    looks: int
    conditions: int = field(metadata=_doc("K, the number of gating conditions"))


@frozen(kw_only=True)
class Decision:
    """decision.json: the verdict, a pure function of manifest.json and trials.jsonl."""

    schema: Literal["certlab.decision/1"]
    experiment: str
    manifest_seal: str
    verdict: Literal["PASS", "BLOCK", "INCONCLUSIVE", "ERROR"]
    exit_code: int
    rule: DecisionRule
    conditions: tuple[ConditionDecision, ...]
    contract_violations: dict[str, int]
    trials: dict[str, int]
    problems: tuple[str, ...]
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    seal: str


def schema_of(document: str) -> dict[str, Any]:
    """The JSON Schema of ``descriptor``, ``manifest``, ``trial`` or ``decision``."""
    if document == "descriptor":
        return descriptor_schema()
    if document == "manifest":
        return manifest_schema()
    if document == "trial":
        return json_schema(TrialLine, "urn:certlab:trial:1", "certlab run store: one line of trials.jsonl")
    if document == "decision":
        return json_schema(Decision, "urn:certlab:decision:1", "certlab run store: decision.json")
    raise ValueError(document)
