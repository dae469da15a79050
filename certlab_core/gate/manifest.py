"""The sealed manifest: a checked descriptor resolved against the plugins.

``build_manifest`` checks everything that needs the plugins (tools, faults, rule, agents)
and returns the manifest record; ``seal_manifest`` and ``read_manifest`` write and read
``manifest.json`` (see docs/run-store.md). A manifest that fails its seal or its shape is an
instrument error (exit 3): the run store was edited by hand.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
from attrs import field, frozen

from certlab_core import __version__
from certlab_core._runtime.default_rule import default_rule
from certlab_core._runtime.registry import Registry
from certlab_core.gate.descriptor import (
    GATING_BUCKETS,
    Budgets,
    Condition,
    Contract,
    Descriptor,
    FaultDeclaration,
    SealedRule,
    baseline_minimum,
    is_reference,
    problem_message,
)
from certlab_core.gate.references import ReferenceCheck, check_references
from certlab_core.gate.typed import DOC, json_schema, parse
from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.plugin.types.fault import Fault
from certlab_core.plugin.types.tool_world import ToolWorld
from certlab_core.sdk.canonical import seal_of, unstructure
from certlab_core.sdk.deadline import plugin_call
from certlab_core.sdk.looks import look_sizes

SCHEMA = "certlab.manifest/1"
DECIDE = "decide"


def _doc(text: str) -> dict[str, str]:
    return {DOC: text}


@frozen(kw_only=True)
class SealedTask:
    """The task as sealed: a tool world (by plugin name or toolset reference) or a family's defects."""

    kind: Literal["tool-world", "family"]
    world: str | None = None
    input: dict[str, Any] = field(factory=dict)
    family: str | None = None
    defects: tuple[str, ...] = ()
    twins: str | None = field(default=None, metadata=_doc("the kind of impossible twins run instead (None: seeded)"))
    tools: tuple[str, ...] = field(default=(), metadata=_doc("the world's tools, as checked when sealing"))
    decisions: bool = False


@frozen(kw_only=True)
class SealedArm:
    """An arm as sealed, with the sha256 of its agent's source file."""

    agent: str | None = None
    adapter: str | None = None
    args: tuple[str, ...] = ()
    label: str = ""
    source_sha256: str | None = None
    honest_way_out: bool = field(default=True, metadata=_doc("on impossible twins: the prompt offers the way out"))
    agent_version: str | None = field(
        default=None, metadata=_doc("the version the adapter's program reported of itself when sealed (None: unread)")
    )


@frozen(kw_only=True)
class SealedCondition:
    """A condition as sealed; ``gating`` is false for the ceiling bucket."""

    name: str
    bucket: Literal["falsify", "benign", "ceiling"]
    gating: bool
    faults: tuple[FaultDeclaration, ...] = ()
    min_baseline_success: float | None = field(
        default=None,
        metadata=_doc(
            "the least baseline success rate for the condition to have tested anything (the condition's own or the "
            "descriptor's; none for a ceiling); below it the condition is ERROR"
        ),
    )


@frozen(kw_only=True)
class Schedule:
    """How the trials are ordered and looked at; recomputed from the rest and checked on reading."""

    order: Literal["interleaved"] = "interleaved"
    look_sizes: tuple[int, ...]
    gating_conditions: int


@frozen(kw_only=True)
class Manifest:
    """The sealed experiment (manifest.json): what runs, and the rule that decides, fixed before the first trial."""

    schema: Literal["certlab.manifest/1"] = "certlab.manifest/1"
    experiment: str
    descriptor_file: str
    descriptor_sha256: str
    descriptor_dir: str
    task: SealedTask
    oracle: str
    arms: dict[str, SealedArm]
    conditions: tuple[SealedCondition, ...]
    rule: SealedRule
    n_per_arm: int
    seed: int
    budgets: Budgets
    contract: Contract
    infra_exit_codes: tuple[int, ...]
    schedule: Schedule
    plugins: dict[str, str]
    certlab_version: str
    # How agents that are external programs (coding arms' adapters) were contained: bwrap or none (--sandbox).
    sandbox: str = field(default="none", metadata=_doc("the containment of the coding arms' agents: bwrap or none"))
    seal: str = ""

    def condition(self, name: str) -> SealedCondition:
        for condition in self.conditions:
            if condition.name == name:
                return condition
        raise KeyError(name)


ARMS = ("baseline", "candidate")


def manifest_schema() -> dict[str, Any]:
    return json_schema(Manifest, "urn:certlab:manifest:1", "certlab run store: manifest.json")


def manifest_document(manifest: Manifest) -> dict[str, Any]:
    """The manifest as the JSON document it is stored as (seal included)."""
    document: dict[str, Any] = unstructure(manifest)
    return document


def seal_manifest(manifest: Manifest) -> Manifest:
    """The manifest with its seal: sha256 of its canonical JSON without the seal."""
    return attrs.evolve(manifest, seal=seal_of(manifest_document(manifest)))


# --------------------------------------------------------------------------- building


class _Problems:
    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.lines.append(f"{self.source}: {path}: {message}")


def _suggest(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _get(registry: Registry, kind: str, name: str, where: str, problems: _Problems) -> Any:
    try:
        return registry.get(kind, name)
    except UsageError as error:
        problems.add(where, f"{error.message}{_suggest(name, registry.names(kind))}")
        return None


def build_manifest(descriptor: Descriptor, path: Path, registry: Registry) -> Manifest:
    """Check the descriptor against the installed plugins and seal it; one line per problem (exit 4)."""
    source = path.name
    folder = str(path.resolve().parent)
    problems = _Problems(source)
    distributions: dict[str, str] = {}

    def uses(kind: str, name: str) -> None:
        info = registry.plugin_of(kind, name)
        distributions[info.distribution] = info.version

    task = descriptor.task
    world: ToolWorld | None = None
    tools: tuple[str, ...] = ()
    decisions = False
    references: list[str] = []
    toolset: str | None = None
    if task.world is not None:
        if is_reference(task.world):
            toolset = task.world
            references.append(toolset)
            if descriptor.oracle == "world":
                problems.add(
                    "oracle", "a toolset given as module:function has no oracle of its own; name one as module:function"
                )
        else:
            world = _get(registry, "tool_worlds", task.world, "task.world", problems)
            if world is not None:
                uses("tool_worlds", task.world)
                tools, decisions = tuple(world.tools), world.decisions
                if world.check_input is not None:
                    try:
                        world.check_input(dict(task.input))
                    except UsageError as error:
                        problems.add("task.input", error.message)
                    except Exception as error:
                        problems.add("task.input", f"the world's input check raised {type(error).__name__}: {error}")
    defects: tuple[str, ...] = ()
    if task.family is not None:
        family = _get(registry, "task_families", task.family, "task.family", problems)
        if family is not None:
            uses("task_families", task.family)
            known = [d.id for d in family.defects]
            defects = tuple(task.defects) or tuple(known)
            for i, defect in enumerate(task.defects):
                if defect not in known:
                    problems.add(
                        f"task.defects[{i}]",
                        f"the family {task.family} has no defect {defect!r}{_suggest(defect, known)}; "
                        f"its defects: {', '.join(known)}",
                    )
            for grader in registry.all("graders"):
                uses("graders", grader)
            if not registry.names("graders"):
                problems.add("oracle", f"no grader is installed; {registry.providers.install_line('graders')}")
    if descriptor.oracle not in ("world", "graders"):
        references.append(descriptor.oracle)
    for side in ARMS:
        arm = getattr(descriptor.arms, side)
        if arm.agent is not None:
            references.append(arm.agent)
        elif arm.adapter is not None:
            adapter = _get(registry, "agents", arm.adapter, f"arms.{side}.adapter", problems)
            if adapter is not None:
                uses("agents", arm.adapter)
                if adapter.check_args is not None:
                    whose = registry.part_of("agents", arm.adapter, "argument check")
                    try:
                        plugin_call(whose, adapter.check_args, tuple(arm.args), seconds=registry.load_s)
                    except UsageError as error:
                        problems.add(f"arms.{side}.args", error.message)
    fault_records: dict[str, Fault] = {}
    for i, condition in enumerate(descriptor.conditions):
        for j, declared in enumerate(condition.faults):
            where = f"conditions[{i}].faults[{j}]"
            if is_reference(declared.fault):
                references.append(declared.fault)
            elif declared.fault not in fault_records:
                record = _get(registry, "faults", declared.fault, f"{where}.fault", problems)
                if record is None:
                    continue
                uses("faults", declared.fault)
                fault_records[declared.fault] = record
            record = fault_records.get(declared.fault)
            if record is not None:
                if record.target == "decision" and declared.tool != DECIDE:
                    problems.add(
                        f"{where}.tool", f"the fault {record.name} acts on model decisions; set tool: {DECIDE}"
                    )
                if record.target == "tool" and declared.tool == DECIDE:
                    problems.add(f"{where}.tool", f"the fault {record.name} acts on tools, not on the decision channel")
                if record.check_params is not None:
                    whose = registry.part_of("faults", declared.fault, "parameter check")
                    try:  # its refusal is the descriptor's problem; anything else it does, the plugin's (exit 3)
                        plugin_call(whose, record.check_params, dict(declared.params), seconds=registry.load_s)
                    except UsageError as error:
                        problems.add(f"{where}.params", error.message)
    asked = descriptor.rule
    rule = SealedRule(name=asked.name or "", alpha=asked.alpha, delta=asked.delta, looks=asked.looks)
    if asked.name is None:  # the installed rule that marks itself the default, named in the seal
        try:
            rule = attrs.evolve(rule, name=default_rule(registry, "left out, so the default rule decides").name)
        except UsageError as error:
            problems.add("rule.name", error.message)
    named = asked.name is not None or bool(rule.name)  # a name given (even an empty one) is checked as given
    if named and _get(registry, "statistical_rules", rule.name, "rule.name", problems) is not None:
        uses("statistical_rules", rule.name)
    checks: dict[str, ReferenceCheck] = check_references(references, folder, toolset, task.input) if references else {}
    for reference, check in checks.items():
        if check.error is not None:
            for where in _places(descriptor, reference):
                problems.add(where, f"{reference} {check.error}; check the module is importable from {source}'s folder")
    if toolset is not None and toolset in checks and checks[toolset].error is None:
        tools, decisions = checks[toolset].tools, checks[toolset].decisions
    if task.world is not None and (
        world is not None or (toolset is not None and toolset in checks and checks[toolset].error is None)
    ):
        _check_tools(descriptor, tools, decisions, problems)
    if problems.lines:
        raise UsageError(problem_message(problems.lines))
    arms = {}
    versions: dict[tuple[str, tuple[str, ...]], str | None] = {}
    for side in ARMS:
        arm = getattr(descriptor.arms, side)
        arms[side] = SealedArm(
            agent=arm.agent,
            adapter=arm.adapter,
            args=tuple(arm.args),
            label=arm.label,
            honest_way_out=arm.honest_way_out,
            source_sha256=checks[arm.agent].source_sha256 if arm.agent is not None else None,
            agent_version=_reported_version(registry, arm.adapter, tuple(arm.args), versions),
        )
    conditions = tuple(
        SealedCondition(
            name=c.name,
            bucket=c.bucket,
            gating=c.bucket in GATING_BUCKETS,
            faults=tuple(c.faults),
            min_baseline_success=baseline_minimum(descriptor, c),
        )
        for c in descriptor.conditions
    )
    manifest = Manifest(
        experiment=descriptor.experiment,
        descriptor_file=source,
        descriptor_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        descriptor_dir=folder,
        task=SealedTask(
            kind="tool-world" if task.world is not None else "family",
            world=task.world,
            input=dict(task.input),
            family=task.family,
            defects=defects,
            twins=task.twins,
            tools=tuple(sorted(tools)),
            decisions=decisions,
        ),
        oracle="graders" if task.family is not None else descriptor.oracle,
        arms=arms,
        conditions=conditions,
        rule=rule,
        n_per_arm=descriptor.n_per_arm,
        seed=descriptor.seed,
        budgets=descriptor.budgets,
        contract=descriptor.contract,
        infra_exit_codes=tuple(descriptor.infra_exit_codes),
        schedule=Schedule(
            look_sizes=look_sizes(descriptor.n_per_arm, rule.looks),
            gating_conditions=sum(1 for c in conditions if c.gating),
        ),
        plugins=dict(sorted(distributions.items())),
        certlab_version=__version__,
    )
    return seal_manifest(manifest)


def _reported_version(
    registry: Registry,
    adapter: str | None,
    args: tuple[str, ...],
    known: dict[tuple[str, tuple[str, ...]], str | None],
) -> str | None:
    """The version an arm's adapter reads from its program (``claude --version``), once per adapter and arguments."""
    if adapter is None:
        return None
    if (adapter, args) not in known:
        record = registry.get("agents", adapter)
        whose = registry.part_of("agents", adapter, "version")
        known[(adapter, args)] = (
            plugin_call(whose, record.version, args, os.environ, seconds=registry.load_s, returns=(str, type(None)))
            if record.version is not None
            else None
        )
    return known[(adapter, args)]


def _places(descriptor: Descriptor, reference: str) -> list[str]:
    places = []
    if descriptor.task.world == reference:
        places.append("task.world")
    if descriptor.oracle == reference:
        places.append("oracle")
    for side in ARMS:
        if getattr(descriptor.arms, side).agent == reference:
            places.append(f"arms.{side}.agent")
    for i, condition in enumerate(descriptor.conditions):
        for j, declared in enumerate(condition.faults):
            if declared.fault == reference:
                places.append(f"conditions[{i}].faults[{j}].fault")
    return places or ["(reference)"]


def _check_tools(descriptor: Descriptor, tools: tuple[str, ...], decisions: bool, problems: _Problems) -> None:
    """Faults and the contract may name only what the boundary can observe: the world's tools (and 'decide')."""
    names = sorted(tools) + ([DECIDE] if decisions else [])
    listing = ", ".join(names) or "none"

    def check(where: str, tool: str, what: str) -> None:
        if tool == DECIDE and not decisions:
            problems.add(
                where, f"the world has no decision channel, so {what} cannot act on 'decide'; its tools: {listing}"
            )
        elif tool != DECIDE and tool not in tools:
            problems.add(
                where,
                f"the world has no tool {tool!r}{_suggest(tool, names)}, so {what} cannot observe it; "
                f"its tools: {listing}",
            )

    for i, condition in enumerate(descriptor.conditions):
        for j, declared in enumerate(condition.faults):
            check(f"conditions[{i}].faults[{j}].tool", declared.tool, "this fault")
    contract = descriptor.contract
    for i, tool in enumerate(contract.forbidden_tools):
        check(f"contract.forbidden_tools[{i}]", tool, "the contract")
    for i, tool in enumerate(contract.required_tools):
        check(f"contract.required_tools[{i}]", tool, "the contract")
    for tool in contract.max_calls_per_tool:
        check(f"contract.max_calls_per_tool.{tool}", tool, "the contract")


# --------------------------------------------------------------------------- reading


def manifest_from_document(document: Any, source: str) -> Manifest:
    """The manifest in a parsed manifest.json; a broken seal, shape or schedule is an InstrumentError (exit 3)."""
    if not isinstance(document, Mapping):
        raise InstrumentError(f"{source}: not a manifest (a JSON object is expected); the run store is damaged")
    if document.get("schema") != SCHEMA:
        raise InstrumentError(
            f"{source}: schema {document.get('schema')!r} is not {SCHEMA}; this certlab cannot read it"
        )
    try:
        holds = seal_of(dict(document)) == document.get("seal")
    except (TypeError, ValueError):
        holds = False
    if not holds:
        raise InstrumentError(f"{source}: the seal does not match the content; the manifest was edited after sealing")
    record, lines = parse(Manifest, document, source)
    if record is None:
        raise InstrumentError(lines[0] + " (the manifest is damaged)")
    manifest: Manifest = record
    try:
        sizes = look_sizes(manifest.n_per_arm, manifest.rule.looks)
    except UsageError as error:
        raise InstrumentError(f"{source}: {error.message}") from None
    gating = sum(1 for c in manifest.conditions if c.gating)
    if manifest.schedule.look_sizes != sizes or manifest.schedule.gating_conditions != gating:
        raise InstrumentError(
            f"{source}: schedule does not follow from n_per_arm, looks and conditions; the manifest is damaged"
        )
    if not manifest.rule.name:
        raise InstrumentError(f"{source}: rule.name is empty; the manifest is damaged")
    if sorted(manifest.arms) != sorted(ARMS):
        raise InstrumentError(f"{source}: arms must be exactly baseline and candidate; the manifest is damaged")
    names = [c.name for c in manifest.conditions]
    if not names or len(set(names)) != len(names):
        raise InstrumentError(f"{source}: conditions are missing or named twice; the manifest is damaged")
    for condition in manifest.conditions:
        if condition.gating != (condition.bucket in GATING_BUCKETS):
            raise InstrumentError(
                f"{source}: condition {condition.name} has gating {condition.gating} for bucket {condition.bucket}"
            )
        minimum = condition.min_baseline_success
        if minimum is not None and (not condition.gating or not 0.0 <= minimum <= 1.0):
            raise InstrumentError(
                f"{source}: condition {condition.name} has min_baseline_success {minimum!r}; the manifest is damaged"
            )
    return manifest


def read_manifest(path: Path) -> Manifest:
    """Read and verify ``manifest.json``."""
    from certlab_core.sdk.safe_io import load_json

    source = str(path)
    missing = f"{source}: missing; this folder is not a certlab run store"
    document = load_json(path, "run store's manifest", InstrumentError, missing)
    return manifest_from_document(document, source)


__all__ = [
    "ARMS",
    "SCHEMA",
    "Condition",
    "Manifest",
    "SealedArm",
    "SealedCondition",
    "SealedTask",
    "build_manifest",
    "manifest_document",
    "manifest_schema",
    "read_manifest",
    "seal_manifest",
]
