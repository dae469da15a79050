"""The mutation runner on a small family of its own: what the suite kills, what only a held-out case kills, a
mutant that loops forever (killed at its time limit, nothing left running), a survivor, and the same score twice."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from certlab_mutation.engine import (
    assessment,
    family_mutants,
    mutation_document,
    prove_by_mutation,
    recheck,
    report_lines,
)

from certlab_core._runtime.registry import Registry, discover
from certlab_core.certify.instrument import prove
from certlab_core.certify.lab import preload
from certlab_core.plugin.types.family import Defect, Seed, TaskFamily
from certlab_core.sdk.grading import grader_chain


@pytest.fixture(scope="module")
def registry() -> Registry:
    """The installed plugins, certlab-mutation among them."""
    return discover()


TOY = '''\
"""A toy module: every mutant of it is one of the kinds the runner must tell apart."""


def floor_at(value, low):
    if value < low:
        return low
    return value


def triangle(n):
    total = 0
    step = 0
    while step != n:
        step += 1
        total += step
    return total


def adult(age):
    return age >= 18


def unused():
    return 3
'''

SUITE = """\
import os

from toy import adult, floor_at, triangle



def test_floor_at():
    assert floor_at(-5, 0) == 0
    assert floor_at(0, 0) == 0
    assert floor_at(7, 0) == 7


def test_triangle():
    if os.environ.get("TOY_PIDS"):
        open(os.path.join(os.environ["TOY_PIDS"], str(os.getpid())), "w").close()
    assert triangle(4) == 10


def test_adult_far_from_the_boundary():
    assert adult(40) and not adult(3)
"""

CASES = [
    {"id": "adult-at-18", "call": "toy:adult", "args": [18], "expect": True},
    {"id": "triangle-3", "call": "toy:triangle", "args": [3], "expect": 6},
    {"id": "floor-equal", "call": "toy:floor_at", "args": [2, 2], "expect": 2},
]


def write_toy_family(root: Path) -> TaskFamily:
    """The toy family laid out in ``root``: its tree, suite, prompt and held-out cases."""
    (root / "tree" / "tests").mkdir(parents=True)
    (root / "tree" / "toy.py").write_text(TOY)
    (root / "tree" / "tests" / "test_toy.py").write_text(SUITE)
    (root / "TASK.md").write_text("Fix the toy.\n")
    (root / "acceptance.jsonl").write_text("".join(json.dumps(case) + "\n" for case in CASES))
    return TaskFamily.in_folder(
        root,
        name="toy",
        version="1",
        description="a toy family for the mutation runner",
        allowed_paths=["toy.py"],
        test_paths=["tests"],
        module_names=["toy"],
        defects=[Defect("floor-flipped", "comparison", "floor_at", [Seed("toy.py", "value < low", "value > low")])],
    )


@pytest.fixture(scope="module")
def toy_family(tmp_path_factory: pytest.TempPathFactory) -> TaskFamily:
    return write_toy_family(tmp_path_factory.mktemp("toy-family"))


@pytest.fixture(scope="module")
def toy_proof(registry: Registry, toy_family: TaskFamily, tmp_path_factory: pytest.TempPathFactory) -> dict:
    graders = grader_chain(registry)
    preload()
    proof = prove(toy_family, graders)
    assert proof.holds, proof.problems
    pids = tmp_path_factory.mktemp("pids")
    temp = tmp_path_factory.mktemp("temp")  # the temp folder of the proof's processes, to see what they leave
    os.environ["TOY_PIDS"] = str(pids)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(temp))
        patch.setenv("TMPDIR", str(temp))
        try:
            mutation = prove_by_mutation(toy_family, graders, proof.expected_tests, workers=2, min_timeout_s=1.5)
        finally:
            del os.environ["TOY_PIDS"]
    left = sorted(p.name for p in temp.iterdir())
    return {"graders": graders, "expected": proof.expected_tests, "mutation": mutation, "pids": pids, "left": left}


def outcome_of(mutation, mutant_id: str) -> tuple[str, str | None]:
    result = next(r for r in mutation.results if r.mutant == mutant_id)
    return result.outcome, result.grader


def test_the_toy_has_the_mutants_it_should(toy_family: TaskFamily) -> None:
    assert [m.id for m in family_mutants(toy_family)] == [
        "toy.py:5:14:compare",
        "toy.py:11:13:integer",
        "toy.py:12:12:integer",
        "toy.py:13:16:compare",
        "toy.py:14:14:arithmetic",
        "toy.py:14:17:integer",
        "toy.py:15:15:arithmetic",
        "toy.py:20:16:compare",
        "toy.py:20:19:integer",
        "toy.py:24:12:integer",
    ]


def test_each_mutant_is_killed_by_the_grader_that_catches_it(toy_proof: dict) -> None:
    mutation = toy_proof["mutation"]
    assert outcome_of(mutation, "toy.py:5:14:compare") == ("survived", None)  # value <= low: equal either way
    assert outcome_of(mutation, "toy.py:11:13:integer") == ("failed", "suite")
    assert outcome_of(mutation, "toy.py:13:16:compare") == ("failed", "suite")
    assert outcome_of(mutation, "toy.py:20:16:compare") == ("failed", "acceptance")  # age > 18: only the case at 18
    assert outcome_of(mutation, "toy.py:20:19:integer") == ("failed", "acceptance")  # age >= 19: the same
    assert outcome_of(mutation, "toy.py:24:12:integer") == ("survived", None)  # nothing calls unused()


def test_a_looping_mutant_is_killed_at_its_time_limit_leaving_nothing_running_or_on_disk(toy_proof: dict) -> None:
    mutation = toy_proof["mutation"]
    # step -= 1 never reaches n: the suite's process spins until its grader's limit
    looping = next(r for r in mutation.results if r.mutant == "toy.py:14:14:arithmetic")
    # CI once saw ("failed", "suite") here at load 4; the result's detail says which limit stopped it.
    assert outcome_of(mutation, "toy.py:14:14:arithmetic") == ("timeout", "suite"), looping
    pids = [int(p.name) for p in toy_proof["pids"].iterdir()]
    assert pids, "the suite of the looping mutant never ran"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    # the suite grader copied the tree into a temp folder of its own, and was killed before it could delete it
    assert toy_proof["left"] == [], "the mutants' graders left these in the temp folder"


def test_the_scores_count_the_suite_alone_and_with_the_held_out_cases(toy_proof: dict) -> None:
    mutation = toy_proof["mutation"]
    assert (mutation.count, mutation.killed_by_suite, mutation.killed) == (10, 6, 8)
    assert (mutation.suite_score, mutation.score) == (0.6, 0.8)
    assert [m.id for m in mutation.survivors] == ["toy.py:5:14:compare", "toy.py:24:12:integer"]


def test_the_report_names_the_scores_and_shows_each_survivor_as_a_diff(toy_family: TaskFamily, toy_proof: dict) -> None:
    lines = report_lines(toy_family, toy_proof["mutation"])
    assert lines[0].startswith(
        "mutants toy: 10 mutants: the visible suite kills 60.0% (6), the suite and held-out cases 80.0% (8); 2 survive"
    )
    text = "\n".join(lines)
    assert "survivor toy.py:24:12:integer (integer):" in text
    assert "-    return 3\n    +    return 4" in text


def test_below_the_minimum_refuses_naming_the_survivors_and_below_the_threshold_warns(toy_proof: dict) -> None:
    mutation = toy_proof["mutation"]  # visible suite 60%, with the held-out cases 80%
    through = "toy.py:5:14:compare, toy.py:20:16:compare, toy.py:20:19:integer, toy.py:24:12:integer"

    def visible_refusal(floor: str) -> str:
        return (
            f"family toy: the visible suite alone kills 60.0% of 10 mutants, below {floor}: plausible wrong fixes "
            f"pass the tests an agent sees; it lets through: {through}"
        )

    refusals, warnings = assessment(mutation, 0.85)
    assert warnings == [] and len(refusals) == 2
    assert "below --min-mutation-score 85.0%" in refusals[0] and "toy.py:24:12:integer" in refusals[0]
    assert refusals[1] == visible_refusal("80.0% (its visible threshold, binding under --min-mutation-score)")
    refusals, warnings = assessment(mutation, None)  # the family's own thresholds, 0.9 and 0.8 by default
    assert refusals == [] and "below its threshold 90.0%" in warnings[0]
    assert warnings[1] == (
        "family toy: the visible suite alone kills 60.0% of 10 mutants, below its visible threshold 80.0%: "
        f"plausible wrong fixes pass the tests an agent sees; it lets through: {through}"
    )
    # a minimum the combined score meets still binds the visible suite, to its threshold or the minimum if lower
    binding = visible_refusal("80.0% (its visible threshold, binding under --min-mutation-score)")
    assert assessment(mutation, 0.8) == ([binding], [])
    assert assessment(mutation, 0.7) == ([visible_refusal("70.0% (--min-mutation-score)")], [])
    assert assessment(mutation, 0.55) == ([], warnings)
    # a visible minimum of its own replaces it
    assert assessment(mutation, 0.8, 0.6) == ([], warnings)
    assert assessment(mutation, None, 0.65) == ([visible_refusal("65.0% (--min-visible-mutation-score)")], [])


def test_the_same_tree_gives_the_same_score_again(toy_family: TaskFamily, toy_proof: dict) -> None:
    recorded = mutation_document(toy_family, toy_proof["mutation"], None)
    again = prove_by_mutation(toy_family, toy_proof["graders"], toy_proof["expected"], workers=2, min_timeout_s=1.5)
    assert recheck(toy_family, recorded, again) == []
    assert recorded["score"] == 0.8 and recorded["mutants"] == 10 and len(recorded["survivors"]) == 2


def test_a_recorded_verdict_that_is_not_re_earned_is_named(toy_family: TaskFamily, toy_proof: dict) -> None:
    recorded = mutation_document(toy_family, toy_proof["mutation"], None)
    for result in recorded["results"]:
        if result["mutant"] == "toy.py:24:12:integer":
            result.update(outcome="failed", grader="suite")
    assert recheck(toy_family, recorded, toy_proof["mutation"]) == [
        "mutant toy.py:24:12:integer: recorded killed by suite, now survived"
    ]
    recorded["mutants_sha256"] = "0" * 64
    assert "differ from the recorded" in recheck(toy_family, recorded, toy_proof["mutation"])[0]


def test_a_grader_that_breaks_on_a_mutant_is_a_problem_of_the_proof_not_a_kill(
    toy_family: TaskFamily, toy_proof: dict
) -> None:
    from certlab_core.plugin.types.grader import Grader, GradeRequest, GradeResult

    def breaks_on_the_unused_mutant(request: GradeRequest) -> GradeResult:
        if "return 4" in (Path(request.workdir) / "toy.py").read_text():
            raise RuntimeError("the verdict is refused")
        return GradeResult("breaker", True)

    graders = [*toy_proof["graders"], Grader("breaker", 99, "breaks on one mutant", breaks_on_the_unused_mutant)]
    only = [m for m in family_mutants(toy_family) if m.id == "toy.py:24:12:integer"]
    proof = prove_by_mutation(toy_family, graders, toy_proof["expected"], mutants=only, min_timeout_s=1.5)
    assert (proof.count, proof.killed, proof.survivors) == (1, 0, ())
    assert proof.problems == (
        "mutant toy.py:24:12:integer could not be graded: grader breaker broke: RuntimeError: the verdict is refused",
    )
    assert assessment(proof, None)[0] == [f"family toy: mutation proof: {proof.problems[0]}"]
