"""Test support: what several tests only read, made once per run (xdist too)."""

from __future__ import annotations

import fcntl
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from certlab_core.testing import run_certlab

REPO = Path(__file__).resolve().parents[3]


def made_once_per_run(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Path]) -> Path:
    """What ``make(folder)`` returns, made once per test run even across pytest-xdist workers.

    The first worker to ask makes it in a new folder of the run's base folder (the parent of each worker's),
    under a lock, and records where; every later one waits for the lock and reuses it. The tests only read
    what it made (they copy it to change it), as they did when each worker made its own.
    """
    base = factory.getbasetemp()
    shared = (base.parent if base.name.startswith("popen-gw") else base) / "made-once"
    shared.mkdir(exist_ok=True)
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = shared / f"{name}.json"
        if record.exists():
            return Path(json.loads(record.read_text(encoding="utf-8"))["path"])
        made = make(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=shared)))  # a failed attempt's folder is left
        record.write_text(json.dumps({"path": str(made)}), encoding="utf-8")
        return made


def _run_a_vs_b(folder: Path) -> Path:
    done = run_certlab("run", str(REPO / "examples/retry/a_vs_b.yaml"), "--out", str(folder / "runs"), "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr  # the story's confirmatory run blocks
    return Path(next(line[len("run: ") :] for line in done.stdout.splitlines() if line.startswith("run: ")))


def a_vs_b_store(factory: pytest.TempPathFactory) -> Path:
    """The store of ``certlab run examples/retry/a_vs_b.yaml`` (the gate story's confirmatory run, exit 1).

    Its tests only read it; it is alone in its ``runs`` folder (the store's parent).
    """
    return made_once_per_run(factory, "a-vs-b", _run_a_vs_b)
