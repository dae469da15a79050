"""A fresh virtual environment beside certlab, installed without network from the local wheelhouse, built once per run.

certlab's own distributions are installed in it from wheels through certlab-all, as a user installs
them from PyPI, together with the third party's family from ``examples/thirdparty_family``
built into a wheel here. The wheelhouse is the one ``make wheelhouse`` prepares (its path
in ``CERTLAB_WHEELHOUSE``, which ``make unit`` exports). Without that variable (pytest run
by hand) the wheelhouse is built the same way in this run's temporary folder, offline
from ``.wheelhouse`` when an earlier ``make`` left one; if it cannot be built the tests
that need it are skipped with the reason, except under ``CI=true``, where they fail.

The environment is built once per test run, even across pytest-xdist workers: the first
worker builds it under a file lock and records the outcome, the others reuse it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "thirdparty_family"
WHEELHOUSE_ENV = "CERTLAB_WHEELHOUSE"
EXAMPLE_DISTRIBUTION = "certlab-family-roman"
ALL_DISTRIBUTION = "certlab-all"

# Build outputs and caches that never belong in a wheel's source.
IGNORED_NAMES = frozenset(
    {"build", "dist", "__pycache__", ".git", ".venv", ".wheelhouse", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
)
# Variables of the calling environment that would make the fresh one less fresh. PYTHONDONTWRITEBYTECODE goes
# too: the wheels are installed without compiling, so the first command compiles what it imports, once.
LEAKY_VARIABLES = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONDONTWRITEBYTECODE",
    "VIRTUAL_ENV",
    "CERTLAB_PLUGINS",
    "PYTEST_ADDOPTS",
)


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def editable_distributions() -> list[tuple[str, Path]]:
    """(distribution name, folder) of the kernel and every plugin in requirements-dev.txt."""
    found = []
    for line in (REPO / "requirements-dev.txt").read_text().splitlines():
        if line.startswith("-e "):
            folder = (REPO / line[3:].strip()).resolve()
            project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
            found.append((str(project["name"]), folder))
    return found


TEST_SUPPORT = "Private :: Do Not Upload"  # the classifier of a distribution that only the tests and tools use


def is_test_support(folder: Path) -> bool:
    """Whether the distribution in ``folder`` is test support: in requirements-dev.txt, never in certlab-all."""
    return TEST_SUPPORT in tomllib.loads((folder / "pyproject.toml").read_text())["project"].get("classifiers", [])


def example_version() -> str:
    return str(tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]["version"])


def copy_distribution(source: Path, destination: Path, keep_tests: bool = False) -> Path:
    """A clean copy of a distribution's folder: no build outputs, no caches, no nested distribution.

    Builds run on copies so that setuptools' ``build/`` (which keeps deleted files) never
    leaks into a wheel, and so that two builds of the same checkout cannot collide.
    """

    def ignored(folder: str, names: list[str]) -> set[str]:
        here = Path(folder)
        skip = {n for n in names if n in IGNORED_NAMES or n.endswith(".egg-info")}
        if here == source and not keep_tests:
            skip |= {"tests"} & set(names)
        if here != source:
            skip |= {n for n in names if (here / n / "pyproject.toml").is_file()}
        return skip

    shutil.copytree(source, destination, ignore=ignored)
    return destination


def pip_env(use_config: bool) -> dict[str, str]:
    """The environment pip runs in; without ``use_config`` no pip configuration or PIP_ variable applies."""
    env = {k: v for k, v in os.environ.items() if use_config or not k.startswith("PIP_")}
    env["PIP_NO_INPUT"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if not use_config:
        env["PIP_CONFIG_FILE"] = os.devnull
    return env


def run(argv: Sequence[str], timeout: float = 600, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def last_error(text: str) -> str:
    """pip's last ``ERROR:`` line (its conclusion), else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["no output"])[-1]


@dataclass(frozen=True)
class FreshEnv:
    """The fresh environment: its interpreter, the third party's built wheel, and how long each step took."""

    home: Path
    venv: Path
    wheelhouse: Path
    example_wheel: Path
    example_copy: Path
    distributions: tuple[tuple[str, Path], ...]  # (name, folder) of certlab's distributions installed in it
    timings: Mapping[str, float] = field(default_factory=dict)

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def env(self, layers: Sequence[Path] = (), plugins: str | None = None) -> dict[str, str]:
        """The caller's environment made fresh: the venv first on PATH, ``layers`` on PYTHONPATH."""
        env = {k: v for k, v in os.environ.items() if k not in LEAKY_VARIABLES and not k.startswith("PYTEST_")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        if layers:
            env["PYTHONPATH"] = os.pathsep.join(str(layer) for layer in layers)
        if plugins is not None:
            env["CERTLAB_PLUGINS"] = plugins
        return env

    def certlab(
        self, *args: str, layers: Sequence[Path] = (), plugins: str | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The fresh environment's own ``certlab`` console script."""
        return run([str(self.bin / "certlab"), *args], env=self.env(layers, plugins), cwd=cwd or self.home)


# One interpreter imports setuptools' PEP 517 backend or pip once, then forks a child per job, all at once: each
# child starts from that interpreter as a process of its own would (nothing built or installed yet), without paying
# the import again (pip's install command: 0.3 CPU-s a process; the backend: 0.15).
FORKED_JOBS = """
import json, os, sys, traceback
kind, common, jobs = json.loads(sys.argv[1])
if kind == "build":
    from setuptools import build_meta
    def work(source):
        os.chdir(source)
        build_meta.build_wheel(common)
        return 0
else:
    from pip._internal.cli.main import main
    def work(argv):
        return main([*common, *argv])
children = []
for job in jobs:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = work(job) or 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    children.append(pid)
sys.exit(1 if [pid for pid in children if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0] else 0)
"""


def _forked(
    kind: str, common: object, jobs: Sequence[object], env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run FORKED_JOBS: ``build`` (each job a source folder) or ``install`` (each job pip's arguments)."""
    return run([sys.executable, "-c", FORKED_JOBS, json.dumps([kind, common, jobs])], env=dict(env))


def build_wheels(destination: Path, sources: Sequence[Path]) -> None:
    """Build each source folder into a wheel in ``destination`` with setuptools' PEP 517 backend, all at once.

    The backend pip calls for these sources, without pip's own start-up; a process a source (forked), as the
    backend keeps state.
    """
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    done = _forked("build", str(destination), [str(source) for source in sources], env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def install_layers(layers: Mapping[Path, Sequence[Path]]) -> None:
    """Install each layer's wheels with pip (no dependencies, no index) into that layer's folder, all at once.

    ``FreshEnv.env(layers=[...])`` puts layers on PYTHONPATH: their distributions are real
    ones with real entry points, seen only by the commands given that layer, so the shared
    site-packages stays as it was. The wheels are pure Python for this same interpreter
    version, so installing them needs nothing of the fresh environment, and can happen
    while another worker is still building it. Each layer is one ``pip install --target``
    in a process of its own, forked from one that imported pip once.
    """
    pip = ["install", "-q", "--no-deps", "--no-index", "--no-compile"]
    jobs = [["--target", str(target), *map(str, wheels)] for target, wheels in layers.items()]
    done = _forked("install", pip, jobs, pip_env(use_config=False))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def build_wheelhouse(destination: Path, distributions: Sequence[tuple[str, Path]]) -> str | None:
    """Build the wheelhouse with ``pip wheel`` from clean copies, when ``make wheelhouse``'s is not given (slower
    than its ``tools/build_wheelhouse.py``, but able to take the dependencies offline from ``.wheelhouse``);
    None when built, else why not."""
    sources = destination.parent / "wheelhouse-sources"
    shutil.rmtree(sources, ignore_errors=True)
    copies = [str(copy_distribution(folder, sources / name)) for name, folder in distributions]
    attempts: list[tuple[str, list[str]]] = []
    local = REPO / ".wheelhouse"
    if (local / ".built").is_file():
        attempts.append(("offline, dependencies from .wheelhouse", ["--no-index", "--find-links", str(local)]))
    attempts.append(("with pip's configured index", []))
    failures = []
    for label, extra in attempts:
        shutil.rmtree(destination, ignore_errors=True)
        destination.mkdir(parents=True)
        pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "-w", str(destination)]
        completed = run([*pip_wheel, *extra, *copies], env=pip_env(use_config=True))
        if completed.returncode == 0:
            return None
        failures.append(f"{label}: {last_error(completed.stderr)}")
    return "could not build the wheelhouse (" + "; ".join(failures) + ")"


def _prepare(home: Path) -> dict[str, Any]:
    """Build everything in ``home``; the outcome as JSON-ready data: the paths, or a skip or error reason."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    distributions = editable_distributions()  # read once: requirements-dev.txt may change during the run
    given = os.environ.get(WHEELHOUSE_ENV, "").strip()
    if given:
        wheelhouse = Path(given)
        if not wheelhouse.is_dir():
            return {"error": f"{WHEELHOUSE_ENV}={given} is not a folder; run 'make wheelhouse'"}
    else:
        wheelhouse = home / "wheelhouse"
        reason = build_wheelhouse(wheelhouse, distributions)
        timings["wheelhouse_s"] = time.monotonic() - started
        if reason is not None:
            hint = f"; run 'make wheelhouse' and set {WHEELHOUSE_ENV} to its .wheelhouse folder"
            return {"error" if on_ci() else "skip": reason + hint}

    step = time.monotonic()
    example_copy = copy_distribution(EXAMPLE, home / "thirdparty_family", keep_tests=True)
    wheels = home / "example-wheel"
    # setuptools' PEP 517 backend, the one pip wheel calls for this source, without pip's own start-up (0.9 CPU-s).
    completed = _forked("build", str(wheels), [str(example_copy)], os.environ)
    if completed.returncode != 0:
        return {"error": f"building the wheel of examples/thirdparty_family failed: {tail(completed.stderr)}"}
    (example_wheel,) = wheels.glob("*.whl")
    # The tests run against the installed wheel: nothing of the package stays beside them.
    shutil.rmtree(example_copy / "certlab_roman")
    timings["example_wheel_s"] = time.monotonic() - step

    step = time.monotonic()
    venv = home / "venv"
    completed = run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    if completed.returncode != 0:
        return {"error": f"python -m venv failed: {tail(completed.stderr)}"}
    timings["venv_s"] = time.monotonic() - step

    step = time.monotonic()
    # certlab-all brings the kernel and every built-in plugin, as a user installs them (tests/test_dist.py).
    names = [ALL_DISTRIBUTION]
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    # No index, no pip configuration: every wheel must come from the wheelhouse or the example's build.
    options = ["-q", "--no-index", "--no-compile", "--find-links", str(wheelhouse), "--find-links", str(wheels)]
    completed = run([*pip, "install", *options, *names, EXAMPLE_DISTRIBUTION], env=pip_env(use_config=False))
    if completed.returncode != 0:
        return {
            "error": f"installing {', '.join(names)} and {EXAMPLE_DISTRIBUTION} from {wheelhouse} without network "
            f"failed (is the wheelhouse missing a plugin or a dependency? run 'make wheelhouse'): "
            f"{tail(completed.stderr)}"
        }
    timings["install_s"] = time.monotonic() - step
    timings["total_s"] = time.monotonic() - started
    return {
        "home": str(home),
        "venv": str(venv),
        "wheelhouse": str(wheelhouse),
        "example_wheel": str(example_wheel),
        "example_copy": str(example_copy),
        "distributions": [[name, str(folder)] for name, folder in distributions],
        "timings": timings,
    }


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_built: dict[str, Any] = {}


def shared_wheelhouse(factory: pytest.TempPathFactory) -> Path:
    """The wheelhouse alone: the one ``CERTLAB_WHEELHOUSE`` names, else the fresh environment's (built for it).

    A test that installs from the wheelhouse itself need not wait, under the lock, while another worker
    builds and installs the whole fresh environment: with the wheelhouse given there is nothing to build.
    """
    given = os.environ.get(WHEELHOUSE_ENV, "").strip()
    if given and Path(given).is_dir():
        return Path(given)
    return shared_fresh_env(factory).wheelhouse


def shared_fresh_env(factory: pytest.TempPathFactory) -> FreshEnv:
    """The run's fresh environment, built by whichever test (or xdist worker) asks first."""
    if "data" not in _built:
        base = factory.getbasetemp()
        root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
        home = root / "certlab-fresh-env"
        home.mkdir(exist_ok=True)
        with _locked(root / "certlab-fresh-env.lock"):
            outcome = home / "outcome.json"
            if not outcome.is_file():
                outcome.write_text(json.dumps(_prepare(home)))
            _built["data"] = json.loads(outcome.read_text())
    data = _built["data"]
    if "skip" in data:
        pytest.skip(data["skip"])
    if "error" in data:
        pytest.fail(data["error"], pytrace=False)
    return FreshEnv(
        home=Path(data["home"]),
        venv=Path(data["venv"]),
        wheelhouse=Path(data["wheelhouse"]),
        example_wheel=Path(data["example_wheel"]),
        example_copy=Path(data["example_copy"]),
        distributions=tuple((name, Path(folder)) for name, folder in data["distributions"]),
        timings=data["timings"],
    )
