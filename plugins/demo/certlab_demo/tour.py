"""The tour: each chapter runs real commands and checks what they print."""

from __future__ import annotations

import importlib
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextvars import ContextVar
from pathlib import Path

from attrs import frozen

from certlab_core.plugin import UsageError
from certlab_core.sdk.trees import make_temp_folder, remove_made

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
    """One checked step: ``run`` returns a one-line finding or raises DemoFailed.

    ``key`` names the step for later steps; ``after`` names the earlier steps whose results it reads:
    it starts once they held, and may run beside any other step.
    """

    title: str
    run: Callable[[DemoContext], str]
    key: str = ""
    after: tuple[str, ...] = ()


# What the running step says: kept with it while steps run at once, so each step's lines print together, in order.
_OUTPUT: ContextVar[list[str] | None] = ContextVar("certlab_demo_output", default=None)


def say(line: str) -> None:
    """Print a line of the current step (kept for the runner to print in step order when a step runs it)."""
    lines = _OUTPUT.get()
    if lines is None:
        print(line, flush=True)
    else:
        lines.append(line)


def certlab(*args: str, expect_exit: int | Sequence[int] = 0, show: bool = True) -> CommandRun:
    """Run ``certlab ARGS`` as a real process, print the command, and check its exit code."""
    argv = (sys.executable, "-m", "certlab_core.cli", *args)
    if show:
        say(f"  $ certlab {' '.join(shlex.quote(a) for a in args)}")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    allowed = (expect_exit,) if isinstance(expect_exit, int) else tuple(expect_exit)
    if done.returncode not in allowed:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise DemoFailed(f"certlab {args[0]} exited {done.returncode}, expected {allowed}: {' | '.join(tail)}")
    return CommandRun(argv, done.returncode, done.stdout, done.stderr)


def read_bundle_summary(folder: Path) -> dict[str, int]:
    return dict(json.loads((folder / "bundle.json").read_text())["summary"])


def default_jobs() -> int:
    """How many steps run at once by default: one per CPU this process may use."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def check_order(steps: Sequence[DemoStep]) -> None:
    """Each step waits only for steps before it, so the printed order is one the steps could have run in."""
    seen: set[str] = set()
    for step in steps:
        unknown = [key for key in step.after if key not in seen]
        if unknown:
            raise ValueError(f"demo step {step.title!r} waits for {unknown}, which no earlier step is")
        if step.key:
            if step.key in seen:
                raise ValueError(f"two demo steps are called {step.key!r}")
            seen.add(step.key)


@frozen
class _Outcome:
    lines: list[str]
    seconds: float
    finding: str = ""
    failure: DemoFailed | None = None
    error: Exception | None = None

    @property
    def held(self) -> bool:
        return self.failure is None and self.error is None


def _run_step(step: DemoStep, context: DemoContext) -> _Outcome:
    """Run one step, keeping what it says (``say``) for the runner to print in step order."""
    lines: list[str] = []
    token = _OUTPUT.set(lines)
    started = time.monotonic()
    try:
        finding = step.run(context)
    except DemoFailed as failure:
        return _Outcome(lines, time.monotonic() - started, failure=failure)
    except Exception as error:  # re-raised by the runner, in step order
        return _Outcome(lines, time.monotonic() - started, error=error)
    finally:
        _OUTPUT.reset(token)
    return _Outcome(lines, time.monotonic() - started, finding=finding)


def _dependents(steps: Sequence[DemoStep]) -> list[int]:
    """For each step, how many later steps wait for it, directly or not: the longer chains start first."""
    waiting: list[set[int]] = [set() for _ in steps]
    index = {step.key: number for number, step in enumerate(steps) if step.key}
    for number in range(len(steps) - 1, -1, -1):
        for key in steps[number].after:
            waiting[index[key]] |= {number} | waiting[number]
    return [len(found) for found in waiting]


def run_demo(keep: Path | None = None, jobs: int | None = None) -> int:
    """Run every chapter's steps (``run_steps``) in ``keep`` or a new temporary folder; return the exit code."""

    def tour_in(workdir: Path) -> int:
        context = DemoContext(workdir=workdir)
        steps: list[DemoStep] = []
        for chapter in CHAPTERS:
            steps.extend(importlib.import_module(chapter).steps(context))
        return run_steps(steps, context, jobs if jobs is not None else default_jobs())

    return in_working_folder(keep, tour_in)


def make_keep_folder(keep: Path) -> None:
    """Make the ``--keep`` folder, which must be new or empty: the tour writes a score of files and folders
    into it (``--keep /`` wrote them into the root folder, and a folder of the user's got them mixed in)."""
    try:
        keep.mkdir(parents=True, exist_ok=True)
        with os.scandir(keep) as entries:
            holds = next(entries, None) is not None
    except OSError as error:
        said = f"--keep {keep}: cannot use the folder ({error.strerror}); give a new or empty folder"
        raise UsageError(said) from None
    if holds:
        raise UsageError(f"--keep {keep} already holds files; give a new or empty folder for the tour")


def in_working_folder(keep: Path | None, run: Callable[[Path], int]) -> int:
    """``run`` in ``keep`` (made if missing, always kept), or in a new temporary folder that is removed when
    ``run`` returns 0 or is interrupted, and kept, and named, for a look when it does not hold (or raises)."""
    if keep is not None:  # absolute: a step's agent runs in a work copy elsewhere, and reads its script from here
        make_keep_folder(keep)
        return run(keep.absolute())
    made = make_temp_folder("certlab-demo-")
    workdir = made.as_path
    code = 1
    try:
        code = run(workdir)
    except KeyboardInterrupt:  # stopped, not failed: nothing in it to look at
        remove_made(made)
        print(f"demo: interrupted; removed its working folder {workdir}", flush=True)
        raise
    finally:
        if code == 0:
            remove_made(made)
            print(f"demo: removed its working folder {workdir} (--keep DIR keeps one)", flush=True)
        elif workdir.exists():
            print(f"demo: its working folder is kept for a look: {workdir}", flush=True)
    return code


def run_steps(steps: Sequence[DemoStep], context: DemoContext, jobs: int) -> int:
    """Run the steps, up to ``jobs`` at once, each once the steps it reads have held; print each step's commands
    and finding in step order, as a run one step after another would, and stop at the first that did not hold."""
    check_order(steps)
    jobs = max(1, jobs)
    print(f"demo: {len(steps)} steps, {jobs} at a time, working in {context.workdir}", flush=True)
    started, cpu_started = time.monotonic(), _children_cpu()
    index = {step.key: number for number, step in enumerate(steps) if step.key}
    # One at a time runs in step order; more at once start the steps with the most waiting on them first.
    rank = _dependents(steps) if jobs > 1 else [0] * len(steps)
    pending = list(range(len(steps)))
    outcomes: dict[int, _Outcome] = {}
    running: dict[Future[_Outcome], int] = {}
    first_failed = len(steps)
    printed = 0
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="certlab-demo") as pool:
        while printed < len(steps):
            ready = [
                number
                for number in pending
                if number < first_failed
                and all(index[key] in outcomes and outcomes[index[key]].held for key in steps[number].after)
            ]
            for number in sorted(ready, key=lambda n: (-rank[n], n))[: jobs - len(running)]:
                pending.remove(number)
                running[pool.submit(_run_step, steps[number], context)] = number
            if not running:
                break  # nothing can run: only steps after a failure are left
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                number = running.pop(future)
                outcomes[number] = future.result()
                if not outcomes[number].held:
                    first_failed = min(first_failed, number)
            while printed in outcomes:
                outcome = outcomes[printed]
                print(f"\n[{printed + 1}/{len(steps)}] {steps[printed].title}", flush=True)
                for line in outcome.lines:
                    print(line, flush=True)
                if outcome.error is not None:
                    raise outcome.error
                if outcome.failure is not None:
                    print(f"demo: step {printed + 1} did not hold: {outcome.failure}", flush=True)
                    return 1
                print(f"  held: {outcome.finding} ({outcome.seconds:.1f} s)", flush=True)
                printed += 1
    wall, cpu = time.monotonic() - started, _children_cpu() - cpu_started
    print(f"\ndemo: all {len(steps)} steps held ({wall:.1f} s, {cpu:.1f} CPU-s)", flush=True)
    return 0


def _children_cpu() -> float:
    """CPU seconds of the commands the demo ran (every one has ended)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
