"""The setup tools `make` runs: the editable install of a requirements file and the tests' wheelhouse.

``tools/install_editables.py`` installs requirements-demo.txt (``make demo``) and requirements-dev.txt
(``make test``): our editable wheels built in one process, one pip run for them and every other line.
``tools/build_wheelhouse.py`` builds the wheels of the same distributions in one process for the tests
that install into a fresh environment. Both replace pip runs that started three setuptools processes for
each of our distributions.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tools"


def _toy_distribution(root: Path) -> Path:
    """A distribution of one package with an entry point and a test folder, in ``root/toy``."""
    folder = root / "toy"
    (folder / "toy_edit" / "tests").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "toy-edit"\nversion = "0.1.0"\nlicense = "MIT"\n\n'
        '[project.entry-points."toy.group"]\ntoy = "toy_edit"\n\n'
        '[tool.setuptools]\npackages = ["toy_edit"]\n'
    )
    (folder / "toy_edit" / "__init__.py").write_text("VALUE = 1\n")
    (folder / "toy_edit" / "tests" / "test_toy.py").write_text("def test_toy() -> None:\n    pass\n")
    return folder


def _plain_wheel(root: Path) -> Path:
    """A wheel file of one module, ``toy_plain``, written by hand: a requirement line that is not ``-e``."""
    files = {
        "toy_plain.py": b"VALUE = 'plain'\n",
        "toy_plain-0.2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: toy-plain\nVersion: 0.2.0\n",
        "toy_plain-0.2.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([name, f"sha256={digest}", len(data)])
    writer.writerow(["toy_plain-0.2.0.dist-info/RECORD", "", ""])
    wheel = root / "toy_plain-0.2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("toy_plain-0.2.0.dist-info/RECORD", record.getvalue())
    return wheel


def _venv_beside_this_one(root: Path) -> Path:
    """A new venv without pip, seeing this environment's pip and setuptools (no index needed); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    (site,) = (root / "venv").glob("lib/python3*/site-packages")
    (site / "beside.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root / "venv" / "bin" / "python"


def test_the_setup_installs_editable_compiled_and_recorded_as_pip_does_with_the_plain_lines(tmp_path: Path) -> None:
    # make demo and make test install their requirements with tools/install_editables.py: one process builds the
    # editable wheels (pip starts three setuptools processes per distribution), one pip run installs them and the
    # file's plain requirement lines (here a wheel's path, taken from the file's folder as the -e folders are).
    folder = _toy_distribution(tmp_path)
    _plain_wheel(tmp_path)
    (tmp_path / "requirements.txt").write_text("# ours\n-e toy\n./toy_plain-0.2.0-py3-none-any.whl  # by hand\n")
    python = _venv_beside_this_one(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # as on the machine measured: nothing is compiled on import
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [str(python), str(TOOLS / "install_editables.py"), str(tmp_path / "requirements.txt")],
        capture_output=True, text=True, env=env, check=False, cwd=elsewhere,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # editable: the folder's source is imported. The install compiled the old source, and a pyc is checked by the
    # source's mtime in whole seconds and its size: the edit changes the size, so a same-second edit is seen too.
    (folder / "toy_edit" / "__init__.py").write_text("VALUE = 22\n")
    probe = (
        "import importlib.metadata as m, toy_edit, toy_plain; "
        "print(toy_edit.VALUE, toy_edit.__file__, [e.value for e in m.entry_points(group='toy.group')], "
        "toy_plain.VALUE)"
    )
    seen = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert seen.stdout.split() == ["22", str(folder / "toy_edit" / "__init__.py"), "['toy_edit']", "plain"]
    shown = subprocess.run([str(python), "-m", "pip", "show", "toy-edit"], capture_output=True, text=True, env=env)
    assert f"Editable project location: {folder}" in shown.stdout, shown.stdout + shown.stderr
    (info,) = (tmp_path / "venv").glob("lib/python3*/site-packages/toy_edit-0.1.0.dist-info")
    assert "toy_edit-0.1.0.dist-info/direct_url.json,sha256=" in (info / "RECORD").read_text()
    assert list((folder / "toy_edit" / "__pycache__").glob("__init__.cpython-*.pyc"))
    assert not (folder / "toy_edit" / "tests" / "__pycache__").exists()


def test_the_setup_refuses_a_line_of_pip_options_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("-e toy\n--index-url http://example.invalid/simple\n")
    _toy_distribution(tmp_path)
    for tool in ("install_editables", "build_wheelhouse"):
        arguments = [str(tmp_path / "requirements.txt")] + (
            [str(tmp_path / "wheels")] if tool == "build_wheelhouse" else []
        )
        done = subprocess.run(
            [sys.executable, str(TOOLS / f"{tool}.py"), *arguments], capture_output=True, text=True, check=False
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines() == [
            f"{tool}: {tmp_path / 'requirements.txt'}:2: only '-e FOLDER' and plain requirement lines are handled "
            "here, not '--index-url http://example.invalid/simple'"
        ]
        assert not (tmp_path / "wheels").exists() or not list((tmp_path / "wheels").iterdir())


def test_the_wheelhouse_wheel_built_in_one_process_holds_what_pips_holds(tmp_path: Path) -> None:
    # build_wheelhouse's wheels come from setuptools in its own process; pip wheel's from three processes each.
    sys.path.insert(0, str(TOOLS))
    try:
        from install_editables import build_wheels
    finally:
        sys.path.remove(str(TOOLS))
    folder = _toy_distribution(tmp_path)
    ours, pips = tmp_path / "ours", tmp_path / "pips"
    ours.mkdir()
    (wheel,) = build_wheels([folder], ours, editable=False)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(pips), str(folder)],
        check=True, capture_output=True,
    )  # fmt: skip
    (pip_wheel,) = pips.glob("*.whl")
    assert wheel.name == pip_wheel.name == "toy_edit-0.1.0-py3-none-any.whl"

    def contents(path: Path) -> dict[str, bytes]:
        with zipfile.ZipFile(path) as archive:
            return {name: archive.read(name) for name in archive.namelist() if not name.endswith(("RECORD", "WHEEL"))}

    assert contents(wheel) == contents(pip_wheel)
    assert "toy_edit/__init__.py" in contents(wheel) and Path.cwd() != folder
