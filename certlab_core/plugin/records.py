"""The named, frozen records that plugins yield to the kernel and the kernel writes to disk.

Closed sets of words are ``Literal`` types, every callable a record carries is a
``Protocol`` saying its exact signature, and no public field is ``Any``: JSON-like data is
``JsonValue``, and what a plugin may not look into is ``object``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, get_args

import attrs
from attrs import field, frozen

from certlab_core.plugin.converters import json_map, names_map, one_of, text_map, tool_map

if TYPE_CHECKING:
    from certlab_core.plugin.report import Report
    from certlab_core.plugin.sandbox import Containment
    from certlab_core.plugin.workcopy import Change

#: JSON-like data: what crosses a tool boundary, a task input, a world's snapshot, a grader's facts.
JsonValue: TypeAlias = "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
JsonObject: TypeAlias = "Mapping[str, JsonValue]"


def _tuple(value: Sequence[Any] | None) -> tuple[Any, ...]:
    return tuple(value or ())


# --------------------------------------------------------------------------- families


@frozen
class Seed:
    """One textual edit that turns a clean file into a seeded one.

    ``find`` must occur exactly once in the clean file ``path`` (relative to the tree);
    the seeded file has it replaced by ``replace``.
    """

    path: str
    find: str
    replace: str


@frozen
class Defect:
    """A proven, seeded defect: one task of a repo family."""

    id: str
    defect_class: str
    description: str
    seeds: tuple[Seed, ...] = field(converter=_tuple)


def _share(_instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    """A share from 0 to 1 (a mutation score threshold); anything else is refused, naming the field."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be a share from 0 to 1, e.g. 0.8; got {value!r}")


@frozen
class TaskFamily:
    """A repo task family: a clean tree, its visible tests, an edit policy and seeded defects.

    ``tree_dir`` holds the clean tree (code and visible tests) as issued to an agent,
    ``prompt_file`` the TASK.md given to every agent, ``cases_file`` the held-out
    acceptance cases (JSON lines), which never enter a work copy. ``allowed_paths`` are
    glob patterns (``fnmatch`` per folder, ``*`` never crossing a ``/``; see ``in_allowed_paths``), relative
    to the tree, an agent may change; ``test_paths``
    are the files or folders of the visible suite; ``module_names`` are the top-level
    modules under test, which must be imported from the work copy under test.
    """

    name: str
    version: str
    description: str
    tree_dir: str
    prompt_file: str
    cases_file: str
    allowed_paths: tuple[str, ...] = field(converter=_tuple)
    test_paths: tuple[str, ...] = field(converter=_tuple)
    module_names: tuple[str, ...] = field(converter=_tuple)
    defects: tuple[Defect, ...] = field(converter=_tuple)
    # False for a user's own task (``certlab_core.plugin.user_task``): the tree as issued holds the
    # defect and no fixed tree is known, so proving means the issued tree fails its grading.
    clean_tree: bool = True
    # A task of the user's own that knows its answer (one built from a bug-fix commit): the fixture as it
    # should be, staged beside the issued tree and hidden like it. The constructed oracle restores the files
    # an agent may change from it, so the task is calibrated like a family's; None when no answer is known.
    answer_dir: str | None = None
    # The virtual environment a task's tests run in (its project's declared dependencies and pytest, made once
    # when the task was built, ``task_environments_dir()``); None: the agent environment's. Read-only in the sandbox.
    environment_dir: str | None = None
    # The least share of the clean tree's mutants the visible suite and held-out cases must kill
    # together (``certlab_core.certify.mutation``); FamilyConformance fails below it, certify and prove warn.
    mutation_threshold: float = field(default=0.9, validator=_share)
    # The least share the visible suite must kill alone (every grader but the held-out one): a weak visible suite
    # lets plausible wrong fixes look right to the agent, whatever the held-out cases catch afterwards.
    # FamilyConformance fails below it, certify and prove warn, ``--min-mutation-score`` refuses (see docs/mutation.md).
    visible_mutation_threshold: float = field(default=0.8, validator=_share)

    #: The standard layout of a family folder shipped in a distribution.
    TREE, PROMPT, CASES = "tree", "TASK.md", "acceptance.jsonl"

    @classmethod
    def in_folder(
        cls,
        folder: str | os.PathLike[str],
        *,
        name: str,
        version: str,
        description: str,
        allowed_paths: Sequence[str],
        test_paths: Sequence[str],
        module_names: Sequence[str],
        defects: Sequence[Defect],
        clean_tree: bool = True,
        answer_dir: str | None = None,
        environment_dir: str | None = None,
        mutation_threshold: float = 0.9,
        visible_mutation_threshold: float = 0.8,
    ) -> TaskFamily:
        """A family laid out the standard way: ``folder/tree`` (the clean tree with its visible
        tests), ``folder/TASK.md`` (the prompt) and ``folder/acceptance.jsonl`` (held-out cases).

        The other fields are the record's own, by keyword (a misspelt one is a type error)."""
        root = os.fspath(folder)
        return cls(
            name=name,
            version=version,
            description=description,
            tree_dir=os.path.join(root, cls.TREE),
            prompt_file=os.path.join(root, cls.PROMPT),
            cases_file=os.path.join(root, cls.CASES),
            allowed_paths=allowed_paths,
            test_paths=test_paths,
            module_names=module_names,
            defects=defects,
            clean_tree=clean_tree,
            answer_dir=answer_dir,
            environment_dir=environment_dir,
            mutation_threshold=mutation_threshold,
            visible_mutation_threshold=visible_mutation_threshold,
        )


# --------------------------------------------------------------------------- agents


@frozen
class Usage:
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
GateVerdict = Literal["PASS", "BLOCK", "INCONCLUSIVE"]
GATE_VERDICTS: tuple[GateVerdict, ...] = get_args(GateVerdict)


class TaskHandle(Protocol):
    """What a constructed (calibration) agent may read of its task: the family and the seeded defect."""

    @property
    def id(self) -> str: ...
    @property
    def family(self) -> TaskFamily: ...
    @property
    def defect(self) -> Defect: ...


@frozen
class AgentRequest:
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
class AgentOutcome:
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
class CalibrationExpectation:
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
class AgentAdapter:
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
class PreflightCheck:
    """One check ``certlab preflight`` reports: what was checked, whether it holds, what was found."""

    name: str
    ok: bool
    detail: str = ""


# --------------------------------------------------------------------------- graders


@frozen
class AcceptanceLock:
    """The held-out cases as locked (by certlab-acceptance): scoring reads only ``cases_file``.

    ``cases_file`` is the copy of the cases taken at lock time (outside every work copy),
    ``cases_sha256`` its hash; ``fingerprints`` maps each fingerprinted file (the cases as
    the task holds them, the scorer's files, the kernel's own files) to its sha256 at lock
    time, and ``sources`` maps each group of them to the file or folder to hash again.
    A score is computed only while nothing moved; ``experiment_dir`` is the folder a
    scoring copy must stay out of.
    """

    cases_file: str
    cases_sha256: str
    fingerprints: Mapping[str, str] = field(converter=text_map)
    sources: Mapping[str, str] = field(converter=text_map)
    experiment_dir: str = ""
    seal: str = ""


@frozen
class GradeRequest:
    """What a grader is given: the work copy an agent left and what was issued.

    ``first_failure`` says that only the verdict is wanted, not the count (the mutation proof
    grading a mutant): a grader may stop at its first failing test or held-out case, and its
    detail then tells only what ran. The verdict must be the one a full run gives.
    """

    workdir: str
    family: TaskFamily
    defect: Defect
    issued: Mapping[str, str] = field(converter=text_map)
    expected_tests: tuple[str, ...] = field(converter=_tuple, default=())
    acceptance_lock: AcceptanceLock | None = None
    first_failure: bool = False


@frozen
class GradeResult:
    """A grader's judgement. ``failure_mode`` is the kernel's or one the grader declares; ``data``
    holds facts the kernel may use (the suite grader reports the node ids it collected)."""

    grader: str
    passed: bool
    failure_mode: str | None = None
    detail: str = ""
    data: Mapping[str, JsonValue] = field(factory=dict, converter=json_map)


class Grade(Protocol):
    """A grader's ``grade``: judge the artifacts an agent left; it runs in its own fresh process."""

    def __call__(self, request: GradeRequest, /) -> GradeResult: ...


class GradingService(Protocol):
    """A grader's ``serve``: what it starts once for a run of contained trials, as a context manager.

    Entered in the process that forks the trials, before the first (``slots`` trials run at
    once) and left after the last; what it starts (a warm server inside the sandbox) is
    inherited by every trial's grading. It must start no thread in that process. ``environments`` are the
    task environments (``TaskFamily.environment_dir``) the run's trials are graded in, besides the agent
    environment when a trial's task has none; a grader that runs tests serves each one.
    """

    def __call__(
        self, containment: Containment, slots: int, environments: tuple[str | None, ...], /
    ) -> AbstractContextManager[None]: ...


class ChangesCheck(Protocol):
    """A grader's ``check_changes``: judge the changes an agent's trial recorded, once the whole chain passed.

    Returns a failure mode (the kernel's, or one the grader declares) that fails the trial
    whatever its tests say, or None. It runs in the trial's process, and again when the trial
    is regraded (then ``request`` carries no lock) or replayed.
    """

    def __call__(self, request: GradeRequest, changes: Sequence[Change], /) -> str | None: ...


@frozen
class Grader:
    """A grader: ``grade(request) -> GradeResult``, run in its own fresh process.

    Graders run in ascending ``order`` and the chain stops at the first that fails.
    ``failure_modes`` declares every mode the grader may name: the kernel's
    (``certlab_core.plugin.failure_modes``) or modes of its own, which reports then count
    like the kernel's; a mode neither the kernel nor the grader declares is an error
    naming the grader. ``serve``, when given, is started once per run of contained trials
    (``GradingService``); ``grade`` must give the same result without it.
    ``check_changes``, when given, judges the trial's recorded changes after the chain
    passed (``ChangesCheck``): the acceptance grader fails a trial whose changes hold the
    held-out answers as ``answers-leaked``.
    """

    name: str
    order: int
    description: str
    grade: Grade = field(eq=False, repr=False)
    failure_modes: tuple[str, ...] = field(converter=_tuple, default=())
    serve: GradingService | None = field(default=None, eq=False, repr=False)
    check_changes: ChangesCheck | None = field(default=None, eq=False, repr=False)


# --------------------------------------------------------------------------- statistics


@frozen
class Bounds:
    """Bounds on candidate minus baseline success rate, and what they decide."""

    lower: float
    upper: float
    verdict: GateVerdict = field(validator=one_of(GATE_VERDICTS))


class Decide(Protocol):
    """A rule's ``decide``: the bounds on candidate minus baseline and the verdict at one look."""

    def __call__(
        self,
        baseline_successes: int,
        baseline_n: int,
        candidate_successes: int,
        candidate_n: int,
        alpha: float = ...,
        delta: float = ...,
        conditions: int = ...,
        looks: int = ...,
    ) -> Bounds: ...


class Interval(Protocol):
    """A rule's per-arm interval at two-sided level ``alpha``: ``(low, high)``."""

    def __call__(self, successes: int, n: int, alpha: float, /) -> tuple[float, float]: ...


class Plan(Protocol):
    """A rule's ``plan``: the exact probabilities of ``PASS``, ``BLOCK`` and ``INCONCLUSIVE``."""

    def __call__(
        self,
        p_baseline: float,
        p_candidate: float,
        n: int,
        alpha: float = ...,
        delta: float = ...,
        conditions: int = ...,
        looks: int = ...,
    ) -> dict[str, float]: ...


class ArmAlpha(Protocol):
    """A rule's ``arm_alpha``: the two-sided level of each per-arm interval ``decide`` combines at one look."""

    def __call__(self, alpha: float, conditions: int, looks: int, /) -> float: ...


@frozen
class StatisticalRule:
    """A decision rule, pure functions of counts and the sealed parameters.

    - ``decide(baseline_successes, baseline_n, candidate_successes, candidate_n, alpha,
      delta, conditions, looks) -> Bounds``: the bounds on candidate minus baseline and
      the verdict at one look (``alpha`` is the experiment's; the rule splits it over
      ``conditions`` and ``looks`` itself); the gate, ``certlab stats bounds`` and replay use it;
    - ``interval(successes, n, alpha) -> (low, high)``: the per-arm interval the rule
      uses, at two-sided level ``alpha``;
    - ``plan(p_baseline, p_candidate, n, alpha, delta, conditions, looks) -> dict`` with
      the exact probabilities of ``PASS``, ``BLOCK`` and ``INCONCLUSIVE`` for ``n`` trials
      per arm, stopping at the first decisive look. ``certlab plan`` and ``certlab selfcheck``
      need it, and so does the HTML report's operating characteristic; without it (None)
      they refuse, saying so. A two-arm interval rule gets one from certlab-rule-support
      (``certlab_rule_support.two_arm_rule.Plan``);
    - ``arm_alpha(alpha, conditions, looks) -> float``, optional: the two-sided level of each
      per-arm interval ``decide`` combines at one look (clopper-pearson: alpha/(2KL)).
      ``certlab stats bounds`` shows the per-arm intervals at that level; without it, at
      ``alpha``, and says they are not the rule's own.
    """

    name: str
    description: str
    decide: Decide = field(eq=False, repr=False)
    interval: Interval = field(eq=False, repr=False)
    plan: Plan | None = field(default=None, eq=False, repr=False)
    arm_alpha: ArmAlpha | None = field(default=None, eq=False, repr=False)


# --------------------------------------------------------------------------- registry


@frozen
class PluginInfo:
    """One loaded plugin: its entry point name, distribution and what it provides."""

    name: str
    distribution: str
    version: str
    provides: Mapping[str, tuple[str, ...]] = field(converter=names_map)


@frozen
class PluginFailure:
    """A plugin left out, reported in one line: it failed to import, or one of its hooks
    (``hook``) raised or returned something other than the spec's records."""

    entry_point: str
    distribution: str
    error: str
    hook: str = ""

    def line(self) -> str:
        where = f", hook {self.hook}" if self.hook else ""
        return f"broken plugin {self.entry_point} ({self.distribution}{where}): {self.error}"


@frozen
class PluginWarning:
    """Something a plugin author should fix that does not stop the plugin: a hook no spec
    defines (a misspelling), a hook function without ``@hookimpl``, a name two plugins provide."""

    plugin: str
    distribution: str
    message: str

    def line(self) -> str:
        return f"warning: plugin {self.plugin} ({self.distribution}): {self.message}"


# --------------------------------------------------------------------------- reporters


class Render(Protocol):
    """A reporter's ``render``: the whole file's text from the report model and the rule (None when not installed)."""

    def __call__(self, report: Report, rule: StatisticalRule | None, /) -> str: ...


@frozen
class Reporter:
    """A report format: ``render(report, rule) -> str``, the whole file's text.

    ``report`` is a ``certlab_core.plugin.Report`` (the verdict, and per condition
    its bounds, arms, fault firings and failure clusters); ``rule`` is the experiment's
    ``StatisticalRule`` when it is installed, else None (a reporter that plots the rule's
    operating characteristic calls ``rule.plan``). ``suffix`` is the usual file ending
    (``.md``, ``.xml``, ``.html``).
    """

    name: str
    description: str
    suffix: str
    render: Render = field(eq=False, repr=False)


# --------------------------------------------------------------------------- tool worlds and faults


@frozen
class OracleVerdict:
    """An oracle's judgement of a tool world's final state; the agent's own account never enters it."""

    passed: bool
    detail: str = ""


#: One tool of a built world, called with keyword arguments that match its own signature (so no
#: Protocol can say more than this); it refuses with a boundary exception.
Tool: TypeAlias = "Callable[..., JsonValue]"


class Snapshot(Protocol):
    """A built world's final state, as JSON-like data for the oracle."""

    def __call__(self) -> JsonValue: ...


class DecisionModel(Protocol):
    """A world's answer on the decision channel: at least ``choice`` and ``confidence``."""

    def __call__(self, question: str, options: tuple[str, ...], rng: random.Random, /) -> JsonObject: ...


@frozen
class WorldInstance:
    """One built world, for one trial: what the agent is told, its tools, and the state to judge.

    ``task`` is what the agent receives as its first argument (JSON-able); ``tools`` maps each
    tool name to a function called with keyword arguments (a refusal raises one of the
    boundary exceptions of ``certlab_core.gate.boundary``, e.g. ``ToolRejected``; any other
    exception means the world is broken); ``snapshot()`` returns the final state as JSON-able
    data for the oracle; ``model(question, options, rng)``, when given, answers the decision
    channel (``tools.decide``) with a mapping holding at least ``choice`` and ``confidence``.
    """

    task: JsonObject = field(converter=json_map)
    tools: Mapping[str, Tool] = field(converter=tool_map, eq=False, repr=False)
    snapshot: Snapshot = field(eq=False, repr=False)
    model: DecisionModel | None = field(default=None, eq=False, repr=False)


class Build(Protocol):
    """A world's ``build``: a fresh instance for one trial, deterministic in ``(task_input, seed)``."""

    def __call__(self, task_input: JsonObject, seed: int, /) -> WorldInstance: ...


class Oracle(Protocol):
    """A world's ``oracle``: judge the final state (never the agent's account), in its own process."""

    def __call__(self, task: JsonObject, snapshot: JsonValue, /) -> OracleVerdict: ...


class CheckInput(Protocol):
    """Refuse a bad task input by raising ``UsageError``."""

    def __call__(self, task_input: JsonObject, /) -> None: ...


@frozen
class ToolWorld:
    """A tool world: ``build(task_input, seed) -> WorldInstance`` and ``oracle(task, snapshot) -> OracleVerdict``.

    ``tools`` names every tool a built instance offers (faults and contracts are checked
    against it before anything runs); ``decisions`` says whether instances answer the decision
    channel (the tool name ``decide``). ``check_input(task_input)``, when given, refuses a bad
    task input by raising UsageError. ``build`` must be deterministic in ``(task_input, seed)``.
    """

    name: str
    description: str
    tools: tuple[str, ...] = field(converter=_tuple)
    build: Build = field(eq=False, repr=False)
    oracle: Oracle = field(eq=False, repr=False)
    decisions: bool = False
    check_input: CheckInput | None = field(default=None, eq=False, repr=False)


FaultTarget = Literal["tool", "decision", "model", "any"]
#: What a call crossing a boundary is: a world's tool, the decision channel, or a model API call.
CallKind = Literal["tool", "decision", "model"]
FAULT_TARGETS: tuple[FaultTarget, ...] = get_args(FaultTarget)
CALL_KINDS: tuple[CallKind, ...] = get_args(CallKind)


@frozen
class FaultContext:
    """What a fault sees of one call crossing the tool boundary, before the call runs.

    ``kind`` is ``tool`` or ``decision``; ``call_number`` counts the calls to ``name`` in this
    trial (1-based, this one included); ``seq`` is the call's position among all events;
    ``fired`` is how many times this declared fault has already fired in this trial;
    ``params`` are the declaration's parameters; ``rng`` is a ``random.Random`` seeded from
    the trial's seed and the fault's position, so a fault that draws is reproducible.
    """

    kind: CallKind = field(validator=one_of(CALL_KINDS))
    name: str
    args: JsonObject = field(converter=json_map)
    seq: int
    call_number: int
    fired: int
    params: JsonObject = field(converter=json_map)
    rng: random.Random = field(eq=False, repr=False)


class Transform(Protocol):
    """What a fault makes of a call's result before the agent receives it."""

    def __call__(self, result: JsonValue, /) -> JsonValue: ...


@frozen
class FaultEffect:
    """What a fault does to one call.

    - ``error``: raise this boundary exception to the agent (``ToolTimeout``, ``ToolError``,
      ``ToolRejected``, ``ToolUnavailable`` or ``ModelUnavailable``) with ``message``;
      with ``execute`` the real call runs first and its effect stands (a reply lost after
      the work was done), otherwise the real call never runs;
    - else the real call runs and ``transform(result)``, when given, replaces what the
      agent receives (an empty result, a low confidence);
    - ``delay_s``: wait this long before anything else (latency).
    """

    error: str | None = None
    message: str = ""
    execute: bool = False
    transform: Transform | None = field(default=None, eq=False, repr=False)
    delay_s: float = 0.0


class Inject(Protocol):
    """A fault's ``inject``: its effect on this call, or None when it does not fire."""

    def __call__(self, context: FaultContext, /) -> FaultEffect | None: ...


class CheckParams(Protocol):
    """Refuse a fault declaration's bad parameters by raising ``UsageError``."""

    def __call__(self, params: JsonObject, /) -> None: ...


@frozen
class Fault:
    """An injectable fault: ``inject(context) -> FaultEffect | None`` (None: it does not fire on this call).

    ``target`` says which calls it may be declared on: ``tool`` (a world's tools),
    ``decision`` (the decision channel, ``decide``), ``model`` (an agent CLI's calls to its
    model API, through the model boundary) or ``any``. ``check_params(params)``,
    when given, refuses bad parameters by raising UsageError before anything runs.
    """

    name: str
    description: str
    inject: Inject = field(eq=False, repr=False)
    target: FaultTarget = field(default="tool", validator=one_of(FAULT_TARGETS))
    check_params: CheckParams | None = field(default=None, eq=False, repr=False)
