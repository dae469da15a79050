"""The machine family proves itself, including its coordinated two-file defects and its pinned fix location."""

from __future__ import annotations

from pathlib import Path

import pytest
from certlab_machine.plugin import certlab_task_families

from certlab_core.plugin.types.family import TaskFamily
from certlab_core.testing import FamilyConformance
from certlab_core.testing.family_checks import (
    FamilyChecks,
    build_tree,
    find_defect,
    run_suite,
    within_allowed_paths,
)

FAMILY: TaskFamily = certlab_task_families()[0]


class TestFamilyChecks(FamilyChecks):
    """The checks every built-in family makes on itself, with the machine family's facts."""

    family = FAMILY
    family_name = "machine"
    distribution_dir = Path(__file__).parents[1]
    package = "certlab_machine"
    visible_test_files = ("test_api.py", "test_evaluator.py", "test_parser.py", "test_tokenizer.py")
    allowed_paths = ("machine/*.py",)
    defect_classes = (
        "coordinated-node-shape",
        "coordinated-token-split",
        "position-off-by-one",
        "operator-precedence",
        "associativity",
        "scope-leak",
    )
    shipped_file = "tree/tests/test_tokenizer.py"


COORDINATED = ["operator-token-in-tree", "power-split-into-stars"]


@pytest.mark.parametrize("defect_id", COORDINATED)
def test_coordinated_defects_span_two_files_and_neither_revert_alone_is_a_fix(tmp_path: Path, defect_id: str) -> None:
    coordinated = find_defect(FAMILY, defect_id)
    paths = sorted({seed.path for seed in coordinated.seeds})
    assert len(paths) == 2
    for reverted in paths:
        tree = build_tree(FAMILY, tmp_path / reverted.replace("/", "_"), coordinated, keep_clean=(reverted,))
        completed = run_suite(tree)
        assert completed.returncode == 1, f"reverting only {reverted} made the suite pass"
        assert " failed" in completed.stdout


def test_node_shape_drift_keeps_end_to_end_tests_green_and_parser_tests_red(tmp_path: Path) -> None:
    tree = build_tree(FAMILY, tmp_path, find_defect(FAMILY, "operator-token-in-tree"))
    assert run_suite(tree, "tests/test_evaluator.py", "tests/test_api.py", "tests/test_tokenizer.py").returncode == 0
    assert run_suite(tree, "tests/test_parser.py").returncode == 1


# A policy-legal but wrong fix for the bad-character position: the api shifts tokenizer positions back.
WRONG_API_FIX = (
    '"column": error.position + 1}',
    '"column": error.position + (0 if isinstance(error, TokenizeError) else 1)}',
)


def wrongly_fixed_tree(tmp_path: Path, check: bool = False) -> Path:
    """The bad-character-position defect's tree with the wrong fix in the api applied (``check``: and shown red)."""
    pinned = find_defect(FAMILY, "bad-character-position")
    assert {seed.path for seed in pinned.seeds} == {"machine/tokenizer.py"}
    tree = build_tree(FAMILY, tmp_path, pinned)
    if check:
        assert run_suite(tree, "tests/test_api.py").returncode == 1
    api = tree / "machine" / "api.py"
    find, replace = WRONG_API_FIX
    assert api.read_text().count(find) == 1
    api.write_text(api.read_text().replace(find, replace))
    assert within_allowed_paths(FAMILY, "machine/api.py")  # the wrong fix is within the edit policy
    return tree


def test_pinned_location_a_wrong_fix_in_the_api_greens_api_tests_but_not_tokenizer_tests(tmp_path: Path) -> None:
    tree = wrongly_fixed_tree(tmp_path, check=True)
    assert run_suite(tree, "tests/test_api.py").returncode == 0
    tokenizer_run = run_suite(tree, "tests/test_tokenizer.py")
    assert tokenizer_run.returncode == 1
    assert "test_unexpected_character_position" in tokenizer_run.stdout
    assert run_suite(tree).returncode == 1


def test_allowed_paths_cover_the_package_and_never_the_tests() -> None:
    assert all(within_allowed_paths(FAMILY, seed.path) for d in FAMILY.defects for seed in d.seeds)
    assert not within_allowed_paths(FAMILY, "tests/test_api.py")
    assert not within_allowed_paths(FAMILY, "conftest.py")


class TestConformance(FamilyConformance):
    """certlab's own conformance suite, run against the installed machine family."""

    family_name = "machine"
    # the published proof this one must re-earn: the fast runner grades each mutant as the recorded run did
    recorded_bundle = str(Path(__file__).parents[3] / "certifications" / "oracle-all" / "bundle.json")
