"""The ledger family proves itself, including its cross-file defect and its pinned fix location."""

from __future__ import annotations

from pathlib import Path

from certlab_ledger.plugin import certlab_task_families

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
    """The checks every built-in family makes on itself, with the ledger family's facts."""

    family = FAMILY
    family_name = "ledger"
    distribution_dir = Path(__file__).parents[1]
    package = "certlab_ledger"
    visible_test_files = ("test_models.py", "test_report.py", "test_validate.py")
    allowed_paths = ("ledger/*.py",)
    defect_classes = (
        "cross-file",
        "pinned-location",
        "fraction-padding",
        "prefix-boundary",
        "negative-division",
        "state-reset",
    )
    shipped_file = "tree/tests/test_validate.py"


def test_cross_file_defect_lives_in_models_and_only_validate_and_report_tests_fail(tmp_path: Path) -> None:
    cross_file = find_defect(FAMILY, "elided-amount-sign")
    assert {seed.path for seed in cross_file.seeds} == {"ledger/models.py"}
    tree = build_tree(FAMILY, tmp_path, cross_file)
    assert run_suite(tree, "tests/test_models.py").returncode == 0
    assert run_suite(tree, "tests/test_validate.py").returncode == 1
    assert run_suite(tree, "tests/test_report.py").returncode == 1


# A policy-legal but wrong fix for the same-day defect: report stops trusting validate's order check.
WRONG_REPORT_FIX = (
    (
        "from ledger.models import account_prefix\n",
        "from ledger.models import LedgerError, account_prefix, parse_journal\n",
    ),
    ("from ledger.validate import check_journal\n", "from ledger.validate import journal_problems\n"),
    (
        "    for transaction in check_journal(entries, accounts):\n",
        "    entries = list(entries)\n"
        '    problems = [problem for problem in journal_problems(entries, accounts) if "out of order" not in problem]\n'
        "    if problems:\n"
        '        raise LedgerError("; ".join(problems))\n'
        "    for transaction in parse_journal(entries):\n",
    ),
)


def wrongly_fixed_tree(tmp_path: Path, check: bool = False) -> Path:
    """The same-day defect's tree with the wrong fix in report applied (``check``: and shown red before it)."""
    pinned = find_defect(FAMILY, "same-day-out-of-order")
    assert {seed.path for seed in pinned.seeds} == {"ledger/validate.py"}
    tree = build_tree(FAMILY, tmp_path, pinned)
    if check:
        assert run_suite(tree, "tests/test_report.py").returncode == 1
    report = tree / "ledger" / "report.py"
    text = report.read_text()
    for find, replace in WRONG_REPORT_FIX:
        assert text.count(find) == 1
        text = text.replace(find, replace)
    report.write_text(text)
    assert within_allowed_paths(FAMILY, "ledger/report.py")  # the wrong fix is within the edit policy
    return tree


def test_pinned_location_a_wrong_fix_in_report_greens_report_tests_but_not_validate_tests(tmp_path: Path) -> None:
    tree = wrongly_fixed_tree(tmp_path, check=True)
    assert run_suite(tree, "tests/test_report.py").returncode == 0
    validate_run = run_suite(tree, "tests/test_validate.py")
    assert validate_run.returncode == 1
    assert "test_same_day_entries_are_in_order" in validate_run.stdout
    assert run_suite(tree).returncode == 1


def test_allowed_paths_cover_the_package_and_never_the_tests() -> None:
    assert all(within_allowed_paths(FAMILY, seed.path) for d in FAMILY.defects for seed in d.seeds)
    assert not within_allowed_paths(FAMILY, "tests/test_report.py")
    assert not within_allowed_paths(FAMILY, "conftest.py")


class TestConformance(FamilyConformance):
    """certlab's own conformance suite, run against the installed ledger family."""

    family_name = "ledger"
    # the published proof this one must re-earn: the fast runner grades each mutant as the recorded run did
    recorded_bundle = str(Path(__file__).parents[3] / "certifications" / "oracle-all" / "bundle.json")
