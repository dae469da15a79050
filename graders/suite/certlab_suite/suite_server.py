"""The suite grader's grading server: started once per run inside the sandbox, warm with pytest, one fork per grading.

Imports nothing of certlab (certlab's installation is hidden inside the sandbox): the suite
grader starts it as ``python -I suite_server.py [PRIVATE_FOLDER...]`` under the run's
containment, beside ``visible_suite.py``. It imports pytest and its built-in plugins once,
makes itself a child subreaper and not dumpable (no process of the same user can read or
write its memory or its file descriptors through ``/proc``), then serves one grading at a
time: a request is one JSON line on stdin (``id``, ``tree``, ``log``, ``modules``,
``test_paths``, ``timeout_s``); the tests run in a fresh child forked for that grading alone,
which closes the server's stdin and stdout before any test module is imported and sends
the hooks' report back over a pipe of its own. At the end of the grading (or its time
limit) every process below the server is killed, round after round, and the sandbox's own
writable folders (its ``/tmp``, ``HOME`` and ``/dev/shm``, and any ``PRIVATE_FOLDER``, each only when it
is on a tmpfs of the sandbox's own) are emptied, so
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
import stat
import sys
import time

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
MAX_REQUEST_BYTES = 1 << 20
MAX_REPORT_BYTES = 16 << 20
SWEEP_ROUNDS = 200


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


def empty_folder(folder: str) -> None:
    """Remove everything in ``folder`` that is on its own file system (a folder bound into it is left alone)."""
    try:
        device = os.lstat(folder).st_dev
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_dev != device:
                continue
            if stat.S_ISDIR(info.st_mode):
                empty_folder(entry.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            continue


def _tmpfs_mounts() -> set[str]:
    """The mount points of tmpfs file systems in this mount namespace: the sandbox's own."""
    found: set[str] = set()
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            before, _, after = line.partition(" - ")
            if after.split(" ", 1)[0] == "tmpfs":
                found.add(before.split(" ")[4])
    return found


def grading_child(request: dict[str, object], result_fd: int) -> None:
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
        import visible_suite

        report = visible_suite.run_pytest(
            str(request["tree"]),
            tuple(str(p) for p in request["test_paths"]),  # type: ignore[attr-defined]
            tuple(str(m) for m in request["modules"]),  # type: ignore[attr-defined]
            str(request["log"]),
            request.get("first_failure") is True,
        )
        for stream in (sys.stdout, sys.stderr):  # pytest's output is the log's; os._exit would not flush it
            with contextlib.suppress(Exception):
                stream.flush()
        data = json.dumps(report).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(result_fd, view) :]
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def grade_one(request: dict[str, object], private: list[str]) -> dict[str, object]:
    """Fork the grading's child, wait for its report or its time limit, then kill all it left and empty /tmp."""
    read_fd, write_fd = os.pipe()
    timeout_s = float(request.get("timeout_s") or 120.0)  # type: ignore[arg-type]
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        grading_child(request, write_fd)
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
    for folder in private:
        empty_folder(folder)
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
    tmpfs = _tmpfs_mounts()
    # Only folders on a tmpfs of the sandbox's own are ever emptied: never a folder of the host.
    wanted = {"/tmp", "/dev/shm", os.environ.get("TMPDIR", "/tmp"), os.environ.get("HOME", "/tmp"), *argv[1:]}
    private = sorted(f for f in wanted if any(f == m or f.startswith(m.rstrip("/") + "/") for m in tmpfs))
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
