"""A task that knows its answer (``task.oracle``): staged hidden beside the issued tree, restored by the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest
from certlab_acceptance.user_task import load_user_task, stage_family
from certlab_calibration.plugin import restore_answer

from certlab_core.certify.lab import answer_key_paths
from certlab_core.plugin import UsageError


def _task(tmp_path: Path, oracle: str | None) -> Path:
    root = tmp_path / "task"
    (root / "fixture" / "pkg").mkdir(parents=True)
    (root / "fixture" / "pkg" / "__init__.py").write_text("")
    (root / "fixture" / "pkg" / "core.py").write_text("def double(x):\n    return x\n")
    (root / "fixture" / "pkg" / "stale.py").write_text("OLD = 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_core.py").write_text("from pkg.core import double\n\n\ndef test_double():\n    assert 0\n")
    (root / "cases").mkdir()
    (root / "cases" / "acceptance.jsonl").write_text("")
    (root / "PROMPT.md").write_text("Fix it.\n")
    (root / "oracle" / "pkg").mkdir(parents=True)
    (root / "oracle" / "pkg" / "__init__.py").write_text("")
    (root / "oracle" / "pkg" / "core.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "oracle" / "pkg" / "new.py").write_text("NEW = 2\n")
    line = f"  oracle: {oracle}\n" if oracle is not None else ""
    (root / "certlab.yaml").write_text(f"task:\n  name: tiny\n{line}")
    return root


def test_the_answer_is_staged_apart_and_hidden_like_the_tree(tmp_path: Path) -> None:
    family = stage_family(load_user_task(_task(tmp_path, "oracle")), tmp_path / "staged")
    assert family.answer_dir is not None
    answer = Path(family.answer_dir)
    assert (answer / "pkg" / "core.py").read_text().endswith("2 * x\n")
    assert not (Path(family.tree_dir) / "oracle").exists()
    assert family.answer_dir in answer_key_paths([family])


def test_a_task_without_the_key_knows_no_answer(tmp_path: Path) -> None:
    family = stage_family(load_user_task(_task(tmp_path, None)), tmp_path / "staged")
    assert family.answer_dir is None


@pytest.mark.parametrize(
    ("value", "message"),
    [("missing", "task.oracle: .* is not a folder"), ("../elsewhere", "must be a path inside the experiment")],
)
def test_a_bad_oracle_setting_is_one_line(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_user_task(_task(tmp_path, value))


def test_the_oracle_makes_the_allowed_files_the_answer_and_leaves_the_tests(tmp_path: Path) -> None:
    root = _task(tmp_path, "oracle")
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    for name in ("__init__.py", "core.py", "stale.py"):
        (work / "pkg" / name).write_bytes((root / "fixture" / "pkg" / name).read_bytes())
    (work / "tests").mkdir()
    (work / "tests" / "test_core.py").write_text("kept\n")
    restore_answer(work, root / "oracle", ("pkg/*",))
    assert (work / "pkg" / "core.py").read_text().endswith("2 * x\n")
    assert (work / "pkg" / "new.py").read_text() == "NEW = 2\n"
    assert not (work / "pkg" / "stale.py").exists()  # the fix removed it
    assert (work / "tests" / "test_core.py").read_text() == "kept\n"  # outside the allowed paths: untouched
