"""The executor ``dask``: each unit a Dask task, in a fresh worker process.

``--executor dask --scheduler tcp://HOST:PORT`` joins an existing cluster; without an
address a ``distributed.LocalCluster`` of ``--workers`` single-thread worker processes is
started for the run and stopped after it. Before the first trial the session checks that
the scheduler answers, that at least one worker is there, and that every worker has the
distributions the run names at the same versions (one line otherwise). A task runs
``run_isolated`` on its worker: a zygote per stage preloads once and forks a fresh process
per trial, so a trial is isolated there as on ``local``; each worker's first task warms it
(``warm_up``: its zygotes forked by one host interpreter per worker), and a worker starts
its trials when its own warm-up ends, not the slowest worker's. The scheduler is told not to run
a task again after its worker died (``allowed_failures`` 0, restored when the session
closes), so a lost worker comes back as a ``worker-lost`` failure that the runner records
and runs as a new attempt, instead of a silent second run. A task the scheduler lets go
(the run stopped) is killed on its worker (``run_units``).

Dask is imported only when a session starts: trials never fork from a process holding it.
"""

from __future__ import annotations

import importlib.metadata
import logging
import socket
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from certlab_core.plugin import Executor, ExecutorOptions, Stage, UsageError, Work, WorkDone, hookimpl
from certlab_core.plugin.types.executor import WorkFailure
from certlab_core.sdk.executor import run_isolated, warm_up
from certlab_core.sdk.trees import MadeFolder, make_temp_folder, remove_made

CONNECT_TIMEOUT_S = 10.0
WORKERS_TIMEOUT_S = 30.0
UNITS_PER_THREAD = 32  # units out per worker thread: a task running, the next one sent, more filling
MAX_UNITS_PER_TASK = 8
TASKS_PER_THREAD = 2  # tasks out per worker thread (one running, its next one there) before units wait to fill one
WARM_UP_PRIORITY = 1 << 40  # above any unit's (the units returned before it)
TASK_TARGET_S = 0.25  # a task runs about this long: short trials travel several to a task, slow ones alone
# The local cluster's workers run no statistical profiler: it samples each worker's thread every
# 10 ms, which on 8 workers of a 2-core machine took 3 of the 7 CPU seconds the workers spent
# over 64 two-second tasks. An existing cluster keeps its own configuration.
LOCAL_CLUSTER_CONFIG = {"distributed.worker.profile.enabled": False}
WORKER_START = "certlab_executor_dask.worker_start"
README_SECTION = "see the README, 'Running on a Dask cluster'"


def installed_versions(names: Sequence[str]) -> dict[str, str | None]:
    """On a worker: the installed version of each distribution (None when it is not installed)."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def swap_allowed_failures(dask_scheduler: Any, allowed: int) -> int:
    """On the scheduler: set how often a task may outlive a dead worker; return the previous value."""
    previous = int(dask_scheduler.allowed_failures)
    dask_scheduler.allowed_failures = allowed
    return previous


def mismatched(wanted: Mapping[str, str], found: Mapping[str, Mapping[str, str | None]]) -> str | None:
    """The first worker whose distributions differ from the run's, said in one line (None when all match)."""
    for address, versions in sorted(found.items()):
        for name, version in sorted(wanted.items()):
            have = versions.get(name)
            if have != version:
                what = f"has {name} {have}" if have is not None else f"does not have {name} installed"
                return (
                    f"the Dask worker {address} {what}, but this run needs {name} {version}: "
                    f"install the same versions on every worker ({README_SECTION})"
                )
    return None


Unit = tuple[Stage, object, float | None]  # what a task carries per unit: its stage, argument and time limit


def run_units(units: Sequence[Unit]) -> tuple[list[WorkDone], float]:
    """On a worker: each unit in a fresh process of its own, one after the other; their results and seconds taken.

    A unit whose task the scheduler has let go (its run stopped: the client closed, or died) is
    killed there, with all it started, and the units after it are not started: Dask cannot stop
    a running task, so a trial would otherwise run on to its own time limit on the cluster."""
    started = time.perf_counter()
    abandoned = _released_by_the_scheduler()
    done = [run_isolated(stage, arg, timeout_s, abandoned) for stage, arg, timeout_s in units]
    return done, time.perf_counter() - started


def _released_by_the_scheduler() -> Callable[[], bool]:
    """On a worker, in a task: whether the scheduler has let the task go (no client waits for it any more).

    Called elsewhere (no task of a worker's runs in this thread), it says False: nothing lets the units go."""
    from distributed import get_worker

    try:
        worker = get_worker()
        key = worker.get_current_task()
    except (ValueError, KeyError):
        return lambda: False

    def released() -> bool:
        task = worker.state.tasks.get(key)
        return task is None or task.state in ("cancelled", "released", "forgotten")

    return released


class DaskSession:
    """Units of work as Dask tasks; results taken as they complete, in the process that writes the store.

    Units travel several to a task, so the scheduler's cost is paid per task rather than per
    trial when trials are short: as many units as run in about ``TASK_TARGET_S`` on a worker
    (measured as tasks come back), at most ``MAX_UNITS_PER_TASK``. While fewer than
    ``TASKS_PER_THREAD`` tasks per worker thread are out, every pending unit is sent, spread
    over the missing tasks, so no thread waits; beyond that, units wait until they fill a
    task. Slow trials (a real agent) travel one to a task. The results of the tasks that
    finished together are fetched in one gather. A task lost with its worker returns each
    of its units as ``worker-lost``.

    Work submitted later runs first (its priority is the number of units returned before
    it): a trial's oracle, submitted when its trial returns, runs on the next free thread
    instead of behind every queued trial, so records reach the store as trials finish.
    """

    def __init__(
        self,
        client: Any,
        cluster: Any,
        previous_allowed_failures: int | None,
        threads: int,
        scratch: MadeFolder | None = None,
    ) -> None:
        self._client = client
        self._scheduler = str(client.scheduler.address)  # named in the line when the link to it breaks
        self._cluster = cluster
        self._scratch = scratch  # the local cluster's workers' folder, made by this run and removed at close
        self._previous_allowed_failures = previous_allowed_failures
        self._threads = threads
        self._pending: list[Work] = []
        self._tags: dict[str, list[Hashable]] = {}  # task key -> the caller's tags of its units, in order
        self._out = 0
        self._completed: Any = None  # distributed.as_completed, made with the first task (it needs a future)
        self._units: dict[str, int] = {}  # task key -> its units
        self._unit_s: float | None = None  # seconds a unit takes on a worker (a running mean)
        self._returned = 0  # units returned so far: the priority of what is submitted next
        self._warming: list[Any] = []  # each worker's warm-up task (kept: a released future is cancelled)

    @property
    def slots(self) -> int:
        return self._threads * UNITS_PER_THREAD

    def busy(self) -> int:
        return self._out + len(self._pending)

    def prepare(self, stages: Sequence[Stage]) -> None:
        """Refuse a stage the workers cannot load; start each stage's zygotes on every worker, without waiting.

        Each worker's warm-up is its first task (it goes before any unit): a worker starts its
        trials as soon as its own zygotes are ready, not when the slowest worker's are, and no
        round trip to this process sits between. One that cannot warm up starts its zygotes
        on first use.
        """
        for stage in stages:
            if not stage.portable:
                raise UsageError(
                    f"--executor dask: the work {stage.name.split('@')[0]!r} uses a plugin that is not importable "
                    "by name (registered in this process only); install it as a distribution on every worker"
                )
        if not stages:
            return
        self._warming = [
            self._client.submit(
                warm_up,
                list(stages),
                threads,
                workers=[address],
                allow_other_workers=False,
                pure=False,
                priority=WARM_UP_PRIORITY,
            )
            for address, threads in self._client.nthreads().items()
        ]

    def submit(self, work: Work) -> None:
        self._pending.append(work)

    def _flush(self) -> None:
        """Send pending units as tasks: enough that each thread has its next task, the rest in full tasks only."""
        pending = len(self._pending)
        if not pending:
            return
        batch = self._batch()
        missing = TASKS_PER_THREAD * self._threads - len(self._units)  # tasks short of every thread having its next
        if missing > 0:
            size, count = max(1, min(batch, -(-pending // missing))), pending
        elif pending >= batch:
            size, count = batch, pending - pending % batch
        else:
            return  # not a full task yet, and every thread has work: wait for results (and more units)
        for first in range(0, count, size):
            chunk = self._pending[first : min(first + size, count)]
            units = [(work.stage, work.arg, work.timeout_s) for work in chunk]
            future = self._client.submit(run_units, units, pure=False, priority=self._returned)
            self._tags[future.key] = [work.tag for work in chunk]
            self._units[future.key] = len(chunk)
            self._out += len(chunk)
            if self._completed is None:
                from distributed import as_completed

                self._completed = as_completed([future], loop=self._client.loop)
            else:
                self._completed.add(future)
        del self._pending[:count]

    def wait(self) -> list[WorkDone]:
        try:
            return self._wait()
        except OSError as error:  # the client's link to the scheduler (Dask's CommClosedError is an OSError)
            said = f"{type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else 'no reply'}"
            raise ConnectionError(f"the Dask scheduler {self._scheduler} is gone ({said})") from None

    def _wait(self) -> list[WorkDone]:
        self._flush()
        finished: list[WorkDone] = []
        if not self._units:  # nothing submitted (the flush sends every unit when no task is out)
            return finished
        futures = self._completed.next_batch(block=True)
        ready = [future for future in futures if future.status == "finished"]
        results = dict(zip((f.key for f in ready), self._client.gather(ready, errors="skip"), strict=True))
        for future in futures:  # one gather for the batch: one round trip, not one per task
            tags = self._tags.pop(future.key)
            units = self._units.pop(future.key)
            self._out -= len(tags)
            self._returned += len(tags)
            result = results.get(future.key)
            if result is not None:
                done_units, seconds = result
                unit_s = seconds / units
                self._unit_s = unit_s if self._unit_s is None else 0.8 * self._unit_s + 0.2 * unit_s
                for tag, done in zip(tags, done_units, strict=True):
                    finished.append(WorkDone(tag=tag, value=done.value, failure=done.failure))
            else:
                failure = _task_failure(future, _exception_of(future))
                finished.extend(WorkDone(tag=tag, failure=failure) for tag in tags)
            future.release()
        return finished

    def _batch(self) -> int:
        """Units per task: about ``TASK_TARGET_S`` of running on a worker (1 until a unit's time is measured)."""
        if self._unit_s is None:
            return 1
        return max(1, min(MAX_UNITS_PER_TASK, int(TASK_TARGET_S / max(self._unit_s, 1e-6))))

    def close(self) -> None:
        self._warming.clear()
        self._pending.clear()
        self._tags.clear()
        if self._completed is not None:
            self._completed.clear()
        try:
            if self._previous_allowed_failures is not None and self._cluster is None:
                self._client.run_on_scheduler(swap_allowed_failures, allowed=self._previous_allowed_failures)
        except Exception:  # the scheduler may already be gone; nothing of the run depends on it any more
            pass
        self._client.close()
        _close_local(self._cluster, self._scratch)


def _close_local(cluster: Any, scratch: MadeFolder | None) -> None:
    """Stop the local cluster, if this run started one, and remove the folder its workers worked in."""
    if cluster is not None:
        cluster.close()
    if scratch is not None:
        remove_made(scratch)


def _task_failure(future: Any, error: object) -> WorkFailure:
    """Why a task gave no result: its worker was lost, the scheduler dropped it, or it raised."""
    from distributed import KilledWorker

    if isinstance(error, KilledWorker):
        return WorkFailure(
            kind="worker-lost", summary=f"the Dask worker running it was lost ({error.last_worker.address})"
        )
    if future.status != "error" or not isinstance(error, BaseException):  # cancelled: the client lost the scheduler
        return WorkFailure(kind="worker-lost", summary=f"the Dask scheduler dropped the task ({future.status})")
    return WorkFailure(kind="exception", summary=f"the Dask task failed: {type(error).__name__}: {error}")


def _exception_of(future: Any) -> object:
    """What a task that gave no result raised (None when it was cancelled or its result could not be fetched)."""
    try:
        return future.exception(timeout=CONNECT_TIMEOUT_S) if future.status == "error" else None
    except Exception as error:  # the client lost the scheduler meanwhile
        return error


def _check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise when the scheduler address refuses, or does not answer Dask's handshake within ``timeout_s``.

    A TCP port where nothing listens refuses at once, while Dask's client retries it until
    its timeout: a plain connection first says so at once. Then Dask's own handshake, under a
    deadline: Dask reads the peer's greeting with no time limit, so a port that accepts and
    stays silent would otherwise hang the client for good.
    """
    import asyncio

    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.core import connect

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except (ValueError, TypeError):  # not host:port; the client says what is wrong with it
        return
    if scheme not in ("tcp", "tls"):
        return
    with socket.create_connection((host, port), timeout=timeout_s):
        pass
    if scheme != "tcp":  # TLS needs the cluster's security settings, which only the client is given
        return

    async def greet() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=timeout_s), timeout_s)
        await comm.close()

    asyncio.run(greet())


def _connect(options: ExecutorOptions) -> tuple[Any, Any, MadeFolder | None]:
    """A client of the scheduler named, or of a local cluster started here with the folder its workers use."""
    from distributed import Client, LocalCluster

    if options.scheduler:
        # Dask's own log lines stay out of this process's stderr, as the local cluster's silence_logs keeps its
        # workers': a lost scheduler was an ERROR line of Dask's, then certlab's line naming it again.
        for handler in logging.getLogger("distributed").handlers:
            handler.setLevel(logging.CRITICAL)
        try:
            _check_reachable(options.scheduler)
            return Client(options.scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False), None, None
        except (OSError, TimeoutError, ValueError, TypeError) as error:
            raise UsageError(
                f"--scheduler {options.scheduler}: no Dask scheduler answers there ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else 'no reply'}); start one with 'dask scheduler' "
                f"or check the address ({README_SECTION})"
            ) from None
    import dask.config

    # The scheduler's and the workers' folder is one this run makes and removes: by default dask keeps a
    # dask-scratch-space folder, with its lock files, in the temp folder for good.
    scratch = make_temp_folder("certlab-dask-")
    config = {**LOCAL_CLUSTER_CONFIG, "temporary-directory": scratch.path}
    try:
        with dask.config.set(config):  # a worker process takes its config from here
            cluster = LocalCluster(
                n_workers=max(1, options.workers),
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",  # a free port: None still serves one, on 8787, warning when it is taken
                silence_logs=50,
                preload=[WORKER_START],  # each worker starts its zygote host as it starts
            )
    except BaseException:
        remove_made(scratch)
        raise
    return Client(cluster, set_as_default=False), cluster, scratch


def start(options: ExecutorOptions) -> DaskSession:
    """Open a session on the cluster; refuse in one line when it cannot run this run's trials."""
    client, cluster, scratch = _connect(options)
    try:
        where = options.scheduler or "the local cluster"
        try:
            client.wait_for_workers(1 if cluster is None else max(1, options.workers), timeout=WORKERS_TIMEOUT_S)
        except TimeoutError:
            raise UsageError(
                f"the Dask scheduler {where} has no worker after {WORKERS_TIMEOUT_S:.0f} s; start some with "
                f"'dask worker {options.scheduler or 'ADDRESS'}' ({README_SECTION})"
            ) from None
        try:
            found = client.run(installed_versions, sorted(options.distributions))
        except Exception as error:  # a worker that cannot even load this module
            raise UsageError(
                f"a Dask worker of {where} cannot run certlab's code ({type(error).__name__}: {error}); install "
                f"certlab-executor-dask and the run's plugins on every worker ({README_SECTION})"
            ) from None
        problem = mismatched(options.distributions, found)
        if problem is not None:
            raise UsageError(problem)
        previous = int(client.run_on_scheduler(swap_allowed_failures, allowed=0))
        threads = sum(int(n) for n in client.nthreads().values())
        return DaskSession(client, cluster, previous, max(1, threads), scratch)
    except BaseException:
        client.close()
        _close_local(cluster, scratch)
        raise


@hookimpl
def certlab_executors() -> list[Executor]:
    return [
        Executor(
            name="dask",
            description="tasks on a Dask distributed cluster (--scheduler ADDRESS, or a local cluster of --workers)",
            start=start,
        )
    ]
