"""Many trials at once: forked here or on an executor, graders warm."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from types import TracebackType
from typing import Any

from certlab_core.certify.heartbeat import InFlight, beating, clock, heartbeat_interval
from certlab_core.certify.lab import (
    Progress,
    TrialRecord,
    TrialSpec,
    preload,
    quiet,
    run_trial,
    trial_time_limit_s,
)
from certlab_core.plugin.errors import CertlabError, InstrumentError
from certlab_core.plugin.types.executor import ExecutorSession, Stage, Work
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import Grader
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.deadline import plugin_call, plugin_wait_s
from certlab_core.sdk.forking import ChildFailure, map_in_forks

_executors: list[ExecutorSession] = []
WORKER_LOST_RERUNS = 3


def on_an_executor() -> bool:
    """Whether an executor is in force (``trials_on``): then work goes to its workers, not to forks here."""
    return bool(_executors)


@contextlib.contextmanager
def trials_on(session: ExecutorSession) -> Iterator[ExecutorSession]:
    """For the ``with`` block, certification's trials, proofs and calibration run on ``session`` (else local forks)."""
    _executors.append(session)
    try:
        yield session
    finally:
        _executors.pop()


def warm_graders() -> None:
    """The preload of a process that forks graded trials on an executor's worker (pytest imported once)."""
    preload()


def _graded_trial(_preloaded: object, item: tuple[TrialSpec, Sequence[Grader]]) -> TrialRecord:
    spec, graders = item
    return run_trial(spec, graders)


def on_executor(
    call: Callable[[object, Any], Any],
    items: Sequence[Any],
    what: str,
    progress: Progress = quiet,
    timeout_s: float | None = None,
) -> Iterator[tuple[int, Any]]:
    """``call(preloaded, item)`` for each item in a fresh process on the executor in force; ``(index, result)`` pairs.

    A result is a ChildFailure when the unit raised, died or ran past ``timeout_s``. A unit lost with its
    worker runs again (at most ``WORKER_LOST_RERUNS`` times), so no trial is counted twice
    or lost.
    """
    session = _executors[-1]
    stage = Stage(name=f"{what}@certlab", call=call, preload=warm_graders)
    session.prepare([stage])
    pending = list(range(len(items)))
    pending.reverse()
    lost: dict[int, int] = {}
    while pending or session.busy():
        while pending and session.busy() < session.slots:
            index = pending.pop()
            session.submit(Work(tag=index, stage=stage, arg=items[index], timeout_s=timeout_s))
        for done in session.wait():
            assert isinstance(done.tag, int)
            index = done.tag
            failure = done.failure
            if failure is None:
                yield index, done.value
            elif failure.kind == "worker-lost" and lost.get(index, 0) < WORKER_LOST_RERUNS:
                lost[index] = lost.get(index, 0) + 1
                progress(f"{what} {index + 1}: {failure.summary}; running it again")
                pending.append(index)
            else:
                yield index, ChildFailure(failure.kind, failure.summary, failure.traceback, failure.exit_code)


def run_trials(
    specs: Sequence[TrialSpec],
    graders: Sequence[Grader],
    workers: int,
    progress: Progress = quiet,
    on_record: Callable[[TrialRecord], None] | None = None,
) -> list[TrialRecord]:
    """Run every trial in its own forked process, ``workers`` at a time; return them in schedule order.

    ``on_record`` gets each record as its trial finishes (certify's journal: certlab_core.certify.journal).
    """
    preload()
    with grading_services(grading_needs(specs), graders, max(1, min(workers, len(specs)))):
        return _run_trials(specs, graders, workers, progress, on_record)


#: The (containment, task environment) pairs whose grading services are up in this process: a nested
#: ``grading_services`` (a calibration's trials inside certify's scope) starts only what is not.
_served: list[tuple[Containment, str | None]] = []


def grading_needs(specs: Sequence[TrialSpec]) -> list[tuple[Containment, str | None]]:
    """What the trials' gradings want served: each sandbox's environments, and each task environment uncontained.

    A contained trial is graded in its sandbox, in its task's environment (None: the agent
    environment). An uncontained one (a calibration agent's) is graded by the harness: in a
    fork of it, or in a fresh interpreter of its task's own environment, which a warm server saves.
    """
    return _distinct_needs((spec.containment, spec.task.family.environment_dir) for spec in specs)


def grading_needs_of(containment: Containment, families: Iterable[TaskFamily]) -> list[tuple[Containment, str | None]]:
    """What gradings of ``families``' tasks under ``containment`` want served (regrade's), as ``grading_needs``."""
    return _distinct_needs((containment, family.environment_dir) for family in families)


def _distinct_needs(
    gradings: Iterable[tuple[Containment | None, str | None]],
) -> list[tuple[Containment, str | None]]:
    """Each (containment, environment) grading's need once, in order; an uncontained one without an environment
    (a fork of the harness) needs nothing."""
    needs: list[tuple[Containment, str | None]] = []
    for containment, environment in gradings:
        if containment is not None and containment.contained:
            need = (containment, environment)
        elif environment is not None:
            need = (Containment(), environment)
        else:
            continue
        if need not in needs:
            needs.append(need)
    return needs


@contextlib.contextmanager
def grading_services(
    needs: Sequence[tuple[Containment, str | None]], graders: Sequence[Grader], slots: int
) -> Iterator[None]:
    """For the ``with`` block, each sandbox's ``serve`` and each grader's ``serve`` for every need not served yet.

    Gradings forked here inherit what the services started (a warm grading server in the
    sandbox, or in a task's environment); gradings on an executor's workers do not, and their
    graders start their own.
    """
    with contextlib.ExitStack() as services:
        wanted = [] if _executors else [need for need in dict.fromkeys(needs) if need not in _served]
        by_containment: dict[Containment, list[str | None]] = {}
        for containment, environment in wanted:
            by_containment.setdefault(containment, []).append(environment)
        for containment, environments in by_containment.items():
            sandbox = containment.sandbox
            if sandbox is not None and sandbox.serve is not None:  # e.g. bwrap's slots: no cgroup move per trial
                _enter_service(services, f"the sandbox {sandbox.name}'s serve", partial(sandbox.serve, slots))
            for grader in graders:
                if grader.serve is not None:
                    start = partial(grader.serve, containment, slots, tuple(environments))
                    _enter_service(services, f"the grader {grader.name}'s serve", start)
        _served.extend(wanted)
        try:
            yield
        finally:
            for need in wanted:
                _served.remove(need)


def _enter_service(
    services: contextlib.ExitStack, whose: str, start: Callable[[], contextlib.AbstractContextManager[Any]]
) -> None:
    """Enter a plugin's service (a grader's or a sandbox's ``serve``) on ``services``, and leave it there, bounded.

    Starting, entering and leaving it each run under the plugin wait (``CERTLAB_PLUGIN_LOAD_S``):
    one that raises or is not done in time is one line naming it (exit 3), never a hang or an
    internal error before the first trial. Left while an error is on its way (another service
    that broke, a trial that hung), a service that breaks as it leaves is a warning line and the
    error stays the one said: a teardown never hides the cause. A service cannot swallow the
    error either: what its ``__exit__`` returns is not asked.
    """
    wait_s = plugin_wait_s()
    service = plugin_call(whose, start, seconds=wait_s, returns=(contextlib.AbstractContextManager,))
    plugin_call(whose, service.__enter__, seconds=wait_s)

    def leave(kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> bool:
        try:
            plugin_call(f"{whose}, leaving,", service.__exit__, kind, error, trace, seconds=wait_s)
        except CertlabError as broke:
            if error is None:
                raise
            print(f"certlab: warning: {broke.message}", file=sys.stderr)
        return False

    services.push(leave)


def _run_trials(
    specs: Sequence[TrialSpec],
    graders: Sequence[Grader],
    workers: int,
    progress: Progress,
    on_record: Callable[[TrialRecord], None] | None,
) -> list[TrialRecord]:
    interval = heartbeat_interval()
    results: list[TrialRecord | None] = [None] * len(specs)
    started = time.monotonic()
    in_flight = InFlight()
    if specs:
        progress(f"[0/{len(specs)}] in flight: {', '.join(s.id for s in specs[:workers])}")
    for spec in specs[:workers]:  # trials start in schedule order, each as soon as a slot is free
        in_flight.start(spec.id)
    # A backstop only: each trial holds its agent and graders to their own deadlines first.
    limit_s = max((trial_time_limit_s(spec.agent_timeout_s, graders) for spec in specs), default=None)
    finished = enumerate(
        on_executor(_graded_trial, [(spec, graders) for spec in specs], "certify-trial", progress, limit_s)
        if _executors
        else map_in_forks(
            lambda spec: run_trial(spec, graders), specs, workers, timeout=limit_s, temp_prefix="certlab-trials-"
        ),
        1,
    )
    with beating(in_flight, progress, interval):
        for done, (index, result) in finished:
            if isinstance(result, ChildFailure) and result.kind == "timeout":
                raise InstrumentError(
                    f"trial {specs[index].id} ran past {limit_s:g} s (its agent's timeout and every grader's "
                    "limit) and was killed: a part of the harness hung (a grader, the model boundary), not the agent"
                )
            if isinstance(result, ChildFailure):
                raise InstrumentError(f"trial {specs[index].id} could not be run: {result.summary}")
            results[index] = result
            in_flight.finish(specs[index].id)
            if done + workers - 1 < len(specs):
                in_flight.start(specs[done + workers - 1].id)
            if on_record is not None:
                on_record(result)
            said = (
                result.verdict
                if result.twin is None
                else f"{result.twin.outcome}" + (f" ({result.twin.mechanism})" if result.twin.mechanism else "")
            )
            line = f"[{done}/{len(specs)}] {specs[index].agent.name} on {result.id}: {said}"
            progress(line + progress_facts(specs, results, done, workers, time.monotonic() - started))
    return [r for r in results if r is not None]


def progress_facts(
    specs: Sequence[TrialSpec], results: Sequence[TrialRecord | None], done: int, workers: int, elapsed_s: float
) -> str:
    """After a trial: elapsed time, an ETA, the running cost (the client's own estimate) and the trials in flight."""
    facts = [f"elapsed {clock(elapsed_s)}"]
    if done < len(specs):
        facts.append(f"ETA {clock(elapsed_s / done * (len(specs) - done))}")
    usages = [r.usage for r in results if r is not None and r.usage is not None]
    costs = [u.cost_usd for u in usages if u.cost_usd is not None]
    if costs:
        facts.append(f"cost so far ${sum(costs):.4f} (the client's own estimate, {len(costs)} trials)")
    in_flight = [specs[i].id for i in range(min(len(specs), done + workers)) if results[i] is None]
    if in_flight:
        facts.append(f"in flight: {', '.join(in_flight)}")
    return "; " + "; ".join(facts)
