"""The process layer: start, supervise, limit, reap processes; one place each.

Everything certlab runs in a process of its own goes through here: a forked call that sends
its one result down a pipe (``fork_call``), many of them under deadlines (``Children``, which
the fork pool and the zygotes serve from), a program stopped at its deadline (``stop_group``:
SIGTERM to its group, SIGKILL a grace later), reaping, and the record of a child that failed
(``ChildFailure``). The parent must not have started a thread before it forks (checked), so a
child never inherits a lock held by a thread that does not exist in it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import selectors
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:  # a zygote imports this module as it starts: nothing it does not need
    import subprocess

    from certlab_core.plugin.types.sandbox import SpawnedProcess

# --------------------------------------------------------------------------- the child failure record


@attrs.frozen
class ChildFailure:
    """What went wrong in a forked child: an exception it raised, or how it died."""

    kind: str  # "exception", "died", "timeout"
    summary: str
    traceback: str = ""
    exit_code: int | None = None  # how a child that "died" exited (None when killed by a signal)


class ForkedCallError(Exception):
    def __init__(self, failure: ChildFailure) -> None:
        super().__init__(failure.summary)
        self.failure = failure


TIMED_OUT = ChildFailure("timeout", "the forked process ran past its time limit and was killed")


def result_of(status: int, data: bytes) -> tuple[str, Any]:
    """What a reaped child sent (``data``), or how it died when it sent nothing (its wait ``status``)."""
    if not data:
        exit_code: int | None = None
        if os.WIFSIGNALED(status):
            how = f"was killed by signal {os.WTERMSIG(status)}"
        else:
            exit_code = os.waitstatus_to_exitcode(status)
            how = f"exited with status {exit_code}"
        return "err", ChildFailure("died", f"the forked process {how} before sending its result", exit_code=exit_code)
    try:
        kind, value = pickle.loads(data)
    except Exception as error:
        return "err", ChildFailure("died", f"the forked process sent an unreadable result ({error})")
    return kind, value


# --------------------------------------------------------------------------- starting


def assert_single_threaded() -> None:
    """Refuse to fork while another thread runs (the child would inherit locks no thread of it holds)."""
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.current_thread())
        raise RuntimeError(f"refusing to fork with other threads running ({names})")


_at_exit: list[tuple[int, Callable[[], object]]] = []  # (the process that registered it, what to run)


def at_exit(cleanup: Callable[[], object]) -> None:
    """Run ``cleanup`` when this process ends: at interpreter exit, and in a forked child of this layer, which
    ends with ``os._exit`` (no atexit), before it exits. A child it forks later does not run it."""
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and cleanup())
    _at_exit.append((owner, cleanup))


def run_exit_cleanups() -> None:
    """Run what this process registered with :func:`at_exit`, newest first: for a process of this layer that
    ends with ``os._exit`` (a forked call's child, a zygote), just before it does."""
    for owner, cleanup in reversed(_at_exit):
        if owner == os.getpid():
            with contextlib.suppress(Exception):
                cleanup()


#: The signals that stop certlab (Ctrl-C, and SIGTERM from timeout, docker stop or a cancelled CI job).
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def _stop_is_the_parents(_signum: int, _frame: object) -> None:
    """A forked child's SIGINT and SIGTERM handler: nothing (:func:`leave_stops_to_parent`)."""


def leave_stops_to_parent() -> None:
    """In a process certlab forked or spawned to do work: Ctrl-C and SIGTERM are its parent's to handle.

    Ctrl-C reaches the terminal's whole process group, and ``timeout``'s SIGTERM the group it
    leads; the parent stops and kills each child with everything it started, where a child dying
    of the signal alone left its agent and graders running and its temp folders behind. A
    handler, not SIG_IGN: the programs the process starts get the default action back.
    """
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _stop_is_the_parents)


def child_main(write_fd: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Run in the child: compute, send ("ok", value) or ("err", ChildFailure), exit without the interpreter's
    cleanup: only what the child registered with :func:`at_exit` runs (a folder it made, say)."""
    code = 0
    try:
        try:
            leave_stops_to_parent()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # held by the parent across the fork
            payload: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as error:  # everything, SystemExit included, is reported
            payload = (
                "err",
                ChildFailure("exception", f"{type(error).__name__}: {error}", traceback.format_exc(limit=20)),
            )
        try:
            data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:
            data = pickle.dumps(("err", ChildFailure("exception", f"unpicklable result: {error}")))
        write_all(write_fd, data)
    except BaseException:
        code = 70
    finally:
        run_exit_cleanups()
        os._exit(code)


_PLUMBING: set[int] = set()  # this process's own descriptors (a zygote's pipes, a store's lock): no child holds them


def keep_from_children(*fds: int) -> None:
    """Close ``fds`` in every child forked from now on (until :func:`release_to_children`), by any fork.

    A forked call runs code certlab does not trust (a tool-world trial runs the agent):
    holding its zygote's result pipe, it could write another call's result; holding a run
    store's record file, it could append to it; holding a command pipe, a host's socket or a
    store's lock, a child left running would keep that zygote or host from seeing its end, or
    the store locked. Only the child's copy is closed (an flock stays the parent's)."""
    _PLUMBING.update(fds)


def release_to_children(*fds: int) -> None:
    """``fds`` are closed (or handed on) here: a child forked from now on has nothing of them to close."""
    _PLUMBING.difference_update(fds)


def _close_plumbing_in_child() -> None:
    for fd in _PLUMBING:
        with contextlib.suppress(OSError):
            os.close(fd)
    _PLUMBING.clear()  # the numbers are free now: a descriptor the child opens may take one


os.register_at_fork(after_in_child=_close_plumbing_in_child)


def fork_call(fn: Callable[..., Any], args: tuple[Any, ...], siblings: Collection[int] = ()) -> tuple[int, int]:
    """Fork a child that runs ``fn(*args)`` and sends its result; return its pid and the pipe to read it from.

    The child holds neither what this process keeps from its children (:func:`keep_from_children`)
    nor ``siblings`` (the descriptors through which the caller watches its other children)."""
    assert_single_threaded()
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        for fd in siblings:
            with contextlib.suppress(OSError):
                os.close(fd)
        child_main(write_fd, fn, args)
    os.close(write_fd)
    return pid, read_fd


# --------------------------------------------------------------------------- stopping and reaping


def reap(pid: int) -> int:
    """Wait for the child ``pid`` to end; its wait status."""
    _pid, status = os.waitpid(pid, 0)
    return status


def kill(pid: int) -> None:
    """SIGKILL the child ``pid`` and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def kill_tree(pid: int, group: bool = False) -> None:
    """SIGKILL the child ``pid`` and everything below it (with its process group when ``group``), and reap it.

    A forked child killed alone leaves running what it started: an agent in a session of its own,
    a grader's processes. Reparented away, they outlived the call and wrote on into folders certlab
    was deleting. So the child is stopped first (it cannot start more), each process below it is
    killed with its process group when the group's leader is one of them (a session's leader takes
    its group with it), else alone (a group certlab did not start is never signalled), then the child.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
    tree = live_descendants(pid)
    ours = {pid, *tree}  # a group is killed whole only when one of these leads it: never one certlab did not make
    for below in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            below_group = os.getpgid(below)
            if below_group in ours:
                os.killpg(below_group, signal.SIGKILL)
            else:
                os.kill(below, signal.SIGKILL)
    if group:
        kill_group(pid)
    kill(pid)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group ``pgid``, if it is still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def reap_exited() -> None:
    """Reap every child of this process that has ended, without waiting for the others."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def has_children() -> bool:
    """Whether this process has any child left, zombies reaped first."""
    reap_exited()
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


def pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` ends (None before Linux 5.3, or when it is gone)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def exited_within(process: SpawnedProcess, timeout_s: float) -> bool:
    """Wait for ``process`` to end, at most ``timeout_s``; True when it ended (it is then reaped).

    Woken by the kernel the moment it exits (a pidfd); ``Popen.wait(timeout)`` instead sleeps in
    doubling steps up to 50 ms, which added up to half a short program's run to every one.
    """
    import subprocess

    watch = pidfd(process.pid)
    if watch is not None:
        try:
            poller = select.poll()
            poller.register(watch, select.POLLIN)
            deadline = time.monotonic() + timeout_s
            while not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                if time.monotonic() >= deadline:
                    return process.poll() is not None
        finally:
            os.close(watch)
    try:
        process.wait(timeout=timeout_s if watch is None else None)
    except subprocess.TimeoutExpired:
        return False
    return True


def stop_group(process: SpawnedProcess, timeout_s: float, grace_s: float) -> bool:
    """Wait for ``process`` until ``timeout_s``, then SIGTERM its group and SIGKILL it ``grace_s`` later; True if
    it ran past its time. It is reaped either way."""
    import subprocess

    if exited_within(process, timeout_s):
        return False
    kill_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        kill_group(process.pid, signal.SIGKILL)
        process.wait()
    return True


def stop_child(pid: int, grace_s: float) -> None:
    """Wait for the forked child ``pid`` to end by itself, at most ``grace_s``, then SIGKILL it; reaped either way."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            ended, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped already
            return
        if ended:
            return
        time.sleep(0.005)
    kill(pid)


def stop(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """Wait for ``process`` to end by itself, at most ``grace_s``, then SIGKILL it; it is reaped either way."""
    try:
        process.wait(timeout=grace_s)
    except Exception:
        process.kill()
        process.wait()


# --------------------------------------------------------------------------- many children under deadlines


@attrs.define
class Finished:
    """A child whose pipe closed, or that was killed at its deadline (``timed_out``; it is reaped then)."""

    tag: Any
    pid: int
    data: bytes
    timed_out: bool

    def outcome(self) -> tuple[str, Any]:
        """``("ok", what it returned)``, or ``("err", the ChildFailure of how it failed)``; it is reaped here."""
        return ("err", TIMED_OUT) if self.timed_out else result_of(reap(self.pid), self.data)


class Children:
    """Forked children, each sending its one result down a pipe watched by ``selector``, killed at its deadline.

    ``start`` forks one (``watch``: one forked elsewhere); the owner selects (at most
    ``wait_s()``), hands each ready descriptor to ``read`` (False: not a child's, the owner's
    own), then takes ``finished()``. The fork pool, each zygote and each forked call serve
    their calls through one of these.
    """

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self._selector = selector
        self._running: dict[int, tuple[Any, int, list[bytes], float | None]] = {}  # fd -> (tag, pid, chunks, deadline)
        self._leaders: dict[int, int | None] = {}  # a group leader's fd -> its pidfd
        self._exits: dict[int, int] = {}  # pidfd -> the leader's fd
        self._ended: dict[int, bool] = {}  # fd -> killed at its deadline

    def __len__(self) -> int:
        return len(self._running)

    def start(self, fn: Callable[..., Any], args: tuple[Any, ...], tag: Any, timeout: float | None) -> None:
        # An interrupt between the fork and the watch would leave a child no one kills: it waits until then.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid, read_fd = fork_call(fn, args, self._descriptors())
            self.watch(pid, read_fd, tag, None if timeout is None else time.monotonic() + timeout)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _descriptors(self) -> list[int]:
        """What this watches its children through: their pipes and pidfds, and the selector's own."""
        selector_fd = getattr(self._selector, "fileno", None)  # an epoll selector has one; a select-based one not
        own = [selector_fd()] if callable(selector_fd) else []
        return [*self._running, *self._exits, *own]

    def watch(self, pid: int, read_fd: int, tag: Any, deadline: float | None, leader: bool = False) -> None:
        """Watch a child that sends its result on ``read_fd`` (closed here once it is done).

        A ``leader`` of its own process group is killed with the group at its deadline, and is
        done when it exits, even while a process it started holds its pipe open.
        """
        self._running[read_fd] = (tag, pid, [], deadline)
        self._selector.register(read_fd, selectors.EVENT_READ)
        if leader:
            self._leaders[read_fd] = exited = pidfd(pid)  # None before Linux 5.3: its pipe's end says it is done
            if exited is not None:
                self._exits[exited] = read_fd
                self._selector.register(exited, selectors.EVENT_READ)

    def wait_s(self) -> float | None:
        """How long the owner may wait in ``select``: until the nearest deadline (None: no deadline)."""
        deadlines = [d for (_t, _p, _c, d) in self._running.values() if d is not None]
        return None if not deadlines else max(0.0, min(deadlines) - time.monotonic())

    def read(self, fd: int) -> bool:
        """Read what the child on ``fd`` sent; False when ``fd`` is not a child's."""
        leader = self._exits.get(fd)
        if leader is not None:  # it has exited: what it wrote is all in its pipe
            os.set_blocking(leader, False)
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(leader, 1 << 16):
                    self._running[leader][2].append(chunk)
            self._ended.setdefault(leader, False)
            return True
        running = self._running.get(fd)
        if running is None:
            return False
        if fd not in self._ended:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                running[2].append(chunk)
            else:
                self._ended[fd] = False
        return True

    def _kill(self, fd: int, pid: int) -> None:
        """Kill a child past its deadline: its group when it leads one (what it started is its caller's to sweep
        and name: a trial's leftover processes), else the child with everything below it (nothing sweeps after
        a trial or a grader killed at its limit)."""
        if fd in self._leaders:
            kill_group(pid)
            with contextlib.suppress(ChildProcessError):
                reap(pid)
        else:
            kill_tree(pid)

    def _forget(self, fd: int) -> None:
        for watched in (fd, self._leaders.pop(fd, None)):
            if watched is not None:
                self._exits.pop(watched, None)
                with contextlib.suppress(KeyError):  # an interrupt came before it was registered
                    self._selector.unregister(watched)
                os.close(watched)

    def finished(self) -> list[Finished]:
        """The children that ended, and those now past their deadline, killed (their pipes closed)."""
        now = time.monotonic()
        for fd, (_t, pid, _c, deadline) in self._running.items():
            if deadline is not None and now >= deadline and fd not in self._ended:
                self._kill(fd, pid)
                self._ended[fd] = True
        done = []
        for fd, timed_out in self._ended.items():
            tag, pid, chunks, _d = self._running.pop(fd)
            self._forget(fd)
            done.append(Finished(tag, pid, b"".join(chunks), timed_out))
        self._ended.clear()
        return done

    def close(self) -> None:
        """Kill every child still running, with everything it started (nothing is left to sweep it), and forget it."""
        for fd, (_t, pid, _c, _d) in list(self._running.items()):
            kill_tree(pid, group=fd in self._leaders)
            self._forget(fd)
        self._running.clear()
        self._ended.clear()


# --------------------------------------------------------------------------- the processes below one


def process_ids() -> list[int]:
    """Every process id in ``/proc``."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _stat(pid: int) -> tuple[int, str] | None:
    """``pid``'s parent and state letter, from ``/proc/PID/stat`` (None when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0]
    except (OSError, IndexError, ValueError):
        return None


def _children(pid: int) -> list[int] | None:
    """The children of ``pid``, from ``/proc/PID/task/*/children``; None where the kernel does not list them."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for task in tasks:
        try:
            found.extend(int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split())
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{task}"):  # the thread is there, its list is not: no lists here
                return None
        except (OSError, ValueError):  # the thread ended meanwhile
            continue
    return found


def process_state(pid: int) -> str:
    """``pid``'s state letter (``Z`` a zombie, ``X`` gone)."""
    return (_stat(pid) or (0, "X"))[1]


def live_descendants(root: int | None = None, spare: Collection[int] = ()) -> list[int]:
    """The live processes below ``root`` (this process by default), leaving out ``spare`` and theirs.

    Walks the tree down from ``root`` through the kernel's lists of children, which reads a
    few files for a few descendants (the whole process table only where those lists are missing).
    """
    me = os.getpid() if root is None else root
    walked: list[int] = []
    stack = [me]
    while stack:
        below = _children(stack.pop())
        if below is None:
            return _live_descendants_from_table(me, spare)
        fresh = [pid for pid in below if pid not in spare and pid not in walked]
        walked.extend(fresh)
        stack.extend(fresh)
    return [pid for pid in walked if process_state(pid) not in ("Z", "X")]


def _live_descendants_from_table(me: int, spare: Collection[int]) -> list[int]:
    table = {pid: stat for pid in process_ids() if (stat := _stat(pid)) is not None}
    children: dict[int, list[int]] = {}
    for pid, (parent, _state) in table.items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    stack = [pid for pid in children.get(me, []) if pid not in spare]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(p for p in children.get(pid, []) if p not in spare)
    return [pid for pid in found if table[pid][1] not in ("Z", "X")]


# --------------------------------------------------------------------------- framing

#: A pickled message on a pipe is its length in 8 bytes, then the pickle.
FRAME = struct.Struct("!Q")


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``, however many writes it takes."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send_frame(fd: int, message: Any) -> None:
    """Send ``message`` pickled, as one frame."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    write_all(fd, FRAME.pack(len(data)) + data)


def read_exactly(fd: int, size: int) -> bytes:
    """Read ``size`` bytes from ``fd``; EOFError when the pipe closes first."""
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            raise EOFError("the pipe closed early")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def frames(buffer: bytearray) -> list[Any]:
    """Complete messages at the front of ``buffer`` (consumed); a partial one stays."""
    messages = []
    while len(buffer) >= FRAME.size:
        (size,) = FRAME.unpack_from(buffer)
        if len(buffer) < FRAME.size + size:
            break
        messages.append(pickle.loads(bytes(buffer[FRAME.size : FRAME.size + size])))
        del buffer[: FRAME.size + size]
    return messages
