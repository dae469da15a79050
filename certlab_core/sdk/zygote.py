"""Zygotes: preloaded parents that fork each call's child, and their hosts."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import selectors
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from certlab_core.sdk.processes import (
    FRAME,
    ChildFailure,
    Children,
    assert_single_threaded,
    frames,
    keep_from_children,
    leave_stops_to_parent,
    pidfd,
    read_exactly,
    reap,
    reap_exited,
    release_to_children,
    run_exit_cleanups,
    send_frame,
    stop,
    stop_child,
    write_all,
)
from certlab_core.sdk.trees import make_temp_folder, remove_made, use_temp_folder

if TYPE_CHECKING:
    import subprocess


def spawned_zygote() -> None:
    """The entry of a zygote started as a fresh interpreter: read its setup, then serve as a forked one does."""
    _serve_setup(int(sys.argv[1]), int(sys.argv[2]))


def start_python(entry: str, fds: tuple[int, ...], *args: str) -> subprocess.Popen[bytes]:
    """A fresh interpreter running this module's ``entry`` with ``fds`` (their numbers first in its argv)."""
    import subprocess

    bootstrap = f"from certlab_core.sdk.zygote import {entry}; {entry}()"
    argv = [sys.executable, "-c", bootstrap, *map(str, fds), *args]
    return subprocess.Popen(argv, pass_fds=fds, stdin=subprocess.DEVNULL)


def _serve_setup(command_fd: int, result_fd: int) -> None:
    """In a new zygote (spawned, or forked by a host): read its pickled setup from its command pipe, serve, exit."""
    code = 0
    try:
        (size,) = FRAME.unpack(read_exactly(command_fd, FRAME.size))
        preload, call = pickle.loads(read_exactly(command_fd, size))
        _zygote_main(command_fd, result_fd, preload, call)
    except BaseException as error:
        with contextlib.suppress(Exception):
            send_frame(result_fd, ("unready", f"{type(error).__name__}: {error}"))
        code = 70
    finally:
        sys.stdout.flush()
        run_exit_cleanups()  # what its preload made for itself (the runtime folder): os._exit runs no atexit
        os._exit(code)


def zygote_host() -> None:
    """The entry of a zygote host: import the given modules once, then fork a zygote for each pair of pipes sent.

    It reads from its socket one byte per request, with the new zygote's command pipe (read
    end) and result pipe (write end) attached; the forked zygote reads its setup from that
    command pipe, as a spawned one does. It ends when the process that started it closes the
    socket (or dies); the zygotes it forked end when their own command pipes close. It reaps
    them itself, never through an ignored SIGCHLD, so that their CPU time (their calls'
    included) is counted in its own, and so in its asker's.
    """
    import importlib
    import socket

    channel = socket.socket(fileno=int(sys.argv[1]))
    for module in sys.argv[2:]:
        with contextlib.suppress(Exception):  # a zygote that needs it reports the failure itself
            importlib.import_module(module)
    if threading.active_count() > 1:  # forking from here would not be safe: each zygote is then spawned
        os._exit(70)
    for stop_signal in (signal.SIGINT, signal.SIGTERM):  # a group's stop is its asker's: it ends with the socket
        signal.signal(stop_signal, signal.SIG_IGN)
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
            reap_exited()
            if os.fork() == 0:
                channel.close()
                _serve_setup(command_fd, result_fd)
            os.close(command_fd)
            os.close(result_fd)
    finally:
        reap_exited()  # the zygotes its asker closed (and waited for) before closing the socket
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

        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._process = start_python("zygote_host", (theirs.fileno(),), *modules)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self._socket = mine
        keep_from_children(mine.fileno())  # a child holding it would keep the host from seeing its asker close
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
            if self._socket.fileno() >= 0:
                release_to_children(self._socket.fileno())
            self._socket.close()
        stop(self._process, 5.0)


def _zygote_main(command_fd: int, result_fd: int, preload: Callable[[], Any], call: Callable[[Any, Any], Any]) -> None:
    """In the zygote: preload once, then fork a fresh grandchild per call and pass its raw result back."""
    leave_stops_to_parent()  # the parent handles an interrupt and closes the zygote
    keep_from_children(command_fd, result_fd)  # a call (an agent's code) can neither forge a result nor stall this
    try:
        preloaded = preload()
        if threading.active_count() > 1:
            raise RuntimeError("preloading started a thread; forking from it would not be safe")
        gc.collect()
        gc.freeze()
    except BaseException as error:
        send_frame(result_fd, ("unready", f"{type(error).__name__}: {error}"))
        return
    send_frame(result_fd, ("ready", os.getpid()))
    # The calls make their temp folders in one the zygote deletes as it ends: a call killed when its parent
    # goes (an interrupted run) cannot leave in the temp folder what it would have deleted itself.
    calls_temp = make_temp_folder("certlab-calls-")
    use_temp_folder(calls_temp.path)
    selector = selectors.DefaultSelector()
    selector.register(command_fd, selectors.EVENT_READ)
    commands = bytearray()
    calls = Children(selector)
    open_commands = True
    try:
        while open_commands or len(calls):
            for key, _mask in selector.select(calls.wait_s()):
                if key.fd != command_fd:
                    calls.read(int(key.fd))
                    continue
                data = os.read(command_fd, 1 << 16)
                if not data:  # the parent has gone: nothing will sweep what a call started, so kill it all
                    open_commands = False
                    selector.unregister(command_fd)
                    calls.close()
                    continue
                commands.extend(data)
                for call_id, arg, timeout in frames(commands):
                    calls.start(call, (preloaded, arg), call_id, timeout)
            for child in calls.finished():
                if child.data and not child.timed_out:
                    reap(child.pid)
                    send_frame(result_fd, ("raw", child.tag, child.data))
                else:
                    send_frame(result_fd, ("failed", child.tag, child.outcome()[1]))
    finally:
        calls.close()
        remove_made(calls_temp)


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
            assert_single_threaded()
        sys.stdout.flush()
        sys.stderr.flush()
        self._process: Any = None
        self._hosted = host is not None
        setup = pickle.dumps((preload, call), protocol=pickle.HIGHEST_PROTOCOL) if apart else b""  # may refuse
        command_read, command_write = os.pipe()
        result_read, result_write = os.pipe()
        if apart:
            try:
                if host is not None:
                    host.fork_with(command_read, result_write)
                else:
                    self._process = start_python("spawned_zygote", (command_read, result_write))
            except BaseException:
                for fd in (command_write, result_read):
                    os.close(fd)
                raise
            finally:
                os.close(command_read)
                os.close(result_write)
            pid = 0 if host is not None else int(self._process.pid)  # a host's zygote: known once it is ready
            write_all(command_write, FRAME.pack(len(setup)) + setup)
        else:
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    os.close(command_write)
                    os.close(result_read)
                    _zygote_main(command_read, result_write, preload, call)
                except BaseException:
                    code = 70
                finally:
                    run_exit_cleanups()  # what its preload made for itself (the runtime folder)
                    os._exit(code)
            os.close(command_read)
            os.close(result_write)
        self.pid = pid
        self.command_fd = command_write
        self.result_fd = result_read
        keep_from_children(command_write, result_read)
        self.closed = False
        self._buffer = bytearray()
        self._calls: dict[int, Any] = {}  # call id -> tag
        self._next = 0
        self.ready = False
        self.problem: str | None = None
        self._start_timeout = start_timeout
        self._started = False
        self._ended: int | None = None  # a hosted zygote's pidfd, readable once it has ended
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
                if self._hosted:  # not this process's child: its close waits on a handle to it instead
                    self._ended = pidfd(self.pid)
                    if self._ended is not None:  # a child holding it could signal the zygote
                        keep_from_children(self._ended)
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
                messages = frames(self._buffer)
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
        send_frame(self.command_fd, (self._next, arg, timeout))

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
        for message in frames(self._buffer):
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
        release_to_children(self.command_fd, self.result_fd)
        with contextlib.suppress(OSError):
            os.close(self.command_fd)
        if self._hosted:
            if self._ended is not None:
                release_to_children(self._ended)
            _await_end(self._ended, self.result_fd, 5.0)  # its host reaps it; once it ends, its calls' folder is gone
            self._ended = None
        elif self._process is not None:
            stop(self._process, 5.0)
        else:
            stop_child(self.pid, 5.0)
        with contextlib.suppress(OSError):
            os.close(self.result_fd)


def _await_end(handle: int | None, drain_fd: int, grace_s: float) -> None:
    """Wait for the process behind the pidfd ``handle`` to end, at most ``grace_s``, then SIGKILL it; close it.

    What it still writes to ``drain_fd`` is read and dropped meanwhile: a full pipe would hold it."""
    if handle is None:
        return
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(handle, selectors.EVENT_READ)
            selector.register(drain_fd, selectors.EVENT_READ)
            deadline = time.monotonic() + grace_s
            killed = False
            while True:
                ready = {key.fd for key, _mask in selector.select(max(0.0, deadline - time.monotonic()))}
                if handle in ready:
                    return
                if drain_fd in ready and not os.read(drain_fd, 1 << 16):
                    selector.unregister(drain_fd)
                if time.monotonic() >= deadline:
                    if killed:
                        return
                    with contextlib.suppress(OSError):
                        signal.pidfd_send_signal(handle, signal.SIGKILL)
                    killed, deadline = True, time.monotonic() + grace_s
    finally:
        os.close(handle)
