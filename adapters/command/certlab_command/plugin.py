"""The command adapter: ``/bin/sh -c CMDLINE`` in the work copy, in its own process session.

Exit code 75 means the agent's own infrastructure failed (``unavailable``); no other exit
code decides anything. At the timeout the process group gets SIGTERM, then SIGKILL 5 s
later. Processes the agent leaves behind (same session, or carrying this run's token in
their environment) are named in the outcome and killed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from certlab_core import hookimpl
from certlab_core.errors import UsageError
from certlab_core.records import AgentAdapter, AgentOutcome, AgentRequest

NAME = "command"
UNAVAILABLE_EXIT_CODE = 75
TAIL_BYTES = 64 * 1024
KILL_GRACE_S = 5.0
TOKEN_VARIABLE = "CERTLAB_AGENT_RUN"
SHELL_WORDS = frozenset(
    {"cd", "exit", "true", "false", "echo", "printf", "test", "[", "export", "set", "unset", "exec", "eval"}
    | {".", ":", "if", "for", "while", "case", "until", "{", "(", "!"}
)


def check_command_line(cmdline: str) -> None:
    """Refuse, in one line, a command line whose program cannot be found."""
    try:
        words = shlex.split(cmdline)
    except ValueError as error:
        raise UsageError(f"the agent command line cannot be parsed ({error}): {cmdline!r}") from None
    while words and "=" in words[0] and not words[0].startswith("="):
        words.pop(0)
    if not words:
        raise UsageError("the agent command line is empty; give it with --agent-arg 'COMMAND ...'")
    program = words[0]
    if program in SHELL_WORDS:
        return
    if "/" in program:
        path = Path(program)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise UsageError(f"the agent command {program} is not an executable file; check the path and its mode")
    elif shutil.which(program) is None:
        raise UsageError(f"the agent command {program!r} is not on PATH; install it or give its full path")


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


def run(request: AgentRequest) -> AgentOutcome:
    """Run the command line given as the agent's argument and report what happened."""
    if not request.agent_args:
        raise UsageError("the command agent needs its command line: --agent-arg 'COMMAND ...'")
    cmdline = " ".join(request.agent_args)
    token = uuid.uuid4().hex
    env = dict(request.env)
    env[TOKEN_VARIABLE] = token
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="certlab-command-") as scratch:
        out_path, err_path = Path(scratch) / "stdout", Path(scratch) / "stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            try:
                process = subprocess.Popen(
                    ["/bin/sh", "-c", cmdline],
                    cwd=request.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as error:
                return AgentOutcome(
                    status="crashed",
                    exit_code=None,
                    stdout_tail="",
                    stderr_tail="",
                    wall_s=time.monotonic() - started,
                    detail=f"could not start /bin/sh: {error}",
                )
            status = "completed"
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
        if status == "completed" and exit_code == UNAVAILABLE_EXIT_CODE:
            status = "unavailable"
        return AgentOutcome(
            status=status,
            exit_code=exit_code,
            stdout_tail=_tail(out_path),
            stderr_tail=_tail(err_path),
            wall_s=wall,
            leftover_processes=tuple(f"pid {pid}: {cmd}" for pid, cmd in leftovers),
            detail=f"timed out after {request.timeout_s:g} s" if status == "timeout" else "",
        )


@hookimpl
def certlab_agents() -> list[AgentAdapter]:
    return [
        AgentAdapter(
            name=NAME,
            description="any command-line agent: /bin/sh -c CMDLINE in the work copy (exit 75: agent unavailable)",
            run=run,
            check_args=lambda args: check_command_line(" ".join(args)),
        )
    ]
