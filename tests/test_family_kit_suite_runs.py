"""The family kit runs a family's visible suite as the graders do: the caller's pytest options stay out of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from certlab_core.testing.family_checks import run_suite


def test_the_kits_suite_run_ignores_the_callers_pytest_options_and_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: PYTEST_ADDOPTS reached the kit's own pytest runs. With a "-p" plugin only the outer run could import
    # (as a CI job adds one), every clean-tree and seeded-tree check of every family failed with exit 4, and a
    # --junitxml there was written by each inner run too. The graders already left both out.
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "tests" / "test_one.py").write_text("def test_one():\n    assert True\n", encoding="utf-8")
    monkeypatch.setenv("PYTEST_ADDOPTS", f"-p not_importable_here --junitxml={tmp_path / 'outer.xml'}")
    monkeypatch.setenv("PYTEST_PLUGINS", "not_importable_either")
    done = run_suite(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert not (tmp_path / "outer.xml").exists()
