"""Fresh processes forked from a lean, preloaded parent: one call, or a pool.

The parent must not have started a thread before it forks (checked), so a child never
inherits a lock held by a thread that does not exist in it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import selectors
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

import attrs

T = TypeVar("T")
R = TypeVar("R")


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


def _assert_single_threaded() -> None:
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.current_thread())
        raise RuntimeError(f"refusing to fork with other threads running ({names})")


def _child_main(write_fd: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Run in the child: compute, send ("ok", value) or ("err", ChildFailure), exit without cleanup."""
    code = 0
    try:
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
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
        view = memoryview(data)
        while view:
            written = os.write(write_fd, view)
            view = view[written:]
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def _spawn(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[int, int]:
    _assert_single_threaded()
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        _child_main(write_fd, fn, args)
    os.close(write_fd)
    return pid, read_fd


def _decode(pid: int, data: bytes, timed_out: bool) -> tuple[str, Any]:
    if timed_out:
        return "err", ChildFailure("timeout", "the forked process ran past its time limit and was killed")
    _, status = os.waitpid(pid, 0)
    return _decoded(status, data)


def _decoded(status: int, data: bytes) -> tuple[str, Any]:
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


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def call_in_fork(fn: Callable[..., R], *args: Any, timeout: float | None = None) -> R:
    """Run ``fn(*args)`` in a fresh forked child and return its result; raise ForkedCallError on failure."""
    pid, read_fd = _spawn(fn, args)
    chunks: list[bytes] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    timed_out = False
    with selectors.DefaultSelector() as sel:
        sel.register(read_fd, selectors.EVENT_READ)
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if wait == 0.0 or not sel.select(wait):
                timed_out = True
                _kill(pid)
                break
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_fd)
    kind, value = _decode(pid, b"".join(chunks), timed_out)
    if kind == "ok":
        returned: R = value
        return returned
    raise ForkedCallError(value)


class PendingCall:
    """A forked child that waits for its argument, then runs ``fn(arg)`` in a process group of its own.

    It is forked at once, while the caller is still single-threaded, and started later with
    ``start(arg)`` (an argument the caller may have made after starting a thread, such as
    the environment of a boundary it serves). ``result(timeout)`` waits at most ``timeout``
    seconds from ``start``; past them, the child's whole process group is killed and a
    ``ForkedCallError`` of kind ``timeout`` is raised, as for a child that raised or died.
    The group is killed once the result is in too, so nothing the call left in it outlives
    it. ``cancel()`` kills it at any time (never started, or abandoned).
    """

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        _assert_single_threaded()
        sys.stdout.flush()
        sys.stderr.flush()
        arg_read, arg_write = os.pipe()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.setpgid(0, 0)
                os.close(arg_write)
                os.close(read_fd)
                (size,) = _FRAME.unpack(_read_exactly(arg_read, _FRAME.size))
                arg = pickle.loads(_read_exactly(arg_read, size))
                os.close(arg_read)
            except BaseException:  # never started: the parent gave up on it
                os._exit(70)
            _child_main(write_fd, fn, (arg,))
        with contextlib.suppress(OSError):  # set on both sides, so the group exists whichever runs first
            os.setpgid(pid, pid)
        os.close(arg_read)
        os.close(write_fd)
        self.pid = pid
        self._arg_fd: int | None = arg_write
        self._read_fd: int | None = read_fd
        self._started_at: float | None = None

    def start(self, arg: Any) -> None:
        """Hand the child its argument: ``fn(arg)`` begins now."""
        assert self._arg_fd is not None, "a PendingCall starts once"
        self._started_at = time.monotonic()
        try:
            _send_frame(self._arg_fd, arg)
        finally:
            os.close(self._arg_fd)
            self._arg_fd = None

    def result(self, timeout: float | None = None) -> Any:
        """The call's return value, waiting at most ``timeout`` seconds from ``start``; ForkedCallError on failure."""
        assert self._read_fd is not None and self._started_at is not None, "start the call first"
        read_fd = self._read_fd
        deadline = None if timeout is None else self._started_at + timeout
        try:
            pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # before Linux 5.3: the end of its pipe alone says it is done
            pidfd = None
        chunks: list[bytes] = []
        timed_out = False
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(read_fd, selectors.EVENT_READ)
                if pidfd is not None:
                    sel.register(pidfd, selectors.EVENT_READ)
                done = False
                while not done:
                    wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                    events = sel.select(wait)
                    if not events and deadline is not None and time.monotonic() >= deadline:
                        timed_out = True
                        break
                    for key, _mask in events:
                        if key.fd == read_fd:
                            chunk = os.read(read_fd, 1 << 16)
                            chunks.append(chunk)
                            done = done or not chunk
                        else:  # the child has exited: what it wrote is all in the pipe (a process it
                            os.set_blocking(read_fd, False)  # started may hold the pipe open for ever)
                            with contextlib.suppress(BlockingIOError):
                                while chunk := os.read(read_fd, 1 << 16):
                                    chunks.append(chunk)
                            done = True
        finally:
            if pidfd is not None:
                os.close(pidfd)
            os.close(read_fd)
            self._read_fd = None
            if timed_out or sys.exc_info()[0] is not None:
                self._kill_group()
        if timed_out:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            raise ForkedCallError(ChildFailure("timeout", "the forked process ran past its time limit and was killed"))
        _, status = os.waitpid(self.pid, 0)
        self._kill_group()  # reaped, its group lives on while any member does: none of them outlives the call
        kind, value = _decoded(status, b"".join(chunks))
        if kind == "ok":
            return value
        raise ForkedCallError(value)

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def cancel(self) -> None:
        """Kill the child and its process group, if it still runs, and reap it (a no-op once its result is read)."""
        if self._arg_fd is not None:
            os.close(self._arg_fd)
            self._arg_fd = None
        if self._read_fd is None and self._started_at is not None:
            return  # its result was read: already reaped
        self._kill_group()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None


def map_in_forks(
    fn: Callable[[T], R],
    items: Iterable[T],
    workers: int = 2,
    timeout: float | None = None,
) -> Iterator[tuple[int, R | ChildFailure]]:
    """Run ``fn(item)`` for each item, each in its own forked child, at most ``workers`` at once.

    Yields ``(index, result)`` as children finish (not in order); a child that raised,
    died or timed out yields a ChildFailure instead of a result.
    """
    pending = list(enumerate(items))
    pending.reverse()
    with ForkPool(workers) as pool:
        while pending or pool.busy():
            while pending and pool.free() > 0:
                index, item = pending.pop()
                pool.submit(fn, item, index, timeout)
            yield from pool.wait()


class ZygoteChannel(Protocol):
    """What a pool needs of a zygote (``certlab_core.sdk.zygote.Zygote``): its result pipe, send and receive."""

    result_fd: int
    closed: bool

    def send(self, arg: Any, tag: Any, timeout: float | None) -> None: ...
    def receive(self) -> list[tuple[Any, Any]]: ...


class ForkPool:
    """Fresh forked children, at most ``workers`` at once, each running one submitted call; results as they finish.

    ``submit(fn, arg, tag, timeout)`` starts ``fn(arg)`` in a new child (call it only while
    ``free()``); ``wait()`` blocks until at least one child finishes and returns ``(tag,
    result)`` pairs, a ChildFailure standing for a child that raised, died or ran past its
    time limit. Unlike ``map_in_forks``, new work can depend on finished work (a trial's
    oracle after the trial). Leaving the ``with`` block kills whatever still runs.
    """

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._running: dict[int, tuple[Any, int, list[bytes], float | None]] = {}  # fd -> (tag, pid, chunks, deadline)
        self._selector = selectors.DefaultSelector()
        self._zygotes: dict[int, ZygoteChannel] = {}  # result fd -> zygote
        self._in_zygotes = 0

    def __enter__(self) -> ForkPool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def free(self) -> int:
        return self.workers - self.busy()

    def busy(self) -> int:
        return len(self._running) + self._in_zygotes

    def submit_to(self, zygote: ZygoteChannel, arg: Any, tag: Any, timeout: float | None = None) -> None:
        """Run the zygote's call on ``arg`` in a fresh grandchild forked from it; its result comes from ``wait()``."""
        if zygote.result_fd not in self._zygotes:
            self._zygotes[zygote.result_fd] = zygote
            self._selector.register(zygote.result_fd, selectors.EVENT_READ)
        zygote.send(arg, tag, timeout)
        self._in_zygotes += 1

    def submit(self, fn: Callable[[Any], Any], arg: Any, tag: Any, timeout: float | None = None) -> None:
        pid, read_fd = _spawn(fn, (arg,))
        deadline = None if timeout is None else time.monotonic() + timeout
        self._running[read_fd] = (tag, pid, [], deadline)
        self._selector.register(read_fd, selectors.EVENT_READ)

    def wait(self) -> list[tuple[Any, Any]]:
        """Block until at least one child has finished; return each finished ``(tag, result or ChildFailure)``."""
        done: list[tuple[Any, Any]] = []
        while self.busy() and not done:
            deadlines = [d for (_t, _p, _c, d) in self._running.values() if d is not None]
            wait = None if not deadlines else max(0.0, min(deadlines) - time.monotonic())
            events = self._selector.select(wait)
            now = time.monotonic()
            finished: dict[int, bool] = {}
            for key, _mask in events:
                fd = int(key.fd)
                zygote = self._zygotes.get(fd)
                if zygote is not None:
                    results = zygote.receive()
                    self._in_zygotes -= len(results)
                    done.extend(results)
                    if zygote.closed:
                        self._selector.unregister(fd)
                        del self._zygotes[fd]
                    continue
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    self._running[fd][2].append(chunk)
                else:
                    finished[fd] = False
            for fd, (_t, pid, _c, deadline) in list(self._running.items()):
                if deadline is not None and now >= deadline and fd not in finished:
                    _kill(pid)
                    finished[fd] = True
            for fd, timed_out in finished.items():
                tag, pid, chunks, _d = self._running.pop(fd)
                self._selector.unregister(fd)
                os.close(fd)
                _kind, value = _decode(pid, b"".join(chunks), timed_out)
                done.append((tag, value))
        return done

    def close(self) -> None:
        for fd, (_t, pid, _c, _d) in list(self._running.items()):
            _kill(pid)
            self._selector.unregister(fd)
            os.close(fd)
        self._running.clear()
        for fd in list(self._zygotes):
            self._selector.unregister(fd)
        self._zygotes.clear()
        self._in_zygotes = 0
        self._selector.close()


# --------------------------------------------------------------------------- framing


#: A pickled message on a pipe is its length in 8 bytes, then the pickle.
_FRAME = struct.Struct("!Q")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _send_frame(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    _write_all(fd, _FRAME.pack(len(data)) + data)


def _read_exactly(fd: int, size: int) -> bytes:
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            raise EOFError("the pipe closed early")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
