"""``run_command``: run an agent's program once, contained; say what happened.

An adapter that drives a command-line agent builds its argument vector and calls
``run_command(request, argv)``. The program starts in the work copy, in a new process
session, with stdin from ``/dev/null``, inside the run's sandbox when it has one
(``active_containment()``, set by the kernel for the trial), under a small intermediate
process that is a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): every process the
agent starts, even a daemon in a new session with a cleared environment, is re-parented to
it rather than to init. At the
request's timeout the process group gets SIGTERM, then SIGKILL ``KILL_GRACE_S`` later. When
the program has ended, the intermediate kills every process still below it, round after
round until none is left, and names each in the outcome (``leftover_processes``); a
process that carries this run's token in its environment is killed too. The last
``TAIL_BYTES`` of stdout and stderr are kept, with the wall time.

The program's exit code decides nothing by itself: ``unavailable_exit_codes`` names the
codes by which the program says its own infrastructure failed (the command adapter uses
75, ``EX_TEMPFAIL``); the adapter reads the rest (its output, its usage) and may return a
changed outcome with ``attrs.evolve``. A run that exceeded one of the sandbox's limits
(CPU time, memory, processes, file size) is ``resource-limit``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Literal, get_args

from attrs import field, frozen

from certlab_core.plugin.types.agent import AgentOutcome, AgentRequest
from certlab_core.plugin.types.fields import one_of
from certlab_core.plugin.types.sandbox import Containment, SandboxLaunch, SpawnedProcess
from certlab_core.sdk.containment import active_containment, record_limits_hit
from certlab_core.sdk.processes import has_children as has_children
from certlab_core.sdk.processes import (
    kill_group,
    live_descendants,
    process_ids,
    process_state,
    reap,
    reap_exited,
    stop_group,
)

TAIL_BYTES = 64 * 1024
KILL_GRACE_S = 5.0
TOKEN_VARIABLE = "CERTLAB_AGENT_RUN"
UNAVAILABLE_EXIT_CODE = 75
PR_SET_CHILD_SUBREAPER = 36
SWEEP_ROUNDS = 500  # rounds of kill-and-reap before the sweep gives up and names what is left
SWEEP_PAUSE_S = 0.002
COMMAND_LINE_READS = 10  # reads of an empty command line (a process inside exec) before its name stands in


def _tail(path: Path) -> str:
    size = path.stat().st_size
    with path.open("rb") as handle:
        handle.seek(max(0, size - TAIL_BYTES))
        return handle.read().decode("utf-8", "replace")


def _command_line(pid: int) -> str:
    """The command line of ``pid`` as one string; ``[name]`` (as ps shows it) when it has none, ``?`` when gone.

    A process caught inside ``exec`` reads an empty command line for a moment, so an empty
    read is tried again a few times before the process's name stands in for it (a zombie
    has no command line at all).
    """
    for _read in range(COMMAND_LINE_READS):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return "?"
        text = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
        if text:
            return text
        time.sleep(SWEEP_PAUSE_S)
    try:
        name = Path(f"/proc/{pid}/comm").read_text(errors="replace").strip()
    except OSError:
        return "?"
    return f"[{name}]" if name else "?"


def become_subreaper() -> bool:
    """Make this process the child subreaper of everything it starts; False where the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def sweep_descendants(spare: Collection[int] = ()) -> list[str]:
    """Kill every live process below this one (a subreaper), round after round, until none is left.

    Returns each process killed as ``pid N: command line``, and ``still alive: ...`` for any
    that outlived every round. ``spare`` are pids (with their own descendants) left alone.
    """
    named: dict[int, str] = {}
    alive: list[int] = []
    if not spare and not has_children():  # a subreaper without a child has no descendant: no scan needed
        return []
    for _round in range(SWEEP_ROUNDS):
        reap_exited()
        alive = live_descendants(spare=spare)
        if not alive:
            break
        for pid in alive:
            if pid not in named:
                named[pid] = f"pid {pid}: {_command_line(pid)}"
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(SWEEP_PAUSE_S)
    reap_exited()
    out = list(named.values())
    if alive:
        out.append(f"still alive after {SWEEP_ROUNDS} rounds of killing: {len(alive)} process(es)")
    return out


def find_leftovers(session_id: int, token: str) -> list[tuple[int, str]]:
    """Processes still alive in the agent's session, or carrying its token: (pid, command line)."""
    marker = f"{TOKEN_VARIABLE}={token}".encode()
    found: list[tuple[int, str]] = []
    me = os.getpid()
    for pid in process_ids():
        if pid == me:
            continue
        try:
            in_session = os.getsid(pid) == session_id
            environ = b"" if in_session else Path(f"/proc/{pid}/environ").read_bytes()
            if not in_session and marker not in environ.split(b"\0"):
                continue
        except OSError:
            continue
        if process_state(pid) in ("Z", "X"):  # already dead, awaiting its parent, or gone
            continue
        found.append((pid, _command_line(pid)))
    return found


RunStatus = Literal["completed", "timeout", "resource-limit", "unstartable"]


@frozen
class ContainedRun:
    """What one contained program did: how it ended, its exit code, the limits it hit, what it left behind."""

    status: RunStatus = field(validator=one_of(get_args(RunStatus)))
    exit_code: int | None
    wall_s: float
    leftovers: tuple[str, ...] = ()
    limits_hit: tuple[str, ...] = ()
    detail: str = ""


def _supervise(
    launch: SandboxLaunch,
    cwd: str,
    timeout_s: float,
    stdout: IO[bytes] | int,
    stderr: IO[bytes] | int,
) -> dict[str, object]:
    """In the intermediate process: start the program, wait for it or its timeout, then kill all it left.

    With the sandbox's ``handoff`` the program starts without a ``before_exec`` (so without a
    fork of this process, which is a copy of the harness), and the handoff puts the limits in
    place before the contained program runs.
    """
    if not become_subreaper():
        return {"error": "the kernel refused PR_SET_CHILD_SUBREAPER"}
    argv = list(launch.argv)
    handoff = None
    try:
        if launch.handoff is not None:
            handoff = launch.handoff()
            argv = list(handoff.argv)
        process: SpawnedProcess
        if handoff is not None and handoff.spawn is not None:
            process = handoff.spawn(argv, cwd, dict(launch.env), stdout, stderr, handoff.pass_fds)
        else:
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=dict(launch.env),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
                pass_fds=handoff.pass_fds if handoff is not None else (),
                preexec_fn=launch.before_exec if handoff is None else None,
            )
    except (OSError, subprocess.SubprocessError) as error:
        program = argv[0] if argv else "(empty command)"
        return {"error": f"could not start {program}: {getattr(error, 'strerror', None) or error}"}
    if handoff is not None:
        try:
            handoff.started(process.pid)
        except OSError as error:
            kill_group(process.pid)
            process.wait()
            sweep_descendants()
            return {"error": f"could not put the sandbox's limits on {argv[0]}: {error}"}
    timed_out = stop_group(process, timeout_s, KILL_GRACE_S)
    if handoff is not None:
        handoff.settle(KILL_GRACE_S)
    return {"exit_code": process.returncode, "timed_out": timed_out, "leftovers": sweep_descendants()}


def run_contained(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout_s: float,
    stdout: IO[bytes] | int = subprocess.DEVNULL,
    stderr: IO[bytes] | int = subprocess.DEVNULL,
    containment: Containment | None = None,
    writable: Iterable[str] = (),
    readable: Iterable[str] = (),
    relay_sockets: Iterable[str] = (),
    relay_ports: Mapping[int, str] | None = None,
) -> ContainedRun:
    """Run ``argv`` in ``cwd`` under ``containment`` (uncontained when None) and a child subreaper.

    Every process the program leaves is killed before this returns and named in ``leftovers``;
    so is any still carrying the run's ``CERTLAB_AGENT_RUN`` token. A grader runs agent-written
    code through this too.
    """
    token = uuid.uuid4().hex
    environment = dict(env)
    environment[TOKEN_VARIABLE] = token
    started = time.monotonic()
    try:
        launch = (containment if containment is not None else Containment()).launch(
            argv,
            cwd,
            environment,
            writable=writable,
            readable=readable,
            relay_sockets=relay_sockets,
            relay_ports=relay_ports,
        )
    except OSError as error:  # the sandbox cannot show what the program needs: it is not started
        return ContainedRun("unstartable", None, time.monotonic() - started, detail=str(error))
    try:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the intermediate: nothing but supervising, then out without cleanup
            code = 0
            try:
                os.close(read_fd)
                report = _supervise(launch, cwd, timeout_s, stdout, stderr)
                os.write(write_fd, json.dumps(report).encode())
            except BaseException:  # anything here must end this process, never unwind into the caller's
                code = 70
            finally:
                os._exit(code)
        os.close(write_fd)
        chunks: list[bytes] = []
        while chunk := os.read(read_fd, 1 << 16):
            chunks.append(chunk)
        os.close(read_fd)
        status = reap(pid)
        wall = time.monotonic() - started
        try:
            report = json.loads(b"".join(chunks) or b"{}")
        except ValueError:
            report = {}
        # The intermediate adopted and killed everything below it; only when it did not report
        # (killed by the agent itself) are the processes carrying the run's token looked for.
        escaped = [] if "exit_code" in report else [f"pid {p}: {cmd}" for p, cmd in find_leftovers(-1, token)]
        for line in escaped:
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(line.split(":", 1)[0].removeprefix("pid ")), signal.SIGKILL)
        if "error" in report or "exit_code" not in report:
            why = str(report.get("error") or f"the supervising process ended with status {status}")
            return ContainedRun(status="unstartable", exit_code=None, wall_s=wall, leftovers=tuple(escaped), detail=why)
        exit_code = report["exit_code"]
        exit_code = int(exit_code) if isinstance(exit_code, int) else None
        named = report.get("leftovers")
        leftovers = tuple(str(x) for x in (named if isinstance(named, list) else ())) + tuple(escaped)
        limits = tuple(launch.limits_hit(exit_code))
    finally:
        launch.release()
    if report.get("timed_out"):
        return ContainedRun("timeout", exit_code, wall, leftovers, limits, f"timed out after {timeout_s:g} s")
    if limits:
        record_limits_hit(limits)
        detail = f"exceeded the sandbox's {', '.join(limits)} limit (exit {exit_code})"
        return ContainedRun("resource-limit", exit_code, wall, leftovers, limits, detail)
    return ContainedRun("completed", exit_code, wall, leftovers, limits)


def run_command(
    request: AgentRequest,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    unavailable_exit_codes: Collection[int] = (UNAVAILABLE_EXIT_CODE,),
    readable: Iterable[str] = (),
    writable: Iterable[str] = (),
    relay_sockets: Iterable[str] = (),
    relay_ports: Mapping[int, str] | None = None,
) -> AgentOutcome:
    """Run ``argv`` as the agent for ``request`` and return its outcome.

    ``env`` replaces ``request.env`` when given (build it from ``request.env`` to keep the
    harness's variables). A program that cannot be started is ``unavailable``, with the
    reason in ``detail``; one that outlives the timeout is ``timeout``; one that exceeds a
    sandbox limit is ``crashed``, and the kernel names it ``agent-resource-limit``.
    ``readable`` are files or folders a contained agent is shown read-only besides its work
    copy, the prompt, the system and its program's own runtime (the sandbox finds the
    program's interpreter, venv, ``node_modules`` or install prefix by itself: declare here
    what else it reads, such as a configuration file or a data folder). ``writable`` are
    folders the adapter made for this run (``tempfile.mkdtemp``), bound read-write at their
    paths: a fresh HOME is the agent's HOME only when it is given here, and a folder of the
    harness's own (its HOME, its temp folder) is refused, the run ``unavailable``. ``relay_sockets``
    (host Unix sockets, such as the model boundary's) are bound into the sandbox at their
    paths, and ``relay_ports`` ({port: socket}) makes ``127.0.0.1:PORT`` inside the sandbox a
    relay to that socket: the only network a contained agent reaches. Uncontained
    (``active_containment().contained`` is false) nothing is bound or relayed: give the agent
    the boundary's host address instead.
    """
    environment = dict(request.env if env is None else env)
    family = getattr(request.task, "family", None)
    task_environment = getattr(family, "environment_dir", None)  # a task's own venv: shown read-only, like the prompt
    shown = (request.prompt_file, *((task_environment,) if isinstance(task_environment, str) else ()))
    with tempfile.TemporaryDirectory(prefix="certlab-command-") as scratch:
        out_path, err_path = Path(scratch) / "stdout", Path(scratch) / "stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            run = run_contained(
                argv,
                cwd=request.workdir,
                env=environment,
                timeout_s=request.timeout_s,
                stdout=out,
                stderr=err,
                containment=active_containment(),
                readable=(*shown, *readable),
                writable=writable,
                relay_sockets=relay_sockets,
                relay_ports=relay_ports,
            )
        if run.status == "unstartable":
            return AgentOutcome(
                status="unavailable",
                exit_code=None,
                stdout_tail=_tail(out_path),
                stderr_tail=_tail(err_path),
                wall_s=run.wall_s,
                leftover_processes=run.leftovers,
                detail=run.detail,
            )
        status: str = run.status
        detail = run.detail
        if status == "resource-limit":  # the kernel names it agent-resource-limit from the limits it noted
            status = "crashed"
        elif status == "completed" and run.exit_code in unavailable_exit_codes:
            status = "unavailable"
            detail = f"the agent exited {run.exit_code}: its own infrastructure failed"
        return AgentOutcome(
            status=status,  # type: ignore[arg-type]
            exit_code=run.exit_code,
            stdout_tail=_tail(out_path),
            stderr_tail=_tail(err_path),
            wall_s=run.wall_s,
            leftover_processes=run.leftovers,
            detail=detail,
        )
