"""Sandboxes: the records a ``certlab_sandboxes`` plugin yields, and the containment a run puts in force.

A sandbox plugin (the built-in one is ``certlab-sandbox-bwrap``) turns a program to run into
a contained one: ``Sandbox.launch(SandboxRequest) -> SandboxLaunch`` gives the argument vector
and environment that start it inside, a hook the child runs before ``exec`` (resource limits,
a cgroup), which limits the run exceeded, and a ``release`` to call when it has ended. The
kernel decides what the program must not see (``hidden``: the answer key, the experiment,
the run store, certlab's installation) and which one folder it may write (``workdir``).

The sandbox named ``none`` is the kernel's own: no plugin, the program runs as the user
who runs certlab, with everything that user can read in reach (docs/trust-model.md).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Literal, Protocol

from attrs import field, frozen

from certlab_core.plugin.converters import text_map
from certlab_core.plugin.trees import MadeFolder, make_temp_folder, remove_made

#: What ``--sandbox`` accepts: bwrap where it works else uncontained (auto), bwrap or refuse, never contained.
SandboxChoice = Literal["auto", "bwrap", "none"]
SANDBOX_CHOICES: tuple[SandboxChoice, ...] = ("auto", "bwrap", "none")
#: The name a run records when nothing contained it.
UNCONTAINED = "none"
#: The resource limits a sandbox enforces; exceeding one is the trial's ``agent-resource-limit``.
ResourceLimit = Literal["cpu", "memory", "processes", "file-size"]


def _strings(values: Iterable[str] | None) -> tuple[str, ...]:
    return tuple(str(v) for v in values or ())


def _ports(values: Iterable[int] | None) -> tuple[int, ...]:
    return tuple(int(port) for port in values or ())


def _port_sockets(mapping: Mapping[int, str]) -> dict[int, str]:
    return {int(port): str(socket) for port, socket in dict(mapping).items()}


@frozen
class ResourceLimits:
    """Per-run limits: CPU seconds, address space, live processes, and the size of any one file written."""

    cpu_s: int = 900
    memory_bytes: int = 4 << 30
    processes: int = 512
    file_bytes: int = 1 << 30


@frozen
class SandboxRequest:
    """One program to contain.

    ``workdir`` is bound writable at its own path and is the program's working directory;
    ``writable`` are further folders bound writable (a grader's scratch folder), ``readable``
    files or folders shown read-only (the prompt file); ``hidden``
    are files and folders that must not be visible inside. ``relay_sockets`` are host Unix
    sockets (such as the model boundary's) bound into the sandbox at the same path, and
    ``relay_ports`` maps a port to such a socket: inside, ``127.0.0.1:PORT`` is relayed to it
    (for a client that wants an ``http://127.0.0.1:PORT`` base URL); ``relay_host_ports`` are
    host ``127.0.0.1`` ports reachable inside at the same port (the sandbox relays them through
    a socket of its own). That is the only network a contained program has (its loopback is
    its own, empty). ``env`` is the program's whole environment.
    """

    argv: tuple[str, ...] = field(converter=_strings)
    workdir: str
    env: Mapping[str, str] = field(converter=text_map)
    hidden: tuple[str, ...] = field(converter=_strings, default=())
    writable: tuple[str, ...] = field(converter=_strings, default=())
    readable: tuple[str, ...] = field(converter=_strings, default=())
    limits: ResourceLimits = ResourceLimits()
    relay_sockets: tuple[str, ...] = field(converter=_strings, default=())
    relay_ports: Mapping[int, str] = field(converter=_port_sockets, factory=dict)
    relay_host_ports: tuple[int, ...] = field(converter=_ports, default=())
    #: The program (a grading server) makes a fresh mount and IPC namespace for each child that runs
    #: untrusted code, and drops every capability there first: it runs in a user namespace of the
    #: sandbox's own, holding ``CAP_SYS_ADMIN`` over that namespace alone.
    nested_namespaces: bool = False


class BeforeExec(Protocol):
    """Runs in the new process just before it starts the contained program (limits, cgroup)."""

    def __call__(self) -> None: ...


class LimitsHit(Protocol):
    """Which limits the ended run exceeded, given its exit code (negative: killed by that signal)."""

    def __call__(self, exit_code: int | None) -> tuple[ResourceLimit, ...]: ...


class Release(Protocol):
    """Frees what the launch holds (a cgroup, a relay) once the program and its processes ended."""

    def __call__(self) -> None: ...


class Started(Protocol):
    """Runs in the supervising process once the program started (``pid``), before it runs anything contained."""

    def __call__(self, pid: int) -> None: ...


class Settle(Protocol):
    """Runs in the supervising process once the program ended: waits, at most ``timeout_s``, for what ends with it."""

    def __call__(self, timeout_s: float) -> None: ...


def _settled(timeout_s: float) -> None:
    return None


class SpawnedProcess(Protocol):
    """A started program as ``subprocess.Popen`` gives it: what the supervising process waits on and reads."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int:
        """The exit status once the program ended; ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        ...


class Spawn(Protocol):
    """Starts ``argv`` as ``subprocess.Popen`` would (a new session, ``pass_fds`` kept, stdin from /dev/null).

    A sandbox gives one in its ``Handoff`` when something other than the supervising process
    must start the program (a process already inside the program's cgroups, so that the
    program is born in them): the program is then not the supervising process's child, and
    the returned process reports its exit status. Raises OSError when it cannot start it.
    """

    def __call__(
        self,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        stdout: IO[bytes] | int,
        stderr: IO[bytes] | int,
        pass_fds: tuple[int, ...],
    ) -> SpawnedProcess: ...


@frozen
class Handoff:
    """A start without ``before_exec`` (no fork of the caller's process just to set limits): see ``SandboxLaunch``.

    Start ``argv`` with ``pass_fds`` inherited and nothing run before ``exec``, then call
    ``started(pid)`` at once: it puts the limits in place while the program waits for it, and
    raises OSError (having killed the program) when it could not. Once the program ended,
    ``settle(timeout_s)`` waits for the sandbox's own processes that end with it (bwrap's init
    of the PID namespace, which outlives bwrap by a moment): a sweep for what the program left
    must not find them still ending. With ``spawn``, the supervising process starts ``argv``
    through it instead of ``subprocess.Popen``.
    """

    argv: tuple[str, ...] = field(converter=_strings)
    pass_fds: tuple[int, ...] = field(converter=_ports)
    started: Started = field(eq=False, repr=False)
    settle: Settle = field(default=_settled, eq=False, repr=False)
    #: Who starts ``argv`` (None: the supervising process, with ``subprocess.Popen``).
    spawn: Spawn | None = field(default=None, eq=False, repr=False)


class HandoffMaker(Protocol):
    """Makes the ``Handoff`` of one start, in the process that will start and supervise the program."""

    def __call__(self) -> Handoff: ...


def _no_limits(exit_code: int | None) -> tuple[ResourceLimit, ...]:
    return ()


def _nothing() -> None:
    return None


@frozen
class SandboxLaunch:
    """How to start one contained program: run ``argv`` with ``env``, ``before_exec`` in the child.

    ``handoff``, when the sandbox offers it, is the faster way for a caller that starts the
    program from a process of its own which exists for that one program (``run_contained``'s
    supervising process): call it there, start its ``argv`` without ``before_exec``, and call
    its ``started(pid)`` right away. It may set limits on that process, which the program
    inherits. Any other caller starts ``argv`` with ``before_exec``.
    """

    argv: tuple[str, ...] = field(converter=_strings)
    env: Mapping[str, str] = field(converter=text_map)
    before_exec: BeforeExec | None = field(default=None, eq=False, repr=False)
    limits_hit: LimitsHit = field(default=_no_limits, eq=False, repr=False)
    release: Release = field(default=_nothing, eq=False, repr=False)
    handoff: HandoffMaker | None = field(default=None, eq=False, repr=False)


class SandboxProbe(Protocol):
    """None when the sandbox works on this machine, else one line saying why not."""

    def __call__(self) -> str | None: ...


class SandboxLauncher(Protocol):
    def __call__(self, request: SandboxRequest) -> SandboxLaunch: ...


class SandboxServe(Protocol):
    def __call__(self, workers: int) -> contextlib.AbstractContextManager[None]: ...


class SandboxVisible(Protocol):
    """The host paths every program under the sandbox can read (the system, the agent environment)."""

    def __call__(self) -> tuple[str, ...]: ...


class AgentPython(Protocol):
    """The interpreter a contained program gets: pytest and nothing of certlab (made on first use)."""

    def __call__(self) -> str: ...


@frozen
class Sandbox:
    """A way to contain an agent and the code it wrote: ``launch(request)`` once ``probe()`` said it works."""

    name: str
    description: str
    probe: SandboxProbe = field(eq=False, repr=False)
    launch: SandboxLauncher = field(eq=False, repr=False)
    python: AgentPython = field(eq=False, repr=False)
    #: Warm resources for up to ``workers`` programs at once while the ``with`` block runs, which the
    #: processes forked inside it inherit (the kernel serves a certification's trials this way);
    #: ``launch`` works without it, and where it is not inherited.
    serve: SandboxServe | None = field(default=None, eq=False, repr=False)
    #: What every launch shows of the host, before a request's own work copy, runtime and readable files.
    visible: SandboxVisible | None = field(default=None, eq=False, repr=False)


@frozen
class Containment:
    """The containment of a run: its sandbox (None: uncontained), what stays hidden, and the limits.

    The kernel makes one per run (``certlab_core.containment``) and hands it to adapters in
    ``AgentRequest.containment`` and to graders in ``GradeRequest.containment``; the SDK's
    ``run_command`` applies it, and a grader that runs agent-written code starts that code
    through :meth:`launch` too.
    """

    sandbox: Sandbox | None = None
    hidden: tuple[str, ...] = field(converter=_strings, default=())
    limits: ResourceLimits = ResourceLimits()
    note: str = ""
    #: Ports relayed inside to host Unix sockets for every program launched under it: the kernel's
    #: model boundary sets them for a trial (``attrs.evolve`` and ``use_containment``), so that any
    #: adapter's CLI reaches ``127.0.0.1:PORT`` inside the sandbox.
    relay_ports: Mapping[int, str] = field(converter=_port_sockets, factory=dict, eq=False)
    #: Host ``127.0.0.1`` ports reachable inside at the same port: the kernel sets the model
    #: boundary's for a trial (``loopback_ports`` of the agent's environment).
    relay_host_ports: tuple[int, ...] = field(converter=_ports, default=(), eq=False)

    @property
    def name(self) -> str:
        return self.sandbox.name if self.sandbox is not None else UNCONTAINED

    @property
    def contained(self) -> bool:
        return self.sandbox is not None

    def python(self) -> str:
        """The interpreter for agent-written code: the sandbox's agent environment, else this one."""
        return self.sandbox.python() if self.sandbox is not None else sys.executable

    def launch(
        self,
        argv: Iterable[str],
        workdir: str,
        env: Mapping[str, str],
        *,
        writable: Iterable[str] = (),
        readable: Iterable[str] = (),
        relay_sockets: Iterable[str] = (),
        relay_ports: Mapping[int, str] | None = None,
        nested_namespaces: bool = False,
    ) -> SandboxLaunch:
        """How to start ``argv`` under this containment (as it is, when uncontained).

        Raises OSError in one line when the sandbox cannot show what the program needs
        (``Unresolvable``), or is asked to bind a folder of the harness's own.
        """
        if self.sandbox is None:
            return SandboxLaunch(argv=tuple(argv), env=env)
        return self.sandbox.launch(
            SandboxRequest(
                argv=tuple(argv),
                workdir=workdir,
                env=env,
                hidden=self.hidden,
                writable=tuple(writable),
                readable=tuple(readable),
                limits=self.limits,
                relay_sockets=tuple(relay_sockets),
                relay_ports={**self.relay_ports, **(relay_ports or {})},
                relay_host_ports=self.relay_host_ports,
                nested_namespaces=nested_namespaces,
            )
        )

    def visible_paths(self) -> tuple[str, ...]:
        """The host paths any program under this containment can read besides its own (all of them, uncontained)."""
        if self.sandbox is None:
            return ("/",)
        return self.sandbox.visible() if self.sandbox.visible is not None else ("/",)

    def document(self) -> dict[str, object]:
        """What the evidence records: the sandbox used, the limits, and why (never a path of this machine)."""
        limits = {
            "cpu_s": self.limits.cpu_s,
            "memory_bytes": self.limits.memory_bytes,
            "processes": self.limits.processes,
            "file_bytes": self.limits.file_bytes,
        }
        return {
            "sandbox": self.name,
            "limits": limits if self.contained else None,
            "note": self.note,
            "environment": list(PASSED_VARIABLES),
        }


#: The harness's variables a contained program (an agent, the code it wrote) gets; every other is dropped.
#: An adapter adds what it declares (``AgentAdapter.environment``), the kernel the prompt variables and
#: the model boundary's per-trial token; the evidence records these names, never a value.
PASSED_VARIABLES: tuple[str, ...] = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "TZ")


def contained_environment(source: Mapping[str, str] | None = None, also: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``source`` (the harness's environment) that a contained program may get: an allow-list.

    ``PASSED_VARIABLES`` and the names in ``also``; a key, a token, ``HOME``, ``TMPDIR`` and
    ``XDG_*`` never pass (the sandbox gives the program its own HOME and /tmp).
    """
    source = os.environ if source is None else source
    names = {*PASSED_VARIABLES, *also}
    return {k: v for k, v in source.items() if k in names or k.startswith("LC_")}


def inherited_folders(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The harness's own folders a sandbox never binds whole: its HOME, temp folders and XDG folders, and ``/``.

    Certlab makes the folders it binds (a work copy, a grader's scratch folder, an adapter's
    HOME) inside these; binding one of them, or a folder that holds one, would show the host's.
    """
    env = os.environ if env is None else env
    found = {"/", "/tmp", "/dev/shm", "/home", "/root", "/var", tempfile.gettempdir(), os.path.expanduser("~")}
    for key, value in env.items():
        if value.startswith("/") and (key in ("HOME", "TMPDIR", "TMP", "TEMP") or key.startswith("XDG_")):
            found.add(value)
    return tuple(sorted(os.path.realpath(f) for f in found if f))


_runtime: list[MadeFolder] = []  # forked processes inherit the maker's; only the maker removes it


def runtime_folder() -> Path:
    """certlab's own folder for its sockets and keepers, made once per process tree, never bound into a sandbox.

    It is made (mode 0700) under ``XDG_RUNTIME_DIR`` or the temp folder; whatever ``TMPDIR``
    points at, no sandbox shows it, because a sandbox binds only the folders a request names,
    and refuses one that holds this folder. ``choose_containment`` makes it in the process that
    forks the trials, so that they share it; its maker removes it at exit, by the handle it made.
    """
    made = made_runtime_folder()
    if made is not None:
        return made
    base = os.environ.get("XDG_RUNTIME_DIR") or None
    handle = make_temp_folder("certlab-runtime-", base if base is not None and os.path.isdir(base) else None)
    _runtime[:] = [handle]
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and remove_made(handle))
    return handle.as_path


def made_runtime_folder() -> Path | None:
    """The runtime folder this process or its maker made, if any (a check against it makes none)."""
    if _runtime and os.path.isdir(_runtime[0].path):
        return _runtime[0].as_path
    return None


_active: list[Containment] = []


def active_containment() -> Containment:
    """The containment in force in this process (uncontained unless the kernel set one).

    The kernel sets it in a trial's process before the adapter runs (``use_containment``);
    forked graders inherit it. ``run_command`` and the graders that run agent-written code
    read it; a calibration agent's trial runs with none, as the harness.
    """
    return _active[-1] if _active else Containment()


@contextlib.contextmanager
def use_containment(containment: Containment) -> Iterator[Containment]:
    """Make ``containment`` the one in force in this process for the ``with`` block."""
    _active.append(containment)
    try:
        yield containment
    finally:
        _active.pop()


def loopback_ports(env: Mapping[str, str]) -> tuple[int, ...]:
    """The host loopback ports the agent's environment points a client at (``*_BASE_URL``, ``*_API_BASE``)."""
    from urllib.parse import urlsplit

    ports: set[int] = set()
    for key, value in env.items():
        if not key.endswith(("_BASE_URL", "_API_BASE")):
            continue
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            continue
        if parts.hostname in ("127.0.0.1", "localhost") and port:
            ports.add(port)
    return tuple(sorted(ports))


_limits_hit: list[str] = []


def record_limits_hit(limits: Iterable[str]) -> None:
    """Note, in this process, the limits a contained run exceeded (``run_contained`` does it)."""
    _limits_hit.extend(limits)


def limits_hit_count() -> int:
    """A mark in this process's log of limits hit; ``limits_hit_since(mark)`` reads what came after it."""
    return len(_limits_hit)


def limits_hit_since(mark: int) -> tuple[str, ...]:
    """The limits contained runs of this process exceeded since ``mark`` (the trial's ``agent-resource-limit``)."""
    return tuple(dict.fromkeys(_limits_hit[mark:]))


def agent_environment_dir() -> Path:
    """Where the dedicated agent environment (a venv with pytest, nothing of certlab) lives: the user's cache."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "certlab" / "agent-env"


TASK_ENVIRONMENTS_VARIABLE = "CERTLAB_TASK_ENVIRONMENTS"


def task_environments_dir() -> Path:
    """Where the environments of tasks built from a repository live, one folder each: beside the agent environment
    (``CERTLAB_TASK_ENVIRONMENTS`` names another folder, certlab's to write)."""
    chosen = os.environ.get(TASK_ENVIRONMENTS_VARIABLE, "").strip()
    return Path(chosen) if chosen else agent_environment_dir().parent / "task-envs"


class SandboxIndex(Protocol):
    """The part of the registry the choice reads: the installed sandboxes by name."""

    def all(self, kind: str) -> dict[str, object]: ...


def _checkout_root(path: Path) -> Path | None:
    """The outermost folder above ``path`` that is a source checkout (holds ``.git``), if any."""
    found: Path | None = None
    for parent in [path, *path.parents]:
        if (parent / ".git").exists():
            found = parent
    return found


def installation_paths() -> tuple[str, ...]:
    """certlab's installation as this process sees it: every loaded certlab package, its checkout, the venv.

    These hold the installed families' clean trees and held-out cases (the answer key) and
    the harness's own code; a contained program must see none of them.
    """
    paths: set[str] = set()
    if sys.prefix != sys.base_prefix:
        paths.add(sys.prefix)
    for name, module in list(sys.modules.items()):
        if not name.startswith("certlab") or "." in name:
            continue
        where = getattr(module, "__file__", None)
        folders = [Path(where).parent] if where else [Path(p) for p in getattr(module, "__path__", [])]
        for folder in folders:
            paths.add(str(folder))
            root = _checkout_root(folder)
            if root is not None and root != Path(root.anchor):
                paths.add(str(root))
    pip_cache = Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")) / "pip"
    paths.add(str(pip_cache))
    return tuple(sorted(paths))


def choose_containment(
    sandboxes: SandboxIndex,
    choice: str,
    hidden: Iterable[str],
    warn: Callable[[str], None],
    limits: ResourceLimits | None = None,
) -> Containment:
    """The containment for ``--sandbox CHOICE``: bwrap where it works (auto), bwrap or refuse, or none.

    ``auto`` without a working sandbox runs uncontained and says so in one ``warn`` line;
    ``bwrap`` without one raises UsageError in one line.
    """
    from certlab_core.plugin.errors import UsageError

    if choice not in SANDBOX_CHOICES:
        raise UsageError(f"--sandbox {choice!r} is not one of {', '.join(SANDBOX_CHOICES)}")
    if choice == UNCONTAINED:
        return Containment(note="--sandbox none: the agent ran as the user, uncontained")
    wanted = "bwrap"
    installed = sandboxes.all("sandboxes")
    sandbox = installed.get(wanted)
    if not isinstance(sandbox, Sandbox):
        reason = f"the sandbox {wanted} is not installed (pip install certlab-sandbox-bwrap)"
    else:
        reason = sandbox.probe() or ""
    wanted_hidden = sorted({*installation_paths(), *(os.path.abspath(p) for p in hidden if p)})
    everything_hidden = tuple(
        p for p in wanted_hidden if not any(p.startswith(q.rstrip("/") + "/") for q in wanted_hidden)
    )
    if isinstance(sandbox, Sandbox) and not reason:
        runtime_folder()  # here, before any trial is forked: every trial shares it, and its maker removes it
        return Containment(sandbox=sandbox, hidden=everything_hidden, limits=limits or ResourceLimits())
    if choice == "bwrap":
        raise UsageError(
            f"--sandbox bwrap: {reason}; install bubblewrap (apt-get install bubblewrap) or use --sandbox auto"
        )
    warn(f"warning: no sandbox: {reason}; the agent runs uncontained (see docs/trust-model.md)")
    return Containment(note=f"--sandbox auto found no sandbox ({reason}); the agent ran uncontained")
