"""An executor's session for a run or a certification: opened, checked, closed.

Every step is a plugin's code: its ``start`` runs under ``CERTLAB_EXECUTOR_START_S`` (a
cluster's may check its workers' installs), its ``close`` under the plugin wait
(``CERTLAB_PLUGIN_LOAD_S``), and every call between is held to the session's protocol
(:class:`CheckedSession`). A start that breaks is one line, exit 3, before any trial; so is a
call that raises or answers what the protocol does not, mid-run (what ran is kept, to resume);
a close that breaks is a warning line: the trials it ran are recorded by then (and a run's
decision written), so it changes no verdict, and an error on its way stays the one named.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

from certlab_core._runtime.registry import Registry
from certlab_core.certify.trial_runs import trials_on
from certlab_core.plugin.errors import CertlabError, InstrumentError, UsageError
from certlab_core.plugin.types.executor import Executor, ExecutorOptions, ExecutorSession, Stage, Work, WorkDone
from certlab_core.sdk.deadline import TooSlow, deadline, plugin_call, plugin_wait_s, seconds_from_environment


@contextlib.contextmanager
def open_executor(
    registry: Registry, name: str, workers: int, scheduler: str | None, distributions: Mapping[str, str]
) -> Iterator[ExecutorSession]:
    """The executor ``name``'s session for the ``with`` block, closed after it; refused in one line before it opens.

    ``distributions`` (name -> version) must be installed alike wherever the trials run; the
    executor's own distribution is added to them. Certification's trials, proofs and
    calibrations in the block run on the session, unless the executor says its units fork
    from this process (``forks_here``): then they fork from here, where warm services are.
    """
    executor: Executor = registry.get("executors", name)
    info = registry.plugin_of("executors", name)
    wanted = {**distributions, info.distribution: distributions.get(info.distribution, info.version)}
    options = ExecutorOptions(workers=workers, scheduler=scheduler or None, distributions=wanted)
    session = started_session(executor, info.distribution, options, executor_start_deadline())
    checked = CheckedSession(session, name, info.distribution)
    try:
        with contextlib.nullcontext() if executor.forks_here else trials_on(checked):
            yield checked
    finally:
        checked.close()


def close_session(session: ExecutorSession, whose: str) -> None:
    """``session.close()``, bounded by the plugin wait; one that raises or runs past it is a warning line naming
    ``whose``, never an internal error, a hang or a changed exit code."""
    try:
        plugin_call(whose, session.close, seconds=plugin_wait_s())
    except CertlabError as broke:
        print(f"certlab: warning: {broke.message}", file=sys.stderr)


class ExecutorBroke(InstrumentError):
    """An executor's session broke mid-run: a call raised, or answered what the protocol does not. What ran is
    recorded, so the command that ran it says how far it got and how to resume."""


class CheckedSession:
    """An executor's session held to its protocol: a call that raises, a ``busy`` that is no count, a ``wait``
    that answers no list of ``WorkDone``, nothing while units are out, or a unit it was not given (or gave
    back already) is one line naming the executor and the call (an ExecutorBroke, exit 3), never an
    internal error nor a loop that spins for ever. Its ``close`` is :func:`close_session`'s."""

    def __init__(self, session: ExecutorSession, name: str, distribution: str) -> None:
        self._session = session
        self._name, self._distribution = name, distribution
        self._out: Counter[Hashable] = Counter()  # the tags submitted and not yet given back

    def _whose(self, method: str) -> str:
        return f"the executor {self._name}'s {method} ({self._distribution})"

    def _call(self, method: str, *args: Any) -> Any:
        # No deadline: a wait blocks while units run (each under its own timeout), and an alarm would hold back
        # certify's heartbeat; what is checked is what the calls answer.
        try:
            return getattr(self._session, method)(*args)
        except CertlabError:
            raise
        except Exception as error:  # a plugin's call
            raise ExecutorBroke(f"{self._whose(method)} raised {type(error).__name__}: {str(error)[:160]}") from None

    @property
    def slots(self) -> int:
        """The session's own, asked each time (a cluster may grow), held to a whole number of at least one."""
        try:
            count = self._session.slots
        except Exception as error:  # a plugin's property
            raise ExecutorBroke(f"{self._whose('slots')} raised {type(error).__name__}: {str(error)[:160]}") from None
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ExecutorBroke(f"{self._whose('slots')} returned {type(count).__name__}, not a count of units")
        return count

    def busy(self) -> int:
        count = self._call("busy")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ExecutorBroke(f"{self._whose('busy')} returned {type(count).__name__}, not a count of units")
        return count

    def prepare(self, stages: Sequence[Stage]) -> None:
        self._call("prepare", stages)

    def submit(self, work: Work) -> None:
        self._call("submit", work)
        self._out[work.tag] += 1

    def wait(self) -> list[WorkDone]:
        finished = self._call("wait")
        if not isinstance(finished, list) or not all(isinstance(done, WorkDone) for done in finished):
            raise ExecutorBroke(f"{self._whose('wait')} returned {type(finished).__name__}, not a list of WorkDone")
        if not finished and self._out.total():
            raise ExecutorBroke(
                f"{self._whose('wait')} returned no finished unit while units were out ({self._out.total()})"
            )
        for done in finished:
            try:
                given = self._out[done.tag] > 0
            except TypeError:  # an unhashable tag: none of ours
                given = False
            if not given:
                raise ExecutorBroke(f"{self._whose('wait')} returned a unit it was not given, or gave back already")
            self._out[done.tag] -= 1
        return finished

    def close(self) -> None:
        close_session(self._session, self._whose("close"))


#: What a session must have (``ExecutorSession``): checked on what an executor's ``start`` returns.
SESSION_METHODS = ("busy", "prepare", "submit", "wait", "close")
#: How long an executor's ``start`` may take (Dask's checks the workers' installs), unless
#: ``CERTLAB_EXECUTOR_START_S`` says otherwise.
EXECUTOR_START_S = 300.0


def executor_start_deadline() -> float:
    """``CERTLAB_EXECUTOR_START_S`` (seconds, a positive number) or :data:`EXECUTOR_START_S`; else one line."""
    said = "an executor may take to start, e.g. 300"
    return seconds_from_environment("CERTLAB_EXECUTOR_START_S", EXECUTOR_START_S, said)


def started_session(executor: Executor, distribution: str, options: ExecutorOptions, seconds: float) -> ExecutorSession:
    """The executor's open session; its refusal (a UsageError) goes on as it is, and a ``start`` that raises
    anything else, runs past ``seconds`` or returns no session is one line (exit 3) before any trial runs."""
    whose = f"the executor {executor.name}'s start ({distribution})"
    try:
        with deadline(seconds):
            session = executor.start(options)
    except UsageError:
        raise
    except TooSlow:
        raise InstrumentError(
            f"{whose} did not open a session within {seconds:g} s; nothing ran (CERTLAB_EXECUTOR_START_S sets the wait)"
        ) from None
    except Exception as error:  # a plugin's start
        raise InstrumentError(f"{whose} raised {type(error).__name__}: {str(error)[:160]}; nothing ran") from None
    missing = [method for method in SESSION_METHODS if not callable(getattr(session, method, None))]
    try:
        slots = session.slots
    except Exception:  # a plugin's property
        slots = None
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
        missing.append("slots")
    if missing:
        if "close" not in missing:  # what it may have started (a cluster) is stopped
            close_session(session, f"the executor {executor.name}'s close ({distribution})")
        raise InstrumentError(
            f"{whose} returned {type(session).__name__}, not a session (no usable {', '.join(missing)}); nothing ran"
        )
    return session
