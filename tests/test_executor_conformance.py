"""ExecutorConformance rejects executors that break their promise (certlab-executor-local's tests pass it).

The broken ones are what an author writes who misreads the contract: units run in the
process that holds the session (no fresh process, and a crashing unit takes the session
down), failures dropped instead of returned, a ``busy()`` that always says 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from certlab_core.plugin.types.executor import Executor, ExecutorOptions, Stage, Work, WorkDone, WorkFailure
from certlab_core.sdk.executor import done_of, unprepared
from certlab_core.sdk.forking import ForkPool
from certlab_core.testing import ExecutorConformance
from certlab_core.testing.executor_checks import SessionRun, session_in_fork

REJECTED = (AssertionError, pytest.fail.Exception)


class InProcess:
    """Runs each unit in the caller's own process, catching what it raises."""

    slots = 2

    def __init__(self) -> None:
        self.done: list[WorkDone] = []

    def busy(self) -> int:
        return len(self.done)

    def prepare(self, stages: Sequence[Stage]) -> None:
        pass

    def submit(self, work: Work) -> None:
        preloaded = work.stage.preload() if work.stage.preload is not None else None
        try:
            self.done.append(WorkDone(tag=work.tag, value=work.stage.call(preloaded, work.arg)))
        except Exception as error:
            self.done.append(WorkDone(tag=work.tag, failure=WorkFailure(kind="exception", summary=str(error))))

    def wait(self) -> list[WorkDone]:
        done, self.done = self.done, []
        return done

    def close(self) -> None:
        self.done.clear()


class Forking:
    """Each unit forked from the session's process by the SDK's pool: what the broken ones below start from."""

    def __init__(self, workers: int) -> None:
        self._pool = ForkPool(workers)
        self.slots = workers

    def busy(self) -> int:
        return self._pool.busy()

    def prepare(self, stages: Sequence[Stage]) -> None:
        pass

    def submit(self, work: Work) -> None:
        self._pool.submit(unprepared(work.stage), work.arg, work.tag, timeout=work.timeout_s)

    def wait(self) -> list[WorkDone]:
        return [done_of(tag, value) for tag, value in self._pool.wait()]

    def close(self) -> None:
        self._pool.close()


class Forgetful(Forking):
    """Fresh processes, but a unit that failed is never returned."""

    def wait(self) -> list[WorkDone]:
        return [done for done in super().wait() if done.failure is None]


class NeverBusy(Forking):
    """Fresh processes, but ``busy()`` always says nothing is out."""

    def busy(self) -> int:
        return 0


def executor(session: type) -> Executor:
    return Executor(name="broken", description="an executor under test", start=lambda options: session())


OPTIONS = ExecutorOptions(workers=2)


@pytest.fixture(scope="module")
def in_process() -> tuple[SessionRun | str, SessionRun | str]:
    broken = executor(InProcess)
    return session_in_fork(broken, OPTIONS, "ordinary"), session_in_fork(broken, OPTIONS, "hazards")


def test_units_run_in_the_sessions_own_process_fail_the_fresh_process_check(
    in_process: tuple[SessionRun | str, SessionRun | str],
) -> None:
    ordinary, _hazards = in_process
    checks = ExecutorConformance()
    checks.test_every_unit_comes_back_once_under_its_own_tag_with_its_value(ordinary)  # it does return them
    with pytest.raises(REJECTED, match="a unit ran in the process that opened the session"):
        checks.test_each_unit_runs_in_a_fresh_process_of_its_own(ordinary)


def test_a_crashing_unit_that_takes_the_session_down_fails_the_died_check(
    in_process: tuple[SessionRun | str, SessionRun | str],
) -> None:
    _ordinary, hazards = in_process
    assert isinstance(hazards, str) and "exit code 7" in hazards, hazards
    with pytest.raises(REJECTED, match="failed running the hazards units"):
        ExecutorConformance().test_a_unit_whose_process_dies_is_a_died_failure_and_the_next_units_still_run(hazards)


def test_an_executor_that_drops_failed_units_fails_the_every_unit_check() -> None:
    broken = Executor(name="broken", description="drops failures", start=lambda options: Forgetful(2))
    ordinary = session_in_fork(broken, OPTIONS, "ordinary")
    with pytest.raises(REJECTED, match=r"never came back"):
        ExecutorConformance().test_every_unit_comes_back_once_under_its_own_tag_with_its_value(ordinary)


def test_an_executor_whose_busy_counts_nothing_fails_the_slots_check() -> None:
    broken = Executor(name="broken", description="never busy", start=lambda options: NeverBusy(2))
    ordinary = session_in_fork(broken, OPTIONS, "ordinary")
    with pytest.raises(REJECTED, match=r"busy\(\) said 0"):
        ExecutorConformance().test_no_more_than_slots_units_are_out_at_once_and_busy_counts_them(ordinary)
