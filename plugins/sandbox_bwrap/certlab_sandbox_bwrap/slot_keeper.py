"""A slot's keeper: a process in a slot's cgroups that starts its programs.

Moving a process into a cgroup v1 (a write to ``cgroup.procs``) waits for an RCU grace period,
10 to 30 ms here, once per contained start; a process started by one already inside is born in
the cgroups and moves nothing. The keeper (this file, run with ``python -I``; the standard
library only) listens on a Unix socket and serves one client at a time:

- the request: a 4-byte length and a JSON object (``argv``, ``cwd``, ``env``, ``fd_args``: the
  arguments that name a descriptor, ``rlimits``), the descriptors themselves attached to it
  (``SCM_RIGHTS``): stdout, stderr, then one per such argument, which names it by its number here;
- the answer: ``{"pid": N}`` once started (or ``{"error": "..."}``), then ``{"exit": CODE}``
  when it ended, each a line of JSON. A client that goes away before the program ended has the
  program's process group killed.

The keeper dies with the process that made it (``PR_SET_PDEATHSIG``), and so does everything
it started (bwrap's ``--die-with-parent``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
MAX_REQUEST_BYTES = 16 << 20
MAX_FDS = 16


def receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One request and its descriptors; EOFError when the client closed first."""
    data, fds, _flags, _address = socket.recv_fds(conn, 1 << 16, MAX_FDS)
    if len(data) < 4 and not data:
        raise EOFError
    while len(data) < 4:
        more = conn.recv(4 - len(data))
        if not more:
            raise EOFError
        data += more
    (size,) = struct.unpack("!I", data[:4])
    if size > MAX_REQUEST_BYTES:
        raise ValueError(f"a request of {size} bytes")
    body = data[4:]
    while len(body) < size:
        more = conn.recv(min(1 << 20, size - len(body)))
        if not more:
            raise EOFError
        body += more
    return json.loads(body), list(fds)


def answer(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def start(request: dict[str, Any], fds: list[int]) -> subprocess.Popen[bytes]:
    out, err, *passed = fds
    argv = [str(a) for a in request["argv"]]
    places = [int(i) for i in request["fd_args"]]
    if len(places) != len(passed) or not all(0 < i < len(argv) for i in places):
        raise ValueError(f"{len(passed)} descriptors for the arguments {places}")
    for place, fd in zip(places, passed, strict=True):  # the program is told each descriptor's number here
        argv[place] = str(fd)
    rlimits = {getattr(resource, name): (int(soft), int(hard)) for name, (soft, hard) in request["rlimits"].items()}

    def before_exec() -> None:  # in the child: the limits its processes inherit
        for kind, pair in rlimits.items():
            resource.setrlimit(kind, pair)

    return subprocess.Popen(
        argv,
        cwd=str(request["cwd"]),
        env={str(k): str(v) for k, v in request["env"].items()},
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        start_new_session=True,
        pass_fds=tuple(passed),
        preexec_fn=before_exec,
    )


def serve_one(conn: socket.socket) -> None:
    try:
        request, fds = receive(conn)
    except (EOFError, ValueError, KeyError, OSError) as error:
        with contextlib.suppress(OSError):
            answer(conn, {"error": f"an unreadable request ({error})"})
        return
    try:
        child = start(request, fds)
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError) as error:
        answer(conn, {"error": f"could not start {request.get('argv', ['?'])[0]}: {error}"})
        return
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    answer(conn, {"pid": child.pid})
    pidfd = os.pidfd_open(child.pid)
    try:
        while True:
            ready = select.select([pidfd, conn.fileno()], [], [])[0]
            if pidfd in ready:
                answer(conn, {"exit": child.wait()})
                return
            if not conn.recv(1):  # the client went away: nothing it started may outlive it
                with contextlib.suppress(OSError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                return
    finally:
        os.close(pidfd)


def main(path: str) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the maker ended before the line above took effect
        return 1
    # The keeper shares its slot's memory cgroup with the program: the cgroup's OOM killer must take the program.
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w", encoding="ascii") as handle:
        handle.write("-1000")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        conn, _address = listener.accept()
        with conn:
            try:
                serve_one(conn)
            except OSError:
                continue


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
