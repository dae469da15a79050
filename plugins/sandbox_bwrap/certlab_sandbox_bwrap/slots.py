"""Slots: cgroups kept across contained starts, a keeper inside each.

A per-start cgroup needs a process moved into it, and a cgroup v1 move waits for an RCU grace
period (10 to 30 ms here). While a certification runs, ``serve(workers)`` makes one slot per
trial that can run at once: a ``pids`` and a ``memory`` cgroup, and a keeper process
(``slot_keeper.py``) moved into both once. A contained start takes a free slot (an ``flock``),
sets the slot's limits to its own, notes the slot's counters, and has the keeper start bwrap,
which is born in the cgroups. The keeper and bwrap are counted in the slot (two processes, and
the keeper's memory, are added to the limits). Where no slot is free, or none was made (an
executor's worker, a gate's coding arms, regrade, replay), a start makes cgroups of its own
as before. A keeper dies with the thread that made it (``PR_SET_PDEATHSIG``): ``serve`` is
entered by the thread that runs the trials.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from attrs import define

from certlab_core.plugin.types.sandbox import Spawn, SpawnedProcess
from certlab_core.sdk.containment import runtime_folder

KEEPER_START_S = 10.0
KEEPER_MEMORY_MARGIN = 32 << 20  # the keeper's own pages, beyond what it used when it was made
SLOT_PROCESSES = 2  # the keeper and bwrap's own process, counted in the slot beside the program's


@define
class Slot:
    """One slot: its cgroups, its keeper and the keeper's socket, and the lock a start holds it by."""

    pids_group: Path
    memory_group: Path
    keeper: subprocess.Popen[bytes]
    socket_path: str
    lock_path: str
    keeper_memory: int


_slots: list[Slot] = []  # forked trials inherit them; only the process that made them tears them down


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _start_slot(folder: Path, index: int) -> Slot | None:
    """A slot, or None when its cgroups cannot be made or its keeper does not start."""
    from certlab_sandbox_bwrap import plugin

    pids_group = plugin._new_cgroup(plugin.PIDS_ROOTS, "pids.max", 1 << 22)
    memory_group = plugin._new_cgroup(plugin.MEMORY_ROOTS, "memory.limit_in_bytes", 1 << 62)
    groups = [g for g in (pids_group, memory_group) if g is not None]
    if pids_group is None or memory_group is None:
        for group in groups:
            plugin._remove(group)
        return None
    socket_path = str(folder / f"slot-{index}.sock")
    keeper = subprocess.Popen(
        [
            getattr(sys, "_base_executable", sys.executable),
            "-I",
            str(Path(__file__).with_name("slot_keeper.py")),
            socket_path,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C at the terminal is the command's to handle, not the keeper's
    )
    try:
        for group in groups:
            (group / "cgroup.procs").write_text(str(keeper.pid))
        assert keeper.stdout is not None
        if not select.select([keeper.stdout], [], [], KEEPER_START_S)[0] or keeper.stdout.readline() != b"ready\n":
            raise OSError("the slot keeper did not start")
    except OSError:
        keeper.kill()
        keeper.wait()
        for group in groups:
            plugin._remove(group)
        return None
    memory = _read_int(memory_group / "memory.usage_in_bytes") + KEEPER_MEMORY_MARGIN
    return Slot(pids_group, memory_group, keeper, socket_path, str(folder / f"slot-{index}.lock"), memory)


@contextlib.contextmanager
def serve(workers: int) -> Iterator[None]:
    """Slots for ``workers`` contained starts at once while the block runs (none when bwrap or cgroups do not work)."""
    from certlab_sandbox_bwrap import plugin

    if _slots or plugin.probe() is not None:
        yield
        return
    owner = os.getpid()
    # In certlab's runtime folder, which no sandbox binds, wherever TMPDIR points: a keeper starts
    # any command on the host, so its socket must be out of every contained program's reach.
    folder = Path(tempfile.mkdtemp(prefix="certlab-slots-", dir=runtime_folder()))
    try:
        for index in range(max(1, workers)):
            slot = _start_slot(folder, index)
            if slot is None:
                break
            _slots.append(slot)
        yield
    finally:
        if os.getpid() == owner:  # a fork unwinding through here leaves the slots to their maker
            for slot in _slots:
                slot.keeper.kill()
                slot.keeper.wait()
                if slot.keeper.stdout is not None:
                    slot.keeper.stdout.close()
                plugin._remove(slot.pids_group)
                plugin._remove(slot.memory_group)
            _slots.clear()
            shutil.rmtree(folder, ignore_errors=True)


@define
class Lease:
    """A slot held for one start: its lock, and the counters noted before it (a limit hit is a change in them)."""

    slot: Slot
    lock_fd: int
    pids_max_events: int
    oom_kills: int

    def release(self) -> None:
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


def lease(processes: int, memory_bytes: int) -> Lease | None:
    """A free slot set to these limits, or None (no slot here, all taken, or it cannot be set)."""
    from certlab_sandbox_bwrap import plugin

    for slot in _slots:  # a keeper that died is found at the start, which then runs without it
        fd = os.open(slot.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            (slot.pids_group / "pids.max").write_text(str(processes + SLOT_PROCESSES))
            limit = str(memory_bytes + slot.keeper_memory)
            (slot.memory_group / "memory.limit_in_bytes").write_text(limit)
            with contextlib.suppress(OSError):
                (slot.memory_group / "memory.memsw.limit_in_bytes").write_text(limit)
            for counter in ("memory.failcnt", "memory.memsw.failcnt"):  # read where oom_kill is not counted
                with contextlib.suppress(OSError):
                    (slot.memory_group / counter).write_text("0")
        except OSError:
            os.close(fd)
            continue
        events = plugin._counter(slot.pids_group / "pids.events", "max")
        return Lease(slot, fd, events, plugin._counter(slot.memory_group / "memory.oom_control", "oom_kill"))
    return None


def limits_hit(held: Lease) -> tuple[bool, bool]:
    """(memory, processes): whether the start that held the slot hit either limit."""
    from certlab_sandbox_bwrap import plugin

    memory = plugin._memory_exceeded(held.slot.memory_group, held.oom_kills)
    processes = plugin._counter(held.slot.pids_group / "pids.events", "max") > held.pids_max_events
    return memory, processes


def in_slot(pid: int, held: Lease) -> bool:
    """Whether ``pid`` is in the slot's pids cgroup (the keeper's children are born there)."""
    want = "/" + held.slot.pids_group.name
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    return any(":pids:" in line and line.endswith(want) for line in lines)


class KeptProcess:
    """A program the slot's keeper started: its pid, and its exit status as the keeper reports it."""

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self._conn = conn
        self._buffer = b""
        self.pid = pid
        self.returncode: int | None = None

    def _read_status(self, timeout: float | None) -> None:
        self._conn.settimeout(timeout)
        try:
            while b"\n" not in self._buffer:
                chunk = self._conn.recv(4096)
                if not chunk:  # the keeper was killed, and bwrap (--die-with-parent) and the program with it
                    self._buffer += b'{"exit": -9}\n'
                    break
                self._buffer += chunk
        except (TimeoutError, BlockingIOError):  # BlockingIOError: poll()'s timeout of 0 makes the socket non-blocking
            raise subprocess.TimeoutExpired("bwrap", timeout or 0.0) from None
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            self.returncode = int(json.loads(line)["exit"])
        except (ValueError, KeyError, TypeError):
            self.returncode = -9
        self._conn.close()

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._read_status(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._read_status(timeout)
        assert self.returncode is not None
        return self.returncode


def spawn_in(held: Lease, rlimits: Mapping[str, tuple[int, int]]) -> Spawn:
    """The ``Handoff.spawn`` of a start that holds ``held``: the keeper starts the program, born in the slot."""

    def spawn(
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        stdout: IO[bytes] | int,
        stderr: IO[bytes] | int,
        pass_fds: tuple[int, ...],
    ) -> SpawnedProcess:
        opened: list[int] = []  # /dev/null for an output given as subprocess.DEVNULL, closed once passed on

        def descriptor(stream: IO[bytes] | int) -> int:
            if stream == subprocess.DEVNULL:
                opened.append(os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC))
                return opened[-1]
            return stream if isinstance(stream, int) else stream.fileno()

        descriptors = [descriptor(stdout), descriptor(stderr)]
        try:
            return _kept(held, argv, cwd, env, descriptors, pass_fds, rlimits)
        except OSError:  # the keeper is gone: started here instead, and moved into the slot as any start is
            return subprocess.Popen(
                argv,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        finally:
            for fd in opened:
                os.close(fd)

    return spawn


def _fd_argument(argv: Sequence[str], fd: int) -> int:
    """Where ``argv`` names descriptor ``fd`` (the value of an option ending in ``-fd``, as bwrap's ``--info-fd``)."""
    for place in range(1, len(argv)):
        if argv[place] == str(fd) and argv[place - 1].startswith("--") and argv[place - 1].endswith("-fd"):
            return place
    raise OSError(f"no argument names the descriptor {fd}")


def _kept(
    held: Lease,
    argv: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    descriptors: list[int],
    pass_fds: tuple[int, ...],
    rlimits: Mapping[str, tuple[int, int]],
) -> KeptProcess:
    """The program started by the slot's keeper; OSError when the keeper could not (it started nothing)."""
    if any(fd < 0 for fd in descriptors):
        raise OSError("the keeper passes on an output that is a file, not a pipe of subprocess's")
    places = [_fd_argument(argv, fd) for fd in pass_fds]
    request = {
        "argv": list(argv),
        "cwd": cwd,
        "env": dict(env),
        "fd_args": places,
        "rlimits": {name: list(pair) for name, pair in rlimits.items()},
    }
    body = json.dumps(request).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(KEEPER_START_S)
        conn.connect(held.slot.socket_path)
        socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [*descriptors, *pass_fds])
        reply = b""
        while b"\n" not in reply:
            chunk = conn.recv(4096)
            if not chunk:
                raise OSError("the slot keeper went away")
            reply += chunk
    except (OSError, TimeoutError) as error:
        conn.close()
        raise OSError(f"the slot keeper did not start it ({error})") from None
    line, _, rest = reply.partition(b"\n")
    message = json.loads(line)
    if "pid" not in message:
        conn.close()
        raise OSError(str(message.get("error") or "the slot keeper did not start it"))
    process = KeptProcess(conn, int(message["pid"]))
    process._buffer = rest
    return process


def available() -> bool:
    """Whether this process inherited slots (it runs inside ``serve``)."""
    return bool(_slots)
