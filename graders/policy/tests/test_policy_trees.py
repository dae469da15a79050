"""The policy grader on a work copy past its totals: failed without reading it, never with RecursionError."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from certlab_policy.plugin import grade, special_files

from certlab_core._runtime.registry import discover
from certlab_core.plugin.types.grader import GradeRequest
from certlab_core.sdk import trees
from certlab_core.sdk.workcopy import materialise

FAMILY = discover(only=("intervals",)).get("task_families", "intervals")


def nest(root: Path, levels: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.mkfifo("pipe", dir_fd=fd)  # deep down, where the old walk never got
    os.close(fd)


def test_a_work_copy_1100_levels_deep_fails_as_oversized_without_recursion(tmp_path: Path) -> None:
    made = trees.make_temp_folder("policy-", tmp_path)
    try:
        work = made.as_path / "work"
        issued = materialise(FAMILY, FAMILY.defects[0], work)
        nest(work, 1_100)
        result = grade(GradeRequest(workdir=str(work), family=FAMILY, defect=FAMILY.defects[0], issued=issued))
        assert (result.passed, result.failure_mode) == (False, "policy-oversized-change"), result
        assert result.detail.startswith("the work copy is past its caps: a path 65 levels deep"), result.detail
    finally:
        gone = trees.remove_made(made)
        if not gone:  # never leave a deep tree to pytest's own clean-up, which recurses
            subprocess.run(["rm", "-rf", "--one-file-system", made.path], check=False)
        assert gone


def test_special_files_are_found_at_any_depth_within_the_caps(tmp_path: Path) -> None:
    nest(tmp_path, 60)
    assert special_files(tmp_path) == ["d/" * 60 + "pipe (a FIFO)"]
