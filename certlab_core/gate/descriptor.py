"""The experiment descriptor (certlab.yaml): its records, schema and reading.

Loading checks shape and values that need nothing installed; what needs the plugins (the
world's tools, the fault and rule names, the agents' imports) is checked when the manifest
is built (``certlab_core.gate.manifest``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
from attrs import field, frozen

from certlab_core.gate.typed import DOC, json_schema, parse
from certlab_core.plugin.errors import UsageError

SCHEMA = "certlab.experiment/1"
BUCKETS = ("falsify", "benign", "ceiling")
GATING_BUCKETS = ("falsify", "benign")
DEFAULT_INFRA_EXIT_CODES = (75,)
MAX_TRIALS_PER_ARM = 100_000
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
REFERENCE_PATTERN = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)


def _doc(text: str) -> dict[str, str]:
    return {DOC: text}


def is_reference(text: str) -> bool:
    """Whether ``text`` reads ``module:function`` (a dotted module, a colon, a dotted attribute)."""
    return bool(REFERENCE_PATTERN.match(text))


@frozen(kw_only=True)
class FaultDeclaration:
    """One fault injected at the tool boundary in every trial of a condition."""

    fault: str = field(metadata=_doc("a fault's name (see 'certlab plugins') or module:function"))
    tool: str = field(metadata=_doc("the tool it targets; 'decide' for the decision channel"))
    on_calls: tuple[int, ...] | Literal["all"] = field(
        default=(1,), metadata=_doc("the calls to that tool it applies to (1-based), or 'all'")
    )
    params: dict[str, Any] = field(factory=dict, metadata=_doc("parameters passed to the fault"))


@frozen(kw_only=True)
class Condition:
    """A condition every trial of both arms runs under: its faults, and whether it gates."""

    name: str = field(metadata=_doc("the condition's name, part of each trial id"))
    bucket: Literal["falsify", "benign", "ceiling"] = field(
        metadata=_doc(
            "falsify: a robust agent should survive; benign: must not change the outcome; "
            "ceiling: known-unrecoverable, reported, never gated"
        )
    )
    faults: tuple[FaultDeclaration, ...] = field(default=(), metadata=_doc("the faults injected; none for a clean run"))
    min_baseline_success: float | None = field(
        default=None,
        metadata=_doc(
            "the least share of its trials the baseline must succeed in for this condition to have tested anything; "
            "below it the condition is ERROR (null: the descriptor's min_baseline_success)"
        ),
    )


@frozen(kw_only=True)
class Task:
    """What every trial works on: a tool world and its input, or a task family's tasks (coding arms)."""

    world: str | None = field(
        default=None, metadata=_doc("a tool world's name (see 'certlab plugins') or module:function of a toolset")
    )
    input: dict[str, Any] = field(factory=dict, metadata=_doc("the world's task input"))
    family: str | None = field(default=None, metadata=_doc("a task family's name, for coding arms"))
    defects: tuple[str, ...] = field(default=(), metadata=_doc("the family's defects to use (default: all)"))
    twins: Literal["one-off", "conflicting"] | None = field(
        default=None,
        metadata=_doc(
            "run these defects' impossible twins instead (their visible tests contradict the prompt): an honesty "
            "condition, where success means the agent did not cheat (null: the seeded defects)"
        ),
    )


@frozen(kw_only=True)
class Arm:
    """One side of the experiment: a Python agent (module:function) or an installed adapter."""

    agent: str | None = field(default=None, metadata=_doc("module:function of agent(task, tools, rng) -> dict"))
    adapter: str | None = field(default=None, metadata=_doc("an installed adapter's name, for coding arms"))
    args: tuple[str, ...] = field(default=(), metadata=_doc("the adapter's arguments"))
    label: str = field(default="", metadata=_doc("free text naming this version, shown in reports"))
    honest_way_out: bool = field(
        default=True,
        metadata=_doc(
            "with task.twins: whether this arm's prompt offers the honest way out (stop, and write "
            "CERTLAB_IMPOSSIBLE.md saying why)"
        ),
    )


@frozen(kw_only=True)
class Arms:
    """The baseline and the candidate."""

    baseline: Arm = field(metadata=_doc("the version the change starts from"))
    candidate: Arm = field(metadata=_doc("the changed version"))


@frozen(kw_only=True)
class RuleParameters:
    """The parameters of the statistical rule, sealed before the first trial."""

    alpha: float = field(default=0.05, metadata=_doc("the experiment's error rate, strictly between 0 and 1"))
    delta: float = field(
        default=0.10, metadata=_doc("the margin: a drop in success rate larger than delta must not PASS")
    )
    looks: int = field(default=1, metadata=_doc("pre-registered looks; alpha is split equally over them"))


@frozen(kw_only=True)
class Rule(RuleParameters):
    """The statistical rule that decides, with the parameters sealed before the first trial.

    Without a name, the installed rule that marks itself the default decides (certlab-clopper-pearson's
    ``clopper-pearson``); the manifest seals the name it resolved to (``SealedRule``), so a run store
    always names its rule.
    """

    name: str | None = field(
        default=None,
        metadata=_doc(
            "a statistical rule's name (see 'certlab plugins'); left out or null, the installed rule that marks "
            "itself the default, whose name the sealed manifest records"
        ),
    )


@frozen(kw_only=True)
class SealedRule(RuleParameters):
    """The statistical rule a sealed manifest names, with its parameters."""

    name: str = field(metadata=_doc("the statistical rule's name"))


@frozen(kw_only=True)
class Budgets:
    """Limits of each trial; running out is the agent's failure."""

    tool_calls: int | None = field(default=None, metadata=_doc("tool calls per trial (null: no limit)"))
    model_steps: int | None = field(
        default=None,
        metadata=_doc("decision-channel steps per trial; for a family task, model calls (null: no limit)"),
    )
    tokens: int | None = field(
        default=None,
        metadata=_doc(
            "model tokens per trial of a family task (input plus output, as the model's answers report them), "
            "counted at the model boundary, which refuses the next call once they are spent (null: no limit)"
        ),
    )
    seconds: float = field(default=60.0, metadata=_doc("wall seconds per trial"))


@frozen(kw_only=True)
class Contract:
    """The behaviour contract, observed at the tool boundary; a violation by the candidate forces BLOCK."""

    max_tool_calls: int | None = field(default=None, metadata=_doc("most tool calls in a trial"))
    forbidden_tools: tuple[str, ...] = field(default=(), metadata=_doc("tools that must never be called"))
    required_tools: tuple[str, ...] = field(default=(), metadata=_doc("tools that must be called in every trial"))
    max_calls_per_tool: dict[str, int] = field(factory=dict, metadata=_doc("most calls of each named tool"))

    def is_empty(self) -> bool:
        return self == Contract()


@frozen(kw_only=True)
class Descriptor:
    """An A/B reliability experiment: what runs, under which faults, and the rule that decides."""

    schema: Literal["certlab.experiment/1"] = field(default=SCHEMA, metadata=_doc("the descriptor's format version"))
    experiment: str = field(metadata=_doc("the experiment's id: letters, digits, '.', '_' and '-'"))
    task: Task = field(metadata=_doc("the task every trial works on"))
    oracle: str = field(
        default="world",
        metadata=_doc("who decides success: 'world' (the world's oracle), module:function, or 'graders' (families)"),
    )
    arms: Arms = field(metadata=_doc("baseline and candidate"))
    conditions: tuple[Condition, ...] = field(metadata=_doc("the conditions; falsify and benign ones gate"))
    rule: Rule = field(factory=Rule, metadata=_doc("the statistical rule"))
    n_per_arm: int = field(metadata=_doc("trials per arm and condition"))
    seed: int = field(default=0, metadata=_doc("base seed; index i of both arms runs with seed + i"))
    budgets: Budgets = field(factory=Budgets, metadata=_doc("limits of each trial"))
    contract: Contract = field(factory=Contract, metadata=_doc("the behaviour contract"))
    infra_exit_codes: tuple[int, ...] = field(
        default=DEFAULT_INFRA_EXIT_CODES, metadata=_doc("agent exit codes that mean the infrastructure failed (ERROR)")
    )
    min_baseline_success: float | None = field(
        default=None,
        metadata=_doc(
            "the least share of its trials the baseline must succeed in, in each gating condition, for the gate to "
            "have tested anything; below it that condition is ERROR, exit 3 (null: no minimum)"
        ),
    )

    @property
    def gating_conditions(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.conditions if c.bucket in GATING_BUCKETS)


def descriptor_schema() -> dict[str, Any]:
    """The descriptor's JSON Schema, generated from the records above."""
    return json_schema(Descriptor, "urn:certlab:experiment:1", "certlab experiment descriptor (certlab.yaml)")


# --------------------------------------------------------------------------- checks that need nothing installed


def value_problems(descriptor: Descriptor) -> list[tuple[str, str]]:
    """Values the shape allows but the experiment cannot use: ``(path, what to do)`` each."""
    out: list[tuple[str, str]] = []
    d = descriptor
    if not NAME_PATTERN.match(d.experiment):
        out.append(("experiment", f"{d.experiment!r} is not an id; use letters, digits, '.', '_' and '-' (at most 80)"))
    task = d.task
    if (task.world is None) == (task.family is None):
        out.append(("task", "name exactly one of 'world' (a tool world) and 'family' (coding arms)"))
    if task.family is not None:
        if task.input:
            out.append(("task.input", "a family task takes no input; remove it or use 'world'"))
        if d.oracle not in ("world", "graders"):
            out.append(("oracle", "a family task is graded by the installed graders; set oracle: graders"))
    elif task.defects:
        out.append(("task.defects", "defects belong to a family task; remove them or use 'family'"))
    if task.twins is not None and task.family is None:
        out.append(("task.twins", "impossible twins are made from a family's defects; name the family or remove it"))
    for side in ("baseline", "candidate"):
        if not getattr(d.arms, side).honest_way_out and task.twins is None:
            out.append(
                (f"arms.{side}.honest_way_out", "the honest way out is offered on impossible twins: set task.twins")
            )
    if task.world is not None and ":" in task.world and not is_reference(task.world):
        out.append(("task.world", f"{task.world!r} is not module:function; write it like my_tools:build"))
    if task.world is not None and d.oracle == "graders":
        out.append(("oracle", "'graders' judge family tasks; use 'world' or module:function for a tool world"))
    if d.oracle not in ("world", "graders") and not is_reference(d.oracle):
        out.append(("oracle", f"{d.oracle!r} is not 'world', 'graders' or module:function"))
    for side in ("baseline", "candidate"):
        arm: Arm = getattr(d.arms, side)
        where = f"arms.{side}"
        if (arm.agent is None) == (arm.adapter is None):
            out.append((where, "name exactly one of 'agent' (module:function) and 'adapter' (an installed adapter)"))
        elif arm.agent is not None:
            if not is_reference(arm.agent):
                out.append((f"{where}.agent", f"{arm.agent!r} is not module:function; write it like my_agents:agent_a"))
            if arm.args:
                out.append((f"{where}.args", "args belong to an adapter; a Python agent takes none"))
            if task.family is not None:
                out.append((f"{where}.agent", "a family task needs a coding agent: use 'adapter'"))
        elif task.world is not None:
            out.append((f"{where}.adapter", "a tool world needs a Python agent: use 'agent: module:function'"))
    if not d.conditions:
        out.append(("conditions", "add at least one condition (a clean run is a condition with no faults)"))
    names = [c.name for c in d.conditions]
    for i, condition in enumerate(d.conditions):
        where = f"conditions[{i}]"
        if not NAME_PATTERN.match(condition.name):
            out.append((f"{where}.name", f"{condition.name!r} is not a name; use letters, digits, '.', '_' and '-'"))
        elif names.count(condition.name) > 1 and names.index(condition.name) != i:
            out.append((f"{where}.name", f"the condition {condition.name!r} is named twice; rename one"))
        if task.family is not None and any(fault.tool != "model" for fault in condition.faults):
            out.append(
                (
                    f"{where}.faults",
                    "a family task has no tool boundary, only the model boundary: declare its faults with "
                    "tool: model (model_rate_limit, model_server_error, model_timeout, model_truncated_stream)",
                )
            )
        for j, fault in enumerate(condition.faults):
            if fault.on_calls != "all":
                if not fault.on_calls:
                    out.append((f"{where}.faults[{j}].on_calls", "give at least one call number, or 'all'"))
                if any(n < 1 for n in fault.on_calls):
                    out.append((f"{where}.faults[{j}].on_calls", "call numbers start at 1"))
            if ":" in fault.fault and not is_reference(fault.fault):
                out.append((f"{where}.faults[{j}].fault", f"{fault.fault!r} is not module:function"))
    for where, minimum in _minimums(d):
        if not 0.0 <= minimum <= 1.0:
            out.append((where, f"{minimum:g} is not a success rate; give a share from 0 to 1, such as 0.2"))
    for i, condition in enumerate(d.conditions):
        if condition.min_baseline_success is not None and condition.bucket not in GATING_BUCKETS:
            out.append(
                (
                    f"conditions[{i}].min_baseline_success",
                    "a ceiling condition is never gated, so no minimum applies to it; remove it",
                )
            )
    if d.conditions and not d.gating_conditions:
        out.append(("conditions", "no condition gates; give at least one the bucket 'falsify' or 'benign'"))
    rule = d.rule
    if not 0.0 < rule.alpha < 1.0:
        out.append(("rule.alpha", f"{rule.alpha} is outside (0, 1); use a level such as 0.05"))
    if not 0.0 <= rule.delta < 1.0:
        out.append(("rule.delta", f"{rule.delta} is outside [0, 1); use a margin such as 0.10"))
    if not 1 <= d.n_per_arm <= MAX_TRIALS_PER_ARM:
        out.append(("n_per_arm", f"{d.n_per_arm} is outside 1..{MAX_TRIALS_PER_ARM}"))
    elif not 1 <= rule.looks <= d.n_per_arm:
        out.append(("rule.looks", f"{rule.looks} looks do not fit {d.n_per_arm} trials per arm; use 1..{d.n_per_arm}"))
    if d.seed < 0:
        out.append(("seed", "the seed must be 0 or more"))
    budgets = d.budgets
    for name in ("tool_calls", "model_steps", "tokens"):
        value = getattr(budgets, name)
        if value is not None and value < 1:
            out.append((f"budgets.{name}", "a budget must be at least 1 (or null for no limit)"))
        if value is not None and task.family is not None and name == "tool_calls":
            out.append((f"budgets.{name}", "a family task has no tool boundary to count at; remove it"))
        if value is not None and task.family is None and name == "tokens":
            out.append((f"budgets.{name}", "a tool world has no model boundary to count tokens at; remove it"))
    if not 0.0 < budgets.seconds <= 86400.0:
        out.append(("budgets.seconds", f"{budgets.seconds} is outside (0, 86400]"))
    contract = d.contract
    if task.family is not None and not contract.is_empty():
        out.append(("contract", "the tool boundary cannot observe a family task's agent; remove the contract"))
    if contract.max_tool_calls is not None and contract.max_tool_calls < 0:
        out.append(("contract.max_tool_calls", "must be 0 or more"))
    for tool, most in contract.max_calls_per_tool.items():
        if most < 0:
            out.append((f"contract.max_calls_per_tool.{tool}", "must be 0 or more"))
    both = set(contract.forbidden_tools) & set(contract.required_tools)
    if both:
        out.append(("contract", f"{', '.join(sorted(both))} both forbidden and required; no agent can comply"))
    for i, code in enumerate(d.infra_exit_codes):
        if not 1 <= code <= 255:
            out.append((f"infra_exit_codes[{i}]", f"{code} is not an exit code; use 1..255"))
    return out


def _minimums(d: Descriptor) -> list[tuple[str, float]]:
    found = [] if d.min_baseline_success is None else [("min_baseline_success", d.min_baseline_success)]
    for i, condition in enumerate(d.conditions):
        if condition.min_baseline_success is not None:
            found.append((f"conditions[{i}].min_baseline_success", condition.min_baseline_success))
    return found


def baseline_minimum(descriptor: Descriptor, condition: Condition) -> float | None:
    """The least baseline success rate a condition must see: its own, else the descriptor's; none for a ceiling."""
    if condition.bucket not in GATING_BUCKETS:
        return None
    own = condition.min_baseline_success
    return own if own is not None else descriptor.min_baseline_success


# --------------------------------------------------------------------------- loading


def _yaml_loader() -> Any:
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _value_node in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                duplicate = False
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            with contextlib.suppress(TypeError):
                seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return StrictLoader


def read_yaml(text: str, source: str) -> Any:
    """The YAML document in ``text``; a syntax error is one line naming the place."""
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise UsageError(f"{source}: {where}: not valid YAML ({problem}); fix the syntax there") from None
    except (ValueError, RecursionError, TypeError) as error:
        raise UsageError(f"{source}: not a readable YAML document ({type(error).__name__}); fix the file") from None


def descriptor_from_data(data: Any, source: str) -> Descriptor:
    """The descriptor in already-parsed data; every problem is one line, all raised together (exit 4)."""
    if not isinstance(data, Mapping):
        raise UsageError(
            f"{source}: the descriptor must be a mapping with keys experiment, task, arms, conditions, n_per_arm; "
            "see 'certlab schema' or examples/retry/"
        )
    record, lines = parse(Descriptor, data, source)
    if record is None:
        raise UsageError(problem_message(lines))
    problems = value_problems(record)
    if problems:
        raise UsageError(problem_message([f"{source}: {path}: {message}" for path, message in problems]))
    descriptor: Descriptor = record
    return descriptor


def problem_message(lines: list[str]) -> str:
    """Several one-line problems as one error message (the CLI prints each on its own line)."""
    return "\ncertlab: error: ".join(lines)


def load_descriptor(path: Path) -> Descriptor:
    """Read and check ``certlab.yaml`` (exit 4 with one line per problem)."""
    from certlab_core.sdk.safe_io import MAX_NESTING, nesting_depth, read_capped_text

    source = path.name
    missing = f"{path}: no such descriptor; give the path of a certlab.yaml (see examples/retry/)"
    text = read_capped_text(path, "descriptor", UsageError, missing)
    if nesting_depth(text) > MAX_NESTING:
        raise UsageError(f"{path}: nested more than {MAX_NESTING} levels deep; a descriptor is a few levels deep")
    return descriptor_from_data(read_yaml(text, source), source)


def replace(descriptor: Descriptor, **changes: Any) -> Descriptor:
    """A copy of ``descriptor`` with top-level fields changed."""
    return attrs.evolve(descriptor, **changes)
