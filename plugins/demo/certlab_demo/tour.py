"""The tour: each chapter runs real certlab commands on built-in agents and checks what they print."""

from __future__ import annotations

import importlib
import json
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from attrs import frozen

from certlab_core.plugin import UsageError

# Each chapter module defines ``steps(context) -> list[DemoStep]``; a capability adds its chapter here.
CHAPTERS: tuple[str, ...] = (
    "certlab_demo.chapter_certify",
    "certlab_demo.chapter_acceptance",
    "certlab_demo.chapter_gate",
    "certlab_demo.chapter_diagnosis",
)

# The example files the chapters read, shipped in this distribution (package data): the same files as the
# repository's examples/ folder, so the demo runs from an installed wheel as from a checkout.
EXAMPLES = Path(__file__).resolve().parent / "examples"


class DemoFailed(Exception):
    """A demo step did not hold: what was expected and what happened."""


@frozen
class DemoContext:
    """Where the demo works, and where its example files are (``examples/...`` paths resolve under ``examples``)."""

    workdir: Path
    examples: Path = EXAMPLES

    def example(self, relpath: str) -> Path:
        """The shipped example file ``relpath`` (written as in the repository: ``examples/retry/a_vs_b.yaml``)."""
        path = self.examples / Path(relpath).relative_to("examples")
        if not path.is_file():
            raise UsageError(f"{path}: the demo's example file is missing; reinstall certlab-demo")
        return path


@frozen
class CommandRun:
    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str


@frozen
class DemoStep:
    """One checked step: ``run`` returns a one-line finding or raises DemoFailed."""

    title: str
    run: Callable[[DemoContext], str]


def certlab(*args: str, expect_exit: int | Sequence[int] = 0, show: bool = True) -> CommandRun:
    """Run ``certlab ARGS`` as a real process, print the command, and check its exit code."""
    argv = (sys.executable, "-m", "certlab_core.cli", *args)
    if show:
        print(f"  $ certlab {' '.join(shlex.quote(a) for a in args)}", flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    allowed = (expect_exit,) if isinstance(expect_exit, int) else tuple(expect_exit)
    if done.returncode not in allowed:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise DemoFailed(f"certlab {args[0]} exited {done.returncode}, expected {allowed}: {' | '.join(tail)}")
    return CommandRun(argv, done.returncode, done.stdout, done.stderr)


def read_bundle_summary(folder: Path) -> dict[str, int]:
    return dict(json.loads((folder / "bundle.json").read_text())["summary"])


def run_demo(keep: Path | None = None) -> int:
    """Run every chapter's steps in order; print each finding; return the exit code."""
    workdir = keep or Path(tempfile.mkdtemp(prefix="certlab-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    context = DemoContext(workdir=workdir)
    steps: list[DemoStep] = []
    for chapter in CHAPTERS:
        steps.extend(importlib.import_module(chapter).steps(context))
    print(f"demo: {len(steps)} steps, working in {workdir}", flush=True)
    started = time.monotonic()
    for number, step in enumerate(steps, 1):
        print(f"\n[{number}/{len(steps)}] {step.title}", flush=True)
        step_started = time.monotonic()
        try:
            finding = step.run(context)
        except DemoFailed as failure:
            print(f"demo: step {number} did not hold: {failure}", flush=True)
            return 1
        print(f"  held: {finding} ({time.monotonic() - step_started:.1f} s)", flush=True)
    print(f"\ndemo: all {len(steps)} steps held ({time.monotonic() - started:.1f} s)", flush=True)
    return 0
