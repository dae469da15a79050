"""The named, frozen records that plugins yield to the kernel and the kernel writes to disk."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from attrs import field, frozen


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


@frozen
class TaskFamily:
    """A repo task family: a clean tree, its visible tests, an edit policy and seeded defects.

    ``tree_dir`` holds the clean tree (code and visible tests) as issued to an agent,
    ``prompt_file`` the TASK.md given to every agent, ``cases_file`` the held-out
    acceptance cases (JSON lines), which never enter a work copy. ``allowed_paths`` are
    glob patterns (``fnmatch``, relative to the tree) an agent may change; ``test_paths``
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
    # False for a user's own task (``certlab_core.user_task``): the tree as issued holds the
    # defect and no fixed tree is known, so proving means the issued tree fails its grading.
    clean_tree: bool = True
    # The least share of the clean tree's mutants the visible suite and held-out cases must kill
    # together (``certlab_core.mutation``); FamilyConformance fails below it, certify warns.
    mutation_threshold: float = 0.9

    #: The standard layout of a family folder shipped in a distribution.
    TREE, PROMPT, CASES = "tree", "TASK.md", "acceptance.jsonl"

    @classmethod
    def in_folder(cls, folder: str | os.PathLike[str], **fields: Any) -> TaskFamily:
        """A family laid out the standard way: ``folder/tree`` (the clean tree with its visible
        tests), ``folder/TASK.md`` (the prompt) and ``folder/acceptance.jsonl`` (held-out cases)."""
        root = os.fspath(folder)
        return cls(
            tree_dir=os.path.join(root, cls.TREE),
            prompt_file=os.path.join(root, cls.PROMPT),
            cases_file=os.path.join(root, cls.CASES),
            **fields,
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


AGENT_STATUSES = ("completed", "timeout", "unavailable", "crashed")


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
    env: Mapping[str, str] = field(converter=lambda m: dict(m))
    agent_args: tuple[str, ...] = field(converter=_tuple, default=())
    task: Any = field(default=None, eq=False, repr=False)


@frozen
class AgentOutcome:
    """What an adapter returns: the adapter hook's contract."""

    status: str = field(validator=attrs.validators.in_(AGENT_STATUSES))
    exit_code: int | None
    stdout_tail: str
    stderr_tail: str
    wall_s: float
    usage: Usage | None = None
    leftover_processes: tuple[str, ...] = field(converter=_tuple, default=())
    detail: str = ""


@frozen
class CalibrationExpectation:
    """What a constructed agent must score on every task: its verdict and failure mode."""

    verdict: str  # fixed, not-fixed or unavailable
    failure_mode: str | None = None  # None: any failure mode (or none, when fixed)


@frozen
class AgentAdapter:
    """An agent certlab can run: ``run(request) -> AgentOutcome``.

    A constructed agent (one of the instrument's own, like ``oracle``) carries the
    ``calibration`` result it must produce on every task; certification checks it.
    ``check_args(agent_args)``, when given, refuses bad arguments (raising UsageError)
    before anything runs. ``preflight(agent_args, environment)``, when given, checks what a
    live run needs (the binary, its version, credentials or base URL) for ``certlab
    preflight``, which then makes one smoke call through ``run``.
    """

    name: str
    description: str
    run: Callable[[AgentRequest], AgentOutcome] = field(eq=False, repr=False)
    calibration: CalibrationExpectation | None = None
    check_args: Callable[[tuple[str, ...]], None] | None = field(default=None, eq=False, repr=False)
    preflight: Callable[[tuple[str, ...], Mapping[str, str]], Sequence[PreflightCheck]] | None = field(
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
    """The held-out cases as locked (``certlab_core.lock``): scoring reads only ``cases_file``.

    ``cases_file`` is the copy of the cases taken at lock time (outside every work copy),
    ``cases_sha256`` its hash; ``fingerprints`` maps each fingerprinted file (the cases as
    the task holds them, the scorer's files, the kernel's own files) to its sha256 at lock
    time, and ``sources`` maps each group of them to the file or folder to hash again.
    A score is computed only while nothing moved; ``experiment_dir`` is the folder a
    scoring copy must stay out of.
    """

    cases_file: str
    cases_sha256: str
    fingerprints: Mapping[str, str] = field(converter=lambda m: dict(m))
    sources: Mapping[str, str] = field(converter=lambda m: dict(m))
    experiment_dir: str = ""
    seal: str = ""


@frozen
class GradeRequest:
    """What a grader is given: the work copy an agent left and what was issued."""

    workdir: str
    family: TaskFamily
    defect: Defect
    issued: Mapping[str, str] = field(converter=lambda m: dict(m))
    expected_tests: tuple[str, ...] = field(converter=_tuple, default=())
    acceptance_lock: AcceptanceLock | None = None


@frozen
class GradeResult:
    """A grader's judgement. ``failure_mode`` is from the kernel's closed list; ``data``
    holds facts the kernel may use (the suite grader reports the node ids it collected)."""

    grader: str
    passed: bool
    failure_mode: str | None = None
    detail: str = ""
    data: Mapping[str, Any] = field(factory=dict, converter=lambda m: dict(m))


@frozen
class Grader:
    """A grader: ``grade(request) -> GradeResult``, run in its own fresh process.

    Graders run in ascending ``order`` and the chain stops at the first that fails.
    """

    name: str
    order: int
    description: str
    grade: Callable[[GradeRequest], GradeResult] = field(eq=False, repr=False)


# --------------------------------------------------------------------------- statistics


@frozen
class Bounds:
    """Bounds on candidate minus baseline success rate, and what they decide."""

    lower: float
    upper: float
    verdict: str  # PASS, BLOCK or INCONCLUSIVE


@frozen
class StatisticalRule:
    """A decision rule, pure functions of counts and the sealed parameters.

    - ``decide(baseline_successes, baseline_n, candidate_successes, candidate_n, alpha,
      delta, conditions, looks) -> Bounds``: the bounds on candidate minus baseline and
      the verdict at one look (``alpha`` is the experiment's; the rule splits it over
      ``conditions`` and ``looks`` itself);
    - ``interval(successes, n, alpha) -> (low, high)``: the per-arm interval the rule
      uses, at two-sided level ``alpha``;
    - ``plan(p_baseline, p_candidate, n, alpha, delta, conditions, looks) -> dict`` with
      the exact probabilities of ``PASS``, ``BLOCK`` and ``INCONCLUSIVE`` (None when the
      rule cannot plan).
    """

    name: str
    description: str
    decide: Callable[..., Bounds] = field(eq=False, repr=False)
    interval: Callable[[int, int, float], tuple[float, float]] = field(eq=False, repr=False)
    plan: Callable[..., dict[str, float]] | None = field(default=None, eq=False, repr=False)


# --------------------------------------------------------------------------- registry


@frozen
class PluginInfo:
    """One loaded plugin: its entry point name, distribution and what it provides."""

    name: str
    distribution: str
    version: str
    provides: Mapping[str, tuple[str, ...]] = field(converter=lambda m: dict(m))


@frozen
class PluginFailure:
    """A plugin that could not be loaded, reported in one line."""

    entry_point: str
    distribution: str
    error: str


# --------------------------------------------------------------------------- reporters


@frozen
class Reporter:
    """A report format: ``render(report, rule) -> str``, the whole file's text.

    ``report`` is a ``certlab_core.diagnosis.model.Report`` (the verdict, and per condition
    its bounds, arms, fault firings and failure clusters); ``rule`` is the experiment's
    ``StatisticalRule`` when it is installed, else None (a reporter that plots the rule's
    operating characteristic calls ``rule.plan``). ``suffix`` is the usual file ending
    (``.md``, ``.xml``, ``.html``).
    """

    name: str
    description: str
    suffix: str
    render: Callable[[Any, StatisticalRule | None], str] = field(eq=False, repr=False)


# --------------------------------------------------------------------------- tool worlds and faults


@frozen
class OracleVerdict:
    """An oracle's judgement of a tool world's final state; the agent's own account never enters it."""

    passed: bool
    detail: str = ""


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

    task: Mapping[str, Any] = field(converter=lambda m: dict(m))
    tools: Mapping[str, Callable[..., Any]] = field(converter=lambda m: dict(m), eq=False, repr=False)
    snapshot: Callable[[], Any] = field(eq=False, repr=False)
    model: Callable[[str, tuple[str, ...], Any], Mapping[str, Any]] | None = field(default=None, eq=False, repr=False)


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
    build: Callable[[Mapping[str, Any], int], WorldInstance] = field(eq=False, repr=False)
    oracle: Callable[[Mapping[str, Any], Any], OracleVerdict] = field(eq=False, repr=False)
    decisions: bool = False
    check_input: Callable[[Mapping[str, Any]], None] | None = field(default=None, eq=False, repr=False)


FAULT_TARGETS = ("tool", "decision", "model", "any")


@frozen
class FaultContext:
    """What a fault sees of one call crossing the tool boundary, before the call runs.

    ``kind`` is ``tool`` or ``decision``; ``call_number`` counts the calls to ``name`` in this
    trial (1-based, this one included); ``seq`` is the call's position among all events;
    ``fired`` is how many times this declared fault has already fired in this trial;
    ``params`` are the declaration's parameters; ``rng`` is a ``random.Random`` seeded from
    the trial's seed and the fault's position, so a fault that draws is reproducible.
    """

    kind: str
    name: str
    args: Mapping[str, Any] = field(converter=lambda m: dict(m))
    seq: int
    call_number: int
    fired: int
    params: Mapping[str, Any] = field(converter=lambda m: dict(m))
    rng: Any = field(eq=False, repr=False)


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
    transform: Callable[[Any], Any] | None = field(default=None, eq=False, repr=False)
    delay_s: float = 0.0


@frozen
class Fault:
    """An injectable fault: ``inject(context) -> FaultEffect | None`` (None: it does not fire on this call).

    ``target`` says which calls it may be declared on: ``tool`` (a world's tools),
    ``decision`` (the decision channel, ``decide``) or ``any``. ``check_params(params)``,
    when given, refuses bad parameters by raising UsageError before anything runs.
    """

    name: str
    description: str
    inject: Callable[[FaultContext], FaultEffect | None] = field(eq=False, repr=False)
    target: str = field(default="tool", validator=attrs.validators.in_(FAULT_TARGETS))
    check_params: Callable[[Mapping[str, Any]], None] | None = field(default=None, eq=False, repr=False)
