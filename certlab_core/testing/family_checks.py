"""A task family's checks on itself: its record, seeded trees, suite and wheel.

A family proves itself here without the lab: each check builds a tree on disk and runs it
in a fresh interpreter, so nothing of the test process (its plugins, its imports) can
make a seeded tree pass or a clean one fail.

- ``build_tree`` copies the clean tree and applies a defect's seeds (optionally leaving
  some files clean, to show a two-file defect is not fixed by reverting one file);
- ``run_suite`` runs the visible suite (or a selection of it) in that tree;
- ``wheel_family_files`` builds the distribution's wheel and lists the family files it
  ships beside those it should;
- ``FamilyChecks``: subclass it with a family's facts and pytest runs the checks every
  built-in family makes on itself (its record, its seeds, its clean and seeded trees, its
  wheel).

The held-out cases are certlab-acceptance's to read and score, and so are their checks
(``certlab_acceptance.conformance.HeldOutChecks``: well-formed, held by the clean tree,
broken by each seeded tree, not shown by the visible suite).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.sdk.trees import copy_tree, walk
from certlab_core.sdk.workcopy import in_allowed_paths

SUBPROCESS_TIMEOUT_S = 60
WHEEL_TIMEOUT_S = 120


def find_defect(family: TaskFamily, defect_id: str) -> Defect:
    """The family's defect with this id (StopIteration when it has none)."""
    return next(defect for defect in family.defects if defect.id == defect_id)


def build_tree(
    family: TaskFamily, destination: Path, seeded: Defect | None = None, keep_clean: Sequence[str] = ()
) -> Path:
    """A copy of the clean tree at ``destination/tree`` with ``seeded``'s seeds applied, except on ``keep_clean``."""
    tree = destination / "tree"
    copy_tree(family.tree_dir, tree)
    for seed in seeded.seeds if seeded else ():
        if seed.path in keep_clean:
            continue
        target = tree / seed.path
        text = target.read_text()
        assert text.count(seed.find) == 1, f"{seed.path}: the seed's text is not there exactly once"
        target.write_text(text.replace(seed.find, seed.replace))
    return tree


def isolated_env(tree: Path) -> dict[str, str]:
    """This environment with ``tree`` first on the import path, no pytest plugin autoloading and no bytecode.

    The caller's own pytest options and plugins (``PYTEST_ADDOPTS``, ``PYTEST_PLUGINS``) are left
    out, as the graders leave them out: they are the outer run's, not the family's suite's.
    """
    env = {name: value for name, value in os.environ.items() if name not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env.update(PYTHONPATH=str(tree), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def run_suite(tree: Path, *selection: str) -> subprocess.CompletedProcess[str]:
    """The visible suite (``tests``, or the given files) run by a fresh pytest in ``tree``; its exit code and output."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(selection or ("tests",))]
    return subprocess.run(
        command, cwd=tree, env=isolated_env(tree), capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S
    )


def within_allowed_paths(family: TaskFamily, path: str) -> bool:
    """Whether the edit policy lets an agent change ``path`` (relative to the tree): allowed, and not a test."""
    return in_allowed_paths(path, family.allowed_paths) and not path.startswith("tests/")


def wheel_family_files(distribution_dir: Path, package: str, work_dir: Path) -> tuple[set[str], set[str]]:
    """``(shipped, expected)``: the ``PACKAGE/family/`` files in the distribution's wheel, and the files on disk.

    The wheel is built without network from a copy of ``distribution_dir`` that leaves out its
    own ``tests/`` and any build output, so only what the package declares can reach the wheel.
    """
    copy = work_dir / package.replace("_", "-")
    build_output = shutil.ignore_patterns("*.egg-info", "build", "__pycache__")

    def ignored(folder: str, names: list[str]) -> set[str]:
        own_tests = {"tests"} & set(names) if Path(folder) == distribution_dir else set()
        return set(build_output(folder, names)) | own_tests

    shutil.copytree(distribution_dir, copy, ignore=ignored)
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(work_dir), "."],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=WHEEL_TIMEOUT_S,
    )
    assert completed.returncode == 0, completed.stderr
    (wheel,) = work_dir.glob(f"{package}-*.whl")
    prefix = f"{package}/family/"
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.startswith(prefix)}
    family_dir = distribution_dir / package / "family"
    expected = {
        prefix + entry.relpath
        for entry in walk(family_dir)
        if entry.path.is_file() and "__pycache__" not in entry.relpath.split("/")
    }
    return shipped, expected


class FamilyChecks:
    """The checks a built-in family's own tests make on itself; subclass it and set the family's facts.

    ``defect_id`` is parametrized over the family's defects, so a seeded-tree check runs once
    per defect under that defect's id.
    """

    family: ClassVar[TaskFamily]
    """The family record, as the family's own plugin hook returns it."""
    family_name: ClassVar[str]
    distribution_dir: ClassVar[Path]
    """The folder holding the family distribution's ``pyproject.toml``."""
    package: ClassVar[str]
    """The import name of the family's package, which ships the family under ``family/``."""
    visible_test_files: ClassVar[tuple[str, ...]]
    """The file names in the clean tree's ``tests/`` folder."""
    allowed_paths: ClassVar[tuple[str, ...]]
    defect_classes: ClassVar[tuple[str, ...]]
    shipped_file: ClassVar[str]
    """A family file the wheel must ship (besides matching the folder on disk), e.g. a visible test."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "defect_id" in metafunc.fixturenames:
            metafunc.parametrize("defect_id", [defect.id for defect in self.family.defects])

    def test_family_record_points_at_real_files(self) -> None:
        family = self.family
        assert family.name == self.family_name
        for path in (family.tree_dir, family.prompt_file, family.cases_file):
            assert Path(path).is_absolute() and Path(path).exists()
        assert sorted(p.name for p in (Path(family.tree_dir) / "tests").iterdir()) == sorted(self.visible_test_files)
        assert family.allowed_paths == self.allowed_paths
        assert not any(pattern.startswith("tests") for pattern in family.allowed_paths)

    def test_defects_of_the_required_distinct_classes(self) -> None:
        classes = [defect.defect_class for defect in self.family.defects]
        assert sorted(classes) == sorted(self.defect_classes)
        assert len({defect.id for defect in self.family.defects}) == len(self.defect_classes)

    def test_each_seed_finds_exactly_one_place_in_the_clean_file(self, defect_id: str) -> None:
        for seed in find_defect(self.family, defect_id).seeds:
            assert (Path(self.family.tree_dir) / seed.path).read_text().count(seed.find) == 1
            assert seed.find != seed.replace

    def test_clean_tree_passes_its_suite(self, tmp_path: Path) -> None:
        completed = run_suite(build_tree(self.family, tmp_path))
        assert completed.returncode == 0, completed.stdout

    def test_seeded_tree_fails_its_suite(self, tmp_path: Path, defect_id: str) -> None:
        completed = run_suite(build_tree(self.family, tmp_path, find_defect(self.family, defect_id)))
        assert completed.returncode == 1, completed.stdout
        assert " failed" in completed.stdout

    def test_the_wheel_ships_every_family_file(self, tmp_path: Path) -> None:
        shipped, expected = wheel_family_files(self.distribution_dir, self.package, tmp_path)
        assert shipped == expected
        assert f"{self.package}/family/{self.shipped_file}" in shipped
