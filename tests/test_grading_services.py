"""A grading service left on an error neither hides the error nor eats it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from certlab_core.certify.trial_runs import grading_services
from certlab_core.plugin.errors import InstrumentError
from certlab_core.plugin.types.grader import Grader, GradeRequest, GradeResult
from certlab_core.plugin.types.sandbox import Containment

Serve = Callable[[Containment, int, tuple[str | None, ...]], contextlib.AbstractContextManager[None]]
# An uncontained task with an environment of its own: the need certify's proofs and calibration serve.
NEEDS = [(Containment(), "task-environment")]


def grader(name: str, order: int, serve: Serve) -> Grader:
    def grade(_request: GradeRequest) -> GradeResult:
        return GradeResult(grader=name, passed=True)

    return Grader(name=name, order=order, description=f"serves as {name}", grade=grade, serve=serve)


@contextlib.contextmanager
def slow_to_leave(_containment: Containment, _slots: int, _environments: tuple[str | None, ...]) -> Iterator[None]:
    try:
        yield
    finally:
        time.sleep(5)  # past the wait of 1 s: the kernel cuts it short


@contextlib.contextmanager
def breaks_on_entry(_containment: Containment, _slots: int, _environments: tuple[str | None, ...]) -> Iterator[None]:
    raise RuntimeError("no server today")
    yield


@contextlib.contextmanager
def swallows(_containment: Containment, _slots: int, _environments: tuple[str | None, ...]) -> Iterator[None]:
    with contextlib.suppress(Exception):
        yield


@pytest.fixture
def wait_of_one_second(monkeypatch: pytest.MonkeyPatch) -> None:
    assert threading.current_thread() is threading.main_thread(), "the plugin wait is an alarm: main thread only"
    monkeypatch.setenv("CERTLAB_PLUGIN_LOAD_S", "1")


@pytest.mark.usefixtures("wait_of_one_second")
def test_a_service_slow_to_leave_on_another_ones_error_is_a_warning_and_the_error_stays_the_cause(
    capsys: pytest.CaptureFixture[str],
) -> None:
    graders = [grader("lingerer", 10, slow_to_leave), grader("server", 20, breaks_on_entry)]
    with pytest.raises(InstrumentError) as raised, grading_services(NEEDS, graders, 1):
        pytest.fail("the block ran although a service did not start")
    assert raised.value.message == "the grader server's serve raised RuntimeError: no server today"
    warned = capsys.readouterr().err.strip().splitlines()
    assert warned == [
        "certlab: warning: the grader lingerer's serve, leaving, did not return within 1 s "
        "(CERTLAB_PLUGIN_LOAD_S sets the wait)"
    ]


@pytest.mark.usefixtures("wait_of_one_second")
def test_a_service_slow_to_leave_after_the_last_trial_is_the_error() -> None:
    with pytest.raises(InstrumentError) as raised, grading_services(NEEDS, [grader("lingerer", 10, slow_to_leave)], 1):
        pass
    assert raised.value.message.startswith("the grader lingerer's serve, leaving, did not return within 1 s")


def test_a_service_cannot_swallow_the_error_it_is_left_on() -> None:
    eater = grader("eater", 10, swallows)
    with pytest.raises(InstrumentError, match="a trial hung"), grading_services(NEEDS, [eater], 1):
        raise InstrumentError("a trial hung")
