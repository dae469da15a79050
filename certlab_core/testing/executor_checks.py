"""``ExecutorConformance``: the checks every executor runs on itself.

An executor plugin subclasses it in its own tests, naming the executor and the options its
session starts with; pytest then opens real sessions and checks the promise every executor
keeps (``certlab_core.plugin.types.executor``):

- every submitted unit comes back from ``wait()`` exactly once, under its own tag, with its
  value, while no more than ``slots`` are out at once, and ``busy()`` counts what is out;
- each unit runs in a fresh process of its own: not the caller's, not another unit's, and
  a prepared stage's units get what its ``preload`` returned;
- a unit that raises comes back as a ``WorkFailure`` of kind ``exception`` naming the error,
  one whose process dies as ``died``, one past its ``timeout_s`` as ``timeout``, and the
  units beside them still come back with their values.

Each session is opened in a forked child of the test process, so that an executor's
threads (a Dask client's) never run in the process pytest forks from.

Example (the executor's ``tests/test_conformance.py``)::

    from certlab_core.plugin import ExecutorOptions
    from certlab_core.testing import ExecutorConformance

    class TestOneAtATime(ExecutorConformance):
        executor_name = "one-at-a-time"

    class TestOnMyCluster(ExecutorConformance):
        executor_name = "my-cluster"

        def options(self) -> ExecutorOptions:
            return ExecutorOptions(workers=2, scheduler="tcp://127.0.0.1:8786")
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Hashable, Sequence
from typing import Any

import pytest
from attrs import frozen

from certlab_core.plugin.types.executor import Executor, ExecutorOptions, Stage, Work, WorkDone

UNITS = 6
#: How long a unit that must time out is given, and how long it would otherwise run.
SHORT_TIMEOUT_S = 1.0
HANG_S = 60.0
#: What a unit past its timeout may take on top of it before it is back (a remote round trip, a kill).
TIMEOUT_SLACK_S = 15.0
#: How long one forked checker may run before it is killed (an executor that never returns a unit).
CHECKER_TIMEOUT_S = 120.0

_touched = {"by": ""}  # a unit sets this; a unit that sees another unit's mark shared its process


# --------------------------------------------------------------------------- the units (module level: they pickle)


def where_am_i() -> tuple[str, int]:
    """The host and process a unit runs in."""
    return socket.gethostname(), os.getpid()


def squaring_unit(preloaded: Any, arg: Any) -> dict[str, Any]:
    """A unit: its argument squared, where it ran, and whether another unit ran in its process before it."""
    seen = _touched["by"]
    _touched["by"] = str(arg)
    return {"square": int(arg) * int(arg), "where": list(where_am_i()), "seen": seen, "preloaded": preloaded}


def raising_unit(preloaded: Any, arg: Any) -> object:
    """A unit that raises, naming its argument."""
    raise ValueError(f"conformance unit {arg} raised on purpose")


def dying_unit(preloaded: Any, arg: Any) -> object:
    """A unit whose process ends at once with exit code 7, as a crashing interpreter does."""
    os._exit(7)


def hanging_unit(preloaded: Any, arg: Any) -> object:
    """A unit that would run for a minute."""
    time.sleep(HANG_S)
    return "woke up"


def marking_preload() -> dict[str, Any]:
    """A stage's preload: a mark of the process it ran in, which every unit of the stage must be handed."""
    host, pid = where_am_i()
    return {"preloaded_in": [host, pid]}


# --------------------------------------------------------------------------- one session, in a forked child


@frozen
class Returned:
    """What came back of one unit: its tag, value and failure (kind and summary), as plain data."""

    tag: Hashable
    value: Any
    failure_kind: str | None
    failure_summary: str


@frozen
class SessionRun:
    """One session's work: what came back, in the order ``wait()`` gave it, and what the checker saw."""

    caller: tuple[str, int]
    slots: int
    returned: tuple[Returned, ...]
    busiest: int
    busy_after: int
    wall_s: dict[str, float]
    problems: tuple[str, ...]


def _drive(session: Any, works: Sequence[Work], problems: list[str]) -> tuple[list[WorkDone], int]:
    """Submit ``works`` while fewer than ``slots`` are out and collect them all; the most ever out at once."""
    pending = list(works)
    done: list[WorkDone] = []
    busiest = 0
    slots = int(session.slots)
    deadline = time.monotonic() + CHECKER_TIMEOUT_S
    while pending or len(done) < len(works):
        while pending and session.busy() < slots:
            session.submit(pending.pop(0))
            busiest = max(busiest, int(session.busy()))
        if len(done) >= len(works):
            break
        if time.monotonic() > deadline:
            problems.append(f"only {len(done)} of {len(works)} units came back in {CHECKER_TIMEOUT_S:.0f} s")
            break
        finished = session.wait()
        if not isinstance(finished, list):
            problems.append(f"wait() returned {type(finished).__name__}, not a list of WorkDone")
            break
        if not finished and session.busy() == 0:
            problems.append(f"wait() returned nothing with no unit out; {len(works) - len(done)} never came back")
            break
        for item in finished:
            if not isinstance(item, WorkDone):
                problems.append(f"wait() returned a {type(item).__name__}, not a WorkDone")
                continue
            done.append(item)
    return done, busiest


def _returned(done: WorkDone) -> Returned:
    failure = done.failure
    return Returned(
        tag=done.tag,
        value=done.value,
        failure_kind=failure.kind if failure is not None else None,
        failure_summary=failure.summary if failure is not None else "",
    )


def run_session(executor: Executor, options: ExecutorOptions, plan: str) -> SessionRun:
    """Open a session and run one plan of units through it: ``ordinary`` or ``hazards``."""
    run_id = uuid.uuid4().hex[:12]
    problems: list[str] = []
    started = time.monotonic()
    session = executor.start(options)
    wall = {"start": time.monotonic() - started}
    returned: list[Returned] = []
    busiest = 0
    try:
        squaring = Stage(name=f"conformance-squares-{run_id}", call=squaring_unit)
        if plan == "ordinary":
            preloaded = Stage(name=f"conformance-preloaded-{run_id}", call=squaring_unit, preload=marking_preload)
            raising = Stage(name=f"conformance-raises-{run_id}", call=raising_unit)
            session.prepare([squaring, preloaded, raising])
            works = [Work(tag=("square", n), stage=squaring, arg=n, timeout_s=60.0) for n in range(UNITS)]
            works += [Work(tag=("preloaded", n), stage=preloaded, arg=n, timeout_s=60.0) for n in range(2)]
            works.insert(2, Work(tag=("raises", 0), stage=raising, arg=0, timeout_s=60.0))
            begun = time.monotonic()
            done, busiest = _drive(session, works, problems)
            wall["units"] = time.monotonic() - begun
            returned += [_returned(d) for d in done]
        else:
            dying = Stage(name=f"conformance-dies-{run_id}", call=dying_unit)
            hanging = Stage(name=f"conformance-hangs-{run_id}", call=hanging_unit)
            session.prepare([squaring, dying, hanging])
            works = [
                Work(tag=("dies", 0), stage=dying, arg=0, timeout_s=60.0),
                Work(tag=("square", 0), stage=squaring, arg=3, timeout_s=60.0),
                Work(tag=("hangs", 0), stage=hanging, arg=0, timeout_s=SHORT_TIMEOUT_S),
                Work(tag=("square", 1), stage=squaring, arg=4, timeout_s=60.0),
            ]
            for work in works:  # one at a time: the time a timed-out unit took is its own
                begun = time.monotonic()
                done, most = _drive(session, [work], problems)
                busiest = max(busiest, most)
                wall[repr(work.tag)] = time.monotonic() - begun
                returned += [_returned(d) for d in done]
        busy_after = int(session.busy())
    finally:
        session.close()
    return SessionRun(
        caller=where_am_i(),
        slots=int(session.slots),
        returned=tuple(returned),
        busiest=busiest,
        busy_after=busy_after,
        wall_s=wall,
        problems=tuple(problems),
    )


def session_in_fork(executor: Executor, options: ExecutorOptions, plan: str) -> SessionRun | str:
    """``run_session`` in a forked child: what it ran, or one line saying how the child failed."""
    from certlab_core.sdk.forking import ForkedCallError, call_in_fork

    try:
        run: SessionRun = call_in_fork(run_session, executor, options, plan, timeout=CHECKER_TIMEOUT_S + 30)
    except ForkedCallError as error:
        failure = error.failure
        exit_code = f" (exit code {failure.exit_code})" if failure.exit_code is not None else ""
        return f"the session's process failed running the {plan} units: {failure.kind}{exit_code}: {failure.summary}"
    return run


def _by_tag(run: SessionRun) -> dict[Hashable, list[Returned]]:
    found: dict[Hashable, list[Returned]] = {}
    for item in run.returned:
        found.setdefault(item.tag, []).append(item)
    return found


def _ok(run: SessionRun | str) -> SessionRun:
    if isinstance(run, str):
        pytest.fail(run)
    assert not run.problems, run.problems
    return run


class ExecutorConformance:
    """The conformance suite every executor runs against itself; set ``executor_name`` (and ``options``)."""

    executor_name: str = ""
    workers: int = 2

    def options(self) -> ExecutorOptions:
        """The options every session of the checks starts with (``--workers``, ``--scheduler``)."""
        return ExecutorOptions(workers=self.workers)

    def executor(self) -> Executor:
        """The executor under test: the installed one named ``executor_name``."""
        from certlab_core._runtime.registry import discover

        if not self.executor_name:
            pytest.fail("set executor_name on the ExecutorConformance subclass")
        found: Executor = discover().get("executors", self.executor_name)
        return found

    @pytest.fixture(scope="class")
    @classmethod
    def executor_options(cls) -> ExecutorOptions:
        """The options as a fixture: override it where they come from another fixture (a test cluster's address)."""
        return cls().options()

    @pytest.fixture(scope="class")
    @classmethod
    def ordinary(cls, executor_options: ExecutorOptions) -> SessionRun | str:
        return session_in_fork(cls().executor(), executor_options, "ordinary")

    @pytest.fixture(scope="class")
    @classmethod
    def hazards(cls, executor_options: ExecutorOptions) -> SessionRun | str:
        return session_in_fork(cls().executor(), executor_options, "hazards")

    def test_every_unit_comes_back_once_under_its_own_tag_with_its_value(self, ordinary: SessionRun | str) -> None:
        run = _ok(ordinary)
        by_tag = _by_tag(run)
        wanted = {("square", n) for n in range(UNITS)} | {("preloaded", n) for n in range(2)} | {("raises", 0)}
        assert set(by_tag) == wanted, f"tags back {sorted(map(str, by_tag))}, submitted {sorted(map(str, wanted))}"
        twice = [str(tag) for tag, items in by_tag.items() if len(items) > 1]
        assert not twice, f"units that came back more than once: {twice}"
        for n in range(UNITS):
            (item,) = by_tag[("square", n)]
            assert item.failure_kind is None, f"unit {n} failed: {item.failure_kind}: {item.failure_summary}"
            assert item.value["square"] == n * n, f"unit {n} came back with {item.value!r}"

    def test_no_more_than_slots_units_are_out_at_once_and_busy_counts_them(self, ordinary: SessionRun | str) -> None:
        run = _ok(ordinary)
        assert run.slots >= 1, f"slots is {run.slots}: no unit could ever be submitted"
        assert 1 <= run.busiest <= run.slots, f"busy() said {run.busiest} with {run.slots} slots"
        assert run.busy_after == 0, f"busy() says {run.busy_after} once every unit came back"

    def test_each_unit_runs_in_a_fresh_process_of_its_own(self, ordinary: SessionRun | str) -> None:
        run = _ok(ordinary)
        values = [item.value for item in run.returned if item.failure_kind is None]
        places = [tuple(value["where"]) for value in values]
        assert tuple(run.caller) not in places, "a unit ran in the process that opened the session"
        assert len(set(places)) == len(places), f"units shared a process: {places}"
        shared = [value["seen"] for value in values if value["seen"]]
        assert not shared, f"a unit found the mark of unit(s) {shared} run before it in its process"

    def test_a_prepared_stage_hands_each_unit_what_its_preload_returned(self, ordinary: SessionRun | str) -> None:
        run = _ok(ordinary)
        preloaded = [item for item in run.returned if item.tag in {("preloaded", n) for n in range(2)}]
        assert len(preloaded) == 2, f"{len(preloaded)} of the 2 units of the prepared stage came back"
        for item in preloaded:
            assert item.failure_kind is None, f"{item.tag}: {item.failure_kind}: {item.failure_summary}"
            mark = item.value["preloaded"]
            assert isinstance(mark, dict) and "preloaded_in" in mark, f"{item.tag} was handed {mark!r}"
            assert mark["preloaded_in"] != item.value["where"], "the unit ran in the process of its preload"

    def test_a_unit_that_raises_is_an_exception_failure_naming_the_error(self, ordinary: SessionRun | str) -> None:
        run = _ok(ordinary)
        (item,) = _by_tag(run)[("raises", 0)]
        assert item.failure_kind == "exception", (item.failure_kind, item.value)
        assert "raised on purpose" in item.failure_summary, item.failure_summary

    def test_a_unit_whose_process_dies_is_a_died_failure_and_the_next_units_still_run(
        self, hazards: SessionRun | str
    ) -> None:
        run = _ok(hazards)
        by_tag = _by_tag(run)
        assert ("dies", 0) in by_tag, "the unit whose process died never came back"
        (dead,) = by_tag[("dies", 0)]
        assert dead.failure_kind in ("died", "worker-lost"), (dead.failure_kind, dead.value)
        for n, square in ((0, 9), (1, 16)):
            assert ("square", n) in by_tag, f"unit {n}, submitted after the one that died, never came back"
            (item,) = by_tag[("square", n)]
            assert item.failure_kind is None and item.value["square"] == square, (item.failure_kind, item.value)

    def test_a_unit_past_its_timeout_is_a_timeout_failure_soon_after_it(self, hazards: SessionRun | str) -> None:
        run = _ok(hazards)
        by_tag = _by_tag(run)
        assert ("hangs", 0) in by_tag, "the unit past its timeout never came back"
        (late,) = by_tag[("hangs", 0)]
        assert late.failure_kind == "timeout", (late.failure_kind, late.value)
        took = run.wall_s[repr(("hangs", 0))]
        assert took < SHORT_TIMEOUT_S + TIMEOUT_SLACK_S, f"a {SHORT_TIMEOUT_S} s timeout came back after {took:.1f} s"
