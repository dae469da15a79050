"""A task's own environment: a project's declared dependency installed once at build time, from a local wheelhouse.

The project is a tiny one made here, whose code imports ``tinydep``, a distribution found nowhere
but in a wheel this test writes into a wheelhouse of its own (beside pytest's wheels from
``CERTLAB_WHEELHOUSE`` or ``.wheelhouse``): so the suite can pass only in the task's environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PYTEST_WHEELS = ("pytest-", "iniconfig-", "packaging-", "pluggy-", "pygments-")
FIXED_TOP = "from tinydep import ordered\n\n\ndef top(values, n):\n    return ordered(values)[::-1][:n]\n"
BUGGY_TOP = "from tinydep import ordered\n\n\ndef top(values, n):\n    return ordered(values)[:n]\n"
VISIBLE = "from sorty import top\n\n\ndef test_one():\n    assert top([3], 1) == [3]\n"
HELD_OUT = VISIBLE + "\n\ndef test_largest_first():\n    assert top([1, 3, 2], 2) == [3, 2]\n"


def certlab(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _source_wheelhouse() -> Path | None:
    for candidate in (os.environ.get("CERTLAB_WHEELHOUSE", ""), str(REPO / ".wheelhouse")):
        if candidate and any(Path(candidate).glob("pytest-*.whl")):
            return Path(candidate)
    return None


def write_wheel(folder: Path) -> None:
    """``tinydep`` 1.0 as a wheel: one module with ``ordered(values)``."""
    with zipfile.ZipFile(folder / "tinydep-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("tinydep.py", "def ordered(values):\n    return sorted(values)\n")
        wheel.writestr("tinydep-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n")
        wheel.writestr(
            "tinydep-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(
            "tinydep-1.0.dist-info/RECORD",
            "tinydep.py,,\ntinydep-1.0.dist-info/METADATA,,\ntinydep-1.0.dist-info/WHEEL,,\ntinydep-1.0.dist-info/RECORD,,\n",
        )


@pytest.fixture(scope="module")
def environments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A wheelhouse of pytest's wheels and tinydep's, and a task-environments folder of this test's own."""
    source = _source_wheelhouse()
    if source is None:
        pytest.skip("no local wheelhouse with pytest (make wheelhouse, or set CERTLAB_WHEELHOUSE)")
    base = tmp_path_factory.mktemp("task-env")
    wheelhouse = base / "wheels"
    wheelhouse.mkdir()
    for wheel in source.glob("*.whl"):
        if wheel.name.lower().startswith(PYTEST_WHEELS):
            (wheelhouse / wheel.name).symlink_to(wheel)
    write_wheel(wheelhouse)
    saved = {k: os.environ.get(k) for k in ("CERTLAB_WHEELHOUSE", "CERTLAB_TASK_ENVIRONMENTS")}
    os.environ["CERTLAB_WHEELHOUSE"] = str(wheelhouse)
    os.environ["CERTLAB_TASK_ENVIRONMENTS"] = str(base / "envs")
    try:
        yield base / "envs"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _git(repo: Path, *argv: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    return subprocess.run(["git", *argv], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def _project(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "sorty"
    (repo / "tests").mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[project]\nname = "sorty"\nversion = "1"\ndependencies = ["tinydep"]\n')
    (repo / "sorty.py").write_text(BUGGY_TOP)
    (repo / "tests" / "test_sorty.py").write_text(VISIBLE)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    (repo / "sorty.py").write_text(FIXED_TOP)
    (repo / "tests" / "test_sorty.py").write_text(HELD_OUT)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "top gives the largest first")
    return repo, _git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def built(environments: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    repo, commit = _project(tmp_path_factory.mktemp("repo"))
    out = tmp_path_factory.mktemp("tasks") / "sorty"
    started = time.monotonic()
    done = certlab("task", "from-commit", str(repo), commit, "--out", str(out))
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return out, seconds


def _environment_folder(task: Path, environments: Path) -> Path:
    config = yaml.safe_load((task / "certlab.yaml").read_text())
    return environments / str(config["task"]["environment"])


def test_the_declared_dependency_is_installed_once_at_build_time_outside_the_task(
    built: tuple[Path, float], environments: Path
) -> None:
    task, seconds = built
    assert seconds <= 60, f"building the task with its environment took {seconds:.1f} s"
    environment = json.loads((task / "cases" / "source.json").read_text())["environment"]
    assert environment["kind"] == "task-environment"
    assert "tinydep" in environment["requirements"] and "pytest" in environment["requirements"]
    assert "tinydep==1.0" in environment["installed"]
    folder = _environment_folder(task, environments)
    assert (folder / "bin" / "python").exists() and not str(folder).startswith(str(task))
    from certlab_core.sdk.workcopy import environment_sha256

    assert environment["content_sha256"] == environment_sha256(folder)
    held = json.loads((task / "cases" / "acceptance.jsonl").read_text().splitlines()[0])
    assert held["environment"] == environment["sha256"]  # the record, so the environment, is in the taskset's hash


def test_the_suite_and_the_held_out_test_run_in_the_task_environment_and_fail_without_it(
    built: tuple[Path, float], tmp_path: Path
) -> None:
    task, _seconds = built
    proven = certlab("prove", "--task", str(task), "--fixed", str(task / "oracle"))
    assert proven.returncode == 0, proven.stdout + proven.stderr
    assert "prove: holds" in proven.stdout
    # the same task without its environment: the project's dependency cannot be imported, so nothing passes
    bare = tmp_path / "bare"
    subprocess.run(["cp", "-r", str(task), str(bare)], check=True)
    config = yaml.safe_load((bare / "certlab.yaml").read_text())
    del config["task"]["environment"]
    (bare / "certlab.yaml").write_text(yaml.safe_dump(config))
    without = certlab("prove", "--task", str(bare), "--fixed", str(bare / "oracle"))
    assert without.returncode == 3
    assert "the fixed tree does not pass grader suite" in without.stderr  # tinydep cannot be imported


def test_prove_grades_a_task_with_an_environment_on_warm_servers_in_it(
    built: tuple[Path, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    # certlab prove started a fresh interpreter of the task's environment for each grading (the tree as issued, the
    # fixed tree, each mutant), where certify's harness gradings fork from a warm server in it.
    from certlab_suite import plugin as suite

    from certlab_core._runtime.registry import discover
    from certlab_core.certify import proving

    task, _seconds = built
    servers_while_proving: list[int] = []
    proved = proving.prove

    def watched(*args: Any, **kwargs: Any) -> Any:
        servers_while_proving.append(len(suite._servers))
        return proved(*args, **kwargs)

    monkeypatch.setattr(proving, "prove", watched)
    report = proving.prove_families(discover(), (), (str(task),), 2, fixed=str(task / "oracle"))
    assert report.problems == () and len(report.lines) == 2, report
    assert report.lines[0].endswith("the fixture as issued fails its grading")
    assert report.lines[1].endswith("the fixed tree passes 1 visible tests and the held-out cases")
    assert servers_while_proving == [2]  # one per worker, in the task's environment
    assert suite._servers == []  # and none is left once it is done


def _bwrap_reason() -> str | None:
    from certlab_core.plugin.types.sandbox import Sandbox
    from certlab_core.sdk.services import installed_plugins

    sandbox = installed_plugins().all("sandboxes").get("bwrap")
    return "no bwrap sandbox" if not isinstance(sandbox, Sandbox) else sandbox.probe()


@pytest.mark.skipif(_bwrap_reason() is not None, reason="bubblewrap cannot make a sandbox here")
def test_in_the_sandbox_the_task_environment_runs_and_is_read_only(
    built: tuple[Path, float], environments: Path
) -> None:
    from certlab_core.sdk.command import run_contained
    from certlab_core.sdk.services import choose_containment

    task, _seconds = built
    python = str(_environment_folder(task, environments) / "bin" / "python")
    containment = choose_containment("bwrap", [str(task)], lambda _line: None)
    work = task.parent / "work"
    work.mkdir(exist_ok=True)
    script = (
        "import sys, tinydep, pathlib\n"
        "print('imported', tinydep.ordered([2, 1]))\n"
        "try:\n    (pathlib.Path(sys.prefix) / 'planted').write_text('x')\n    print('written')\n"
        "except OSError as error:\n    print('refused', error.errno)\n"
    )
    out = work / "out.txt"
    with out.open("wb") as handle:
        ran = run_contained(
            [python, "-I", "-c", script], cwd=str(work), env={"PATH": os.defpath}, timeout_s=60,
            stdout=handle, stderr=handle, containment=containment,
        )  # fmt: skip
    text = out.read_text()
    assert ran.status == "completed", (ran, text)
    assert "imported [1, 2]" in text and "refused 30" in text, text  # EROFS: a read-only bind
    assert not (_environment_folder(task, environments) / "planted").exists()


def test_a_changed_environment_makes_the_regrade_stale(
    built: tuple[Path, float], environments: Path, tmp_path: Path
) -> None:
    task, _seconds = built
    out = tmp_path / "cert"
    fix = "sed -i 's/\\[:n\\]/[::-1][:n]/' sorty.py"
    done = certlab("certify", "--task", str(task), "--agent", "command", "--agent-arg", fix, "--out", str(out))
    assert done.returncode == 0, done.stderr
    (trial,) = json.loads((out / "bundle.json").read_text())["trials"]
    assert (trial["verdict"], trial["failure_mode"]) == ("fixed", None), trial["grades"]
    assert certlab("regrade", str(out), "--task", str(task)).returncode == 0
    site = next((_environment_folder(task, environments) / "lib").glob("python*/site-packages"))
    planted = site / "planted_by_the_test.py"
    planted.write_text("x = 1\n")
    try:
        stale = certlab("regrade", str(out), "--task", str(task))
        assert stale.returncode == 2, stale.stdout + stale.stderr
        assert "stale" in stale.stdout + stale.stderr
        refused = certlab("certify", "--task", str(task), "--agent", "null", "--out", str(tmp_path / "again"))
        assert refused.returncode == 4 and "changed since the task was built" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        planted.unlink()


def test_editing_the_oracle_makes_the_lock_and_the_regrade_stale(built: tuple[Path, float], tmp_path: Path) -> None:
    task, _seconds = built
    copy = tmp_path / "task"
    subprocess.run(["cp", "-r", str(task), str(copy)], check=True)
    assert certlab("lock", str(copy)).returncode == 0
    out = tmp_path / "cert"
    assert certlab("certify", "--task", str(copy), "--agent", "null", "--out", str(out)).returncode == 0
    assert certlab("regrade", str(out), "--task", str(copy)).returncode == 0
    oracle = copy / "oracle" / "sorty.py"
    oracle.write_text(oracle.read_text() + "\n# edited\n")
    checked = certlab("lock", str(copy), "--check")
    assert checked.returncode == 3 and "moved: the oracle's answer sorty.py changed" in checked.stdout
    stale = certlab("regrade", str(out), "--task", str(copy))
    assert stale.returncode in (2, 3), stale.stdout + stale.stderr
    assert "stale" in stale.stdout + stale.stderr or "oracle" in stale.stdout + stale.stderr


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({"requirements.txt": b"-e .\n"}, "requirements.txt:1: '-e .' is not a plain requirement"),
        ({"requirements.txt": b"ok\nhttps://example.invalid/x.whl\n"}, "requirements.txt:2:"),
        ({"pyproject.toml": b"[project\n"}, "pyproject.toml is not valid TOML"),
        ({"pyproject.toml": b"[project]\ndependencies = 'tinydep'\n"}, "are not a list of requirements"),
    ],
)
def test_a_declared_setup_that_is_not_plain_requirements_is_one_line(files: dict[str, bytes], said: str) -> None:
    from certlab_acceptance.task_env import EnvironmentRefused, declared_requirements

    with pytest.raises(EnvironmentRefused, match=said.replace(".", r"\.").replace("'", "'")):
        declared_requirements(files, "commit x")


def test_what_a_project_declares_is_read_from_pyproject_and_requirements_files() -> None:
    from certlab_acceptance.task_env import declared_requirements

    pyproject = b'[project]\ndependencies = ["a>=1"]\n[project.optional-dependencies]\ntest = ["b"]\ndocs = ["c"]\n'
    files = {"pyproject.toml": pyproject, "requirements-dev.txt": b"# tools\nd==2 ; python_version >= '3'\n\n"}
    assert declared_requirements(files, "commit x") == ["a>=1", "b", "d==2 ; python_version >= '3'"]
    assert declared_requirements({"tests/requirements.txt": b"e\n"}, "commit x") == []  # the top of the tree only


@pytest.mark.skipif(_bwrap_reason() is not None, reason="bubblewrap cannot make a sandbox here")
def test_the_agent_runs_the_projects_tests_in_the_task_environment_in_the_sandbox(
    built: tuple[Path, float], tmp_path: Path
) -> None:
    """The agent's own ``python`` is the task environment's: it can import the dependency and run the tests."""
    task, _seconds = built
    fix = "python -m pytest -q tests -p no:cacheprovider && sed -i 's/\\[:n\\]/[::-1][:n]/' sorty.py"
    out = tmp_path / "cert"
    done = certlab(
        *("certify", "--task", str(task), "--agent", "command", "--agent-arg", fix),
        *("--sandbox", "bwrap", "--out", str(out)),
    )
    assert done.returncode == 0, done.stderr
    (trial,) = json.loads((out / "bundle.json").read_text())["trials"]
    assert (trial["verdict"], trial["failure_mode"]) == ("fixed", None), (trial["grades"], trial["output_tail"])
