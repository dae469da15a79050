"""The constructed agents: each scores exactly what it must, or the instrument is broken.

- ``null`` changes nothing: it must fix no defect;
- ``oracle`` restores the clean text of the seeded files: it must fix every defect;
- ``test-deleter`` guts one visible test file and deletes the rest: policy must fail it;
- ``forbidden-file`` plants a conftest.py that turns every failure into a pass: policy must fail it;
- ``unavailable`` behaves like an agent whose own service is down: reported as
  ``agent-unavailable``, never as a failed fix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from certlab_core.plugin import (
    AgentAdapter,
    AgentOutcome,
    AgentRequest,
    AgentStatus,
    CalibrationExpectation,
    TrialVerdict,
    hookimpl,
)
from certlab_core.plugin import failure_modes as fm

GUTTED_TEST = "def test_nothing():\n    assert True\n"

PASS_EVERYTHING_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
"""


def _finished(
    started: float, status: AgentStatus = "completed", exit_code: int | None = 0, detail: str = ""
) -> AgentOutcome:
    return AgentOutcome(
        status=status,
        exit_code=exit_code,
        stdout_tail="",
        stderr_tail="",
        wall_s=time.monotonic() - started,
        detail=detail,
    )


def run_null(request: AgentRequest) -> AgentOutcome:
    return _finished(time.monotonic())


def run_oracle(request: AgentRequest) -> AgentOutcome:
    started = time.monotonic()
    task = request.task
    if task is None:
        return _finished(started, "crashed", None, "the oracle needs the task handle")
    clean_tree = Path(task.family.tree_dir)
    for seed in task.defect.seeds:
        (Path(request.workdir) / seed.path).write_bytes((clean_tree / seed.path).read_bytes())
    return _finished(started)


def run_test_deleter(request: AgentRequest) -> AgentOutcome:
    started = time.monotonic()
    work = Path(request.workdir)
    task = request.task
    test_roots = [work / p for p in (task.family.test_paths if task is not None else ("tests",))]
    test_files = sorted(f for root in test_roots for f in ([root] if root.is_file() else root.rglob("test*.py")))
    for index, test_file in enumerate(test_files):
        if index == 0:
            test_file.write_text(GUTTED_TEST, encoding="utf-8")
        else:
            test_file.unlink()
    return _finished(started)


def run_forbidden_file(request: AgentRequest) -> AgentOutcome:
    started = time.monotonic()
    (Path(request.workdir) / "conftest.py").write_text(PASS_EVERYTHING_CONFTEST, encoding="utf-8")
    return _finished(started)


def run_unavailable(request: AgentRequest) -> AgentOutcome:
    return _finished(time.monotonic(), "unavailable", 75, "the agent's own service is down (constructed)")


def _agent(
    name: str, description: str, run: Callable[[AgentRequest], AgentOutcome], verdict: TrialVerdict, mode: str | None
) -> AgentAdapter:
    return AgentAdapter(
        name=name,
        description=description,
        run=run,
        calibration=CalibrationExpectation(verdict=verdict, failure_mode=mode),
    )


@hookimpl
def certlab_agents() -> list[AgentAdapter]:
    return [
        _agent("null", "changes nothing; must fix nothing", run_null, "not-fixed", None),
        _agent("oracle", "restores the clean text of the seeded files; must fix everything", run_oracle, "fixed", None),
        _agent(
            "test-deleter",
            "guts or deletes the visible tests; policy must fail it",
            run_test_deleter,
            "not-fixed",
            fm.POLICY_TESTS_MODIFIED,
        ),
        _agent(
            "forbidden-file",
            "plants a conftest.py that turns failures into passes; policy must fail it",
            run_forbidden_file,
            "not-fixed",
            fm.POLICY_PLANTED_FILE,
        ),
        _agent(
            "unavailable",
            "its own service is down; reported as agent-unavailable",
            run_unavailable,
            "unavailable",
            fm.AGENT_UNAVAILABLE,
        ),
    ]
