"""What runs in a trial's process and its oracle's, kept lean to fork from.

It imports the boundary, the records and the plugins a trial needs, nothing else of the
gate (no manifest, no cattrs, no registry): an arm's zygote may be a fresh interpreter that
imports only this, the world and the agent, and forks each trial from there. A
:class:`TrialPlan` is plain, picklable data naming everything a trial needs; plugin records
are looked up by the module that provides them.
"""

from __future__ import annotations

import importlib
import json
import random
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from attrs import field, frozen

from certlab_core.gate import boundary as bd
from certlab_core.gate.references import callable_reference
from certlab_core.plugin import exceptions
from certlab_core.plugin.types.agent import Usage
from certlab_core.plugin.types.fault import Fault
from certlab_core.plugin.types.fields import loose_map
from certlab_core.plugin.types.tool_world import OracleVerdict, WorldInstance

RETURNED_LIMIT = 64 * 1024
DETAIL_LIMIT = 2000
USAGE_FIELDS = ("input_tokens", "output_tokens", "cached_input_tokens", "cost_usd", "cost_source")


@frozen
class TrialKey:
    """One scheduled trial: its arm, condition, index and seed."""

    arm: str
    condition: str
    index: int
    seed: int

    @property
    def id(self) -> str:
        return f"{self.arm}/{self.condition}/{self.index}"


@frozen
class Job:
    """One attempt of one trial."""

    key: TrialKey
    attempt: int
    identity: str


@frozen
class FaultSpec:
    """One declared fault of a condition: a plugin fault (by its providing module) or a ``module:function``."""

    index: int
    name: str
    module: str | None  # the plugin module providing the fault; None for a module:function reference
    tool: str
    on_calls: tuple[int, ...] | None  # None: every call
    params: Mapping[str, Any] = field(converter=loose_map)


@frozen
class TrialPlan:
    """Everything a trial and its oracle need, as plain data (picklable, so a fresh interpreter can receive it)."""

    descriptor_dir: str
    task_input: Mapping[str, Any] = field(converter=loose_map)
    world: tuple[str, str] | None  # (plugin module, world name)
    toolset: str | None  # module:function building the world, when not a plugin
    oracle: str  # "world" or module:function
    agents: Mapping[str, str | None] = field(converter=loose_map)
    conditions: Mapping[str, tuple[FaultSpec, ...]] = field(converter=loose_map)
    tool_calls: int | None
    model_steps: int | None
    seconds: float


# --------------------------------------------------------------------------- plugins by module

_LOCAL: dict[tuple[str, str, str], Any] = {}  # (module, kind, name) -> record, seen in this process


def remember(module: str, kind: str, name: str, record: Any) -> None:
    """Register a record this process already holds (children forked from it then need no import)."""
    _LOCAL[(module, kind, name)] = record


def plugin_record(module: str, kind: str, name: str) -> Any:
    """The record ``name`` of ``kind`` that the plugin module ``module`` provides (imported on first use)."""
    key = (module, kind, name)
    if key not in _LOCAL:
        plugin = importlib.import_module(module)
        for record in getattr(plugin, f"certlab_{kind}")() or ():
            _LOCAL[(module, kind, record.name)] = record
    return _LOCAL[key]


# --------------------------------------------------------------------------- the trial


class _Deadline(BaseException):
    """Raised in a trial's process when its seconds budget runs out."""


def _on_deadline(_signum: int, _frame: Any) -> None:
    raise _Deadline()


def _detail(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:DETAIL_LIMIT]


def declared_faults(plan: TrialPlan, condition: str, seed: int) -> list[bd.DeclaredFault]:
    """The condition's faults, live for one trial (a fault that does not load is the injector's failure)."""
    out = []
    for spec in plan.conditions[condition]:
        try:
            if spec.module is not None:
                fault: Fault = plugin_record(spec.module, "faults", spec.name)
            else:
                inject = callable_reference(spec.name, plan.descriptor_dir)
                fault = Fault(name=spec.name, description=spec.name, inject=inject, target="any")
        except Exception as error:
            raise exceptions.BoundaryBroken(
                f"injector-broken: the fault {spec.name} does not load ({_detail(error)})"
            ) from None
        out.append(
            bd.DeclaredFault(
                index=spec.index,
                name=spec.name,
                fault=fault,
                tool=spec.tool,
                on_calls=spec.on_calls,
                params=dict(spec.params),
                rng=random.Random(f"{seed}/fault/{spec.index}"),
            )
        )
    return out


def build_world(plan: TrialPlan, seed: int) -> WorldInstance:
    builder: Callable[..., Any]
    if plan.world is not None:
        builder = plugin_record(plan.world[0], "tool_worlds", plan.world[1]).build
    else:
        assert plan.toolset is not None
        builder = callable_reference(plan.toolset, plan.descriptor_dir)
    instance = builder(json.loads(json.dumps(plan.task_input)), seed)
    if not isinstance(instance, WorldInstance):
        raise TypeError(f"the world's build returned {type(instance).__name__}, not WorldInstance")
    return instance


def load_agent(plan: TrialPlan, arm: str) -> Callable[..., Any]:
    reference = plan.agents[arm]
    assert reference is not None
    return callable_reference(reference, plan.descriptor_dir)


def blank_outcome(status: str, detail: str = "") -> dict[str, Any]:
    """What a trial's process reports before anything happened: the agent's status, no calls, no faults, no error.

    The trial fills it in as it runs; the runner uses it as it is for a child that never reported.
    """
    return {
        "agent": {"status": status, "exit_code": None, "detail": detail, "returned": None},
        "events": [],
        "faults": [],
        "counts": {"tool_calls": 0, "model_steps": 0, "by_tool": {}},
        "budget_exceeded": None,
        "error": None,
        "uncaught_tool_error": False,
    }


def run_tool_trial(plan: TrialPlan, key: TrialKey, agent: Callable[..., Any] | None = None) -> dict[str, Any]:
    """In a trial's process: build the world, run the agent through the boundary, return what happened (no verdict).

    ``agent`` is the arm's agent when the process was forked from a zygote that preloaded it;
    otherwise it is imported here.
    """
    started = time.perf_counter()
    result: dict[str, Any] = {**blank_outcome("completed"), "task": None, "snapshot": None, "usage": None}
    try:
        instance = build_world(plan, key.seed)
    except Exception as error:
        result["error"] = f"world-broken: building the world raised {_detail(error)}"
        return result
    try:
        faults = declared_faults(plan, key.condition, key.seed)
    except exceptions.BoundaryBroken as broken:
        result["error"] = broken.line
        return result
    budgets = bd.Budgets(tool_calls=plan.tool_calls, model_steps=plan.model_steps, seconds=plan.seconds)
    boundary = bd.Boundary(instance, faults, budgets, seed=key.seed)
    tools = bd.Tools.over(boundary)
    task = bd.to_json(instance.task)
    result["task"] = task
    agent_status = result["agent"]
    if agent is None:
        try:
            agent = load_agent(plan, key.arm)
        except Exception as error:
            agent_status.update(status="crashed", detail=f"the agent does not load: {_detail(error)}")
    if agent is not None:
        previous = signal.signal(signal.SIGALRM, _on_deadline)
        signal.setitimer(signal.ITIMER_REAL, max(0.001, plan.seconds - (time.perf_counter() - started)))
        try:
            returned = agent(json.loads(json.dumps(task)), tools, random.Random(key.seed))
            agent_status["returned"] = _returned(returned)
            if isinstance(returned, Mapping) and isinstance(returned.get("usage"), Mapping):
                result["usage"] = usage_of(returned["usage"])
        except _Deadline:
            agent_status.update(status="timeout", detail=f"the seconds budget ({plan.seconds:g} s) ran out")
            boundary.budget_exceeded = boundary.budget_exceeded or "seconds"
        except exceptions.BudgetExceeded as error:
            agent_status.update(status="budget", detail=_detail(error))
        except exceptions.BoundaryBroken as broken:
            result["error"] = broken.line
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            agent_status.update(status="exited", exit_code=code, detail=f"the agent called sys.exit({done.code!r})")
        except exceptions.ToolError as error:
            agent_status.update(status="crashed", detail=_detail(error))
            result["uncaught_tool_error"] = True
        except BaseException as error:
            agent_status.update(status="crashed", detail=_detail(error))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    if boundary.broken and not result["error"]:
        result["error"] = boundary.broken  # the agent swallowed it; the world is still broken
    result["events"] = boundary.events
    result["faults"] = boundary.fault_summaries()
    result["counts"] = boundary.counts()
    result["budget_exceeded"] = boundary.budget_exceeded
    if result["error"] is None:
        try:
            result["snapshot"] = bd.to_json(instance.snapshot())
        except Exception as error:
            result["error"] = f"world-broken: the world's snapshot raised {_detail(error)}"
    result["agent_s"] = time.perf_counter() - started
    return result


def _returned(value: Any) -> Any:
    data = bd.to_json(value)
    if len(json.dumps(data)) > RETURNED_LIMIT:
        return {"truncated": True, "note": f"the agent returned more than {RETURNED_LIMIT} bytes of JSON"}
    return data


def usage_of(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The agent's reported consumption as a Usage record's fields (None when it is not one)."""
    fields = {key: data[key] for key in USAGE_FIELDS if key in data}
    if set(data) - set(USAGE_FIELDS) - {"shape"}:
        return None
    try:
        usage = Usage(shape=str(data.get("shape", "python-agent")), **fields)
    except TypeError:
        return None
    for key in ("input_tokens", "output_tokens", "cached_input_tokens"):
        value = getattr(usage, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return None
    if usage.cost_usd is not None and (isinstance(usage.cost_usd, bool) or not isinstance(usage.cost_usd, int | float)):
        return None
    return {
        "shape": usage.shape,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_input_tokens": usage.cached_input_tokens,
        "cost_usd": usage.cost_usd,
        "cost_source": usage.cost_source,
    }


# --------------------------------------------------------------------------- the oracle


def load_oracle(plan: TrialPlan) -> Callable[..., Any]:
    if plan.oracle == "world":
        assert plan.world is not None
        oracle: Callable[..., Any] = plugin_record(plan.world[0], "tool_worlds", plan.world[1]).oracle
        return oracle
    return callable_reference(plan.oracle, plan.descriptor_dir)


def run_oracle(plan: TrialPlan, task: Any, snapshot: Any, oracle: Callable[..., Any] | None = None) -> dict[str, Any]:
    """In an oracle's process: judge the final state; anything but a verdict is the oracle's own failure."""
    judge = oracle if oracle is not None else load_oracle(plan)
    verdict = judge(task, snapshot)
    if isinstance(verdict, bool):
        verdict = OracleVerdict(passed=verdict)
    if not isinstance(verdict, OracleVerdict):
        raise TypeError(f"the oracle returned {type(verdict).__name__}, not OracleVerdict")
    return {"passed": bool(verdict.passed), "detail": str(verdict.detail)[:DETAIL_LIMIT]}


# --------------------------------------------------------------------------- zygotes (module-level: picklable)


def preload_agent(plan: TrialPlan, arm: str) -> tuple[TrialPlan, Callable[..., Any]]:
    """In an arm's zygote: import the world, the faults and the arm's agent once; each trial forked from it starts warm.

    Only the agent must load here (a world or fault that does not is reported by each trial).
    """
    try:
        if plan.world is not None:
            plugin_record(plan.world[0], "tool_worlds", plan.world[1])
        else:
            assert plan.toolset is not None
            callable_reference(plan.toolset, plan.descriptor_dir)
        for specs in plan.conditions.values():
            for spec in specs:
                if spec.module is not None:
                    plugin_record(spec.module, "faults", spec.name)
                else:
                    callable_reference(spec.name, plan.descriptor_dir)
    except Exception:
        pass
    return plan, load_agent(plan, arm)


def trial_call(preloaded: tuple[TrialPlan, Callable[..., Any]], job: Job) -> dict[str, Any]:
    """In a trial forked from an arm's zygote."""
    plan, agent = preloaded
    return run_tool_trial(plan, job.key, agent)


def direct_trial(plan: TrialPlan, job: Job) -> dict[str, Any]:
    """A trial in a process with nothing preloaded: it loads the agent itself (a failure to load is its crash).

    Here rather than in the runner: a stage's functions are unpickled on an executor's
    worker, which then imports their modules, and this one is light.
    """
    return run_tool_trial(plan, job.key)


def direct_oracle(plan: TrialPlan, state: tuple[Any, Any]) -> dict[str, Any]:
    """An oracle in a process with nothing preloaded."""
    task, snapshot = state
    return run_oracle(plan, task, snapshot)


def preload_oracle(plan: TrialPlan) -> tuple[TrialPlan, Callable[..., Any]]:
    """In the oracles' zygote (which never sees an agent's code): import the oracle once."""
    return plan, load_oracle(plan)


def oracle_call(preloaded: tuple[TrialPlan, Callable[..., Any]], state: tuple[Any, Any]) -> dict[str, Any]:
    """In an oracle's process forked from the oracles' zygote."""
    plan, oracle = preloaded
    task, snapshot = state
    return run_oracle(plan, task, snapshot, oracle)
