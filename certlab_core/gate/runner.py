"""The trial runner: each trial in a fresh process, its oracle in another.

The parent holds the registry, the manifest and the plugins' records and never imports the
code under test. Each arm has a zygote: a fresh, lean interpreter (or, when a plugin is not
importable by name, a child forked from the parent) that imports only the trial machinery,
the world and that arm's agent, and forks one fresh process per trial; the oracles' zygote
does the same for oracles and never sees an agent's code. A trial's process runs the agent
through the recorded boundary and returns the events and the final state; an oracle's
process judges that state. The parent starts no thread. After each look the stopping rule
is evaluated in a child (the rule's scipy never enters the parent).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from attrs import define, field, frozen

from certlab_core._runtime.registry import Registry
from certlab_core.certify.heartbeat import InFlight, beating, heartbeat_interval
from certlab_core.certify.lab import trial_time_limit_s
from certlab_core.gate import boundary as bd
from certlab_core.gate import trial as tr
from certlab_core.gate.classify import WORKER_LOST, child_failure_outcome, classify, needs_oracle
from certlab_core.gate.decision import walk
from certlab_core.gate.descriptor import FaultDeclaration, is_reference
from certlab_core.gate.manifest import ARMS, Manifest
from certlab_core.gate.progress import ProgressLine
from certlab_core.gate.resume import pending_jobs, recorded_trials
from certlab_core.gate.schedule import Identities, key_of, look_order
from certlab_core.gate.store import TRIAL_SCHEMA, TRIALS, TrialSink
from certlab_core.gate.trial import Job, TrialKey, TrialPlan
from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.plugin.types.executor import ExecutorSession, Stage, Work
from certlab_core.plugin.types.fault import Fault
from certlab_core.plugin.types.rule import StatisticalRule
from certlab_core.plugin.types.tool_world import ToolWorld
from certlab_core.sdk.forking import ForkedCallError, call_in_fork
from certlab_core.sdk.grading import grader_chain

if TYPE_CHECKING:
    from certlab_core.gate.family import FamilyTrials

ORACLE_TIMEOUT_S = 120.0
KILL_GRACE_S = 5.0
DETAIL_LIMIT = tr.DETAIL_LIMIT
ORACLES = "oracles"
# What differs between two runs of one manifest, on any executors (and, in a coding trial's
# ``grades``, the ``wall_s`` a grader reports in its data).
VOLATILE_FIELDS = ("timings", "seal")
WORKER_LOST_RERUNS = 3  # a trial whose worker is lost runs again, at most this many times (then its last loss stands)

__all__ = [
    "Job",
    "Plan",
    "TrialKey",
    "plan_run",
    "rerun_trial",
    "run_distributions",
    "run_experiment",
    "run_oracle",
    "run_tool_trial",
]


@frozen
class Plan:
    """What the parent resolved before the first trial: the world, the faults, the rule, and the trials' plan."""

    manifest: Manifest
    world: ToolWorld | None
    faults: Mapping[str, Fault]  # plugin faults by name (references are resolved in the trial's process)
    rule: StatisticalRule
    registry: Registry = field(eq=False, repr=False)
    trial: TrialPlan | None = None
    spawnable: bool = False  # every plugin the trials need imports by name in a fresh interpreter

    @property
    def contract(self) -> dict[str, Any]:
        return _contract_of(self.manifest)


def _contract_of(manifest: Manifest) -> dict[str, Any]:
    contract = manifest.contract
    return {
        "max_tool_calls": contract.max_tool_calls,
        "forbidden_tools": list(contract.forbidden_tools),
        "required_tools": list(contract.required_tools),
        "max_calls_per_tool": dict(contract.max_calls_per_tool),
    }


def _module_of(registry: Registry, kind: str, name: str) -> Any:
    plugin_name = registry.plugin_name_of(kind, name)
    return registry.pm.get_plugin(plugin_name)


def _importable(module: Any) -> bool:
    name = getattr(module, "__name__", None)
    if not isinstance(name, str) or getattr(module, "__file__", None) is None:
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def plan_run(manifest: Manifest, registry: Registry) -> Plan:
    """Resolve the manifest's plugin names against the installed plugins (a missing one is a usage error)."""
    world = None
    modules: list[Any] = []
    world_ref: tuple[str, str] | None = None
    if manifest.task.kind == "tool-world" and manifest.task.world and not is_reference(manifest.task.world):
        world = registry.get("tool_worlds", manifest.task.world)
        module = _module_of(registry, "tool_worlds", manifest.task.world)
        modules.append(module)
        world_ref = (module.__name__, world.name)
        tr.remember(module.__name__, "tool_worlds", world.name, world)
    faults: dict[str, Fault] = {}
    fault_modules: dict[str, str] = {}
    for condition in manifest.conditions:
        for declared in condition.faults:
            if not is_reference(declared.fault) and declared.fault not in faults:
                faults[declared.fault] = registry.get("faults", declared.fault)
                module = _module_of(registry, "faults", declared.fault)
                modules.append(module)
                fault_modules[declared.fault] = module.__name__
                tr.remember(module.__name__, "faults", declared.fault, faults[declared.fault])
    rule = registry.get("statistical_rules", manifest.rule.name)
    trial = None
    if manifest.task.kind == "tool-world":
        toolset = manifest.task.world if manifest.task.world and is_reference(manifest.task.world) else None
        trial = TrialPlan(
            descriptor_dir=manifest.descriptor_dir,
            task_input=manifest.task.input,
            world=world_ref,
            toolset=toolset,
            oracle=manifest.oracle,
            agents={arm: manifest.arms[arm].agent for arm in ARMS},
            conditions={
                c.name: tuple(
                    tr.FaultSpec(
                        index=i,
                        name=d.fault,
                        module=fault_modules.get(d.fault),
                        tool=d.tool,
                        on_calls=None if d.on_calls == "all" else tuple(d.on_calls),
                        params=d.params,
                    )
                    for i, d in enumerate(c.faults)
                )
                for c in manifest.conditions
            },
            tool_calls=manifest.budgets.tool_calls,
            model_steps=manifest.budgets.model_steps,
            seconds=manifest.budgets.seconds,
        )
    return Plan(
        manifest=manifest,
        world=world,
        faults=faults,
        rule=rule,
        registry=registry,
        trial=trial,
        spawnable=trial is not None and all(_importable(m) for m in modules),
    )


def run_tool_trial(plan: Plan, key: TrialKey, agent: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Run one tool-world trial in this process (call it in a fresh one): see ``certlab_core.gate.trial``."""
    assert plan.trial is not None
    return tr.run_tool_trial(plan.trial, key, agent)


def run_oracle(plan: Plan, task: Any, snapshot: Any) -> dict[str, Any]:
    """Judge a final state in this process (call it in a fresh one)."""
    assert plan.trial is not None
    return tr.run_oracle(plan.trial, task, snapshot)


# --------------------------------------------------------------------------- the record


def trial_line(
    plan: Plan,
    job: Job,
    outcome: Mapping[str, Any],
    oracle: Mapping[str, Any] | None,
    oracle_error: str | None,
    timings: Mapping[str, float],
) -> dict[str, Any]:
    manifest = plan.manifest
    verdict, failure_mode, error = classify(manifest, outcome, oracle, oracle_error)
    violations = (
        bd.contract_violations(plan.contract, outcome["events"], completed=outcome["agent"]["status"] == "completed")
        if manifest.task.kind == "tool-world"
        else []
    )
    line: dict[str, Any] = {
        "schema": TRIAL_SCHEMA,
        "id": job.key.id,
        "arm": job.key.arm,
        "condition": job.key.condition,
        "index": job.key.index,
        "seed": job.key.seed,
        "attempt": job.attempt,
        "identity": job.identity,
        "manifest_seal": manifest.seal,
        "outcome": verdict,
        "failure_mode": failure_mode,
        "error": error,
        "agent": dict(outcome["agent"]),
        "oracle": dict(oracle) if oracle is not None else None,
        "events": outcome["events"],
        "faults": outcome["faults"],
        "counts": outcome["counts"],
        "budget_exceeded": outcome.get("budget_exceeded"),
        "contract_violations": violations,
        "usage": outcome.get("usage"),
        "timings": {name: round(value, 6) for name, value in timings.items()},
    }
    for extra in ("grades", "changes", "upstream_errors"):
        if extra in outcome:
            line[extra] = outcome[extra]
    return line


# --------------------------------------------------------------------------- running


@define
class RunOutcome:
    """What ``run_experiment`` did: the lines it appended and whether it stopped early."""

    lines: int = 0
    stopped: str | None = None


def _walk_child(plan: Plan, path: Path) -> tuple[int | None, list[str], list[str]]:
    """In a child: where the stopping rule stands on the lines of ``path`` so far (the rule's scipy is imported here).

    The child reads the file itself, a line at a time, so the parent never holds the store.
    """
    from certlab_core.gate.summaries import read_summaries

    trials = read_summaries(plan.manifest, path, workers=1)
    result = walk(plan.manifest, trials.latest, plan.rule)
    return result.due_look, result.due_conditions, result.problems + trials.problems


def run_experiment(
    plan: Plan,
    folder: Path,
    session: ExecutorSession,
    retry_infra: bool = False,
    progress: ProgressLine | None = None,
) -> RunOutcome:
    """Run the manifest's trials into ``folder/trials.jsonl`` look by look, stopping as the stopping rule says.

    The trials run on ``session`` (``open_executor``'s, which stays open: its opener closes
    it); a coding arm's proof runs where ``open_executor`` sends certification's work.
    """
    stages, coding = _stages(plan)
    result = RunOutcome()
    gc.collect()
    gc.freeze()  # children then share the parent's objects without copying them on the collector's account
    session.prepare(list(stages.values()))
    # A coding trial's gradings fork from warm services, as certify's do, where its unit forks from here.
    with contextlib.nullcontext() if coding is None else coding.warm_gradings(session.slots):
        _run_looks(plan, folder, retry_infra, progress, stages, session, result)
    if progress is not None:
        progress.finish()
    return result


FAMILY = "family"


def trial_stages(plan: Plan) -> dict[str, Stage]:
    """The stages of a run's work: one per arm and one for the oracles (tool worlds), or one graded coding trial.

    An arm's stage preloads only its own agent; the oracles' stage never sees an agent's
    code. A coding arm's trial is graded in its own process and has no serving process.
    Stage names carry the manifest's seal, so a worker that served another run starts afresh.
    """
    return _stages(plan)[0]


def _stages(plan: Plan) -> tuple[dict[str, Stage], FamilyTrials | None]:
    """``trial_stages``, and a coding run's trials (whose gradings want warm services), else None."""
    seal = plan.manifest.seal
    if plan.manifest.task.kind == "family":
        from certlab_core.gate.family import FamilyTrials

        trials = attrs.evolve(FamilyTrials.prepare(plan), plan=ManifestOnly(plan.manifest))
        return {FAMILY: Stage(name=f"{FAMILY}@{seal}", call=partial(_family_trial, trials))}, trials
    assert plan.trial is not None
    stages = {
        arm: Stage(
            name=f"{arm}@{seal}",
            preload=partial(tr.preload_agent, plan.trial, arm),
            call=tr.trial_call,
            direct=partial(tr.direct_trial, plan.trial),
            portable=plan.spawnable,
        )
        for arm in ARMS
    }
    stages[ORACLES] = Stage(
        name=f"{ORACLES}@{seal}",
        preload=partial(tr.preload_oracle, plan.trial),
        call=tr.oracle_call,
        direct=partial(tr.direct_oracle, plan.trial),
        portable=plan.spawnable,
    )
    return stages, None


@frozen
class ManifestOnly:
    """The part of a Plan a coding trial's process reads (the registry stays in the parent)."""

    manifest: Manifest


def _family_trial(trials: Any, _preloaded: object, job: Job) -> dict[str, Any]:
    """A coding trial in its own process: the arm's adapter on the index's defect, graded by the chain."""
    result: dict[str, Any] = trials.child(job)
    return result


@frozen
class TrialTag:
    """What a trial's unit of work carries back: which attempt it was."""

    job: Job


@frozen
class OracleTag:
    """What an oracle's unit carries back: the attempt, what its trial reported, and when the oracle started."""

    job: Job
    outcome: Mapping[str, Any] = field(eq=False, hash=False)
    started: float


def _run_looks(
    plan: Plan,
    folder: Path,
    retry_infra: bool,
    progress: ProgressLine | None,
    stages: Mapping[str, Stage],
    session: ExecutorSession,
    result: RunOutcome,
) -> None:
    manifest = plan.manifest
    graded_in_child = FAMILY in stages
    identities = Identities(manifest)
    looks = len(manifest.schedule.look_sizes)
    counts = {"done": 0, "failed": 0, "errors": 0}
    trial_timeout = _trial_time_limit_s(plan, graded_in_child)
    retried: set[str] = set()  # trials whose one --retry-infra retry is used
    lost: dict[str, int] = {}  # trials re-run after their worker was lost, and how often
    in_flight = InFlight()
    interval = heartbeat_interval() if progress is not None and progress.enabled else None
    with TrialSink(folder) as sink, beating(in_flight, progress.note if progress else print, interval):
        recorded = recorded_trials(folder / TRIALS, manifest)  # a resumed run: these never run again
        counts["done"] = len(recorded)
        conditions: list[str] | None = None
        for look in range(1, looks + 1):
            scheduled = (Job(key, 1, identities.of(key)) for key in look_order(manifest, look, conditions))
            jobs, stopped = pending_jobs(scheduled, recorded, retry_infra)
            result.stopped = result.stopped or stopped
            queue: deque[Job] = deque(jobs)
            started: dict[str, float] = {}
            while queue or session.busy():
                while queue and session.busy() < session.slots and result.stopped is None:
                    job = queue.popleft()
                    started[f"{job.key.id}#{job.attempt}"] = time.perf_counter()
                    in_flight.start(job.key.id)
                    stage = stages[FAMILY if graded_in_child else job.key.arm]
                    session.submit(Work(tag=TrialTag(job), stage=stage, arg=job, timeout_s=trial_timeout))
                if result.stopped is not None and not session.busy():
                    break
                for done in session.wait():
                    tag = done.tag
                    job = tag.job  # type: ignore[attr-defined]
                    if isinstance(tag, TrialTag):
                        outcome = (
                            child_failure_outcome(done.failure, manifest, agent_held_inside=graded_in_child)
                            if done.failure is not None
                            else done.value
                        )
                        assert isinstance(outcome, dict)
                        if not graded_in_child and needs_oracle(outcome):
                            state = (outcome.get("task"), outcome.get("snapshot"))
                            oracle_tag = OracleTag(job, outcome, time.perf_counter())
                            session.submit(
                                Work(tag=oracle_tag, stage=stages[ORACLES], arg=state, timeout_s=ORACLE_TIMEOUT_S)
                            )
                            continue
                        line = trial_line(
                            plan, job, outcome, outcome.get("oracle"), None, _timings(started, job, outcome)
                        )
                    else:
                        assert isinstance(tag, OracleTag)
                        outcome, oracle_started = dict(tag.outcome), tag.started
                        oracle_error = None
                        oracle: Mapping[str, Any] | None = None
                        if done.failure is not None:
                            oracle_error = done.failure.summary[:DETAIL_LIMIT]
                            if done.failure.kind == WORKER_LOST:  # the judging was lost, not judged: run it all again
                                outcome = child_failure_outcome(done.failure, manifest)
                        else:
                            assert isinstance(done.value, dict)
                            oracle = done.value
                        timings = _timings(started, job, outcome)
                        timings["oracle_s"] = time.perf_counter() - oracle_started
                        timings["total_s"] = time.perf_counter() - started[f"{job.key.id}#{job.attempt}"]
                        line = trial_line(
                            plan, job, outcome, oracle if outcome.get("error") is None else None, oracle_error, timings
                        )
                    sink.append(line)
                    in_flight.finish(job.key.id)
                    result.lines += 1
                    if line["outcome"] == "error":
                        key_id = job.key.id
                        if str(line["error"]).startswith(WORKER_LOST) and lost.get(key_id, 0) < WORKER_LOST_RERUNS:
                            lost[key_id] = lost.get(key_id, 0) + 1  # not its --retry-infra retry
                            queue.appendleft(Job(job.key, job.attempt + 1, job.identity))
                            continue
                        if retry_infra and key_id not in retried:
                            retried.add(key_id)
                            queue.appendleft(Job(job.key, job.attempt + 1, job.identity))
                            continue
                        counts["errors"] += 1
                        result.stopped = result.stopped or f"{job.key.id}: {line['error']}"
                    counts["done"] += 1
                    counts["failed"] += line["outcome"] == "failure"
                    if progress is not None:
                        progress.update(counts["done"], counts["failed"], counts["errors"])
            if result.stopped is not None or look == looks:
                break
            due_look, due, problems = _interim(plan, folder)
            if problems:
                result.stopped = problems[0]
                break
            if due_look is None:
                result.stopped = f"the stopping rule stopped the run after look {look}"
                break
            conditions = due


def _trial_time_limit_s(plan: Plan, graded_in_child: bool) -> float:
    """How long one trial's unit may run. A tool-world trial is its agent's run: the seconds budget and a grace.
    A coding trial holds its agent to the budget itself and is graded after it, so its limit is a backstop."""
    seconds = plan.manifest.budgets.seconds
    return trial_time_limit_s(seconds, grader_chain(plan.registry)) if graded_in_child else seconds + KILL_GRACE_S


def _timings(started: Mapping[str, float], job: Job, outcome: Mapping[str, Any]) -> dict[str, float]:
    total = time.perf_counter() - started[f"{job.key.id}#{job.attempt}"]
    return {"agent_s": float(outcome.get("agent_s", total)), "total_s": total}


def _interim(plan: Plan, folder: Path) -> tuple[int | None, list[str], list[str]]:
    if threading.active_count() > 1:  # an executor's client holds threads here: no fork, the look is read in place
        return _walk_child(plan, folder / TRIALS)
    try:
        return call_in_fork(_walk_child, plan, folder / TRIALS, timeout=600.0)
    except ForkedCallError as error:
        raise InstrumentError(f"evaluating the stopping rule failed: {error.failure.summary}") from None


# --------------------------------------------------------------------------- one trial again (diagnosis)


def rerun_trial(
    manifest: Manifest,
    trial_id: str,
    registry: Registry,
    faults: Sequence[FaultDeclaration] | None = None,
    attempt: int = 1,
) -> dict[str, Any]:
    """Run one scheduled trial again in a fresh process (its oracle in another), optionally under other faults.

    Returns the trial line it would record (sealed identity of the original manifest; not
    appended anywhere). With ``faults`` the condition's declarations are replaced, so the
    line's ``faults`` entries follow the given list.
    """
    key = key_of(manifest, trial_id)
    if key is None:
        raise UsageError(f"{trial_id!r} is not a trial of this manifest; ids read ARM/CONDITION/INDEX")
    if faults is not None:
        conditions = tuple(
            attrs.evolve(c, faults=tuple(faults)) if c.name == key.condition else c for c in manifest.conditions
        )
        manifest = attrs.evolve(manifest, conditions=conditions)
    plan = plan_run(manifest, registry)
    job = Job(key, attempt, Identities(manifest).of(key))
    started = time.perf_counter()
    try:
        outcome = call_in_fork(run_tool_trial, plan, key, timeout=manifest.budgets.seconds + KILL_GRACE_S)
    except ForkedCallError as error:
        outcome = child_failure_outcome(error.failure, manifest)
    oracle: dict[str, Any] | None = None
    oracle_error = None
    if needs_oracle(outcome):
        try:
            oracle = call_in_fork(
                run_oracle, plan, outcome.get("task"), outcome.get("snapshot"), timeout=ORACLE_TIMEOUT_S
            )
        except ForkedCallError as error:
            oracle_error = error.failure.summary
    return trial_line(plan, job, outcome, oracle, oracle_error, {"total_s": time.perf_counter() - started})


def run_distributions(manifest: Manifest) -> dict[str, str]:
    """What every machine running this manifest's trials must have: its plugins and certlab, at the sealed versions."""
    return {"certlab": manifest.certlab_version, **manifest.plugins}
