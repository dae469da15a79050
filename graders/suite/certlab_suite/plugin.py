"""The suite grader: the visible tests, run in a copy of the work tree, counted through pytest's own hooks.

The tests run in a fresh process forked from this grader's process; their outcomes come
back over a pipe, collected by a pytest plugin object from ``pytest_collection_finish``
and ``pytest_runtest_logreport``. Nothing is read from pytest's output, so code that
prints success, exits at import time or collects nothing cannot pass.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from certlab_core.plugin import ForkedCallError, Grader, GradeRequest, GradeResult, call_in_fork, copy_tree, hookimpl
from certlab_core.plugin import failure_modes as fm

NAME = "suite"
SUITE_TIMEOUT_S = 120.0
LOG_TAIL_BYTES = 4096


class OutcomeCollector:
    """A pytest plugin object that records collected node ids and each test's outcome."""

    def __init__(self) -> None:
        self.collected: list[str] = []
        self.outcomes: dict[str, str] = {}
        self.collect_errors: list[str] = []

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collect_errors.append(str(report.nodeid))

    def pytest_collection_finish(self, session: Any) -> None:
        self.collected = [item.nodeid for item in session.items]

    def pytest_runtest_logreport(self, report: Any) -> None:
        nodeid = str(report.nodeid)
        previous = self.outcomes.get(nodeid)
        if report.when == "call":
            if previous != "failed":
                self.outcomes[nodeid] = str(report.outcome)
        elif report.failed:  # an error in setup or teardown fails the test
            self.outcomes[nodeid] = "failed"
        elif report.when == "setup" and report.skipped:
            self.outcomes[nodeid] = "skipped"


def _run_pytest(tree: str, test_paths: tuple[str, ...], module_names: tuple[str, ...], log: str) -> dict[str, Any]:
    """In the fresh test process: run pytest on the copy and report what its hooks saw."""
    import pytest

    os.chdir(tree)
    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ.pop("PYTEST_PLUGINS", None)
    sys.path.insert(0, tree)
    for name in module_names:  # the parent never imports code under test; make sure of it
        if name in sys.modules:
            raise RuntimeError(f"the module {name} was already imported before the tests ran")
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    ini = Path(log).with_name("pytest.ini")
    ini.write_text("[pytest]\n", encoding="utf-8")
    collector = OutcomeCollector()
    args = [
        *test_paths,
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        str(ini),
        "--rootdir",
        tree,
    ]
    exit_code = pytest.main(args, plugins=[collector])
    strays: list[str] = []
    for name in module_names:
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) if module is not None else None
        if origin and not os.path.realpath(origin).startswith(os.path.realpath(tree) + os.sep):
            strays.append(f"{name} from {origin}")
    return {
        "exit_code": int(exit_code),
        "collected": collector.collected,
        "outcomes": collector.outcomes,
        "collect_errors": collector.collect_errors,
        "strays": strays,
    }


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
        try:
            run = call_in_fork(
                _run_pytest,
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
