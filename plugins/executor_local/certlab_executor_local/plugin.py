"""The executor ``local``: fresh processes forked here, --workers at once.

A prepared stage is served by a zygote: a lean interpreter that runs the preload once and
forks one process per unit. Stages prepared together share one interpreter start: a zygote
host imports their code and forks a zygote for each (a stage alone gets a fresh interpreter;
one whose functions do not pickle, a child forked from this process). A unit of a stage
without a zygote is forked from this process and runs ``direct`` (or ``call(preload(),
arg)``). The record says ``forks_here``: its units inherit what this process started, so
certify runs its trials, proofs and calibrations as forks of its own (a warm grading server
reaches them) rather than through a session, and a coding run's trials, forked here, grade
on the servers the run started.
"""

from __future__ import annotations

from collections.abc import Sequence

from certlab_core.plugin import Executor, ExecutorOptions, Stage, UsageError, Work, WorkDone, hookimpl
from certlab_core.sdk.executor import code_modules, done_of, live_host, unprepared
from certlab_core.sdk.forking import ForkPool
from certlab_core.sdk.zygote import Zygote, ZygoteHost


class LocalSession:
    """Forks of this process, at most ``workers`` units at once."""

    def __init__(self, workers: int) -> None:
        self._pool = ForkPool(workers, temp_prefix="certlab-units-")  # what a killed unit made goes on close
        self._zygotes: dict[str, Zygote] = {}
        self._host: ZygoteHost | None = None  # forks the zygotes of stages prepared together

    @property
    def slots(self) -> int:
        return self._pool.workers

    def busy(self) -> int:
        return self._pool.busy()

    def prepare(self, stages: Sequence[Stage]) -> None:
        """Start a zygote per new stage: the fresh interpreters all at once, then a forked one where a spawn failed."""
        started: dict[str, Zygote] = {}
        served = [
            (stage, stage.preload)
            for stage in stages
            if stage.preload is not None and not self._serving(stage.name)  # a stage prepared again keeps its zygote
        ]
        portable = [(stage, preload) for stage, preload in served if stage.portable]
        host = self._host_for([stage for stage, _preload in portable]) if len(portable) > 1 else None
        for stage, preload in portable:
            try:
                if host is not None:
                    started[stage.name] = host.zygote(preload, stage.call)
                else:
                    started[stage.name] = Zygote.spawn(preload, stage.call)
            except Exception:  # not picklable, or could not start: fork one below
                continue
        for stage, preload in served:
            zygote = started.get(stage.name)
            if zygote is None or not zygote.wait_ready():
                zygote = Zygote(preload, stage.call)
            if zygote.ready:
                self._zygotes[stage.name] = zygote

    def _host_for(self, stages: Sequence[Stage]) -> ZygoteHost | None:
        """The session's zygote host, started with the stages' code if none is alive; None if it cannot start.

        It lives until the session closes: it reaps the zygotes it forked, and leaves a group's stop to this
        process, as they do."""
        self._host = live_host(self._host, code_modules(stages))
        return self._host

    def _serving(self, name: str) -> bool:
        zygote = self._zygotes.get(name)
        return zygote is not None and not zygote.closed

    def submit(self, work: Work) -> None:
        if self._serving(work.stage.name):
            self._pool.submit_to(self._zygotes[work.stage.name], work.arg, work.tag, timeout=work.timeout_s)
        else:
            self._pool.submit(unprepared(work.stage), work.arg, work.tag, timeout=work.timeout_s)

    def wait(self) -> list[WorkDone]:
        return [done_of(tag, value) for tag, value in self._pool.wait()]

    def close(self) -> None:
        self._pool.close()
        for zygote in self._zygotes.values():
            zygote.close()  # a hosted one is waited for: what its units made is gone when it returns
        self._zygotes.clear()
        if self._host is not None:
            self._host.close()
            self._host = None


def start(options: ExecutorOptions) -> LocalSession:
    """Open a session of ``--workers`` forks at once; ``--scheduler`` is another executor's option."""
    if options.scheduler:
        raise UsageError(f"--scheduler {options.scheduler}: the local executor has no scheduler; add --executor dask")
    return LocalSession(max(1, options.workers))


LOCAL = Executor(
    name="local",
    description="fresh processes forked on this machine from a lean, preloaded parent (--workers at once)",
    start=start,
    forks_here=True,
)


@hookimpl
def certlab_executors() -> list[Executor]:
    return [LOCAL]
