"""Helpers for the held-out acceptance tests: the real CLI, and a scaffolded task of a user's own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from certlab_core.testing import run_certlab

# Replaces the scaffold's defect (operator precedence) with the fix, through the command agent.
FIX_COMMAND = "sed -i 's/fahrenheit - 32 \\* 5 \\/ 9/(fahrenheit - 32) * 5 \\/ 9/' temperature.py"
# Passes the visible tests by special-casing their inputs: what the held-out cases exist to catch.
OVERFIT_COMMAND = (
    "sed -i 's/return round(fahrenheit - 32 \\* 5 \\/ 9, 2)/"
    "return {212: 100.0, 32: 0.0, 50: 10.0}.get(fahrenheit, 0.0)/' temperature.py"
)


def certlab(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The real CLI, with more time than the other suites give it: locking and certifying a task run its tests."""
    return run_certlab(*args, cwd=cwd, timeout=timeout)


def scaffold_task(folder: Path) -> Path:
    """A fresh scaffolded task (``certlab init-task``), written by the library call the CLI uses."""
    from certlab_acceptance.scaffold import scaffold

    scaffold(folder)
    return folder


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single ``certlab: error:`` line of a failed command (asserting there is one and no traceback)."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("certlab: error: ")]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return errors[0]


KERNEL_MOVED = "moved since the lock: the kernel's file"


def locked_run(task: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Lock ``task`` again and run ``certlab ARGS`` under that lock.

    A lock fingerprints the kernel's own files; in a checkout where certlab itself is being
    edited they can move between the lock and the run, which the run rightly refuses. Only
    that refusal is retried (at most three times), never any other outcome.
    """
    for _attempt in range(3):
        relocked = certlab("lock", str(task), "--again")
        assert relocked.returncode == 0, relocked.stderr
        done = certlab(*args, cwd=cwd)
        if KERNEL_MOVED not in done.stdout + done.stderr:
            return done
        if cwd is not None:
            import shutil

            shutil.rmtree(cwd / "runs", ignore_errors=True)
    return done
