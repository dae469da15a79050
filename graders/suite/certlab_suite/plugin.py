"""The suite grader: the visible tests, run in a copy of the work tree, counted through pytest's own hooks.

The tests run in a fresh process forked from this grader's process; their outcomes come
back over a pipe, collected by a pytest plugin object from ``pytest_collection_finish``
and ``pytest_runtest_logreport``. Nothing is read from pytest's output, so code that
prints success, exits at import time or collects nothing cannot pass.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from certlab_core.plugin import (
    ForkedCallError,
    Grader,
    GradeRequest,
    GradeResult,
    active_containment,
    call_in_fork,
    copy_tree,
    hookimpl,
    run_contained,
)
from certlab_core.plugin import failure_modes as fm
from certlab_suite import visible_suite
from certlab_suite.visible_suite import run_pytest

NAME = "suite"
SUITE_TIMEOUT_S = 120.0
LOG_TAIL_BYTES = 4096
# Variables the contained test process must not inherit: the lab's own, and those that steer Python or pytest.
DROPPED_PREFIXES = ("CERTLAB_", "PYTHON", "PYTEST_")


def _tail(path: Path, tree: Path) -> str:
    """The end of pytest's log, with the copy's temporary location replaced by ``<work>``."""
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-LOG_TAIL_BYTES:].decode("utf-8", "replace").replace(str(tree), "<work>")


def judge(run: dict[str, Any], expected: tuple[str, ...], log_tail: str) -> GradeResult:
    """Decide from the hooks' report alone: every expected test ran and passed."""
    outcomes: dict[str, str] = run["outcomes"]
    if run["strays"]:
        return GradeResult(
            NAME,
            False,
            fm.SUITE_NOT_RUN,
            "the code under test was imported from outside the copy: " + "; ".join(run["strays"]),
        )
    discovering = not expected
    wanted = tuple(run["collected"]) if discovering else expected
    if not wanted:
        return GradeResult(NAME, False, fm.SUITE_NOT_RUN, "no test was collected\n" + log_tail)
    ran = [nodeid for nodeid in wanted if nodeid in outcomes]
    if not ran:
        return GradeResult(NAME, False, fm.SUITE_NOT_RUN, f"none of the {len(wanted)} expected tests ran\n" + log_tail)
    failing = [nodeid for nodeid in wanted if outcomes.get(nodeid) != "passed"]
    data = {"collected": list(run["collected"])} if discovering else {}
    if failing or run["collect_errors"]:
        shown = ", ".join(failing[:8]) + (f" (+{len(failing) - 8} more)" if len(failing) > 8 else "")
        detail = f"{len(wanted) - len(failing)}/{len(wanted)} expected tests passed"
        if failing:
            detail += f"; not passed: {shown}"
        if run["collect_errors"]:
            detail += f"; collection errors in {', '.join(run['collect_errors'][:3])}"
        return GradeResult(NAME, False, fm.SUITE_FAILED, detail + "\n" + log_tail, data)
    return GradeResult(NAME, True, None, f"{len(wanted)}/{len(wanted)} expected tests passed", data)


def grade(request: GradeRequest) -> GradeResult:
    """Copy the work tree, run its visible tests in a fresh process, and count the results."""
    scratch = Path(tempfile.mkdtemp(prefix="certlab-suite-"))
    try:
        tree = scratch / "tree"
        copy_tree(Path(request.workdir), tree)
        log = scratch / "pytest.log"
        if active_containment().contained:
            return _grade_contained(request, scratch, tree, log)
        try:
            run = call_in_fork(
                run_pytest,
                str(tree),
                tuple(request.family.test_paths),
                tuple(request.family.module_names),
                str(log),
                timeout=SUITE_TIMEOUT_S,
            )
        except ForkedCallError as error:
            return GradeResult(
                NAME,
                False,
                fm.SUITE_NOT_RUN,
                f"the test process did not report: {error.failure.summary}\n" + _tail(log, tree),
            )
        return judge(run, tuple(request.expected_tests), _tail(log, tree))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _grade_contained(request: GradeRequest, scratch: Path, tree: Path, log: Path) -> GradeResult:
    """The agent's code under the run's sandbox: a new interpreter of the agent environment, out of the key's reach.

    The test process is this distribution's ``visible_suite.py``, copied into the scratch
    folder (certlab's installation is hidden inside); it writes the hooks' report as JSON.
    """
    containment = active_containment()
    runner = scratch / "runner"
    runner.mkdir()
    script = runner / "visible_suite.py"
    shutil.copyfile(visible_suite.__file__, script)
    result = scratch / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_PREFIXES)}
    argv = [
        containment.python(),
        "-I",
        str(script),
        str(result),
        str(tree),
        str(log),
        ",".join(request.family.module_names),
        *request.family.test_paths,
    ]
    ran = run_contained(
        argv, cwd=str(tree), env=env, timeout_s=SUITE_TIMEOUT_S, containment=containment, writable=(str(scratch),)
    )
    try:
        report = json.loads(result.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        how = ran.detail or f"exit status {ran.exit_code}"
        return GradeResult(
            NAME, False, fm.SUITE_NOT_RUN, f"the test process did not report ({how})\n" + _tail(log, tree)
        )
    return judge(report, tuple(request.expected_tests), _tail(log, tree))


@hookimpl
def certlab_graders() -> list[Grader]:
    return [
        Grader(
            name=NAME,
            order=20,
            description="every visible test collected on the clean tree ran and passed, counted by pytest's hooks",
            grade=grade,
            failure_modes=(fm.SUITE_FAILED, fm.SUITE_NOT_RUN),
        )
    ]
