"""Fresh processes forked from a lean, preloaded parent: one call, or a pool.

The parent must not have started a thread before it forks (checked), so a child never
inherits a lock held by a thread that does not exist in it.
"""

from __future__ import annotations

import contextlib
import gc
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
from typing import Any, TypeVar

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
        self._zygotes: dict[int, Zygote] = {}  # result fd -> zygote
        self._in_zygotes = 0

    def __enter__(self) -> ForkPool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def free(self) -> int:
        return self.workers - self.busy()

    def busy(self) -> int:
        return len(self._running) + self._in_zygotes

    def submit_to(self, zygote: Zygote, arg: Any, tag: Any, timeout: float | None = None) -> None:
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


# --------------------------------------------------------------------------- zygotes

_FRAME = struct.Struct("!Q")
_ZYGOTE_FDS: set[int] = set()  # the parent's ends of every live zygote's pipes


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


def spawned_zygote() -> None:
    """The entry of a zygote started as a fresh interpreter: read its setup, then serve as a forked one does."""
    _serve_setup(int(sys.argv[1]), int(sys.argv[2]))


def _serve_setup(command_fd: int, result_fd: int) -> None:
    """In a new zygote (spawned, or forked by a host): read its pickled setup from its command pipe, serve, exit."""
    code = 0
    try:
        (size,) = _FRAME.unpack(_read_exactly(command_fd, _FRAME.size))
        preload, call = pickle.loads(_read_exactly(command_fd, size))
        _zygote_main(command_fd, result_fd, preload, call)
    except BaseException as error:
        with contextlib.suppress(Exception):
            _send_frame(result_fd, ("unready", f"{type(error).__name__}: {error}"))
        code = 70
    finally:
        sys.stdout.flush()
        os._exit(code)


def zygote_host() -> None:
    """The entry of a zygote host: import the given modules once, then fork a zygote for each pair of pipes sent.

    It reads from its socket one byte per request, with the new zygote's command pipe (read
    end) and result pipe (write end) attached; the forked zygote reads its setup from that
    command pipe, as a spawned one does. It ends when the process that started it closes the
    socket (or dies); the zygotes it forked end when their own command pipes close.
    """
    import importlib
    import socket

    channel = socket.socket(fileno=int(sys.argv[1]))
    for module in sys.argv[2:]:
        with contextlib.suppress(Exception):  # a zygote that needs it reports the failure itself
            importlib.import_module(module)
    if threading.active_count() > 1:  # forking from here would not be safe: each zygote is then spawned
        os._exit(70)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the zygotes
    gc.collect()
    gc.freeze()
    try:
        while True:
            message, fds, _flags, _address = socket.recv_fds(channel, 1, 2)
            if not message:
                break
            if len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                continue
            command_fd, result_fd = fds
            if os.fork() == 0:
                channel.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote waits for its own children
                _serve_setup(command_fd, result_fd)
            os.close(command_fd)
            os.close(result_fd)
    finally:
        os._exit(0)


class ZygoteHost:
    """A fresh, lean interpreter that forks zygotes on request: one interpreter start for every stage of a process.

    Spawning a zygote costs a new interpreter per stage (and per thread that serves it); a
    host is started once, imports ``modules`` (the code the stages' functions live in, never
    an agent's), and forks each zygote asked of it, which then runs its own preload. Such a
    zygote talks over pipes that the asking process made, exactly as a spawned one does; it
    is the host's child, not the asker's. Safe to use from several threads.
    """

    def __init__(self, modules: Iterable[str] = ()) -> None:
        import socket
        import subprocess

        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        bootstrap = "from certlab_core.sdk.forking import zygote_host; zygote_host()"
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", bootstrap, str(theirs.fileno()), *modules],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self._socket = mine
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self._socket.fileno() >= 0 and self._process.poll() is None

    def zygote(
        self, preload: Callable[[], Any], call: Callable[[Any, Any], Any], start_timeout: float = 120.0
    ) -> Zygote:
        """A zygote forked by this host; it starts in the background: call ``wait_ready()`` before using it."""
        return Zygote(preload, call, start_timeout, host=self)

    def fork_with(self, command_fd: int, result_fd: int) -> None:
        """Ask the host for a zygote on these pipe ends (an OSError when the host is gone)."""
        import socket

        with self._lock:
            socket.send_fds(self._socket, [b"z"], [command_fd, result_fd])

    def close(self) -> None:
        """Stop the host (the zygotes it forked stay until their own pipes close)."""
        with self._lock:
            self._socket.close()
        try:
            self._process.wait(timeout=5.0)
        except Exception:
            self._process.kill()
            self._process.wait()


def _frames(buffer: bytearray) -> list[Any]:
    """Complete messages at the front of ``buffer`` (consumed); a partial one stays."""
    messages = []
    while len(buffer) >= _FRAME.size:
        (size,) = _FRAME.unpack_from(buffer)
        if len(buffer) < _FRAME.size + size:
            break
        messages.append(pickle.loads(bytes(buffer[_FRAME.size : _FRAME.size + size])))
        del buffer[: _FRAME.size + size]
    return messages


def _zygote_main(command_fd: int, result_fd: int, preload: Callable[[], Any], call: Callable[[Any, Any], Any]) -> None:
    """In the zygote: preload once, then fork a fresh grandchild per call and pass its raw result back."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles an interrupt and closes the zygote
    try:
        preloaded = preload()
        if threading.active_count() > 1:
            raise RuntimeError("preloading started a thread; forking from it would not be safe")
        gc.collect()
        gc.freeze()
    except BaseException as error:
        _send_frame(result_fd, ("unready", f"{type(error).__name__}: {error}"))
        return
    _send_frame(result_fd, ("ready", os.getpid()))
    selector = selectors.DefaultSelector()
    selector.register(command_fd, selectors.EVENT_READ)
    commands = bytearray()
    running: dict[int, tuple[int, int, list[bytes], float | None]] = {}  # fd -> (call id, pid, chunks, deadline)
    open_commands = True
    try:
        while open_commands or running:
            deadlines = [d for (_c, _p, _k, d) in running.values() if d is not None]
            wait = None if not deadlines else max(0.0, min(deadlines) - time.monotonic())
            events = selector.select(wait)
            now = time.monotonic()
            finished: dict[int, bool] = {}
            for key, _mask in events:
                fd = int(key.fd)
                if fd == command_fd:
                    data = os.read(fd, 1 << 16)
                    if not data:
                        open_commands = False
                        selector.unregister(fd)
                        for child_fd, (_c, pid, _k, _d) in list(running.items()):  # the parent has gone
                            _kill(pid)
                            finished[child_fd] = True
                        continue
                    commands.extend(data)
                    for call_id, arg, timeout in _frames(commands):
                        pid, read_fd = _spawn(call, (preloaded, arg))
                        deadline = None if timeout is None else time.monotonic() + timeout
                        running[read_fd] = (call_id, pid, [], deadline)
                        selector.register(read_fd, selectors.EVENT_READ)
                    continue
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    running[fd][2].append(chunk)
                else:
                    finished[fd] = False
            for fd, (_c, pid, _k, deadline) in list(running.items()):
                if deadline is not None and now >= deadline and fd not in finished:
                    _kill(pid)
                    finished[fd] = True
            for fd, timed_out in finished.items():
                call_id, pid, chunks, _d = running.pop(fd)
                selector.unregister(fd)
                os.close(fd)
                data = b"".join(chunks)
                if data and not timed_out:
                    os.waitpid(pid, 0)
                    _send_frame(result_fd, ("raw", call_id, data))
                else:
                    _kind, failure = _decode(pid, data, timed_out)
                    _send_frame(result_fd, ("failed", call_id, failure))
    finally:
        for _fd, (_c, pid, _k, _d) in running.items():
            _kill(pid)


class Zygote:
    """A forked child that runs ``preload()`` once, then forks a fresh grandchild for every call it is sent.

    Each grandchild runs ``call(preloaded, arg)``: the work of one call happens in a fresh
    process, as with ``ForkPool.submit``, but what ``preload`` imported is already there (the
    code under test, which the parent itself never imports). Check ``ready`` after creating
    it: a preload that raised, or started a thread, leaves ``ready`` false and ``problem``
    set. Results come through ``ForkPool.submit_to`` and ``ForkPool.wait``. It is forked
    from this process, spawned as a fresh interpreter (``Zygote.spawn``), or forked by a
    :class:`ZygoteHost` (``host.zygote``).
    """

    def __init__(
        self,
        preload: Callable[[], Any],
        call: Callable[[Any, Any], Any],
        start_timeout: float = 120.0,
        spawn: bool = False,
        host: ZygoteHost | None = None,
    ) -> None:
        apart = spawn or host is not None  # a new interpreter, or a host's fork: the caller may have threads
        if not apart:
            _assert_single_threaded()
        sys.stdout.flush()
        sys.stderr.flush()
        self._process: Any = None
        self._hosted = host is not None
        setup = pickle.dumps((preload, call), protocol=pickle.HIGHEST_PROTOCOL) if apart else b""  # may refuse
        command_read, command_write = os.pipe()
        result_read, result_write = os.pipe()
        if host is not None:
            try:
                host.fork_with(command_read, result_write)
            except BaseException:
                for fd in (command_write, result_read):
                    os.close(fd)
                raise
            finally:
                os.close(command_read)
                os.close(result_write)
            pid = 0  # known when the zygote says it is ready
            _write_all(command_write, _FRAME.pack(len(setup)) + setup)
        elif spawn:
            import subprocess

            bootstrap = "from certlab_core.sdk.forking import spawned_zygote; spawned_zygote()"
            try:
                self._process = subprocess.Popen(
                    [sys.executable, "-c", bootstrap, str(command_read), str(result_write)],
                    pass_fds=(command_read, result_write),
                    stdin=subprocess.DEVNULL,
                )
            except BaseException:
                for fd in (command_write, result_read):
                    os.close(fd)
                raise
            finally:
                os.close(command_read)
                os.close(result_write)
            pid = int(self._process.pid)
            _write_all(command_write, _FRAME.pack(len(setup)) + setup)
        else:
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    os.close(command_write)
                    os.close(result_read)
                    for fd in _ZYGOTE_FDS:  # another zygote's pipes: holding them would keep it from seeing its end
                        with contextlib.suppress(OSError):
                            os.close(fd)
                    _zygote_main(command_read, result_write, preload, call)
                except BaseException:
                    code = 70
                finally:
                    os._exit(code)
            os.close(command_read)
            os.close(result_write)
        self.pid = pid
        self.command_fd = command_write
        self.result_fd = result_read
        _ZYGOTE_FDS.update((command_write, result_read))
        self.closed = False
        self._buffer = bytearray()
        self._calls: dict[int, Any] = {}  # call id -> tag
        self._next = 0
        self.ready = False
        self.problem: str | None = None
        self._start_timeout = start_timeout
        self._started = False
        if not apart:
            self.wait_ready()

    def wait_ready(self) -> bool:
        """Wait for the zygote's preload (a spawned one is waited for here, so several can start at once)."""
        if not self._started:
            self._started = True
            first = self._first_message(self._start_timeout)
            if first is not None and first[0] == "ready":
                self.ready = True
                self.pid = int(first[1])
            else:
                self.problem = first[1] if first is not None else "the zygote did not start"
                self.close()
        return self.ready

    @classmethod
    def spawn(cls, preload: Callable[[], Any], call: Callable[[Any, Any], Any], start_timeout: float = 120.0) -> Zygote:
        """A zygote started as a fresh interpreter rather than forked from this process.

        It holds only what ``preload`` and ``call`` import (both must pickle, as module-level
        functions and plain data do), so forking from it is cheap. It starts in the background:
        call ``wait_ready()`` before using it.
        """
        return cls(preload, call, start_timeout, spawn=True)

    def _first_message(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.result_fd, selectors.EVENT_READ)
            while True:
                messages = _frames(self._buffer)
                if messages:
                    return messages[0]
                wait = deadline - time.monotonic()
                if wait <= 0 or not selector.select(wait):
                    return None
                data = os.read(self.result_fd, 1 << 16)
                if not data:
                    return None
                self._buffer.extend(data)

    def send(self, arg: Any, tag: Any, timeout: float | None) -> None:
        self._next += 1
        self._calls[self._next] = tag
        _send_frame(self.command_fd, (self._next, arg, timeout))

    def receive(self) -> list[tuple[Any, Any]]:
        """Read what is available: each finished call's ``(tag, result or ChildFailure)``."""
        data = os.read(self.result_fd, 1 << 16)
        out: list[tuple[Any, Any]] = []
        if not data:  # the zygote died: every call still out is lost
            for tag in self._calls.values():
                out.append((tag, ChildFailure("died", "the zygote that forks these trials died")))
            self._calls.clear()
            self.close()
            return out
        self._buffer.extend(data)
        for message in _frames(self._buffer):
            if message[0] == "raw":
                _kind, call_id, raw = message
                try:
                    _status, value = pickle.loads(raw)
                except Exception as error:
                    value = ChildFailure("died", f"the forked process sent an unreadable result ({error})")
            else:
                _kind, call_id, value = message
            out.append((self._calls.pop(call_id), value))
        return out

    def close(self) -> None:
        """Stop the zygote: it kills any grandchild still running and exits."""
        if self.closed:
            return
        self.closed = True
        _ZYGOTE_FDS.difference_update((self.command_fd, self.result_fd))
        with contextlib.suppress(OSError):
            os.close(self.command_fd)
        if self._hosted:
            pass  # not this process's child: its host reaps it once it has ended
        elif self._process is not None:
            try:
                self._process.wait(timeout=5.0)
            except Exception:
                self._process.kill()
                self._process.wait()
        else:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                pid, _status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    break
                time.sleep(0.005)
            else:
                _kill(self.pid)
        with contextlib.suppress(OSError):
            os.close(self.result_fd)
