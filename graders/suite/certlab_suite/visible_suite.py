"""The suite grader's test process: pytest on the copy, counted by its hooks.

Imports nothing of certlab, so that it also runs as a script (``python visible_suite.py
[--first-failure] RESULT TREE LOG MODULES TEST_PATH...``) in the agent environment inside a sandbox, where
certlab's installation is hidden; it then writes what the hooks saw as JSON to RESULT.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

FIRST_FAILURE_FLAG = "--first-failure"
OUTCOMES_ONLY_FLAG = "--outcomes-only"


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


def run_pytest(
    tree: str,
    test_paths: tuple[str, ...],
    module_names: tuple[str, ...],
    log: str,
    first_failure: bool = False,
    outcomes_only: bool = False,
) -> dict[str, Any]:
    """In the fresh test process: run pytest on the copy and report what its hooks saw.

    With ``first_failure`` the run stops at the first failing test, formats no traceback and
    does not rewrite the tests' asserts (``-x --tb=no --assert=plain``: rewriting changes what a
    failure says, never whether an assert holds): the verdict is the same, at a fraction of the cost.
    With ``outcomes_only`` every test runs, but with no traceback and no rewriting (``--tb=no
    --assert=plain``): for a caller that records each test's outcome and never what a failure said.
    """
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
        *(("-x",) if first_failure else ()),
        *(("--tb=no", "--assert=plain") if first_failure or outcomes_only else ()),
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


def main(argv: list[str]) -> int:
    """As a script: run the tests and write the hooks' report as JSON to the result file.

    ``--first-failure`` and ``--outcomes-only`` before the other arguments are ``run_pytest``'s flags.
    """
    arguments = argv[1:]
    flags: set[str] = set()
    while arguments and arguments[0] in (FIRST_FAILURE_FLAG, OUTCOMES_ONLY_FLAG):
        flags.add(arguments.pop(0))
    result, tree, log, modules, *test_paths = arguments
    report = run_pytest(
        tree,
        tuple(test_paths),
        tuple(m for m in modules.split(",") if m),
        log,
        FIRST_FAILURE_FLAG in flags,
        OUTCOMES_ONLY_FLAG in flags,
    )
    Path(result).write_text(json.dumps(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
