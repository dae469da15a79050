"""Held-out test files: the strict reader, the overlay at grading, and real pytest runs judged outside them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from certlab_acceptance.hidden_tests import (
    HiddenTest,
    PytestRun,
    cases_text,
    is_hidden_tests,
    judge_tests,
    lay_over,
    parse_tests,
    pytest_run,
    run_tests,
)

from certlab_core.plugin import UsageError

HELD_OUT = "tests/test_tiny.py"
HELD_OUT_TEXT = "from tiny import half\n\n\ndef test_half():\n    assert half(4) == 2\n"


def line(**fields: object) -> str:
    return json.dumps({"id": "t", "test": "tests/test_tiny.py::test_half", **fields})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "not an object"),
        (line(call="tiny:half"), "unknown key(s) 'call'"),
        (line(test="../outside.py::test_x"), "must be a pytest node id"),
        (line(test="/etc/x.py::test_x"), "must be a pytest node id"),
        (line(test="tests/test_tiny.py"), "must be a pytest node id"),
        (line(files={"../../etc/cron.d/x": "boom"}), "'files' must map relative paths"),
        (line(files={"tests/a.py": 3}), "'files' must map relative paths"),
        (line(environment=7), "'environment' must be"),
        (line() + "\n" + line(), "already used on line 1"),
        ("", "no held-out test"),
    ],
)
def test_a_bad_held_out_test_line_is_one_usage_error(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=None) as refused:
        parse_tests(text, "cases/acceptance.jsonl")
    assert message in refused.value.message


def test_the_file_format_round_trips_and_is_told_from_call_cases() -> None:
    tests = [HiddenTest(id="a", test="tests/t.py::test_a", files={"tests/t.py": "x"}, environment="e" * 64)]
    text = cases_text(tests)
    assert is_hidden_tests(text.encode())
    assert not is_hidden_tests(b'{"id": "c", "call": "m:f", "expect": 1}\n')
    (again,) = parse_tests(text, "f")
    assert (again.id, again.test, dict(again.files), again.environment) == (
        "a",
        "tests/t.py::test_a",
        {"tests/t.py": "x"},
        "e" * 64,
    )


def test_the_held_out_version_replaces_the_visible_file_only_in_the_grading_copy(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    (copy / "tests").mkdir(parents=True)
    (copy / HELD_OUT).write_text("def test_old():\n    pass\n")
    lay_over([HiddenTest(id="t", test=f"{HELD_OUT}::test_half", files={HELD_OUT: HELD_OUT_TEXT})], copy)
    assert (copy / HELD_OUT).read_text() == HELD_OUT_TEXT


def test_a_symlinked_folder_in_the_copy_is_not_written_through(tmp_path: Path) -> None:
    copy, elsewhere = tmp_path / "copy", tmp_path / "elsewhere"
    copy.mkdir()
    elsewhere.mkdir()
    (copy / "tests").symlink_to(elsewhere)
    with pytest.raises(UsageError):
        lay_over([HiddenTest(id="t", test=f"{HELD_OUT}::test_half", files={HELD_OUT: HELD_OUT_TEXT})], copy)
    assert not any(elsewhere.iterdir())


def test_judging_reads_each_outcome_and_the_runs_exit() -> None:
    a = HiddenTest(id="a", test="tests/t.py::test_a", files={})
    b = HiddenTest(id="b", test="tests/t.py::test_b", files={})
    partial = PytestRun(1, {a.test: "passed", b.test: "failed"})
    assert judge_tests([a, b], partial) == [("a", True, ""), ("b", False, "failed")]
    # a run that claims success with nothing failing must have exited 0
    assert judge_tests([a], PytestRun(1, {a.test: "passed"}))[0][1] is False
    assert judge_tests([a], PytestRun(3, {a.test: "passed"}))[0][1] is False
    assert judge_tests([a], PytestRun(-1, {}, ("pytest wrote no readable report",)))[0] == (
        "a",
        False,
        "not run (pytest wrote no readable report)",
    )


def _tree(tmp_path: Path, module: str) -> Path:
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "tiny.py").write_text(module)
    lay_over([HiddenTest(id="t", test=f"{HELD_OUT}::test_half", files={HELD_OUT: HELD_OUT_TEXT})], tree)
    return tree


@pytest.mark.parametrize(
    ("module", "held", "got"),
    [
        ("def half(x):\n    return x / 2\n", True, ""),
        ("def half(x):\n    return x * 2\n", False, "failed"),
        ("import os\nos._exit(0)\n", False, "not run"),  # exits 0 at import: no report, nothing holds
        ("import sys\nsys.exit(0)\n", False, "not run"),
    ],
)
def test_a_real_pytest_run_is_judged_by_its_report(tmp_path: Path, module: str, held: bool, got: str) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    test = HiddenTest(id="t", test=f"{HELD_OUT}::test_half", files={})
    ((_id, ok, what),) = judge_tests([test], run_tests(_tree(tmp_path, module), [test.test], scratch))
    assert ok is held
    assert what.startswith(got)


@pytest.mark.parametrize(
    ("module", "held", "got"),
    [
        ("def half(x):\n    return x / 2\n", True, ""),
        ("def half(x):\n    return x * 2\n", False, "failed"),
        ("import os\nos._exit(0)\n", False, "not run"),
        ("import sys\nsys.exit(0)\n", False, "not run"),
    ],
)
def test_graded_as_the_suite_grader_runs_its_tests_the_held_out_tests_are_judged_the_same(
    tmp_path: Path, module: str, held: bool, got: str
) -> None:
    # The grader's route (certlab_suite's run_tests: uncontained, a fork of the harness), the files laid over its copy.
    from certlab_suite.plugin import run_tests as suite_run

    work = tmp_path / "work"
    (work / "tests").mkdir(parents=True)
    (work / "tiny.py").write_text(module)
    test = HiddenTest(id="t", test=f"{HELD_OUT}::test_half", files={HELD_OUT: HELD_OUT_TEXT})
    run = suite_run(str(work), None, [test.test], ("tiny",), prepare=lambda tree: lay_over([test], tree))
    ((_id, ok, what),) = judge_tests([test], pytest_run(run.report, run.why))
    assert ok is held
    assert what.startswith(got)
    assert not (work / HELD_OUT).exists(), "the held-out file was laid over the work copy, not a grading copy"


def test_a_report_whose_code_came_from_outside_the_copy_holds_nothing() -> None:
    a = HiddenTest(id="a", test="tests/t.py::test_a", files={})
    report = {"exit_code": 0, "outcomes": {a.test: "passed"}, "collect_errors": [], "strays": ["tiny from /x/tiny.py"]}
    assert judge_tests([a], pytest_run(report, ""))[0][1] is False
    assert judge_tests([a], pytest_run(dict(report, strays=[]), ""))[0] == ("a", True, "")
    assert judge_tests([a], pytest_run(None, "the test process did not report (timed out)"))[0] == (
        "a",
        False,
        "not run (the test process did not report (timed out))",
    )


def test_outcomes_alone_give_the_same_outcomes_with_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The held-out grading records outcomes only, so it asks for no traceback and no assert rewriting (cheaper).
    from certlab_suite.plugin import run_tests as suite_run

    work = tmp_path / "work"
    (work / "tests").mkdir(parents=True)
    (work / "tiny.py").write_text("def half(x):\n    return x * 2\n")
    test = HiddenTest(id="t", test=f"{HELD_OUT}::test_half", files={HELD_OUT: HELD_OUT_TEXT})
    with capsys.disabled():  # the forked run's pytest writes its log through sys.stdout, which capture replaces
        runs = [
            suite_run(str(work), None, [test.test], ("tiny",), prepare=lambda t: lay_over([test], t), outcomes_only=o)
            for o in (False, True)
        ]
    assert [r.report and r.report["outcomes"] for r in runs] == [{test.test: "failed"}] * 2
    full, alone = (r.log_tail for r in runs)
    assert "def test_half" in full and "def test_half" not in alone
