"""Sandboxes: the ``certlab_sandboxes`` records, and a run's containment.

A sandbox plugin (the built-in one is ``certlab-sandbox-bwrap``) turns a program to run into
a contained one: ``Sandbox.launch(SandboxRequest) -> SandboxLaunch`` gives the argument vector
and environment that start it inside, a hook the child runs before ``exec`` (resource limits,
a cgroup), which limits the run exceeded, and a ``release`` to call when it has ended. The
kernel decides what the program must not see (``hidden``: the answer key, the experiment,
the run store, certlab's installation) and which one folder it may write (``workdir``).

A sandbox record that declares ``contains=False`` is the uncontained choice: chosen by its
name (certlab-sandbox-none's ``none``), the program runs as the user who runs certlab, with
everything that user can read in reach (docs/trust-model.md); the run records ``none``.


The containment in force in a process, and the environment a contained program gets, are the
SDK's (``certlab_core.sdk.containment``); the choice for ``--sandbox`` is the runtime's.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Literal, Protocol

import attrs
from attrs import field, frozen

from certlab_core.plugin.types.base import Record
from certlab_core.plugin.types.fields import text_map

#: What ``--sandbox`` accepts: ``auto`` (the first installed sandbox that works here and takes part in
#: the choice, ``Sandbox.auto_order``, else uncontained with a warning) or an installed sandbox's name
#: (that one, or refuse; ``none``, certlab-sandbox-none's, never contains).
SandboxChoice = str
#: The words ``--sandbox`` takes besides the installed sandboxes' names.
SANDBOX_CHOICES: tuple[str, ...] = ("auto",)
#: The name a run records when nothing contained it, and the only name a sandbox that does not contain may take.
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
class ResourceLimits(Record):
    """Per-run limits: CPU seconds, address space, live processes, and the size of any one file written."""

    cpu_s: int = 900
    memory_bytes: int = 4 << 30
    processes: int = 512
    file_bytes: int = 1 << 30


@frozen
class SandboxRequest(Record):
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
class Handoff(Record):
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
class SandboxLaunch(Record):
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
    """None when the sandbox works on this machine, else one line saying why not.

    It must answer within 20 s: past that, the kernel interrupts it and counts the sandbox as
    not working here, naming the probe (one that raises or answers anything else is named too).
    """

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
class Sandbox(Record):
    """A way to contain an agent and the code it wrote: ``launch(request)`` once ``probe()`` said it works."""

    name: str
    description: str
    probe: SandboxProbe = field(eq=False, repr=False)
    launch: SandboxLauncher = field(eq=False, repr=False)
    python: AgentPython = field(eq=False, repr=False)
    #: Warm resources for up to ``workers`` programs at once while the ``with`` block runs, which the
    #: processes forked inside it inherit (the kernel serves a certification's trials and a regrade's
    #: gradings this way); ``launch`` works without it, and where it is not inherited. Making,
    #: entering and leaving it each have ``CERTLAB_PLUGIN_LOAD_S``: past that, or raising, it is
    #: one line naming it, exit 3.
    serve: SandboxServe | None = field(default=None, eq=False, repr=False)
    #: What every launch shows of the host, before a request's own work copy, runtime and readable files.
    visible: SandboxVisible | None = field(default=None, eq=False, repr=False)
    #: Where ``--sandbox auto`` tries it: sandboxes with an order are probed lowest first (then by name) and
    #: the first that works is used; None: chosen only by its name.
    auto_order: int | None = field(default=None, validator=attrs.validators.optional(attrs.validators.instance_of(int)))
    #: One line on what makes ``probe`` pass where it does not (what to install), shown when it fails.
    install_hint: str = field(default="", validator=attrs.validators.instance_of(str))
    #: False: the uncontained choice, which only the name ``none`` may take; chosen, the program runs as the user
    #: (``launch`` is never called), and ``auto`` never takes it (``auto_order`` must be None).
    contains: bool = field(default=True, validator=attrs.validators.instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if (self.name == UNCONTAINED) == self.contains:
            raise ValueError(
                f"sandbox {self.name!r}: only the sandbox named {UNCONTAINED!r} does not contain, and it never does"
            )
        if not self.contains and self.auto_order is not None:
            raise ValueError(f"sandbox {self.name!r}: a sandbox that does not contain takes no part in auto")


@frozen
class Containment(Record):
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
