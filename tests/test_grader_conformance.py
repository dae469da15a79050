"""GraderConformance rejects graders that break the contract; the shipped graders pass it in their own tests.

Each broken grader is a few lines a plugin author might write: a verdict by coin toss, a dict
for a result, a grader that leaves a file in the work copy it judges, one that names a failure
mode nobody declared, one that fails every tree (the oracle's fix too), and one that raises.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from certlab_core.plugin.types.grader import Grader, GradeRequest, GradeResult
from certlab_core.testing import GraderConformance
from certlab_core.testing.grader_checks import Graded, grade_scenarios

REJECTED = (AssertionError, pytest.fail.Exception)


def coin_toss(request: GradeRequest) -> GradeResult:
    passed = random.SystemRandom().random() < 0.5
    return GradeResult(grader="broken", passed=passed, failure_mode=None if passed else "suite-failed")


def as_dict(request: GradeRequest) -> Any:
    return {"grader": "broken", "passed": True}


def leaves_a_file(request: GradeRequest) -> GradeResult:
    (Path(request.workdir) / ".grader-cache").write_text("seen\n")
    return GradeResult(grader="broken", passed=True)


def undeclared_mode(request: GradeRequest) -> GradeResult:
    return GradeResult(grader="broken", passed=False, failure_mode="looked-wrong")


def fails_everything(request: GradeRequest) -> GradeResult:
    return GradeResult(grader="broken", passed=False, failure_mode="suite-failed")


def raises(request: GradeRequest) -> GradeResult:
    raise RuntimeError("the grader's own bug")


class Broken(GraderConformance):
    grader_name = "broken"
    sandbox = "none"

    def __init__(self, grade: Any) -> None:
        self.grade = grade

    def grader(self) -> Grader:
        return Grader(name="broken", order=50, description="a grader under test", grade=self.grade)


def gradings(grade: Any, tmp_path: Path) -> tuple[Broken, list[Graded]]:
    checks = Broken(grade)
    return checks, grade_scenarios(checks.grader(), checks.family(), tmp_path, "none", workers=2)


@pytest.mark.parametrize(
    ("grade", "check", "message"),
    [
        (as_dict, "test_every_verdict_is_a_grade_result_with_a_known_failure_mode", "grade returned dict"),
        (raises, "test_every_verdict_is_a_grade_result_with_a_known_failure_mode", "raised: RuntimeError"),
        (undeclared_mode, "test_every_verdict_is_a_grade_result_with_a_known_failure_mode", "'looked-wrong', neither"),
        (leaves_a_file, "test_grading_leaves_the_work_copy_as_it_was_and_writes_nothing_beside_it", ".grader-cache"),
        (fails_everything, "test_it_never_fails_the_oracles_fix", "the oracle's fix failed as suite-failed"),
    ],
)
def test_a_grader_that_breaks_the_contract_is_rejected(grade: Any, check: str, message: str, tmp_path: Path) -> None:
    checks, graded = gradings(grade, tmp_path)
    with pytest.raises(REJECTED, match=message):
        getattr(checks, check)(graded)


def test_a_grader_that_tosses_a_coin_is_caught_regrading_the_same_artifacts(tmp_path: Path) -> None:
    # Each toss is fair: the two scenarios graded twice agree by chance 1 time in 4; 8 tries all agreeing, 1 in 65536.
    for attempt in range(8):
        checks, graded = gradings(coin_toss, tmp_path / str(attempt))
        try:
            checks.test_the_same_artifacts_get_the_same_verdict(graded)
        except AssertionError as error:
            assert "graded twice" in str(error)
            return
    pytest.fail("a coin-toss grader gave the same verdicts eight times over")


def test_a_grader_that_catches_nothing_fails_the_catches_it_declares(tmp_path: Path) -> None:
    checks, graded = gradings(lambda request: GradeResult(grader="broken", passed=True), tmp_path)
    checks.catches = {"planted": "policy-planted-file"}
    with pytest.raises(REJECTED, match="'planted': None"):
        checks.test_it_gives_the_failure_modes_it_catches(graded)
