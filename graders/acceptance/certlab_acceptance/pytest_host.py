"""Run pytest node ids on a copy of the code in a new interpreter, and say each.

``python -I pytest_host.py TREE REPORT NODEID...``. pytest runs in TREE with an empty
configuration of certlab's (the project's own ``pytest.ini``/``setup.cfg`` options are not read,
no plugin is autoloaded), exactly as the suite grader runs the visible tests; a ``conftest.py``
in the tree still loads. REPORT gets one JSON object: ``{"exit_code", "outcomes": {nodeid: outcome},
"collect_errors": [...]}``, outcome being passed, failed, skipped or error. This file imports
nothing of certlab: it runs in the agent environment, under the sandbox.
"""

import json
import os
import sys
from typing import Any


class Outcomes:
    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.collect_errors: list[str] = []

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or report.outcome != "passed":
            previous = self.outcomes.get(report.nodeid)
            if previous in (None, "passed"):
                failed = "error" if report.when != "call" and report.outcome == "failed" else report.outcome
                self.outcomes[report.nodeid] = failed
        elif report.when == "setup":
            self.outcomes.setdefault(report.nodeid, "passed")

    def pytest_collectreport(self, report: Any) -> None:
        if report.outcome == "failed":
            self.collect_errors.append(f"{report.nodeid or '.'}: {str(report.longrepr).strip().splitlines()[-1:]}")


def main(argv: list[str]) -> int:
    tree, report_path, nodeids = argv[1], argv[2], argv[3:]
    import pytest

    os.chdir(tree)
    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ.pop("PYTEST_PLUGINS", None)
    sys.path.insert(0, tree)
    ini = os.path.join(os.path.dirname(report_path), "certlab-empty-pytest.ini")
    with open(ini, "w", encoding="utf-8") as handle:
        handle.write("[pytest]\n")
    collector = Outcomes()
    args = [*nodeids, "-q", "-p", "no:cacheprovider", "-c", ini, "--rootdir", tree]
    exit_code = pytest.main(args, plugins=[collector])
    report = {"exit_code": int(exit_code), "outcomes": collector.outcomes, "collect_errors": collector.collect_errors}
    with open(report_path, "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
