"""Install a requirements file, its ``-e FOLDER`` lines editable, quickly: ``python tools/install_editables.py F``.

What ``pip install --no-build-isolation -r FILE`` does, with the same setuptools backend and the
same editable wheels, less the processes: pip starts three backend processes per distribution
(does it support editables, its metadata, the wheel), each importing setuptools, about a second
of CPU each, when the builds themselves take a tenth of that. Here every editable wheel is
built in this one process, then one pip run installs them with their third-party dependencies,
and each is recorded as pip records an editable install (PEP 610's ``direct_url.json``), so
``pip list`` names its folder. pip compiles bytecode one file after another, tests included;
here it does not, and the modules that can be imported (site-packages less pip, setuptools
and test folders, and our packages in their folders) are compiled afterwards on every CPU.
Compiling on first import is not enough: with ``PYTHONDONTWRITEBYTECODE`` set (as on the
machine this was measured on) every process would compile every module it imports again.
Any other line is a plain requirement (``pytest>=8``, a wheel's path) and goes to that same
pip run; a line of pip options (``-r``, ``--index-url``) is refused. Run it with the
environment's own python, which must have setuptools 77 or later (SPDX ``license`` strings).

Exit codes: 0 installed, 2 a line or a folder it does not handle (said in one line), else pip's.
"""

from __future__ import annotations

import base64
import compileall
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

BACKEND = "setuptools.build_meta"


class Refused(Exception):
    """A requirements line or a distribution this installer does not handle."""


def requirement_lines(requirements: Path) -> tuple[list[Path], list[str]]:
    """The folders of the file's ``-e`` lines and its plain requirements; a line of pip options is refused."""
    folders: list[Path] = []
    plain: list[str] = []
    for number, line in enumerate(requirements.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if not line.startswith("-e "):
            if line.startswith("-"):
                raise Refused(
                    f"{requirements}:{number}: only '-e FOLDER' and plain requirement lines are handled here, "
                    f"not {line!r}"
                )
            # A path is taken from the file's folder, as the '-e' folders are; pip runs with another cwd.
            plain.append(str((requirements.parent / line).resolve()) if line.startswith(("./", "../")) else line)
            continue
        folder = (requirements.parent / line[3:].strip()).resolve()
        backend = _project(folder).get("build-system", {}).get("build-backend")
        if backend != BACKEND:
            raise Refused(f"{folder}: its build backend is {backend!r}; only {BACKEND} is built here")
        folders.append(folder)
    return folders, plain


def _project(folder: Path) -> dict[str, Any]:
    try:
        document: dict[str, Any] = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise Refused(f"{folder / 'pyproject.toml'}: {error}") from None
    return document


@contextlib.contextmanager
def quiet(log: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (setuptools' chatter, at the descriptor) to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("a", encoding="utf-8") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def build_wheels(folders: list[Path], out: Path, editable: bool = True) -> list[Path]:
    """One wheel per folder (PEP 660 editable ones unless told), built in this process; a failed build shows
    its log's tail."""
    import setuptools.build_meta as backend

    build = backend.build_editable if editable else backend.build_wheel
    log = out / "build.log"
    wheels = []
    here = Path.cwd()
    for folder in folders:
        os.chdir(folder)
        try:
            with quiet(log):
                wheels.append(out / build(str(out)))
        except BaseException:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:]
            print("\n".join(tail), file=sys.stderr)
            raise
        finally:
            os.chdir(here)
    return wheels


def mark_editable(wheel: Path, folder: Path) -> None:
    """Record the wheel's installed distribution as pip records ``pip install -e FOLDER`` (PEP 610), in RECORD too."""
    distribution, version = wheel.name.split("-")[:2]
    info = Path(sysconfig.get_paths()["purelib"]) / f"{distribution}-{version}.dist-info"
    data = (json.dumps({"url": folder.as_uri(), "dir_info": {"editable": True}}) + "\n").encode()
    (info / "direct_url.json").write_bytes(data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = info / "RECORD"
    name = f"{info.name}/direct_url.json"
    kept = [line for line in record.read_text(encoding="utf-8").splitlines() if not line.startswith(name + ",")]
    record.write_text("\n".join([*kept, f"{name},sha256={digest},{len(data)}"]) + "\n", encoding="utf-8")


def requirements_or_none(tool: str, path: str) -> tuple[list[Path], list[str]] | None:
    """``requirement_lines`` of ``path``, or None when it cannot be read or handled (said in one line)."""
    try:
        return requirement_lines(Path(path))
    except (OSError, Refused) as error:
        print(f"{tool}: {error}", file=sys.stderr)
        return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tools/install_editables.py REQUIREMENTS", file=sys.stderr)
        return 2
    read = requirements_or_none("install_editables", argv[0])
    if read is None:
        return 2
    folders, plain = read
    names = [str(_project(folder)["project"]["name"]) for folder in folders]
    with tempfile.TemporaryDirectory(prefix="certlab-editables-") as scratch:
        wheels = build_wheels(folders, Path(scratch))
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        installed = [name for name in names if _installed(name)]
        if installed:  # a wheel of an installed version would be skipped: a changed entry point must be seen
            subprocess.run([*pip, "uninstall", "-y", *installed], check=True)
        done = subprocess.run([*pip, "install", "--no-compile", *map(str, wheels), *plain], check=False)
        if done.returncode != 0:
            return done.returncode
        for wheel, folder in zip(wheels, folders, strict=True):
            mark_editable(wheel, folder)
    compile_bytecode(folders)
    return 0


# Folders no import reaches: test suites, the task families' seeded trees and the demo's examples, pip itself.
NOT_IMPORTED = re.compile(r"/(tests?|examples|fixture|family|pip|setuptools|pkg_resources|_distutils_hack)/")


def compile_bytecode(folders: list[Path]) -> None:
    """Compile what the environment can import, in parallel; a file that does not compile is left, as pip does."""
    roots = [Path(sysconfig.get_paths()["purelib"])]
    for folder in folders:
        setuptools_options = _project(folder).get("tool", {}).get("setuptools", {})
        packages = setuptools_options.get("packages", [])
        if isinstance(packages, dict):
            packages = packages.get("find", {}).get("include", [])
        roots += sorted({folder / str(name).split(".")[0] for name in packages})
    for root in roots:
        if root.is_dir():
            compileall.compile_dir(str(root), quiet=2, workers=0, rx=NOT_IMPORTED)


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
