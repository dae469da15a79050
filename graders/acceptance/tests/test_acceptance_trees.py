"""A user's task with a tree too deep: ``certlab lock`` refuses it in one line, where its walks recursed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from certlab_acceptance.scaffold import scaffold

from certlab_core.sdk import trees


def test_lock_refuses_a_fixture_1100_levels_deep_in_one_line(tmp_path: Path) -> None:
    made = trees.make_temp_folder("task-", tmp_path)
    try:
        task = made.as_path / "task"
        scaffold(task)
        fd = os.open(task / "fixture", os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(1_100):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(fd)
        done = subprocess.run(
            [sys.executable, "-m", "certlab_core.cli", "lock", str(task)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        errors = [line for line in done.stderr.splitlines() if line.startswith("certlab: error: ")]
        assert done.returncode == 4 and len(errors) == 1, done.stdout + done.stderr
        assert "a path 65 levels deep (the cap is 64)" in errors[0] and "Traceback" not in done.stderr, done.stderr
        assert not (task / ".certlab").exists()  # no lock was written
    finally:
        gone = trees.remove_made(made)
        if not gone:  # never leave a deep tree to pytest's own clean-up, which recurses
            subprocess.run(["rm", "-rf", "--one-file-system", made.path], check=False)
        assert gone
