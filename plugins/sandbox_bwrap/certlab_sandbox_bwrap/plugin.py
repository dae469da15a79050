"""The bwrap sandbox: a read-only system, the work copy, own /tmp, no network.

``bwrap --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp`` gives the read-only view; every
hidden path (the installed families, certlab's installation and checkout, the experiment,
the run store) is covered by an empty tmpfs (a hidden file by ``/dev/null``); the work copy
and any further writable folder are bound back at their own paths; ``HOME`` is a fresh
``/home/agent`` (or the fresh HOME an adapter made for the run in the temp folder, bound
with the work copy); the dedicated agent environment (a venv with pytest and nothing of
certlab) is bound read-only and first on ``PATH``. ``--cap-drop ALL``: a program run as root keeps no
capability (with CAP_SYS_ADMIN it could unmount what hides the key). ``--unshare-pid --die-with-parent``: every
process the program starts dies with it. ``--unshare-net``: no network at all, not even the
host's loopback; host Unix sockets named in ``relay_sockets`` are bound in at their paths,
and each port of ``relay_ports`` is relayed to its socket by ``inner_relay.py`` inside.

Limits: CPU time and file size as rlimits; memory through a memory cgroup when one can be
made (else ``RLIMIT_AS``); processes through a cgroup's ``pids.max`` (root ignores
``RLIMIT_NPROC``), else ``RLIMIT_NPROC`` when not root. A limit is reported hit from the
signal that ended the program (SIGXCPU, SIGXFSZ), a file in a writable folder that reached the
size limit (a program that ignores SIGXFSZ gets EFBIG there), or the cgroups' own counters.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from certlab_core.plugin import Sandbox, SandboxLaunch, SandboxRequest, hookimpl
from certlab_core.plugin.types.sandbox import Handoff, ResourceLimit
from certlab_core.sdk.containment import agent_environment_dir, inherited_folders, made_runtime_folder, runtime_folder
from certlab_sandbox_bwrap import runtime

NAME = "bwrap"
AGENT_HOME = "/home/agent"
PIDS_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")
MEMORY_ROOTS = ("/sys/fs/cgroup/memory",)
AGENT_ENV_MARKER = ".certlab-agent-env"
AGENT_ENV_PACKAGES = ("pytest",)
# Variables that would point a contained Python at the harness's installation.
DROPPED_VARIABLES = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")
# The harness's own folders by name: the sandbox gives its own HOME and /tmp, and no XDG folder.
DROPPED_PREFIXES = ("XDG_",)
FILE_LIMIT_SCAN = 100_000
PROBE_TIMEOUT_S = 10.0
RELAY_FILE = Path(__file__).with_name("inner_relay.py")

_probed: list[str | None] = []


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or ["no message"])[0]


def agent_python() -> str:
    """The agent environment's interpreter, made on first use (a venv with pytest, outside any checkout)."""
    folder = agent_environment_dir()
    python = folder / "bin" / "python"
    if (folder / AGENT_ENV_MARKER).is_file() and python.exists():
        return str(python)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / "agent-env.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / AGENT_ENV_MARKER).is_file() and python.exists():
            return str(python)
        shutil.rmtree(folder, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        steps = [
            [base, "-m", "venv", str(folder)],
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *AGENT_ENV_PACKAGES],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"the agent environment could not be made ({_first_line(done.stderr)})")
        (folder / AGENT_ENV_MARKER).write_text("pytest, nothing of certlab\n", encoding="utf-8")
    return str(python)


def probe() -> str | None:
    """None when bwrap makes a sandbox here and the agent environment exists (or can be made)."""
    if _probed:
        return _probed[0]
    reason: str | None = None
    program = shutil.which("bwrap")
    if program is None:
        reason = "bubblewrap (bwrap) is not installed"
    else:
        argv = [program, *runtime.system_arguments(), "--dev", "/dev", "--proc", "/proc", "--unshare-pid"]
        argv += ["--unshare-net"]
        try:
            done = subprocess.run([*argv, "/bin/true"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
            if done.returncode != 0:
                reason = f"bwrap cannot make a sandbox here ({_first_line(done.stderr)})"
        except (OSError, subprocess.TimeoutExpired) as error:
            reason = f"bwrap cannot make a sandbox here ({error})"
    if reason is None:
        try:
            agent_python()
        except (OSError, RuntimeError) as error:
            reason = str(error)
    _probed.append(reason)
    return reason


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _new_cgroup(roots: tuple[str, ...], control: str, value: int) -> Path | None:
    """A fresh cgroup under the first writable hierarchy holding ``control``, set to ``value``; None when none is."""
    for root in roots:
        base = Path(root)
        own = _own_cgroup(base)
        for parent in (base / own.lstrip("/"), base) if own else (base,):
            if not (parent / control).exists() and not (parent / "cgroup.procs").exists():
                continue
            group = parent / f"certlab-{uuid.uuid4().hex[:12]}"
            try:
                group.mkdir()
                (group / control).write_text(str(value))
                return group
            except OSError:
                with contextlib.suppress(OSError):
                    group.rmdir()
    return None


def _own_cgroup(base: Path) -> str:
    """This process's cgroup path in the hierarchy mounted at ``base`` (v1 names the controller)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return ""
    controller = base.name
    for line in lines:
        _id, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    return ""


def _counter(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return 0
    return 0


def _memory_exceeded(group: Path, oom_kills_before: int = 0) -> bool:
    """Whether the memory cgroup's limit killed a process since its ``oom_kill`` count was ``oom_kills_before``
    (older kernels, without that counter: whether the limit was reached since the fail counts were 0)."""
    try:
        control = (group / "memory.oom_control").read_text()
    except OSError:
        control = ""
    if "oom_kill " in control:
        return _counter(group / "memory.oom_control", "oom_kill") > oom_kills_before
    for name in ("memory.failcnt", "memory.memsw.failcnt"):
        try:
            if int((group / name).read_text().strip()) > 0:
                return True
        except (OSError, ValueError):
            continue
    return False


def _remove(group: Path | None) -> None:
    if group is None:
        return
    for _attempt in range(50):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            procs = (group / "cgroup.procs").read_text().split() if (group / "cgroup.procs").exists() else []
            for pid in procs:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.01)


def _sandbox_pid(info: int) -> int | None:
    """The pid of the sandbox's first process, from bwrap's ``--info-fd`` JSON; None when bwrap ended first."""
    data = b""
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    while True:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([info], [], [], wait)[0]:
            raise OSError("bwrap did not say which process it started")
        chunk = os.read(info, 4096)
        if not chunk:
            break
        data += chunk
    if not data:
        return None
    try:
        pid = json.loads(data)["child-pid"]
    except (ValueError, KeyError, TypeError) as error:
        raise OSError(f"bwrap's --info-fd is unreadable ({error})") from None
    if not isinstance(pid, int) or pid <= 1:
        raise OSError(f"bwrap's --info-fd names no process ({data[:80]!r})")
    return pid


def _file_at_limit(folders: list[str], size: int) -> bool:
    """Whether a file in the writable folders reached the file-size limit (Python ignores SIGXFSZ and gets EFBIG).

    An iterative walk that follows no link and looks at no more than ``FILE_LIMIT_SCAN`` entries.
    """
    stack = list(folders)
    seen = 0
    while stack and seen < FILE_LIMIT_SCAN:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_size >= size:
                    return True
            except OSError:
                continue
    return False


def _runtime_of(
    programs: list[str], env: Mapping[str, str], hidden: list[str], inherited: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    """What the program, each executable readable file and the agent environment need shown, and what to cover.

    Raises ``runtime.Unresolvable`` (an OSError, one line) for the program itself when it cannot be shown.
    """
    python = str(agent_environment_dir() / "bin" / "python")
    lookup = {**env, "PATH": ":".join([str(agent_environment_dir() / "bin"), env.get("PATH", os.defpath)])}
    shown: list[str] = []
    covered: list[str] = []
    first, *rest = programs
    wanted = [(first, True), *((p, False) for p in rest if os.path.isfile(p) and os.access(p, os.X_OK))]
    if os.path.exists(python):
        wanted.append((python, True))
    for program, required in wanted:
        try:
            found = runtime.resolve(program, lookup, hidden, inherited)
        except runtime.Unresolvable:
            if required:
                raise
            continue
        shown.extend(found.shown)
        covered.extend(found.covered)
    return runtime.outermost(shown), list(dict.fromkeys(covered))


def visible() -> tuple[str, ...]:
    """The host paths every launch shows: the system, the minimal /etc, and the agent environment's runtime."""
    shown, _covered = _runtime_of(["/bin/sh"], {"PATH": os.defpath}, [], inherited_folders())
    return (*runtime.system_paths(), *shown)


def launch(request: SandboxRequest) -> SandboxLaunch:
    """The bwrap command line for ``request``, its limits, and how to read which were hit."""
    from certlab_sandbox_bwrap import slots  # the slots' keepers, imported by a launch, not by discovery
    from certlab_sandbox_bwrap.forwarder import HostPortForwarder

    program = shutil.which("bwrap") or "bwrap"
    environment = agent_environment_dir()
    python_bin = environment / "bin"
    inherited = inherited_folders()
    hidden = [p for p in request.hidden if p not in ("/",)]
    # The harness's folders and certlab's own runtime folder are never bound, nor a folder holding one.
    never_bound = [*inherited, *(str(f) for f in (made_runtime_folder(),) if f is not None)]
    for path in (request.workdir, *request.writable):
        real = os.path.realpath(path)
        if any(_inside(folder, [real]) for folder in never_bound) or _inside(real, hidden):
            raise OSError(f"the sandbox does not bind {path} writable: it is or holds a folder of the harness's own")
    command = list(request.argv)
    shown_runtime, covered = _runtime_of([command[0], *request.readable], request.env, hidden, inherited)
    forwarder = (
        HostPortForwarder(request.relay_host_ports, parent=str(runtime_folder())) if request.relay_host_ports else None
    )
    relay_ports = {**(forwarder.sockets if forwarder else {}), **request.relay_ports}
    home = request.env.get("HOME", "")
    own_home = bool(home) and any(os.path.realpath(home) == os.path.realpath(w) for w in request.writable)
    shown = [request.workdir, *request.writable]
    argv: list[str] = [program, *runtime.system_arguments(), "--dev", "/dev", "--proc", "/proc"]
    argv += ["--tmpfs", "/tmp", "--tmpfs", "/dev/shm", "--mqueue", "/dev/mqueue", "--tmpfs", AGENT_HOME]
    for path in shown_runtime:
        argv += ["--ro-bind", path, path]
    readable = [path for path in request.readable if os.path.exists(path)]
    for path in readable:
        argv += ["--ro-bind", path, path]
    # Whatever is hidden inside a shown folder (an answer key in a prefix's packages) is covered.
    folders = [*shown_runtime, *(p for p in readable if os.path.isdir(p))]
    for path in dict.fromkeys([*covered, *(p for p in hidden if _inside(p, folders))]):
        if not os.path.lexists(path) or not _inside(path, folders):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            argv.extend(["--tmpfs", path])
        else:
            argv.extend(["--ro-bind", "/dev/null", path])
    for path in shown:
        argv += ["--bind", path, path]
    for socket_path in sorted({*request.relay_sockets, *relay_ports.values()}):
        argv += ["--bind", socket_path, socket_path]  # one socket, never its folder
    if relay_ports:  # the relay binds the ports inside, then becomes the program
        argv += ["--ro-bind", str(RELAY_FILE), str(RELAY_FILE)]
        pairs = [f"{port}={path}" for port, path in sorted(relay_ports.items())]
        command = [str(python_bin / "python"), "-I", str(RELAY_FILE), *pairs, "--", *command]
    argv += ["--remount-ro", "/dev"]  # nothing written in /dev outlives the program (its shm and mqueue are its own)
    if request.nested_namespaces:
        # A user namespace of the sandbox's own; CAP_SYS_ADMIN over it alone, dropped before untrusted code runs.
        argv += ["--unshare-user", "--cap-add", "CAP_SYS_ADMIN"]
    else:
        # Run as root, bwrap would keep every capability of the caller.
        argv += ["--cap-drop", "ALL"]
    argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    argv += ["--chdir", request.workdir, "--", *command]

    env = {k: v for k, v in request.env.items() if k not in DROPPED_VARIABLES and not k.startswith(DROPPED_PREFIXES)}
    path_entries = [p for p in env.get("PATH", os.defpath).split(":") if p and not _inside(p, hidden)]
    # A venv shown read-only (a task's own environment) whose bin/ leads the PATH keeps its place, before the agent
    # environment's; every other entry comes after it.
    ahead = [p for p in path_entries[:1] if p.endswith("/bin") and os.path.dirname(p) in readable]
    env["PATH"] = ":".join([*ahead, str(python_bin), *(p for p in path_entries if p not in ahead)])
    env["HOME"] = home if own_home else AGENT_HOME
    env["TMPDIR"] = "/tmp"

    limits = request.limits
    pids_group = _new_cgroup(PIDS_ROOTS, "pids.max", limits.processes)
    memory_group = _new_cgroup(MEMORY_ROOTS, "memory.limit_in_bytes", limits.memory_bytes)
    if memory_group is not None:
        with contextlib.suppress(OSError):
            (memory_group / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))
    groups = [g for g in (pids_group, memory_group) if g is not None]

    kept_rlimits = {  # CPU (SIGXCPU, then SIGKILL) and file size: what every process of the program inherits
        "RLIMIT_CPU": (limits.cpu_s, limits.cpu_s + 1),
        "RLIMIT_FSIZE": (limits.file_bytes, limits.file_bytes),
    }

    def inherited_limits() -> None:  # harmless to the process that sets them, its children inherit them
        for name, pair in kept_rlimits.items():
            resource.setrlimit(getattr(resource, name), pair)

    def fallback_limits(pid: int) -> None:  # where no cgroup holds memory or processes
        if memory_group is None:
            resource.prlimit(pid, resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        if pids_group is None and os.geteuid() != 0:
            resource.prlimit(pid, resource.RLIMIT_NPROC, (limits.processes, limits.processes))

    def before_exec() -> None:
        inherited_limits()
        fallback_limits(0)
        me = str(os.getpid())
        for group in groups:
            (group / "cgroup.procs").write_text(me)

    # What the supervising process found of a slot's limits (a slot is leased there), for limits_hit here.
    slot_report_read, slot_report_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

    def handoff() -> Handoff:
        """bwrap tells the sandbox's first process (``--info-fd``) and holds it before it starts anything
        (``--block-fd``) while that process is put in the cgroups: no fork of the supervising process, and
        the cgroup moves overlap bwrap's own setup. With a free slot (``slots``), the slot's keeper starts
        bwrap, and the held process is already in the slot's cgroups: nothing is moved."""
        inherited_limits()
        info_read, info_write = os.pipe()
        block_read, block_write = os.pipe()
        fds = (info_write, block_read)
        handed = [argv[0], "--info-fd", str(info_write), "--block-fd", str(block_read), *argv[1:]]
        init: list[int] = []  # a pidfd of the sandbox's first process (its PID namespace's init)
        held = slots.lease(limits.processes, limits.memory_bytes) if slots.available() else None
        joins = groups if held is None else [held.slot.pids_group, held.slot.memory_group]
        spawn = None if held is None else slots.spawn_in(held, kept_rlimits)

        def started(pid: int) -> None:
            for fd in fds:
                os.close(fd)
            child: int | None = None
            try:
                child = _sandbox_pid(info_read)  # None: bwrap ended before making the sandbox, nothing runs
                if child is not None:
                    with contextlib.suppress(OSError):  # held on the block pipe: alive, the pid is its own
                        init.append(os.pidfd_open(child))
                    if held is None:
                        fallback_limits(child)
                    if held is None or not slots.in_slot(child, held):  # born in the slot: no move
                        for group in joins:
                            (group / "cgroup.procs").write_text(str(child))
                    os.write(block_write, b"1")
            except OSError:
                # Killed while still held: closing the block pipe unwritten would release it, unlimited.
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                for victim in (pid,) if child is None else (child, pid):
                    with contextlib.suppress(OSError):
                        os.kill(victim, signal.SIGKILL)
                raise
            finally:
                os.close(info_read)
                os.close(block_write)

        def settle(timeout_s: float) -> None:
            """bwrap ends when the program does; its init, killed as bwrap ends (die-with-parent), takes the
            namespace's last processes with it a moment later: wait for it, so no sweep finds them still dying.
            A slot's limits are read here, where the slot is held, and passed on to ``limits_hit``."""
            for pidfd in init:
                with contextlib.suppress(OSError):
                    select.select([pidfd], [], [], timeout_s)
                os.close(pidfd)
            init.clear()
            if held is not None:
                memory, processes = slots.limits_hit(held)
                with contextlib.suppress(OSError):
                    os.write(slot_report_write, json.dumps({"memory": memory, "processes": processes}).encode())
                held.release()

        return Handoff(argv=handed, pass_fds=fds, started=started, settle=settle, spawn=spawn)

    def limits_hit(exit_code: int | None) -> tuple[ResourceLimit, ...]:
        hit: list[ResourceLimit] = []
        signals = {-exit_code, exit_code - 128} if exit_code is not None else set()
        try:
            in_slot = json.loads(os.read(slot_report_read, 4096) or b"{}")
        except (OSError, ValueError):
            in_slot = {}
        if signal.SIGXCPU in signals:
            hit.append("cpu")
        if signal.SIGXFSZ in signals or _file_at_limit(shown, limits.file_bytes):
            hit.append("file-size")
        if (memory_group is not None and _memory_exceeded(memory_group)) or in_slot.get("memory"):
            hit.append("memory")
        if (pids_group is not None and _counter(pids_group / "pids.events", "max") > 0) or in_slot.get("processes"):
            hit.append("processes")
        return tuple(hit)

    def release() -> None:
        for fd in (slot_report_read, slot_report_write):
            with contextlib.suppress(OSError):
                os.close(fd)
        for group in groups:
            _remove(group)
        if forwarder is not None:
            forwarder.close()

    return SandboxLaunch(
        argv=argv, env=env, before_exec=before_exec, limits_hit=limits_hit, release=release, handoff=handoff
    )


def serve(workers: int) -> contextlib.AbstractContextManager[None]:
    """The slots for ``workers`` contained starts while the block runs (``slots.serve``, imported when called)."""
    from certlab_sandbox_bwrap import slots

    return slots.serve(workers)


@hookimpl
def certlab_sandboxes() -> list[Sandbox]:
    return [
        Sandbox(
            name=NAME,
            description="bubblewrap: read-only system, hidden answer key, no network, per-trial limits",
            probe=probe,
            launch=launch,
            python=agent_python,
            serve=serve,
            visible=visible,
            auto_order=10,
            install_hint="install bubblewrap (apt-get install bubblewrap)",
        )
    ]
