"""Fresh processes forked from a lean, preloaded parent: one call, or a pool.

Built on the process layer (``certlab_core.sdk.processes``), which starts, supervises and
reaps every child; this module shapes its calls: one call, a call started later, a pool.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import selectors
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, Protocol, TypeVar

from certlab_core.sdk.processes import FRAME as _FRAME
from certlab_core.sdk.processes import (
    STOP_SIGNALS,
    ChildFailure,
    Children,
    Finished,
    ForkedCallError,
    fork_call,
    kill_group,
    read_exactly,
    reap,
    send_frame,
)
from certlab_core.sdk.trees import MadeFolder, make_temp_folder, remove_made, use_temp_folder

__all__ = [
    "ChildFailure", "ForkPool", "ForkedCallError", "PendingCall", "call_in_fork", "map_in_forks", "use_temp_folder",
]  # fmt: skip

T = TypeVar("T")
R = TypeVar("R")


def call_in_fork(fn: Callable[..., R], *args: Any, timeout: float | None = None, temp_prefix: str | None = None) -> R:
    """Run ``fn(*args)`` in a fresh forked child and return its result; raise ForkedCallError on failure.

    With ``temp_prefix``, the child's temp folders (``tempfile``'s and ``TMPDIR``) are made in a
    folder this process makes and deletes when the call is over: a child killed at its deadline,
    or dead by a signal, cannot leave what it made in the temp folder. Nothing the call makes
    there outlives it, so it must return data, not paths into it.
    """
    if temp_prefix is not None:
        made = make_temp_folder(temp_prefix)
        try:
            inside: R = call_in_fork(_in_temp_folder, made.path, fn, *args, timeout=timeout)
            return inside
        finally:
            remove_made(made)
    with selectors.DefaultSelector() as selector:
        children = Children(selector)
        children.start(fn, args, None, timeout)
        done: list[Finished] = []
        try:
            while not done:
                for key, _mask in selector.select(children.wait_s()):
                    children.read(int(key.fd))
                done = children.finished()
        finally:  # an interrupt leaves no child running on, nor writing into a temp folder being deleted
            children.close()
    kind, value = done[0].outcome()
    if kind == "ok":
        returned: R = value
        return returned
    raise ForkedCallError(value)


def _in_temp_folder(folder: str, fn: Callable[..., R], *args: Any) -> R:
    use_temp_folder(folder)
    return fn(*args)


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
        arg_read, arg_write = os.pipe()
        # A stop between the fork and this object's making would leave a child no one kills: it waits until then.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid, read_fd = fork_call(_when_started, (fn, arg_read, arg_write))
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            os.close(arg_read)
            os.close(arg_write)
            raise
        with contextlib.suppress(OSError):  # set on both sides, so the group exists whichever runs first
            os.setpgid(pid, pid)
        os.close(arg_read)
        self.pid = pid
        self._arg_fd: int | None = arg_write
        self._read_fd: int | None = read_fd
        self._started_at: float | None = None
        self._reaped = False
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a stop held meanwhile is raised here
        except BaseException:
            self.cancel()
            raise

    def start(self, arg: Any) -> None:
        """Hand the child its argument: ``fn(arg)`` begins now."""
        assert self._arg_fd is not None, "a PendingCall starts once"
        self._started_at = time.monotonic()
        try:
            send_frame(self._arg_fd, arg)
        finally:
            os.close(self._arg_fd)
            self._arg_fd = None

    def result(self, timeout: float | None = None) -> Any:
        """The call's return value, waiting at most ``timeout`` seconds from ``start``; ForkedCallError on failure."""
        assert self._read_fd is not None and self._started_at is not None, "start the call first"
        deadline = None if timeout is None else self._started_at + timeout
        read_fd, self._read_fd = self._read_fd, None  # the watch's from here: it closes it
        with selectors.DefaultSelector() as selector:
            calls = Children(selector)
            try:
                calls.watch(self.pid, read_fd, None, deadline, leader=True)
                done: list[Finished] = []
                while not done:
                    for key, _mask in selector.select(calls.wait_s()):
                        calls.read(int(key.fd))
                    done = calls.finished()
            finally:
                calls.close()  # an interrupted wait: its group is killed
        self._reaped = True
        kind, value = done[0].outcome()
        kill_group(self.pid)  # reaped, its group lives on while any member does: none of them outlives the call
        if kind == "ok":
            return value
        raise ForkedCallError(value)

    def cancel(self) -> None:
        """Kill the child and its process group, if it still runs, and reap it (a no-op once its result is read)."""
        if self._arg_fd is not None:
            os.close(self._arg_fd)
            self._arg_fd = None
        if self._reaped:
            return  # its result was read
        kill_group(self.pid)
        with contextlib.suppress(ChildProcessError):
            reap(self.pid)
        self._reaped = True
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None


def _when_started(fn: Callable[[Any], Any], arg_read: int, arg_write: int) -> Any:
    """In a PendingCall's child: lead a process group, wait for the argument, then run ``fn(arg)``."""
    os.setpgid(0, 0)
    os.close(arg_write)
    (size,) = _FRAME.unpack(read_exactly(arg_read, _FRAME.size))
    arg = pickle.loads(read_exactly(arg_read, size))
    os.close(arg_read)
    return fn(arg)


def map_in_forks(
    fn: Callable[[T], R],
    items: Iterable[T],
    workers: int = 2,
    timeout: float | None = None,
    temp_prefix: str | None = None,
) -> Iterator[tuple[int, R | ChildFailure]]:
    """Run ``fn(item)`` for each item, each in its own forked child, at most ``workers`` at once.

    Yields ``(index, result)`` as children finish (not in order); a child that raised,
    died or timed out yields a ChildFailure instead of a result. With ``temp_prefix``, as
    :func:`call_in_fork`'s: the children's temp folders are made in one folder this process
    deletes once the map is over, or abandoned (its children in flight are killed first).
    """
    pending = list(enumerate(items))
    pending.reverse()
    with ForkPool(workers, temp_prefix) as pool:
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

    With ``temp_prefix``, the temp folders of the children ``submit`` starts are made in one
    folder the pool makes at the first submit and deletes on ``close``, after killing what still
    runs: a child killed at its deadline or abandoned cannot leave in the temp folder what it
    would have deleted itself. (A zygote does the same for the grandchildren it forks.)
    """

    def __init__(self, workers: int, temp_prefix: str | None = None) -> None:
        self.workers = max(1, workers)
        self._temp_prefix = temp_prefix
        self._temp: MadeFolder | None = None
        self._selector = selectors.DefaultSelector()
        self._children = Children(self._selector)
        self._zygotes: dict[int, ZygoteChannel] = {}  # result fd -> zygote
        self._in_zygotes = 0

    def __enter__(self) -> ForkPool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def free(self) -> int:
        return self.workers - self.busy()

    def busy(self) -> int:
        return len(self._children) + self._in_zygotes

    def submit_to(self, zygote: ZygoteChannel, arg: Any, tag: Any, timeout: float | None = None) -> None:
        """Run the zygote's call on ``arg`` in a fresh grandchild forked from it; its result comes from ``wait()``."""
        if zygote.result_fd not in self._zygotes:
            self._zygotes[zygote.result_fd] = zygote
            self._selector.register(zygote.result_fd, selectors.EVENT_READ)
        zygote.send(arg, tag, timeout)
        self._in_zygotes += 1

    def submit(self, fn: Callable[[Any], Any], arg: Any, tag: Any, timeout: float | None = None) -> None:
        if self._temp_prefix is not None:
            if self._temp is None:
                self._temp = make_temp_folder(self._temp_prefix)
            fn = partial(_in_temp_folder, self._temp.path, fn)
        self._children.start(fn, (arg,), tag, timeout)

    def wait(self) -> list[tuple[Any, Any]]:
        """Block until at least one child has finished; return each finished ``(tag, result or ChildFailure)``."""
        done: list[tuple[Any, Any]] = []
        while self.busy() and not done:
            for key, _mask in self._selector.select(self._children.wait_s()):
                fd = int(key.fd)
                zygote = self._zygotes.get(fd)
                if zygote is None:
                    self._children.read(fd)
                    continue
                results = zygote.receive()
                self._in_zygotes -= len(results)
                done.extend(results)
                if zygote.closed:
                    self._selector.unregister(fd)
                    del self._zygotes[fd]
            done.extend((child.tag, child.outcome()[1]) for child in self._children.finished())
        return done

    def close(self) -> None:
        self._children.close()
        for fd in list(self._zygotes):
            self._selector.unregister(fd)
        self._zygotes.clear()
        self._in_zygotes = 0
        self._selector.close()
        if self._temp is not None:
            remove_made(self._temp)
            self._temp = None
