"""The suite grader against hostile code: results come from pytest's hooks, never from what the code says."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import pytest
from certlab_suite.plugin import grade

from certlab_core._runtime.registry import discover
from certlab_core.plugin.types.grader import GradeRequest
from certlab_core.sdk.workcopy import materialise

FAMILY = discover(only=("intervals",)).get("task_families", "intervals")


def expected_tests(tmp_path: Path) -> tuple[str, ...]:
    work = tmp_path / "clean"
    issued = materialise(FAMILY, None, work)
    result = grade(GradeRequest(workdir=str(work), family=FAMILY, defect=FAMILY.defects[0], issued=issued))
    assert result.passed, result.detail
    return tuple(result.data["collected"])


def graded_with(tmp_path: Path, prefix: str, expected: tuple[str, ...] = ()) -> tuple[bool, str | None, str]:
    expected = expected or expected_tests(tmp_path)
    work = tmp_path / "work"
    issued = materialise(FAMILY, None, work)
    module = work / "intervals.py"
    module.write_text(prefix + module.read_text())
    result = grade(
        GradeRequest(workdir=str(work), family=FAMILY, defect=FAMILY.defects[0], issued=issued, expected_tests=expected)
    )
    return result.passed, result.failure_mode, result.detail


def test_the_clean_tree_collects_and_passes(tmp_path: Path) -> None:
    assert len(expected_tests(tmp_path)) >= 10


def test_the_seeded_tree_fails(tmp_path: Path) -> None:
    expected = expected_tests(tmp_path)
    work = tmp_path / "seeded"
    issued = materialise(FAMILY, FAMILY.defects[0], work)
    result = grade(
        GradeRequest(workdir=str(work), family=FAMILY, defect=FAMILY.defects[0], issued=issued, expected_tests=expected)
    )
    assert not result.passed and result.failure_mode == "suite-failed"
    assert "expected tests passed" in result.detail


@pytest.mark.parametrize(
    "prefix",
    [
        "import os\nos._exit(0)\n",
        "raise SystemExit(0)\n",
        "print('25 passed in 0.01s')\nimport os\nos._exit(0)\n",
        "import pytest\npytest.skip('nothing to see', allow_module_level=True)\n",
        "import pytest\npytest.exit('all good', returncode=0)\n",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    ],
    ids=["os-exit", "system-exit", "claims-success", "skip-module", "pytest-exit", "kill-self"],
)
def test_hostile_code_at_import_cannot_pass(tmp_path: Path, prefix: str) -> None:
    passed, mode, detail = graded_with(tmp_path, prefix)
    assert not passed, detail
    assert mode in ("suite-not-run", "suite-failed")


def test_the_module_must_come_from_the_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = expected_tests(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "intervals.py").write_text("def length(i):\n    return 0\n")
    monkeypatch.syspath_prepend(str(elsewhere))
    import intervals  # noqa: F401  (the grader's process now holds a foreign copy)

    try:
        passed, mode, detail = graded_with(tmp_path, "", expected)
    finally:
        sys.modules.pop("intervals", None)
    assert not passed and mode == "suite-not-run" and "already imported" in detail


def test_asked_for_the_first_failure_alone_the_verdict_is_the_same_and_the_run_stops_there(tmp_path: Path) -> None:
    expected = expected_tests(tmp_path)
    work = tmp_path / "seeded"
    issued = materialise(FAMILY, FAMILY.defects[0], work)
    request = GradeRequest(
        workdir=str(work), family=FAMILY, defect=FAMILY.defects[0], issued=issued, expected_tests=expected
    )
    full = grade(request)
    first = grade(attrs.evolve(request, first_failure=True))
    assert (first.passed, first.failure_mode) == (full.passed, full.failure_mode) == (False, "suite-failed")
    passed_in_full = int(full.detail.split("/")[0])
    # stopped at the first failing test: the tests after it did not run, so fewer passed
    assert int(first.detail.split("/")[0]) < passed_in_full


@pytest.mark.parametrize(
    "report",
    [
        {"collected": [], "outcomes": {"t": ["passed"]}, "collect_errors": [], "strays": []},  # an outcome not text
        {"collected": [1], "outcomes": {}, "collect_errors": [], "strays": []},
        {"collected": [], "outcomes": {}, "collect_errors": [], "strays": [], "exit_code": "0"},
        {"collected": [], "outcomes": {}, "collect_errors": [None], "strays": []},
    ],
)
def test_a_report_of_the_wrong_shape_below_its_keys_is_not_one(report: dict[str, object]) -> None:
    from certlab_suite.plugin import well_formed

    assert not well_formed(report)
    assert well_formed({"collected": ["t"], "outcomes": {"t": "passed"}, "collect_errors": [], "strays": []})


def test_a_report_nested_too_deep_is_no_report_not_a_crash(tmp_path: Path) -> None:
    from certlab_suite.plugin import _reported

    run = _reported("[" * 100_000 + "]" * 100_000, tmp_path / "log", tmp_path)
    assert run.report is None and "did not report" in run.why


def test_a_report_the_graded_code_turned_into_a_symlink_is_not_read(tmp_path: Path) -> None:
    # In a new interpreter (a task environment's: here this venv), the graded code learns the report's path from
    # the script's arguments and links it elsewhere; the script then writes its passing report through the link.
    from certlab_suite.plugin import run_tests

    work = tmp_path / "work"
    materialise(FAMILY, None, work)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    (work / "conftest.py").write_text(
        "import os, sys\n"
        f"os.remove(sys.argv[1]) if os.path.exists(sys.argv[1]) else None\n"
        f"os.symlink({str(elsewhere)!r}, sys.argv[1])\n"
    )
    run = run_tests(str(work), sys.prefix, FAMILY.test_paths, FAMILY.module_names)
    assert run.report is None and "a symlink" in run.why, run.why
    assert elsewhere.read_text() != "{}", "the script did write its report through the link"
