"""The suite's grading server: once per run in the sandbox, a fork per grading.

Imports nothing of certlab (certlab's installation is hidden inside the sandbox): the suite
grader starts it as ``python -I suite_server.py --fresh-namespaces [PRIVATE_FOLDER...]`` under the run's
containment, beside ``visible_suite.py``. It imports pytest and its built-in plugins once,
makes itself a child subreaper and not dumpable (no process of the same user can read or
write its memory or its file descriptors through ``/proc``), then serves one grading at a
time: a request is one JSON line on stdin (``id``, ``tree``, ``log``, ``modules``,
``test_paths``, ``timeout_s``); the tests run in a fresh child forked for that grading alone,
which closes the server's stdin and stdout before any test module is imported and sends
the hooks' report back over a pipe of its own. That child first makes a mount and an IPC
namespace of its own, with a fresh tmpfs on ``/tmp``, ``/dev/shm``, ``HOME`` and each
``PRIVATE_FOLDER`` and a fresh ``/dev/mqueue``, and drops every capability (the server runs
in a user namespace of the sandbox's own, holding ``CAP_SYS_ADMIN`` over it alone, and runs
no graded code itself): what one trial's code writes there, or leaves in SysV or POSIX IPC,
is gone with its namespace, and the server never deletes a file. At the end of the grading
(or its time limit) every process below the server is killed, round after round, so
nothing of one trial's code runs or is kept when the next trial's is graded. The reply is
one JSON line on stdout: the request's ``id``, the child's report as an escaped string
(``report_text``, or ``None`` with ``failure``), and the processes it left (``leftovers``).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import select
import signal
import sys
import time

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
MAX_REQUEST_BYTES = 1 << 20
MAX_REPORT_BYTES = 16 << 20
SWEEP_ROUNDS = 200
FRESH_FLAG = "--fresh-namespaces"


def _process_table() -> dict[int, int]:
    """{pid: parent pid} of every live (not zombie) process visible here."""
    table: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in (b"Z", b"X"):
            table[int(entry)] = int(fields[1])
    return table


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def kill_descendants() -> int:
    """Kill every process below this server (a subreaper: orphans of a grading are its own), until none is left."""
    me = os.getpid()
    killed: set[int] = set()
    for _round in range(SWEEP_ROUNDS):
        _reap()
        table = _process_table()
        below = [pid for pid, parent in table.items() if parent == me]
        stack = list(below)
        while stack:
            pid = stack.pop()
            kids = [p for p, parent in table.items() if parent == pid]
            below.extend(kids)
            stack.extend(kids)
        if not below:
            return len(killed)
        for pid in below:
            killed.add(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)
    return len(killed)


CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
LAST_CAPABILITY = 63
FRESH_TMPFS_OPTIONS = b"mode=1777,size=1g"


class NamespaceRefused(OSError):
    """The grading child could not make its own namespaces: the grading is not run (an infrastructure error)."""


def _below(path: str, folder: str) -> bool:
    return path != folder and path.startswith(folder.rstrip("/") + "/")


def fresh_namespaces(private: list[str], keep: list[str]) -> None:
    """In a grading's child: its own mount and IPC namespace, fresh tmpfs folders, then no capability at all."""
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            raise NamespaceRefused(f"{what}: {os.strerror(ctypes.get_errno())}")

    check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make the mounts private")
    fresh = [f for f in dict.fromkeys(["/tmp", "/dev/shm", os.environ.get("HOME", ""), *private]) if os.path.isdir(f)]
    # The grading's own folder (the server's, bound from the host) is kept where a fresh tmpfs covers it.
    kept = [(k, os.open(k, os.O_PATH | os.O_DIRECTORY)) for k in keep if any(_below(k, f) for f in fresh)]
    for folder in fresh:
        check(libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, FRESH_TMPFS_OPTIONS), folder)
    for folder, handle in kept:
        os.makedirs(folder, exist_ok=True)
        check(libc.mount(f"/proc/self/fd/{handle}".encode(), folder.encode(), None, MS_BIND | MS_REC, None), folder)
        os.close(handle)
    if os.path.isdir("/dev/mqueue"):  # the new IPC namespace's own message queues
        check(libc.mount(b"mqueue", b"/dev/mqueue", b"mqueue", MS_NOSUID | MS_NODEV, None), "/dev/mqueue")
    for capability in range(LAST_CAPABILITY + 1):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # EINVAL past the kernel's last one
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no new privileges")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: none, in both 32-bit halves
    check(libc.capset(header, data), "drop the capabilities")


def grading_child(request: dict[str, object], result_fd: int, private: list[str] | None) -> None:
    """In the child forked for one grading: no way back to the server's pipes, then the tests; never returns."""
    code = 0
    try:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")  # under the sandbox's memory limit, the grading dies before the server
        if private is not None:
            # the server's folder (the grading's tree and log) and its own environment, wherever they are
            fresh_namespaces(private, [os.getcwd(), sys.prefix, sys.base_prefix])
        import visible_suite

        report = visible_suite.run_pytest(
            str(request["tree"]),
            tuple(str(p) for p in request["test_paths"]),  # type: ignore[attr-defined]
            tuple(str(m) for m in request["modules"]),  # type: ignore[attr-defined]
            str(request["log"]),
            request.get("first_failure") is True,
            request.get("outcomes_only") is True,
        )
        for stream in (sys.stdout, sys.stderr):  # pytest's output is the log's; os._exit would not flush it
            with contextlib.suppress(Exception):
                stream.flush()
        data = json.dumps(report).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(result_fd, view) :]
    except NamespaceRefused as error:
        with contextlib.suppress(OSError):
            os.write(2, f"grading server: no fresh namespace for the grading ({error})\n".encode())
        code = 73
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def grade_one(request: dict[str, object], private: list[str] | None) -> dict[str, object]:
    """Fork the grading's child, wait for its report or its time limit, then kill all it left.

    ``private`` are the folders the child gets fresh (None: no namespaces of its own, uncontained).
    """
    read_fd, write_fd = os.pipe()
    timeout_s = float(request.get("timeout_s") or 120.0)  # type: ignore[arg-type]
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        grading_child(request, write_fd, private)
    os.close(write_fd)
    chunks: list[bytes] = []
    total = 0
    deadline = time.monotonic() + timeout_s
    failure = None
    while True:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([read_fd], [], [], wait)[0]:
            failure = f"timed out after {timeout_s:g} s"
            break
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        total += len(chunk)
        if total > MAX_REPORT_BYTES:
            failure = "the test process sent more than 16 MB"
            break
        chunks.append(chunk)
    os.close(read_fd)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if failure is None and not data:
        if os.WIFSIGNALED(status):
            failure = f"killed by signal {os.WTERMSIG(status)}"
        else:
            failure = f"exit status {os.waitstatus_to_exitcode(status)}"
    leftovers = kill_descendants()
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 73 and not data:
        failure = "the grading could not make a fresh namespace of its own"
    return {
        "id": request.get("id"),
        "report_text": None if failure else data.decode("utf-8", "replace"),
        "failure": failure,
        "leftovers": leftovers,
    }


def main(argv: list[str]) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pytest  # noqa: F401  (every grading's child starts with it imported)
    import visible_suite  # noqa: F401
    from _pytest.config import default_plugins

    for name in default_plugins:
        with contextlib.suppress(ImportError):
            importlib.import_module(f"_pytest.{name}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 or libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        os.write(2, b"grading server: could not become a non-dumpable child subreaper\n")
        return 71
    # --fresh-namespaces (contained): each grading gets its own namespaces and fresh folders; nothing is emptied.
    fresh = FRESH_FLAG in argv[1:]
    private: list[str] | None = [a for a in argv[1:] if a != FRESH_FLAG] if fresh else None
    gc.collect()
    gc.freeze()
    os.write(1, b'{"id": null, "ready": true}\n')
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return 0
            buffer += chunk
            if len(buffer) > MAX_REQUEST_BYTES:
                return 72
        line, buffer = buffer.split(b"\n", 1)
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not an object")
            reply = grade_one(request, private)
        except (ValueError, KeyError, TypeError) as error:
            reply = {"id": None, "report_text": None, "failure": f"unreadable request ({error})", "leftovers": 0}
        data = (json.dumps(reply) + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
