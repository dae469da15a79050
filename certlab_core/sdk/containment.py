"""Containment in force, a contained program's environment, runtime folders."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from certlab_core.plugin.types.sandbox import PASSED_VARIABLES, Containment
from certlab_core.sdk.processes import at_exit
from certlab_core.sdk.trees import MadeFolder, make_temp_folder, remove_made


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
RUNTIME_PREFIX = "certlab-runtime-"
#: The bytes a socket's path may take: AF_UNIX's ``sun_path`` holds 108 with the terminating NUL.
SOCKET_PATH_MAX = 107
#: The most a socket below the runtime folder adds to its path: a folder of its own and the socket's name
#: ("/certlab-slots-XXXXXXXX/slot-12.sock", "/certlab-relay-XXXXXXXX/65535.sock").
SOCKET_ROOM = 40


def _runtime_base() -> str | None:
    """The folder the runtime folder is made in: ``XDG_RUNTIME_DIR``, else the temp folder, else ``/tmp``,
    the first that exists and is short enough for a socket's path below it (None: the temp folder).

    A long ``TMPDIR`` (a CI workspace's) made every socket certlab binds there too long for AF_UNIX
    (``OSError: AF_UNIX path too long``), and each trial through a model relay broke.
    """
    room = SOCKET_PATH_MAX - len(f"/{RUNTIME_PREFIX}XXXXXXXX") - SOCKET_ROOM
    for base in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir(), "/tmp"):
        if base and os.path.isabs(base) and len(base) <= room and os.path.isdir(base):
            return base
    return None


def runtime_folder() -> Path:
    """certlab's own folder for its sockets and keepers, made once per process tree, never bound into a sandbox.

    It is made (mode 0700) under ``XDG_RUNTIME_DIR`` or the temp folder (:func:`_runtime_base`);
    whatever ``TMPDIR`` points at, no sandbox shows it, because a sandbox binds only the folders a
    request names, and refuses one that holds this folder. ``choose_containment`` makes it in the
    process that forks the trials, so that they share it; its maker removes it at exit, by the
    handle it made.
    """
    made = made_runtime_folder()
    if made is not None:
        return made
    handle = make_temp_folder(RUNTIME_PREFIX, _runtime_base())
    _runtime[:] = [handle]
    at_exit(lambda: remove_made(handle))  # a forked child that made it removes it too, before its os._exit
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
