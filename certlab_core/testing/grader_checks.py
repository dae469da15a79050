"""``GraderConformance``: the checks every grader runs on itself.

A grader plugin subclasses it in its own tests, naming the grader (and, optionally, the
failure mode it must give on each of the scenarios below); pytest then grades real work
copies of an installed family (``intervals`` unless ``family_name`` says otherwise), each in
a fresh forked process under the run's containment, as a certification does:

- ``fixed``: the seeded defect reverted (the oracle's fix); ``seeded``: the work copy as
  issued; ``tests-emptied``: fixed, and every visible test replaced by one that passes;
  ``planted``: seeded, with a ``conftest.py`` planted at the top.

and checks that

- its record is well formed (its name, and every failure mode it declares named once);
- every verdict is a ``GradeResult`` under the grader's name: passed with no failure mode,
  or failed naming a mode that is the kernel's or one it declares;
- it is deterministic: the same artifacts graded twice give the same verdict;
- it never fails the oracle's fix;
- grading leaves the work copy byte for byte as it was, and writes nothing beside it;
- it gives the failure modes its ``catches`` says, scenario by scenario.

Example (the grader's ``tests/test_conformance.py``)::

    from certlab_core.testing import GraderConformance

    class TestNoNotes(GraderConformance):
        grader_name = "no-notes"
        catches = {}  # it passes all four scenarios (none holds a NOTES.txt)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from attrs import frozen

from certlab_core.plugin.failure_modes import FAILURE_MODES
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.grader import Grader, GradeRequest, GradeResult
from certlab_core.plugin.types.sandbox import Containment

SCENARIOS = ("fixed", "seeded", "tests-emptied", "planted")
#: The scenarios graded twice, to show the same artifacts get the same verdict.
REGRADED = ("fixed", "seeded")
PASSING_TEST = "def test_nothing():\n    pass\n"


@frozen
class Graded:
    """One grading of one scenario: what ``grade`` returned (or raised), and what it changed around it."""

    scenario: str
    result: Any
    raised: str
    changed_in_work_copy: tuple[str, ...]
    written_beside: tuple[str, ...]


def _revert(work: Path, defect: Defect) -> None:
    for seed in defect.seeds:
        target = work / seed.path
        target.write_text(target.read_text(encoding="utf-8").replace(seed.replace, seed.find, 1), encoding="utf-8")


def _empty_tests(work: Path, family: TaskFamily) -> None:
    from certlab_core.sdk.workcopy import iter_tree

    folders = [p.strip("/") for p in family.test_paths]
    for relpath, path in iter_tree(work):
        if relpath.endswith(".py") and any(relpath == f or relpath.startswith(f + "/") for f in folders):
            path.write_text(PASSING_TEST, encoding="utf-8")


def make_scenario(family: TaskFamily, defect: Defect, scenario: str, root: Path) -> tuple[Path, dict[str, str]]:
    """The work copy of one scenario at ``root/work``, and what was issued (the seeded tree's hashes)."""
    from certlab_core.sdk.workcopy import materialise

    work = root / "work"
    issued = materialise(family, defect, work)
    if scenario in ("fixed", "tests-emptied"):
        _revert(work, defect)
    if scenario == "tests-emptied":
        _empty_tests(work, family)
    if scenario == "planted":
        (work / "conftest.py").write_text("import pytest\n", encoding="utf-8")
    return work, issued


def grade_once(grader: Grader, family: TaskFamily, scenario: str, root: str, containment: Containment) -> Graded:
    """In a fresh forked process: make the scenario's work copy, grade it under the containment, look around."""
    from certlab_core.sdk.containment import use_containment
    from certlab_core.sdk.trees import walk
    from certlab_core.sdk.workcopy import tree_hashes

    defect = family.defects[0]
    base = Path(root)
    base.mkdir(parents=True)
    work, issued = make_scenario(family, defect, scenario, base)
    before = tree_hashes(work)
    beside_before = {e.relpath for e in walk(base)}
    request = GradeRequest(workdir=str(work), family=family, defect=defect, issued=issued)
    result: Any = None
    raised = ""
    try:
        with use_containment(containment):
            result = grader.grade(request)
    except Exception as error:  # a grader that raises is reported by the check, not a crash of it
        raised = f"{type(error).__name__}: {error}"
    after = tree_hashes(work)
    changed = sorted(p for p in {*before, *after} if before.get(p) != after.get(p))
    work_prefix = os.path.relpath(work, base)
    beside = sorted(
        e.relpath
        for e in walk(base)
        if e.relpath not in beside_before and e.relpath != work_prefix and not e.relpath.startswith(work_prefix + "/")
    )
    return Graded(scenario, result, raised, tuple(changed), tuple(beside))


def _grade_item(item: tuple[Grader, TaskFamily, str, str, Containment]) -> Graded:
    return grade_once(*item)


def grade_scenarios(grader: Grader, family: TaskFamily, root: Path, sandbox: str, workers: int) -> list[Graded]:
    """Every scenario graded once, and ``REGRADED`` twice, each in a forked process; in that order."""
    from certlab_core._runtime.containment import choose_containment
    from certlab_core._runtime.registry import discover
    from certlab_core.sdk.forking import ChildFailure, map_in_forks

    # Chosen here, in the process that forks the gradings, as a certification does: they share its runtime folder.
    containment = choose_containment(discover(), sandbox, [], lambda _line: None)

    names = [*SCENARIOS, *REGRADED]
    items = [(grader, family, name, str(root / f"{index}-{name}"), containment) for index, name in enumerate(names)]
    graded: dict[int, Graded] = {}
    for index, value in map_in_forks(_grade_item, items, workers=workers, timeout=300):
        if isinstance(value, ChildFailure):
            graded[index] = Graded(names[index], None, f"the grading process {value.kind}: {value.summary}", (), ())
        else:
            graded[index] = value
    return [graded[index] for index in range(len(names))]


def _verdict(graded: Graded) -> tuple[bool, str | None]:
    result = graded.result
    return bool(result.passed), result.failure_mode


class GraderConformance:
    """The conformance suite every grader runs against itself; set ``grader_name`` (and ``catches``)."""

    grader_name: str = ""
    #: The installed family whose first defect the scenarios are made of.
    family_name: str = "intervals"
    #: The failure mode the grader must give on a scenario (``seeded``, ``tests-emptied``, ``planted``).
    catches: ClassVar[Mapping[str, str]] = {}
    #: The containment the gradings run under, as ``certlab certify --sandbox`` takes it.
    sandbox: str = "auto"
    workers: int = 2

    def grader(self) -> Grader:
        """The grader under test: the installed one named ``grader_name``."""
        from certlab_core._runtime.registry import discover

        if not self.grader_name:
            pytest.fail("set grader_name on the GraderConformance subclass")
        found: Grader = discover().get("graders", self.grader_name)
        return found

    def family(self) -> TaskFamily:
        from certlab_core._runtime.registry import discover

        found: TaskFamily = discover().get("task_families", self.family_name)
        return found

    @pytest.fixture(scope="class")
    @classmethod
    def gradings(cls, tmp_path_factory: pytest.TempPathFactory) -> list[Graded]:
        checks = cls()
        return grade_scenarios(
            checks.grader(), checks.family(), tmp_path_factory.mktemp("grader"), checks.sandbox, checks.workers
        )

    def test_its_record_is_well_formed(self) -> None:
        grader = self.grader()
        assert isinstance(grader, Grader), f"{type(grader).__name__} is not a Grader record"
        assert grader.name == self.grader_name, f"the grader is named {grader.name!r}"
        modes = grader.failure_modes
        assert all(isinstance(m, str) and m for m in modes), f"failure modes must be words: {modes!r}"
        assert len(set(modes)) == len(modes), f"a failure mode is declared twice: {modes!r}"

    def test_every_verdict_is_a_grade_result_with_a_known_failure_mode(self, gradings: list[Graded]) -> None:
        declared = set(self.grader().failure_modes)
        for graded in gradings:
            assert not graded.raised, f"grading {graded.scenario} raised: {graded.raised}"
            result = graded.result
            assert isinstance(result, GradeResult), f"{graded.scenario}: grade returned {type(result).__name__}"
            assert result.grader == self.grader_name, f"{graded.scenario}: the result names {result.grader!r}"
            assert isinstance(result.passed, bool), f"{graded.scenario}: passed is {result.passed!r}"
            assert isinstance(result.detail, str), f"{graded.scenario}: detail is {type(result.detail).__name__}"
            if result.passed:
                assert result.failure_mode is None, f"{graded.scenario} passed naming {result.failure_mode!r}"
            else:
                mode = result.failure_mode
                assert mode in FAILURE_MODES or mode in declared, (
                    f"{graded.scenario} failed as {mode!r}, neither the kernel's nor declared by the grader"
                )

    def test_the_same_artifacts_get_the_same_verdict(self, gradings: list[Graded]) -> None:
        first = {g.scenario: g for g in gradings[: len(SCENARIOS)]}
        for again in gradings[len(SCENARIOS) :]:
            once = first[again.scenario]
            assert isinstance(once.result, GradeResult) and isinstance(again.result, GradeResult), (
                f"{again.scenario}: {once.raised or again.raised}"
            )
            assert _verdict(once) == _verdict(again), (
                f"{again.scenario} graded twice: {_verdict(once)} then {_verdict(again)}"
            )

    def test_it_never_fails_the_oracles_fix(self, gradings: list[Graded]) -> None:
        for graded in (g for g in gradings if g.scenario == "fixed"):
            assert isinstance(graded.result, GradeResult), graded.raised
            assert graded.result.passed, (
                f"the oracle's fix failed as {graded.result.failure_mode}: {graded.result.detail}"
            )

    def test_grading_leaves_the_work_copy_as_it_was_and_writes_nothing_beside_it(self, gradings: list[Graded]) -> None:
        for graded in gradings:
            assert not graded.changed_in_work_copy, (
                f"grading {graded.scenario} changed the work copy: {list(graded.changed_in_work_copy)}"
            )
            assert not graded.written_beside, (
                f"grading {graded.scenario} wrote beside the work copy: {list(graded.written_beside)}"
            )

    def test_it_gives_the_failure_modes_it_catches(self, gradings: list[Graded]) -> None:
        if not self.catches:
            pytest.skip("no scenario is declared caught: set catches = {'seeded': 'suite-failed', ...}")
        unknown = sorted(set(self.catches) - set(SCENARIOS))
        assert not unknown, f"catches names scenarios that do not exist: {unknown} (they are: {SCENARIOS})"
        got = {
            g.scenario: g.result.failure_mode for g in gradings[: len(SCENARIOS)] if isinstance(g.result, GradeResult)
        }
        wrong = {s: got.get(s) for s, mode in self.catches.items() if got.get(s) != mode}
        assert not wrong, f"the grader gave {wrong}; its catches say {dict(self.catches)}"
