"""An executor's session for a run or a certification: opened, checked, closed.

Every step is a plugin's code under a deadline: its ``start`` under ``CERTLAB_EXECUTOR_START_S``
(a cluster's may check its workers' installs), its ``close`` under the plugin wait
(``CERTLAB_PLUGIN_LOAD_S``). A start that breaks is one line, exit 3, before any trial; a close
that breaks is a warning line: the trials it ran are recorded by then (and a run's decision
written), so it changes no verdict, and an error on its way stays the one named.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping

from certlab_core._runtime.registry import Registry
from certlab_core.certify.trial_runs import trials_on
from certlab_core.plugin.errors import CertlabError, InstrumentError, UsageError
from certlab_core.plugin.types.executor import Executor, ExecutorOptions, ExecutorSession
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
    try:
        with contextlib.nullcontext() if executor.forks_here else trials_on(session):
            yield session
    finally:
        close_session(session, f"the executor {name}'s close ({info.distribution})")


def close_session(session: ExecutorSession, whose: str) -> None:
    """``session.close()``, bounded by the plugin wait; one that raises or runs past it is a warning line naming
    ``whose``, never an internal error, a hang or a changed exit code."""
    try:
        plugin_call(whose, session.close, seconds=plugin_wait_s())
    except CertlabError as broke:
        print(f"certlab: warning: {broke.message}", file=sys.stderr)


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
