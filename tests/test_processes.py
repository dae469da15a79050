"""The process layer (certlab_core.sdk.processes): deadlines, group stops and reaping, as the callers rely on them."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.grader import Grader, GradeRequest
from certlab_core.sdk import containment, forking
from certlab_core.sdk.forking import ForkedCallError, ForkPool, PendingCall, call_in_fork, map_in_forks
from certlab_core.sdk.grading import run_chain
from certlab_core.sdk.processes import ChildFailure, Children, live_descendants, stop_child, stop_group
from certlab_core.sdk.zygote import Zygote


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _leave_a_sleeper(_arg: object) -> int:
    """Fork a process that holds this call's result pipe (a fork keeps every descriptor) and outlives the call."""
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    return pid


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def test_a_pending_call_returns_when_it_exits_though_a_process_it_started_holds_its_pipe_and_that_one_dies() -> None:
    call = PendingCall(_leave_a_sleeper)
    call.start(None)
    started = time.monotonic()
    sleeper = call.result(timeout=30)
    assert time.monotonic() - started < 10  # not the sleeper's 60 s, nor the 30 s deadline
    deadline = time.monotonic() + 5
    while _alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(sleeper), "the call's process group outlived it"


def test_a_pending_call_past_its_time_is_a_timeout_and_its_group_is_killed() -> None:
    call = PendingCall(_sleep)
    call.start(30.0)
    started = time.monotonic()
    with pytest.raises(ForkedCallError) as raised:
        call.result(timeout=0.3)
    assert raised.value.failure.kind == "timeout" and time.monotonic() - started < 5
    assert not _alive(call.pid)


def test_a_pool_kills_the_child_past_its_deadline_and_returns_the_others_result() -> None:
    with ForkPool(2) as pool:
        pool.submit(_sleep, 30.0, "slow", timeout=0.3)
        pool.submit(_sleep, 0.0, "quick", timeout=30)
        results: dict[str, object] = {}
        while pool.busy():
            results.update(pool.wait())
    assert results["quick"] == "woke"
    slow = results["slow"]
    assert isinstance(slow, ChildFailure) and slow.kind == "timeout", slow


TRAPS_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
)


@pytest.mark.parametrize(
    ("program", "at_least", "at_most"), [("import time; time.sleep(60)", 0.2, 1.5), (TRAPS_TERM, 1.2, 3.0)]
)
def test_a_program_past_its_time_gets_sigterm_then_sigkill_a_grace_later(
    program: str, at_least: float, at_most: float
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", program], start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    if program == TRAPS_TERM:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    started = time.monotonic()
    assert stop_group(process, timeout_s=0.2, grace_s=1.0) is True
    took = time.monotonic() - started
    assert at_least <= took <= at_most, took
    assert process.returncode == -(signal.SIGKILL if program == TRAPS_TERM else signal.SIGTERM)
    assert process.stdout is not None
    process.stdout.close()


def test_a_program_that_ends_in_time_is_reaped_and_not_signalled() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    assert stop_group(process, timeout_s=30, grace_s=1.0) is False
    assert process.returncode == 0 and not _alive(process.pid)


def _forked(then: str) -> int:
    """A forked child that exits at once (``exit``) or ignores SIGTERM and sleeps (``hang``)."""
    pid = os.fork()
    if pid == 0:
        if then == "hang":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(60)
        os._exit(0)
    return pid


def test_a_forked_child_that_ends_is_reaped_and_one_that_hangs_is_killed_a_grace_later() -> None:
    ended = _forked("exit")
    stop_child(ended, 5.0)
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(ended, os.WNOHANG)
    stop_child(ended, 5.0)  # one reaped already is no error

    hung = _forked("hang")
    started = time.monotonic()
    stop_child(hung, 0.3)
    assert time.monotonic() - started >= 0.3  # it was given its grace
    assert not _alive(hung)
    with pytest.raises(ChildProcessError):
        os.waitpid(hung, os.WNOHANG)


def _make_a_folder_then(end: str) -> str:
    """Make a temp folder, as a grader copying a tree does, then die by SIGKILL, hang, or return its path."""
    made = tempfile.mkdtemp(prefix="certlab-suite-")
    if end == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if end == "hangs":
        time.sleep(60)
    return made


def _a_program_s_temp_folder() -> str:
    """The temp folder a program this process starts makes its own in."""
    probe = [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"]
    return subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def private_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's temp folder, a fresh one of the test's: what a call leaves there is seen."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)  # the runtime folder is made there when it is set
    return tmp_path


# A call that must die gets all the time a loaded machine may need to fork it; only the hanging one is cut short.
@pytest.mark.parametrize(("end", "kind", "timeout_s"), [("killed", "died", 60.0), ("hangs", "timeout", 0.5)])
def test_a_call_killed_or_past_its_time_leaves_nothing_in_the_temp(
    private_temp: Path, end: str, kind: str, timeout_s: float
) -> None:
    with pytest.raises(ForkedCallError) as raised:
        call_in_fork(_make_a_folder_then, end, timeout=timeout_s, temp_prefix="certlab-grader-")
    assert raised.value.failure.kind == kind
    assert list(private_temp.iterdir()) == []
    # without a folder of its own, what the killed child made stays: the leak this guards against
    with pytest.raises(ForkedCallError):
        call_in_fork(_make_a_folder_then, "killed", timeout=60.0)
    assert [p.name[:14] for p in private_temp.iterdir()] == ["certlab-suite-"]


def test_a_call_with_a_temp_folder_of_its_own_returns_and_its_programs_see_it_as_tmpdir(private_temp: Path) -> None:
    made = call_in_fork(_make_a_folder_then, "returns", temp_prefix="certlab-grader-")
    assert Path(made).parent.parent == private_temp and Path(made).parent.name.startswith("certlab-grader-")
    said = call_in_fork(_a_program_s_temp_folder, temp_prefix="certlab-grader-")
    assert Path(said).parent == private_temp and Path(said).name.startswith("certlab-grader-")
    assert list(private_temp.iterdir()) == []


def test_a_grader_that_dies_in_the_chain_leaves_nothing_in_the_temp_folder(private_temp: Path) -> None:
    family = TaskFamily.in_folder(
        private_temp.parent, name="toy", version="1", description="toy", defects=[],
        allowed_paths=[], test_paths=[], module_names=[],
    )  # fmt: skip
    request = GradeRequest(workdir=str(private_temp), family=family, defect=Defect("d", "c", "d", []), issued={})
    dying = Grader(name="dying", order=1, description="dies", grade=lambda _r: _make_a_folder_then("killed"))
    chain = run_chain([dying], request)
    assert chain.error.startswith("grader dying broke"), chain
    assert list(private_temp.iterdir()) == []


def _make_a_folder_then_fail_or_wait(item: tuple[str, Path]) -> None:
    what, root = item
    tempfile.mkdtemp(prefix="certlab-regrade-")
    if what == "fails":  # once the other child has made its folder too (a sleep was not enough under load)
        deadline = time.monotonic() + 60
        while len(list(root.rglob("certlab-regrade-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        raise RuntimeError("a trial that cannot be regraded")
    time.sleep(60)


def _first_failure_refused(temp_prefix: str | None, root: Path) -> None:
    """As regrade does: raise at the first child that failed, abandoning the children still running."""
    for _index, outcome in map_in_forks(
        _make_a_folder_then_fail_or_wait, [("fails", root), ("waits", root)], workers=2, temp_prefix=temp_prefix
    ):
        if isinstance(outcome, ChildFailure):
            raise ValueError(outcome.summary)


def test_a_map_abandoned_at_its_first_failure_leaves_nothing_in_the_temp_folder(private_temp: Path) -> None:
    with pytest.raises(ValueError, match="a trial that cannot be regraded"):
        _first_failure_refused("certlab-regrades-", private_temp)
    assert list(private_temp.iterdir()) == []
    # without a folder of its own, both children's folders stay: the killed one's and the one that raised
    with pytest.raises(ValueError):
        _first_failure_refused(None, private_temp)
    assert sorted(p.name[:16] for p in private_temp.iterdir()) == ["certlab-regrade-"] * 2


def _runtime_parent() -> Path:
    """Where a process with this one's temp folder makes the runtime folder: the temp folder, or /tmp where the
    temp folder's path leaves no room for a socket below it (a test's tmp_path under make test's own)."""
    return Path(containment._runtime_base() or tempfile.gettempdir())


def _make_a_runtime_folder_of_its_own() -> str:
    containment._runtime.clear()  # as in a process whose parent made none (a conformance kit's forked run)
    return str(containment.runtime_folder())


def test_a_forked_child_that_made_the_runtime_folder_removes_it_before_it_exits(private_temp: Path) -> None:
    # A forked child ends with os._exit, so the maker's atexit never ran: AdapterConformance's five forked runs
    # each left an empty certlab-runtime-* folder in the temp folder.
    made = call_in_fork(_make_a_runtime_folder_of_its_own)
    assert Path(made).parent == _runtime_parent() and Path(made).name.startswith("certlab-runtime-")
    assert not Path(made).exists()


@pytest.mark.parametrize("spawn", [False, True], ids=["forked", "spawned"])
def test_a_zygote_whose_preload_made_the_runtime_folder_removes_it_when_it_ends(
    private_temp: Path, spawn: bool
) -> None:
    # A zygote ends with os._exit too: one whose preload made the runtime folder left it, empty, in the temp folder.
    # A spawned zygote is a fresh interpreter: its preload and call are found by name (kernel and stdlib ones),
    # and its runtime folder is its own; the call gives the folder back (os.path.join(folder, "")).
    preload = containment.runtime_folder if spawn else _make_a_runtime_folder_of_its_own
    zygote = Zygote(preload, os.path.join, spawn=spawn)
    try:
        assert zygote.wait_ready(), zygote.problem
        with ForkPool(1) as pool:
            pool.submit_to(zygote, "", "made")
            ((tag, made),) = pool.wait()
        assert tag == "made" and Path(made).parent == _runtime_parent() and Path(made).is_dir()
    finally:
        zygote.close()
    assert not Path(made).exists()


def _made_in_a_zygote_then(_preloaded: object, end: str) -> str:
    return _make_a_folder_then(end)


def test_a_zygote_s_calls_killed_when_it_is_closed_leave_nothing_in_the_temp_folder(private_temp: Path) -> None:
    # An interrupted run closes its zygotes: each killed the calls it had forked, and the folders they would have
    # deleted (a trial's work copy, its agent's capture) stayed in the temp folder.
    zygote = Zygote(lambda: None, _made_in_a_zygote_then)
    try:
        assert zygote.wait_ready(), zygote.problem
        with ForkPool(2) as pool:
            pool.submit_to(zygote, "returns", "returns")
            ((_tag, made),) = pool.wait()
            pool.submit_to(zygote, "hangs", "hangs")
            deadline = time.monotonic() + 30
            while len(list(Path(made).parent.iterdir())) < 2:  # the hanging call has made its folder
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert Path(made).parent.parent == private_temp and Path(made).parent.name.startswith("certlab-calls-")
    finally:
        zygote.close()
    assert list(private_temp.iterdir()) == []


def _start_an_agent_and_join_a_group(foreign_group: int, pids: Path) -> None:
    """In a pool's child: an agent in a session of its own, and a process that joins a group certlab did not make."""
    agent = subprocess.Popen(["sleep", "60"], start_new_session=True)
    joiner = subprocess.Popen(["sleep", "60"], process_group=foreign_group)
    (pids / "started").write_text(f"{agent.pid} {joiner.pid}")
    time.sleep(60)


def test_an_abandoned_pool_kills_what_its_children_started_and_signals_no_group_it_did_not_make(
    tmp_path: Path,
) -> None:
    from certlab_core.sdk.processes import process_state

    foreign = subprocess.Popen(["sleep", "60"], process_group=0)  # a group of its own, which the pool did not make
    try:
        with ForkPool(1) as pool:
            pool.submit(lambda _arg: _start_an_agent_and_join_a_group(foreign.pid, tmp_path), None, "child")
            deadline = time.monotonic() + 30
            while not (tmp_path / "started").exists():
                assert time.monotonic() < deadline, "the child did not start its processes"
                time.sleep(0.02)
        # the pool is abandoned here, its child still running
        agent, joiner = (int(pid) for pid in (tmp_path / "started").read_text().split())
        time.sleep(0.1)  # killed ones are reaped by init meanwhile
        assert process_state(agent) in ("Z", "X"), "the agent in a session of its own outlived the pool"
        assert process_state(joiner) in ("Z", "X")
        assert foreign.poll() is None, "the pool killed a process group it did not make"
    finally:
        foreign.kill()
        foreign.wait()


class _InterruptedAtRegister(selectors.DefaultSelector):
    """A selector whose first ``register`` is interrupted, as Ctrl-C there interrupts a watch under way."""

    interrupted = False

    def register(self, fileobj, events, data=None):  # type: ignore[no-untyped-def]
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        return super().register(fileobj, events, data)


def test_an_interrupt_while_a_child_is_being_watched_kills_it_with_no_internal_error() -> None:
    # Measured: certify stopped by SIGTERM ended "internal error: KeyError: '7 is not registered'" (exit 3, not
    # 143) once in 24 runs: the stop came between a child's watch and its pipe's registration.
    before = set(live_descendants())
    with _InterruptedAtRegister() as selector:
        children = Children(selector)
        with pytest.raises(KeyboardInterrupt):
            children.start(time.sleep, (60,), "waits", None)
        assert len(set(live_descendants()) - before) == 1  # the child runs, watched by no one yet
        children.close()
    assert set(live_descendants()) - before == set()


def test_a_stop_while_a_pending_call_is_forked_kills_its_child(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stop that came between the fork and the PendingCall's making left a child waiting for its argument,
    # which no one would hand it or kill (a trial's adapter call is a PendingCall).
    real_fork_call = forking.fork_call

    def fork_then_stop(fn: Any, args: tuple[Any, ...]) -> tuple[int, int]:
        forked = real_fork_call(fn, args)
        # Ctrl-C, just after the fork. To this thread: a PendingCall is made while its process has no other
        # thread (the fork asks for it), where an xdist worker has execnet's, which would take a process's signal.
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        return forked

    monkeypatch.setattr(forking, "fork_call", fork_then_stop)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # however the suite was started
    before = set(live_descendants())
    try:
        with pytest.raises(KeyboardInterrupt):
            PendingCall(_sleep)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert set(live_descendants()) - before == set()
