"""Executors: where trials run; their records and the session they open.

The kernel hands an executor units of work and receives their results; it never learns how
they ran. A unit (:class:`Work`) names a :class:`Stage` (what kind of work: a trial of one
arm, an oracle, a graded certification trial) and the stage's argument (one job). Every
executor keeps the same promise: each unit runs in a fresh process of its own, forked from
a process that ran the stage's ``preload`` once, and its result (or how it failed) comes
back to the one process that writes the store. ``local`` (certlab-executor-local) forks from this
machine's lean parent; an executor plugin such as ``dask`` runs :func:`run_isolated` on a
remote worker, which keeps that promise there.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal, Protocol, get_args

from attrs import field, frozen
from attrs.validators import instance_of

from certlab_core.plugin.types.base import Record
from certlab_core.plugin.types.fields import one_of, text_map

#: How a unit of work failed: it raised, its process died, it ran past its time, or the machine running it was lost.
FailureKind = Literal["exception", "died", "timeout", "worker-lost"]


class Preload(Protocol):
    """Run once in the process that forks a stage's units; what it returns is handed to each unit."""

    def __call__(self) -> object: ...


class StageCall(Protocol):
    """One unit of a stage, in its own fresh process: ``call(preloaded, arg)``."""

    def __call__(self, preloaded: Any, arg: Any, /) -> object: ...


class DirectCall(Protocol):
    """One unit of a stage run without a preloaded process: ``direct(arg)`` (it loads what it needs itself)."""

    def __call__(self, arg: Any, /) -> object: ...


def nothing_to_preload() -> None:
    """The preload of a stage whose units need nothing imported ahead."""
    return None


@frozen
class Stage(Record):
    """A kind of work: ``preload()`` once per serving process, then ``call(preloaded, arg)`` per unit, each fresh.

    A stage without ``preload`` needs no serving process: on ``local`` its units fork from
    the parent (which loaded what they need), elsewhere from a process with nothing preloaded
    (``call`` then receives None). ``name`` identifies the stage across processes (a worker
    keeps one serving process per name), so it must differ between runs that differ (the runner puts the manifest's seal
    in it). ``direct`` is how one unit runs where no serving process could be started (a
    preload that failed): it loads what it needs itself, and a failure to load is that
    unit's own result. An executor that ships stages to other machines pickles ``preload``,
    ``call`` and ``direct``: module-level functions (or ``functools.partial`` of them) over
    plain data; ``portable`` says they do, and that the plugins they use import by name in a
    fresh interpreter (a plugin registered in this process only does not).
    """

    name: str
    call: StageCall
    preload: Preload | None = None
    direct: DirectCall | None = None
    portable: bool = True


@frozen
class Work(Record):
    """One unit of work: a stage's call on ``arg``, killed after ``timeout_s``; ``tag`` comes back with its result."""

    tag: Hashable
    stage: Stage
    arg: object
    timeout_s: float | None = None


@frozen
class WorkFailure(Record):
    """Why a unit of work gave no result."""

    kind: FailureKind = field(validator=one_of(get_args(FailureKind)))
    summary: str
    exit_code: int | None = None  # how a process that "died" exited (None when killed by a signal)
    traceback: str = ""


@frozen
class WorkDone(Record):
    """A finished unit of work: its tag and either its result (``failure`` None) or its failure."""

    tag: Hashable
    value: object = None
    failure: WorkFailure | None = None


@frozen
class ExecutorOptions(Record):
    """What the user asked for: ``--workers``, ``--scheduler``; and what every worker must have installed."""

    workers: int = 2
    scheduler: str | None = None
    distributions: Mapping[str, str] = field(factory=dict, converter=text_map)  # name -> version


class ExecutorSession(Protocol):
    """An open executor: submit units while ``busy() < slots``, collect them with ``wait()``, then ``close()``.

    certlab holds it to this: a call that raises, a ``busy`` that is no count, or a ``wait`` that
    answers no list of ``WorkDone``, nothing while units are out, or a unit it was not given, is
    one line naming the executor and the call (exit 3); the trials recorded so far are kept."""

    @property
    def slots(self) -> int:
        """How many units may be out at once (beyond that, ``submit`` is not called)."""
        ...

    def busy(self) -> int:
        """Units submitted and not yet returned by ``wait``."""
        ...

    def prepare(self, stages: Sequence[Stage]) -> None:
        """Start what serves these stages ahead of their first unit (optional work: a session may start lazily)."""
        ...

    def submit(self, work: Work) -> None:
        """Start one unit; its result comes from a later ``wait()``."""
        ...

    def wait(self) -> list[WorkDone]:
        """Block until at least one submitted unit has finished; return every finished one."""
        ...

    def close(self) -> None:
        """Stop everything still running; the session is not used again.

        It has ``CERTLAB_PLUGIN_LOAD_S`` (60 s): one that raises or runs past that is a warning
        line; the trials are recorded by then, and the verdict and exit code stand."""
        ...


class ExecutorStart(Protocol):
    """Open a session: reach the machines, check what they have installed; refuse in one line (UsageError).

    certlab waits ``CERTLAB_EXECUTOR_START_S`` (300 s) for it; a start past that, one that raises
    anything else, or one that returns no session is named in one line (exit 3) and nothing runs.
    """

    def __call__(self, options: ExecutorOptions, /) -> ExecutorSession: ...


@frozen
class Executor(Record):
    """A place trials run (``--executor NAME``): ``start(options)`` opens a session for one run or certification.

    ``forks_here`` says that the units run on this machine, a stage's without ``preload`` as
    forks of the process that runs certlab, inheriting what it started: certify then forks
    its trials, proofs and calibrations itself (its warm grading services reach them)
    instead of sending them through a session, and a coding run starts the grading services
    its trials' forks inherit.
    """

    name: str
    description: str
    start: ExecutorStart
    forks_here: bool = field(default=False, validator=instance_of(bool))  # a truthy word would fork here
