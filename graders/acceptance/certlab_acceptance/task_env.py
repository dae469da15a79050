"""A task's own environment: its dependencies and pytest, in a venv made once.

``certlab task from-commit`` reads what the project declares (``pyproject.toml``'s
``[project] dependencies`` and its ``test``/``tests``/``testing`` extras, and the plain
requirement lines of ``requirements*.txt``), and, when it declares anything, installs it with
pytest into a virtual environment of its own, once, from the package index or, when
``CERTLAB_WHEELHOUSE`` names a folder of wheels, from that folder alone (``--no-index``). The
environment lives in certlab's cache (``task_environments_dir()/<id>``, beside the agent
environment), never in the task folder, which no sandbox shows; its id is a hash of the
interpreter's version and the requirements, so tasks of one project share it. Every trial
reuses it offline: the graders run its interpreter (``TaskFamily.environment_dir``), which the
sandbox shows read-only like the agent environment. Nothing is installed during a trial. Its
content hash (``environment_sha256``) is in the task's record, so in the taskset's hash.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from attrs import frozen

from certlab_core.plugin import UsageError
from certlab_core.sdk.containment import task_environments_dir
from certlab_core.sdk.workcopy import environment_sha256

WHEELHOUSE_VARIABLE = "CERTLAB_WHEELHOUSE"
MARKER = ".certlab-task-env"
TEST_EXTRAS = ("test", "tests", "testing")
INSTALL_TIMEOUT_S = 600.0
MAX_SOURCE_BYTES = 1 << 20
REQUIREMENT = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._, -]+\])?"
    r"(\s*(===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+(\s*,\s*(===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+)*)?"
    r"(\s*;\s*[^#]*)?$"
)


class EnvironmentRefused(UsageError):
    """The project's declared setup cannot be installed into a task environment: one line saying why."""


def _is_requirements_file(path: str) -> bool:
    name = PurePosixPath(path).name
    return "/" not in path and name.endswith(".txt") and ("requirements" in name or name.startswith("requires"))


def _checked(requirement: str, where: str) -> str:
    text = requirement.strip()
    if not REQUIREMENT.match(text):
        raise EnvironmentRefused(
            f"{where}: {text[:80]!r} is not a plain requirement (a name, versions, a marker); "
            "certlab installs named packages only, no path, URL or pip option"
        )
    return text


def declared_requirements(files: Mapping[str, bytes], label: str) -> list[str]:
    """The requirements a project declares at the top of its tree, each checked to be a plain one."""
    found: list[str] = []
    if "pyproject.toml" in files:
        try:
            project = tomllib.loads(files["pyproject.toml"].decode("utf-8")).get("project", {})
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
            raise EnvironmentRefused(f"{label}: pyproject.toml is not valid TOML ({str(error)[:120]})") from None
        if not isinstance(project, dict):
            raise EnvironmentRefused(f"{label}: pyproject.toml's [project] is not a table")
        extras = project.get("optional-dependencies") or {}
        groups = [
            project.get("dependencies") or [],
            *((extras.get(e) or []) for e in TEST_EXTRAS if isinstance(extras, dict)),
        ]
        for group in groups:
            if not isinstance(group, list) or not all(isinstance(r, str) for r in group):
                raise EnvironmentRefused(f"{label}: pyproject.toml's dependencies are not a list of requirements")
            found.extend(_checked(r, f"{label}: pyproject.toml") for r in group)
    for path in sorted(p for p in files if _is_requirements_file(p)):
        text = files[path].decode("utf-8", "replace")
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                found.append(_checked(line, f"{label}: {path}:{number}"))
    return sorted(dict.fromkeys(found))


def _names(requirements: Sequence[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def environment_id(requirements: Sequence[str]) -> str:
    """The folder name of the environment of ``requirements`` under this interpreter: tasks that agree share it."""
    key = json.dumps({"python": sys.version.split()[0], "requirements": sorted(requirements)}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:24]


@frozen
class TaskEnvironment:
    """A task environment as made (or found made): its id, folder, what it holds and its content hash."""

    id: str
    folder: Path
    requirements: tuple[str, ...]
    installed: tuple[str, ...]
    sha256: str
    source: str
    seconds: float

    @property
    def python(self) -> str:
        return str(self.folder / "bin" / "python")


def installed_distributions(folder: Path) -> tuple[str, ...]:
    """``name==version`` of every distribution in the environment, from its ``.dist-info`` folders."""
    found: list[str] = []
    for site in sorted(folder.glob("lib/python*/site-packages")):
        for info in sorted(site.glob("*.dist-info")):
            name, _, version = info.name.removesuffix(".dist-info").partition("-")
            found.append(f"{name}=={version}")
    return tuple(found)


def _source() -> tuple[list[str], str]:
    wheelhouse = os.environ.get(WHEELHOUSE_VARIABLE, "").strip()
    if wheelhouse:
        if not Path(wheelhouse).is_dir():
            raise EnvironmentRefused(f"{WHEELHOUSE_VARIABLE}={wheelhouse} is not a folder; give a folder of wheels")
        return ["--no-index", "--find-links", wheelhouse], "a local wheelhouse (no index)"
    return [], "the package index"


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines or ["no message"])[-1][:200]


def make_environment(requirements: Sequence[str], label: str) -> TaskEnvironment:
    """The environment of ``requirements`` (with pytest unless they name it), made now when it is not yet."""
    started = time.monotonic()
    wanted = list(requirements) + ([] if "pytest" in _names(requirements) else ["pytest"])
    ident = environment_id(wanted)
    folder = task_environments_dir() / ident
    source_args, source = _source()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{ident}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / MARKER).is_file():
            if folder.exists():
                shutil.rmtree(folder)  # a build of ours that did not finish (no marker): ours to remove
            base = getattr(sys, "_base_executable", sys.executable)
            steps = [
                [base, "-m", "venv", "--without-pip", str(folder)],
                [sys.executable, "-m", "pip", "--python", str(folder / "bin" / "python"), "install", "-q",
                 "--disable-pip-version-check", "--no-input", *source_args, *wanted],
            ]  # fmt: skip
            for step in steps:
                try:
                    done = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
                except subprocess.TimeoutExpired:
                    shutil.rmtree(folder, ignore_errors=True)
                    raise EnvironmentRefused(
                        f"{label}: installing its environment took more than {INSTALL_TIMEOUT_S:g} s"
                    ) from None
                if done.returncode != 0:
                    shutil.rmtree(folder, ignore_errors=True)
                    raise EnvironmentRefused(
                        f"{label}: its declared dependencies ({', '.join(wanted)}) could not be installed from "
                        f"{source} ({_first_line(done.stderr)}); set {WHEELHOUSE_VARIABLE} to a folder holding them"
                    )
            record = {"requirements": wanted, "source": source}
            (folder / MARKER).write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
    return TaskEnvironment(
        id=ident,
        folder=folder,
        requirements=tuple(wanted),
        installed=installed_distributions(folder),
        sha256=environment_sha256(folder),
        source=source,
        seconds=round(time.monotonic() - started, 2),
    )


def check_unchanged(family_name: str, environment_dir: str, source_file: Path, cases: bytes) -> None:
    """Refuse (one line) a task environment that is not the one the task was built and sealed with.

    The held-out tests (``cases``, the locked copy) carry the sha256 of the environment record in
    ``cases/source.json``; that record carries the environment's content hash when it was built,
    which must be the hash of the folder as it is now.
    """
    from certlab_acceptance.hidden_tests import is_hidden_tests, read_tests_bytes

    where = f"task {family_name}"
    fix = "build the task again (certlab task from-commit), then lock it"
    try:
        if source_file.is_symlink() or source_file.stat().st_size > MAX_SOURCE_BYTES:
            raise ValueError("not a small regular file")
        record = json.loads(source_file.read_text(encoding="utf-8"))["environment"]
        claimed = str(record.pop("sha256"))
        recomputed = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
        built = str(record["content_sha256"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UsageError(f"{where}: {source_file} does not record the task's environment; {fix}") from None
    sealed = {t.environment for t in read_tests_bytes(cases, source_file)} if is_hidden_tests(cases) else set()
    if recomputed != claimed or sealed != {claimed}:
        raise UsageError(
            f"{where}: the environment record in {source_file} is not the one its held-out tests name; {fix}"
        )
    now = environment_sha256(Path(environment_dir))
    if now != built:
        raise UsageError(
            f"{where}: its environment {environment_dir} changed since the task was built "
            f"(content {now[:12]}, built {built[:12]}); {fix}"
        )
