"""What of the host an allow-list sandbox shows: system, minimal /etc, runtimes.

The sandbox starts from an empty root. :func:`system_arguments` gives bwrap the system's
read-only folders (``/usr``, ``/bin``, ``/sbin``, ``/lib*``, as folders or as the symlinks
they are) and the few entries of ``/etc`` a program needs (name service, certificates,
time zone, the loader's cache, ``alternatives/``), never a credential. :func:`resolve`
finds what one program needs beyond that, wherever it is installed: the resolved file, a
script's ``#!`` interpreter (``/usr/bin/env NAME`` looked up on the program's ``PATH``),
the venv that holds it with the base interpreter's prefix that its ``pyvenv.cfg`` names,
the whole ``node_modules`` root of an npm CLI, and otherwise the install prefix of a
``bin/`` folder. What cannot be shown is a :class:`Unresolvable` problem, never a wider view.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

from attrs import frozen

#: The read-only system folders every sandbox holds (a symlink, such as ``/bin -> usr/bin``, is kept a symlink).
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: The entries of ``/etc`` a program may need: users and name service, certificates, time zone, the loader, locale.
ETC_ENTRIES = (
    "passwd",
    "group",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "gai.conf",
    "protocols",
    "services",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "localtime",
    "timezone",
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "os-release",
    "debian_version",
    "mime.types",
    "magic",
    "inputrc",
    "terminfo",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
)
SHEBANG_BYTES = 256
CONFIG_BYTES = 64 << 10
INTERPRETER_DEPTH = 4


class Unresolvable(OSError):
    """A program whose runtime the sandbox cannot show: one line saying which path, and what to do."""


@frozen
class Runtime:
    """What a program needs beyond the system: host paths to show read-only, and site-packages to cover."""

    shown: tuple[str, ...]
    covered: tuple[str, ...] = ()


def _inside(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


@lru_cache(maxsize=1)
def _system_folders() -> tuple[str, ...]:
    return tuple(os.path.realpath(f) for f in SYSTEM_FOLDERS if os.path.exists(f))


def is_system(path: str) -> bool:
    """Whether ``path`` (resolved) is in the system's read-only folders, which every sandbox holds."""
    return _inside(os.path.realpath(path), _system_folders())


@lru_cache(maxsize=1)
def system_arguments() -> tuple[str, ...]:
    """bwrap's arguments for the system folders and the minimal ``/etc`` (computed once per process)."""
    argv: list[str] = []
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            argv += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            argv += ["--ro-bind", folder, folder]
    argv += ["--dir", "/etc"]
    for name in ETC_ENTRIES:
        path = f"/etc/{name}"
        if os.path.lexists(path) and os.path.exists(path):
            argv += ["--ro-bind", path, path]
    return tuple(argv)


def system_paths() -> tuple[str, ...]:
    """The host paths :func:`system_arguments` shows (for a check of what a sandbox can read)."""
    shown = [f for f in SYSTEM_FOLDERS if os.path.isdir(f) and not os.path.islink(f)]
    shown += [f"/etc/{name}" for name in ETC_ENTRIES if os.path.exists(f"/etc/{name}")]
    return tuple(shown)


def _head(path: Path, limit: int) -> bytes:
    """The first ``limit`` bytes of a regular file; nothing for a FIFO, a device or what cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def _venv_root(path: Path) -> Path | None:
    for parent in path.parents:
        if (parent / "pyvenv.cfg").is_file():
            return parent
    return None


def _venv_base(venv: Path) -> tuple[Path | None, bool]:
    """The base interpreter's prefix a venv names (``home`` in ``pyvenv.cfg``), and whether it sees its packages."""
    home: Path | None = None
    system_site = False
    lines = _head(venv / "pyvenv.cfg", CONFIG_BYTES).decode("utf-8", "replace").splitlines()
    for line in lines:
        key, _, value = line.partition("=")
        key, value = key.strip().lower(), value.strip()
        if key == "home" and value:
            folder = Path(os.path.realpath(value))
            home = folder.parent if folder.name in ("bin", "Scripts") else folder
        elif key == "include-system-site-packages":
            system_site = value.lower() == "true"
    return home, system_site


def _site_packages(prefix: Path) -> list[str]:
    """A base interpreter's own package folders: hidden from a venv without system packages (a copy of certlab)."""
    found: list[str] = []
    for lib in ("lib", "lib64"):
        try:
            entries = sorted((prefix / lib).iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("python") and entry.is_dir() and not entry.is_symlink():
                for name in ("site-packages", "dist-packages"):
                    if (entry / name).is_dir():
                        found.append(str(entry / name))
    return found


def _node_modules_root(path: Path) -> Path | None:
    root: Path | None = None
    for parent in path.parents:
        if parent.name == "node_modules":
            root = parent
    return root


def _shebang(path: Path) -> list[str]:
    head = _head(path, SHEBANG_BYTES)
    if not head.startswith(b"#!"):
        return []
    return head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()


def find_program(program: str, env: Mapping[str, str]) -> str | None:
    """``program`` as the sandbox's ``execvp`` would find it on the environment's ``PATH`` (None: not found)."""
    if "/" in program:
        return program if os.path.exists(program) else None
    return shutil.which(program, path=env.get("PATH", os.defpath))


def resolve(
    program: str, env: Mapping[str, str], hidden: Iterable[str] = (), inherited: Iterable[str] = (), depth: int = 0
) -> Runtime:
    """What ``program`` needs shown besides the system, or Unresolvable naming what cannot be shown.

    ``hidden`` are folders nothing is shown from (certlab's installation, an answer key): a
    program inside one cannot run contained, and one inside a shown folder is covered.
    ``inherited`` are the harness's own folders (its HOME, its temp folder): never shown
    whole, so a program's install prefix that would hold one is narrowed to the program.
    """
    hidden = tuple(os.path.realpath(h) for h in hidden)
    inherited = tuple(os.path.realpath(i) for i in inherited)
    found = find_program(program, env)
    if found is None:
        raise Unresolvable(f"the program {program} is not found on the agent's PATH")
    real = Path(os.path.realpath(found))
    shown: list[str] = []
    covered: list[str] = []
    # A venv's interpreter is a link to its base one: the venv is the one it is called in (its pyvenv.cfg beside
    # the link's folder), else the one holding the resolved file. Read from the resolved file alone, the venv's
    # packages were not shown and the base prefix's were, whole.
    venv = _venv_root(Path(os.path.abspath(found))) or _venv_root(real)
    own_file = os.path.abspath(found) == str(real)  # called by its own path, not through a link
    # A file of its own in a hidden folder (a checkout), called by its path or by a link there (the demo's script
    # agent, package data linked to the checkout's examples/): shown alone, at both; its #! decides.
    alone = _inside(str(real), hidden) and (own_file or _inside(found, hidden))
    if alone:
        shown.extend(dict.fromkeys((str(real), found)))
    elif not is_system(str(real)):
        modules = _node_modules_root(real)
        if venv is not None and _may_show(venv, inherited):
            shown.append(str(venv))
            base, system_site = _venv_base(venv)
            if base is not None and not is_system(str(base)) and _may_show(base, inherited):
                shown.append(str(base))
            if base is not None and not system_site:
                covered.extend(_site_packages(base))
        elif modules is not None and _may_show(modules, inherited):
            shown.append(str(modules))
        elif real.parent.name in ("bin", "sbin") and _may_show(real.parent.parent, inherited):
            shown.append(str(real.parent.parent))
        else:
            shown.append(str(real))
        if found != str(real) and not is_system(found) and not _inside(found, shown):
            shown.append(found)  # the symlink the program is called by
    for place in shown:
        if _inside(place, hidden) and place != str(real) and not (alone and place == found):
            raise Unresolvable(
                f"the program {program} is in {place}, which is hidden from the agent (certlab's installation or "
                "an answer key): install it elsewhere"
            )
    covered.extend(h for h in hidden if _inside(h, shown))
    words = _shebang(real)
    if words and depth < INTERPRETER_DEPTH:
        interpreter = words[0]
        if os.path.basename(interpreter) == "env" and len(words) > 1:
            names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            interpreter = names[0] if names else interpreter
        inner = resolve(interpreter, env, hidden, inherited, depth + 1)
        shown.extend(inner.shown)
        covered.extend(inner.covered)
    return Runtime(tuple(dict.fromkeys(shown)), tuple(dict.fromkeys(covered)))


def outermost(paths: Iterable[str]) -> list[str]:
    """``paths`` without any that lies inside another (binding both would bind into a read-only bind)."""
    unique = list(dict.fromkeys(paths))
    return [p for p in unique if not any(q != p and _inside(p, [q]) for q in unique)]


def _may_show(folder: Path, inherited: tuple[str, ...]) -> bool:
    """Whether ``folder`` may be shown whole: not ``/``, not a home, and holding none of the harness's folders."""
    text = str(folder)
    if text in ("/", "") or folder.parent in (Path("/home"), Path("/")):
        return False
    return not any(_inside(i, [text]) for i in inherited)
