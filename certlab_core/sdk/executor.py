"""What executors share: one stage call in a fresh process, results as units.

The records an executor plugin returns are the contract's (``certlab_core.plugin.types.executor``); this is
the machinery executors share: zygotes forked ahead, one per stage (``run_isolated``, ``warm_up``), and a
pool's results as finished units (``done_of``). The executor ``local`` is certlab-executor-local's.
"""

from __future__ import annotations

import selectors
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from functools import partial

from attrs import frozen

from certlab_core.plugin.types.executor import (
    DirectCall,
    FailureKind,
    Preload,
    Stage,
    StageCall,
    WorkDone,
    WorkFailure,
    nothing_to_preload,
)
from certlab_core.sdk.forking import ChildFailure, ForkPool
from certlab_core.sdk.zygote import Zygote, ZygoteHost


def failure_of(child: ChildFailure) -> WorkFailure:
    """A forked child's failure as a unit's failure."""
    kind: FailureKind = "timeout" if child.kind == "timeout" else "died" if child.kind == "died" else "exception"
    return WorkFailure(kind=kind, summary=child.summary, exit_code=child.exit_code, traceback=child.traceback)


def done_of(tag: Hashable, value: object) -> WorkDone:
    """What a pool returned for ``tag`` (a result, or a ChildFailure) as a finished unit."""
    if isinstance(value, ChildFailure):
        return WorkDone(tag=tag, failure=failure_of(value))
    return WorkDone(tag=tag, value=value)


class _Unprepared:
    """One unit of a stage that has no serving process, in a process of its own."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage

    def __call__(self, arg: object) -> object:
        if self.stage.direct is not None:
            return self.stage.direct(arg)
        return self.stage.call(self.stage.preload() if self.stage.preload is not None else None, arg)


def unprepared(stage: Stage) -> DirectCall:
    """How one unit of ``stage`` runs in a process that has no zygote for it: ``direct``, or preload then call."""
    return _Unprepared(stage)


# --------------------------------------------------------------------------- a unit where it is called (a worker)

_STAGES_KEPT = 8  # the stages a process keeps zygotes for (the most recently used)
_idle: OrderedDict[str, list[Zygote]] = OrderedDict()  # stage name -> zygotes no thread is using
_idle_lock = threading.Lock()
_host: ZygoteHost | None = None  # forks this process's zygotes (one interpreter start for all of them)


def code_modules(stages: Sequence[Stage]) -> list[str]:
    """The modules the stages' functions are defined in (the kernel's trial machinery; never an agent's code)."""
    found: dict[str, None] = {}
    for stage in stages:
        for function in (stage.preload, stage.call):
            if function is None:
                continue
            while isinstance(function, partial):
                function = function.func
            module = getattr(function, "__module__", None) or type(function).__module__
            if isinstance(module, str):
                found.setdefault(module, None)
    return list(found)


TRIAL_MACHINERY = ("certlab_core.gate.trial",)  # what a host started ahead of any stage imports (a tool-world trial's)


def _zygote_host(stages: Sequence[Stage]) -> ZygoteHost | None:
    """This process's zygote host, started (with the stages' modules imported) when there is none alive."""
    return _start_host(code_modules(stages))


def _start_host(modules: Sequence[str]) -> ZygoteHost | None:
    global _host
    with _idle_lock:
        _host = live_host(_host, modules)
        return _host


def live_host(host: ZygoteHost | None, modules: Sequence[str]) -> ZygoteHost | None:
    """``host`` while it is alive; else a new host importing ``modules`` (a dead one closed), None if none starts."""
    if host is not None and host.alive:
        return host
    if host is not None:
        host.close()
    try:
        return ZygoteHost(modules)
    except OSError:
        return None


def start_zygote_host(modules: Sequence[str] = TRIAL_MACHINERY) -> bool:
    """Start this process's zygote host now, ahead of any stage, if none runs; True when one runs.

    An executor calls it where a worker process starts: the host's interpreter starts and
    imports ``modules`` in the background, while the worker's own start goes on, instead of
    in the worker's first warm-up. ``warm_up`` and ``run_isolated`` then fork from it.
    """
    return _start_host(list(modules)) is not None


def _hosted(stage: Stage, preload: Preload, call: StageCall) -> Zygote:
    """A zygote for ``stage`` forked by this process's host, or (no host) spawned as a fresh interpreter."""
    host = _zygote_host([stage])
    if host is not None:
        try:
            return host.zygote(preload, call)
        except OSError:  # the host has just gone: the next call starts another
            pass
    return Zygote.spawn(preload, call)


def _started(stage: Stage) -> Zygote:
    """A new zygote for ``stage``; if its preload fails, a fresh interpreter, then one whose units load themselves."""
    zygote = _hosted(stage, stage.preload or nothing_to_preload, stage.call)
    if zygote.wait_ready():
        return zygote
    problem = zygote.problem
    zygote = Zygote.spawn(stage.preload or nothing_to_preload, stage.call)  # not the host's doing, if it fails too
    if zygote.wait_ready():
        return zygote
    fallback = Zygote.spawn(nothing_to_preload, _Apply(stage.direct or unprepared(stage)))
    if not fallback.wait_ready():
        raise RuntimeError(f"no process could be started for {stage.name}: {problem}; {fallback.problem}")
    return fallback


def _take(stage: Stage) -> Zygote:
    with _idle_lock:
        zygotes = _idle.get(stage.name, [])
        while zygotes:
            zygote = zygotes.pop()
            if not zygote.closed:
                return zygote
    return _started(stage)


def _give_back(stage: Stage, zygote: Zygote) -> None:
    if zygote.closed:
        return
    with _idle_lock:
        _idle.setdefault(stage.name, []).append(zygote)
        _idle.move_to_end(stage.name)
        while len(_idle) > _STAGES_KEPT:
            _name, oldest = _idle.popitem(last=False)
            for old in oldest:
                old.close()


def warm_up(stages: Sequence[Stage], per_stage: int = 1) -> int:
    """Start ``per_stage`` zygotes for each stage in this process now, all at once; return how many are ready.

    An executor calls it on each worker before the first unit (``per_stage``: the worker's
    threads), so no trial waits for a process to start. The zygotes are forked by one host
    interpreter (started here with the stages' modules), so a worker pays one interpreter
    start, not one per stage and thread; each then runs its stage's preload, all at once.
    """
    with _idle_lock:
        wanted = [stage for stage in stages for _ in range(max(0, per_stage - len(_idle.get(stage.name, []))))]
    if wanted:
        _zygote_host(stages)
    spawned = [(stage, _hosted(stage, stage.preload or nothing_to_preload, stage.call)) for stage in wanted]
    ready = 0
    for stage, zygote in spawned:
        if zygote.wait_ready():
            _give_back(stage, zygote)
            ready += 1
    return ready


@frozen
class _Apply:
    """A zygote's call that runs a direct call on the unit's argument (picklable when the direct call is)."""

    direct: DirectCall

    def __call__(self, _preloaded: object, arg: object) -> object:
        return self.direct(arg)


def run_isolated(
    stage: Stage, arg: object, timeout_s: float | None = None, abandoned: Callable[[], bool] | None = None
) -> WorkDone:
    """Run one unit in a fresh process on this machine, even from a process that has threads (a Dask worker).

    For executor plugins: call it where the unit is to run. The stage's preload runs once in
    a fresh interpreter (a zygote, kept for the next unit of the stage; one per thread at
    work), and each unit forks from it; graders and oracles the unit starts fork from that
    fresh process in turn. Returns the result or the failure (the tag is the caller's to add).
    ``abandoned``, when given, is asked before the unit starts and every ``ABANDON_POLL_S`` while
    it runs: once it says True (nothing waits for the result any more, as a Dask task its client
    let go), the unit is not started, or killed with all it started and its zygote closed; the
    failure says so.
    """
    if abandoned is not None and abandoned():
        return _ABANDONED_UNIT
    zygote = _take(stage)
    try:
        with ForkPool(1) as pool:
            pool.submit_to(zygote, arg, 0, timeout=timeout_s)
            if abandoned is not None and _abandoned_while_running(zygote.result_fd, abandoned):
                zygote.close()  # it kills the unit's process and everything below it
                return _ABANDONED_UNIT
            (_tag, value), *_rest = pool.wait()
    finally:
        _give_back(stage, zygote)
    return done_of(0, value)


ABANDON_POLL_S = 0.5
_ABANDONED_UNIT = WorkDone(
    tag=0,
    failure=WorkFailure(
        kind="died", summary="killed or never started: nothing waited for its result (the run that sent it had stopped)"
    ),
)


def _abandoned_while_running(result_fd: int, abandoned: Callable[[], bool]) -> bool:
    """Wait until the zygote answers (False) or ``abandoned()`` says True (True)."""
    with selectors.DefaultSelector() as selector:
        selector.register(result_fd, selectors.EVENT_READ)
        while not selector.select(ABANDON_POLL_S):
            if abandoned():
                return True
    return False


def close_isolated() -> None:
    """Stop this process's idle zygotes and its zygote host (they also end by themselves when their parent does)."""
    global _host
    with _idle_lock:
        while _idle:
            _name, zygotes = _idle.popitem()
            for zygote in zygotes:
                zygote.close()
        if _host is not None:
            _host.close()
            _host = None
