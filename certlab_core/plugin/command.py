"""The adapter SDK's ``run_command``: run an agent's program once, safely, and say what happened.

An adapter that drives a command-line agent builds its argument vector and calls
``run_command(request, argv)``. It starts the program in a new process session in the
work copy, with stdin from ``/dev/null``; at the request's timeout the process group gets
SIGTERM, then SIGKILL ``KILL_GRACE_S`` later; every process the agent left behind (in its
session, or carrying this run's token in its environment) is named in the outcome and
killed; the last ``TAIL_BYTES`` of stdout and stderr are kept, with the wall time.

The program's exit code decides nothing by itself: ``unavailable_exit_codes`` names the
codes by which the program says its own infrastructure failed (the command adapter uses
75, ``EX_TEMPFAIL``); the adapter reads the rest (its output, its usage) and may return a
changed outcome with ``attrs.evolve``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from certlab_core.plugin.records import AgentOutcome, AgentRequest

TAIL_BYTES = 64 * 1024
KILL_GRACE_S = 5.0
TOKEN_VARIABLE = "CERTLAB_AGENT_RUN"
UNAVAILABLE_EXIT_CODE = 75


def _tail(path: Path) -> str:
    size = path.stat().st_size
    with path.open("rb") as handle:
        handle.seek(max(0, size - TAIL_BYTES))
        return handle.read().decode("utf-8", "replace")


def _proc_ids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def find_leftovers(session_id: int, token: str) -> list[tuple[int, str]]:
    """Processes still alive in the agent's session, or carrying its token: (pid, command line)."""
    marker = f"{TOKEN_VARIABLE}={token}".encode()
    found: list[tuple[int, str]] = []
    me = os.getpid()
    for pid in _proc_ids():
        if pid == me:
            continue
        try:
            in_session = os.getsid(pid) == session_id
            environ = b"" if in_session else Path(f"/proc/{pid}/environ").read_bytes()
            if not in_session and marker not in environ.split(b"\0"):
                continue
            stat_text = Path(f"/proc/{pid}/stat").read_text()
            if stat_text.rsplit(")", 1)[1].split()[0] == "Z":  # already dead, awaiting its parent
                continue
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (OSError, IndexError):
            continue
        found.append((pid, cmdline or "?"))
    return found


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def run_command(
    request: AgentRequest,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    unavailable_exit_codes: Collection[int] = (UNAVAILABLE_EXIT_CODE,),
) -> AgentOutcome:
    """Run ``argv`` as the agent for ``request`` and return its outcome.

    ``env`` replaces ``request.env`` when given (build it from ``request.env`` to keep the
    harness's variables). A program that cannot be started is ``unavailable``, with the
    reason in ``detail``; one that outlives the timeout is ``timeout``.
    """
    token = uuid.uuid4().hex
    environment = dict(request.env if env is None else env)
    environment[TOKEN_VARIABLE] = token
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="certlab-command-") as scratch:
        out_path, err_path = Path(scratch) / "stdout", Path(scratch) / "stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            try:
                process = subprocess.Popen(
                    list(argv),
                    cwd=request.workdir,
                    env=environment,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as error:
                program = argv[0] if argv else "(empty command)"
                return AgentOutcome(
                    status="unavailable",
                    wall_s=time.monotonic() - started,
                    detail=f"could not start {program}: {error.strerror or error}",
                )
            status: str = "completed"
            try:
                exit_code: int | None = process.wait(timeout=request.timeout_s)
            except subprocess.TimeoutExpired:
                status = "timeout"
                _kill_group(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    _kill_group(process.pid, signal.SIGKILL)
                    process.wait()
                exit_code = process.returncode
        wall = time.monotonic() - started
        leftovers = find_leftovers(process.pid, token)
        for pid, _cmd in leftovers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        detail = ""
        if status == "timeout":
            detail = f"timed out after {request.timeout_s:g} s"
        elif exit_code in unavailable_exit_codes:
            status = "unavailable"
            detail = f"the agent exited {exit_code}: its own infrastructure failed"
        return AgentOutcome(
            status=status,  # type: ignore[arg-type]
            exit_code=exit_code,
            stdout_tail=_tail(out_path),
            stderr_tail=_tail(err_path),
            wall_s=wall,
            leftover_processes=tuple(f"pid {pid}: {cmd}" for pid, cmd in leftovers),
            detail=detail,
        )
