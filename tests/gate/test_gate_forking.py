"""The fork pool and zygotes the gate runs trials on: fresh processes, preloaded once, results over pipes."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

from certlab_core.sdk.forking import ChildFailure, ForkPool
from certlab_core.sdk.zygote import Zygote, ZygoteHost


def preload() -> dict[str, Any]:
    return {"loaded_in": os.getpid(), "calls": 0}


def call(preloaded: dict[str, Any], arg: Any) -> Any:
    preloaded["calls"] += 1  # a fresh process each time: never seen by the next call
    if arg == "raise":
        raise ValueError("in the grandchild")
    if arg == "sleep":
        time.sleep(30)
    if arg == "exit":
        os._exit(75)
    return {"pid": os.getpid(), "loaded_in": preloaded["loaded_in"], "calls": preloaded["calls"], "arg": arg}


def test_each_call_runs_in_a_fresh_grandchild_of_the_preloaded_zygote() -> None:
    zygote = Zygote(preload, call)
    try:
        assert zygote.ready
        with ForkPool(4) as pool:
            for n in range(6):
                pool.submit_to(zygote, n, ("z", n))
            pool.submit(lambda _unused: "direct", None, ("d", 0))
            results: dict[Any, Any] = {}
            while pool.busy():
                results.update(pool.wait())
    finally:
        zygote.close()
    assert results[("d", 0)] == "direct"
    answers = [results[("z", n)] for n in range(6)]
    assert {a["loaded_in"] for a in answers} == {zygote.pid}
    assert len({a["pid"] for a in answers}) == 6 and zygote.pid not in {a["pid"] for a in answers}
    assert {a["calls"] for a in answers} == {1}
    assert [a["arg"] for a in answers] == list(range(6))


def test_failures_of_a_grandchild_come_back_as_child_failures() -> None:
    zygote = Zygote(preload, call)
    try:
        with ForkPool(3) as pool:
            pool.submit_to(zygote, "raise", "raise")
            pool.submit_to(zygote, "sleep", "sleep", timeout=0.3)
            pool.submit_to(zygote, "exit", "exit")
            results: dict[Any, Any] = {}
            while pool.busy():
                results.update(pool.wait())
    finally:
        zygote.close()
    assert isinstance(results["raise"], ChildFailure) and results["raise"].kind == "exception"
    assert "ValueError: in the grandchild" in results["raise"].summary
    assert results["sleep"].kind == "timeout"
    assert results["exit"].kind == "died" and results["exit"].exit_code == 75


def test_a_preload_that_fails_or_starts_a_thread_leaves_the_zygote_not_ready() -> None:
    def broken() -> None:
        raise ImportError("no such agent")

    def threaded() -> None:
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()

    failed = Zygote(broken, call)
    assert not failed.ready and failed.problem == "ImportError: no such agent" and failed.closed
    spun = Zygote(threaded, call)
    assert not spun.ready and spun.problem is not None and "started a thread" in spun.problem


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper is not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_closing_a_zygote_stops_its_grandchildren(tmp_path: Any) -> None:
    marker = tmp_path / "pid"

    def sleeper(_preloaded: Any, _arg: Any) -> None:
        staged = tmp_path / "pid.tmp"
        staged.write_text(str(os.getpid()))
        staged.rename(marker)  # appears whole, never half written
        time.sleep(30)

    zygote = Zygote(preload, sleeper)
    pool = ForkPool(1)
    pool.submit_to(zygote, None, "sleep")
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    grandchild = int(marker.read_text())
    started = time.monotonic()
    zygote.close()
    pool.close()
    assert time.monotonic() - started < 5.0
    deadline = time.monotonic() + 5
    while _running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _running(grandchild)


SPAWNED = """
import os, sys

def preload():
    return os.getpid()

def call(preloaded, arg):
    return {"zygote": preloaded, "pid": os.getpid(), "parent": os.getppid(), "arg": arg,
            "lean": not any(m in sys.modules for m in ("typer", "pytest", "certlab_core.cli"))}
"""


def test_a_spawned_zygote_is_a_fresh_lean_interpreter(tmp_path: Any, monkeypatch: Any) -> None:
    (tmp_path / "spawned_helpers.py").write_text(SPAWNED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    import spawned_helpers  # type: ignore[import-not-found]

    zygote = Zygote.spawn(spawned_helpers.preload, spawned_helpers.call)
    try:
        assert zygote.wait_ready(), zygote.problem
        with ForkPool(2) as pool:
            pool.submit_to(zygote, "x", "x")
            pool.submit_to(zygote, "y", "y")
            results: dict[Any, Any] = {}
            while pool.busy():
                results.update(pool.wait())
    finally:
        zygote.close()
    for arg in ("x", "y"):
        answer = results[arg]
        assert answer["zygote"] == zygote.pid and answer["parent"] == zygote.pid and answer["pid"] != zygote.pid
        assert answer["lean"] and answer["arg"] == arg
    assert zygote.pid != os.getpid()


def open_descriptors() -> dict[int, str]:
    """What this process holds open, beyond 0, 1 and 2: descriptor -> what it points at."""
    held = {}
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                held[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return held


DESCRIPTORS = """
import os, time

def preload():
    return None

def call(_preloaded, arg):
    if arg == "first":  # still running when the second call is forked
        time.sleep(1.5)
    held = {}
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            try:
                held[int(name)] = os.readlink("/proc/self/fd/" + name)
            except OSError:  # the listing's own descriptor, closed by now
                pass
    return held
"""


def test_a_call_holds_no_descriptor_of_its_zygote_nor_of_another_call(tmp_path: Any, monkeypatch: Any) -> None:
    """A call runs an agent's code (a tool-world trial): holding its zygote's result pipe, it could write a
    sibling trial's result; holding its command pipe or selector, it could stall the zygote. A fork from the
    asking process holds no zygote's pipes either, nor a zygote host's socket or a hosted zygote's pidfd. The
    spawned zygote starts with nothing but its pipes, so each call must hold exactly one pipe: its own result's."""
    (tmp_path / "descriptor_helpers.py").write_text(DESCRIPTORS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    import descriptor_helpers  # type: ignore[import-not-found]

    zygote = Zygote.spawn(descriptor_helpers.preload, descriptor_helpers.call)
    host = ZygoteHost()
    hosted = host.zygote(descriptor_helpers.preload, descriptor_helpers.call)
    try:
        assert zygote.wait_ready(), zygote.problem
        assert hosted.wait_ready(), hosted.problem
        plumbing = [zygote.command_fd, zygote.result_fd, hosted.command_fd, hosted.result_fd, host._socket.fileno()]
        plumbing += [hosted._ended] if hosted._ended is not None else []
        links = {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in plumbing}
        with ForkPool(3) as pool:
            pool.submit_to(zygote, "first", "first")
            time.sleep(0.3)
            pool.submit_to(zygote, "second", "second")
            pool.submit(lambda _unused: open_descriptors(), None, "direct")
            results: dict[Any, Any] = {}
            while pool.busy():
                results.update(pool.wait())
    finally:
        zygote.close()
        hosted.close()
        host.close()
    for name in ("first", "second"):
        held = list(results[name].values())
        assert len([h for h in held if h.startswith("pipe:")]) == 1, (name, held)
        assert not [h for h in held if h.startswith(("anon_inode:", "socket:"))], (name, held)
    direct = results["direct"]
    assert not {fd: link for fd, link in links.items() if direct.get(fd) == link}, direct


def test_a_forked_call_holds_neither_a_run_stores_record_file_nor_its_lock(tmp_path: Any) -> None:
    """A trial forked from the runner (a plugin registered in-process, a stage run directly) runs an agent's
    code: holding trials.jsonl open for appending, it could add records the run never made."""
    from certlab_core.gate.store import TrialSink
    from certlab_core.sdk.forking import call_in_fork

    with TrialSink(tmp_path) as sink:
        mine = open_descriptors()
        held = call_in_fork(open_descriptors)
    assert str(sink.path) in mine.values() and str(tmp_path) in mine.values()  # the parent holds both
    assert str(sink.path) not in held.values(), held
    assert str(tmp_path) not in held.values(), held


HOSTED = """
import importlib, os, sys

def preload(module):
    importlib.import_module(module)
    return os.getpid(), os.getppid()

def call(preloaded, arg):
    zygote, host = preloaded
    modules = sorted(m for m in sys.modules if m.startswith("f14_"))
    return {"zygote": zygote, "host": host, "parent": os.getppid(), "modules": modules}
"""


def test_a_zygote_host_forks_zygotes_that_see_its_modules_and_not_each_others(tmp_path: Any, monkeypatch: Any) -> None:
    import functools

    (tmp_path / "hosted_helpers.py").write_text(HOSTED)
    for name in ("f14_shared", "f14_agent", "f14_oracle"):
        (tmp_path / f"{name}.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    import hosted_helpers  # type: ignore[import-not-found]

    stop = threading.Event()
    busy = threading.Thread(target=stop.wait)  # a process with threads (a Dask worker) may use a host
    busy.start()
    host = ZygoteHost(["f14_shared"])
    zygotes = [
        host.zygote(functools.partial(hosted_helpers.preload, m), hosted_helpers.call)
        for m in ("f14_agent", "f14_oracle")
    ]
    try:
        assert all(zygote.wait_ready() for zygote in zygotes)
        with ForkPool(2) as pool:
            for zygote in zygotes:
                pool.submit_to(zygote, None, zygote.pid)
            results: dict[Any, Any] = {}
            while pool.busy():
                results.update(pool.wait())
    finally:
        for zygote in zygotes:
            zygote.close()
        host.close()
        stop.set()
        busy.join()
    agent, oracle = (results[zygote.pid] for zygote in zygotes)
    assert agent["modules"] == ["f14_agent", "f14_shared"] and oracle["modules"] == ["f14_oracle", "f14_shared"]
    assert agent["zygote"] == zygotes[0].pid != oracle["zygote"] == zygotes[1].pid
    assert agent["parent"] == agent["zygote"] and agent["host"] == oracle["host"] == host._process.pid != os.getpid()
    assert not host.alive


ENDING = """
import os, tempfile, time

def preload():
    return None

def call(preloaded, arg):
    with open(os.path.join(tempfile.gettempdir(), "running"), "w"):  # the zygote's calls' folder
        pass
    if arg == "sleep":
        time.sleep(30)
    return os.getpid()
"""


def test_closing_a_hosted_zygote_returns_once_it_has_ended_and_its_calls_folder_is_gone(
    tmp_path: Any, monkeypatch: Any
) -> None:
    # A hosted zygote is its host's child, not this process's: a session that closed it and returned at once
    # could leave its calls' temp folder behind for a moment (a run that had just ended, its TMPDIR removed).
    (tmp_path / "ending_helpers.py").write_text(ENDING)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    import ending_helpers  # type: ignore[import-not-found]

    host = ZygoteHost()
    try:
        zygote = host.zygote(ending_helpers.preload, ending_helpers.call)
        assert zygote.wait_ready()
        pool = ForkPool(1)
        pool.submit_to(zygote, None, "sleep")
        deadline = time.monotonic() + 10
        while not any(temp.glob("certlab-calls-*/*")) and time.monotonic() < deadline:
            time.sleep(0.01)  # the call is running: its own temp folder is in the zygote's
        assert any(temp.glob("certlab-calls-*/*"))
        zygote.close()
        assert not _running(zygote.pid)
        assert list(temp.iterdir()) == []
        pool.close()
    finally:
        host.close()


def test_a_zygote_host_leaves_a_groups_stop_to_the_process_that_asks_it(tmp_path: Any, monkeypatch: Any) -> None:
    # Ctrl-C and timeout's SIGTERM reach the whole process group; the asker closes what it started.
    import signal

    (tmp_path / "ending_helpers.py").write_text(ENDING)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    from ending_helpers import call, preload  # type: ignore[import-not-found]

    host = ZygoteHost()
    try:
        first = host.zygote(preload, call)
        assert first.wait_ready()  # the host is serving: its signal dispositions are set
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            os.kill(host._process.pid, stop_signal)
        time.sleep(0.2)
        assert host.alive
        second = host.zygote(preload, call)
        assert second.wait_ready()
        first.close()
        second.close()
    finally:
        host.close()
    assert not host.alive


def test_a_zygote_that_cannot_be_spawned_refuses_before_starting() -> None:
    import pickle

    import pytest

    with pytest.raises((pickle.PicklingError, AttributeError)):  # a closure does not pickle
        Zygote.spawn(lambda: None, call)
