"""The held-out side of a task family, checked: certlab-acceptance's test kit.

A family's held-out cases (its ``cases_file``, ``acceptance.jsonl``) are certlab-acceptance's to
read and score, so their checks are here, beside the kernel's ``FamilyChecks`` (the seeded trees
and the visible suite, ``certlab_core.testing.family_checks``). Each check runs the code in a
fresh interpreter, so nothing of the test process can make a case hold:

- ``held_out_cases`` reads the cases with the strict reader (``certlab_acceptance.cases``);
- ``held_out_verdicts`` evaluates every case against a tree, one verdict each;
- ``leaked_held_out_inputs`` names cases the visible suite calls with the same literal arguments
  (the scan of ``certlab_acceptance.visible_calls``, as ``certlab lock`` does);
- ``HeldOutChecks``: subclass it with a family's facts and pytest runs the held-out checks every
  built-in family makes on itself (well-formed and unique cases, held by the clean tree, broken
  by each seeded tree, none shown by the visible suite).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from certlab_acceptance.cases import HeldOutCase, read_cases
from certlab_acceptance.visible_calls import LiteralCall, leaked_inputs, suite_calls
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.sdk.trees import visible_test_modules
from certlab_core.sdk.workcopy import materialise

SUBPROCESS_TIMEOUT_S = 60

# Evaluates every held-out case (JSON lines on stdin) in the tree given as argv[1]; prints one JSON verdict a line.
# The comparison happens here, on the value the code returned (a tuple never equals a JSON list).
CASE_RUNNER = r"""
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
for line in sys.stdin:
    if not line.strip():
        continue
    case = json.loads(line)
    module_name, function_name = case["call"].split(":")
    try:
        module = importlib.import_module(module_name)
        if not module.__file__.startswith(sys.argv[1]):
            raise SystemExit(f"{module_name} was imported from {module.__file__}, not from the tree under test")
        function = getattr(module, function_name)
        result = function(*case.get("args", []), **case.get("kwargs", {}))
    except Exception as error:
        held = "raises" in case and type(error).__name__ == case["raises"]
        print(json.dumps({"id": case["id"], "held": held, "got": "raised " + type(error).__name__}))
        continue
    held = "raises" not in case and result == case["expect"]
    print(json.dumps({"id": case["id"], "held": held, "got": repr(result)}))
"""


def issued_tree(family: TaskFamily, destination: Path, seeded: Defect | None = None) -> Path:
    """The family's tree at ``destination/tree``, clean or seeded with ``seeded``, as a trial is issued it."""
    tree = destination / "tree"
    materialise(family, seeded, tree)
    return tree


def held_out_cases(family: TaskFamily) -> list[HeldOutCase]:
    """The family's held-out cases, read by the strict reader (a malformed line raises UsageError)."""
    return read_cases(Path(family.cases_file))


def held_out_verdicts(family: TaskFamily, tree: Path) -> dict[str, bool]:
    """Whether each held-out case holds against ``tree``, by case id, evaluated in one fresh interpreter."""
    completed = subprocess.run(
        [sys.executable, "-c", CASE_RUNNER, str(tree)],
        input=Path(family.cases_file).read_text(),
        cwd=tree,
        # The tree first on the import path, no bytecode written into it.
        env=dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=True,
    )
    verdicts = [json.loads(line) for line in completed.stdout.splitlines()]
    return {verdict["id"]: verdict["held"] for verdict in verdicts}


def visible_test_files(family: TaskFamily) -> list[Path]:
    """The clean tree's visible test modules, as pytest collects them (the SDK's ``visible_test_modules``, which
    the lock's own scan of a family reads too)."""
    tree = Path(family.tree_dir)
    return [tree / relpath for relpath in visible_test_modules(tree, family.test_paths)]


def visible_literal_calls(family: TaskFamily) -> list[LiteralCall]:
    """Every call with literal arguments in the clean tree's visible suite (``certlab_acceptance.visible_calls``)."""
    return suite_calls(visible_test_files(family), Path(family.tree_dir))


def leaked_held_out_inputs(family: TaskFamily) -> list[str]:
    """One line per held-out case the visible suite also calls with equal literal arguments; empty when none."""
    return leaked_inputs(held_out_cases(family), visible_literal_calls(family), Path(family.cases_file).name)


class HeldOutChecks:
    """The held-out checks a built-in family makes on itself; subclass it and set the family's facts.

    ``defect_id`` is parametrized over the family's defects, so a seeded-tree check runs once per
    defect under that defect's id.
    """

    family: ClassVar[TaskFamily]
    """The family record, as the family's own plugin hook returns it."""
    visible_call: ClassVar[tuple[str, list[Any]]]
    """One call the visible suite makes with literal arguments: proves the scan for leaked inputs sees the suite."""
    case_count: ClassVar[tuple[int, int]] = (10, 25)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "defect_id" in metafunc.fixturenames:
            metafunc.parametrize("defect_id", [defect.id for defect in self.family.defects])

    def test_the_clean_tree_holds_every_held_out_case(self, tmp_path: Path) -> None:
        verdicts = held_out_verdicts(self.family, issued_tree(self.family, tmp_path))
        assert len(verdicts) == len(held_out_cases(self.family))
        assert all(verdicts.values()), {case: held for case, held in verdicts.items() if not held}

    def test_each_seeded_tree_breaks_some_held_out_case(self, tmp_path: Path, defect_id: str) -> None:
        defect = next(defect for defect in self.family.defects if defect.id == defect_id)
        tree = issued_tree(self.family, tmp_path, defect)
        assert not all(held_out_verdicts(self.family, tree).values())

    def test_held_out_cases_are_well_formed_and_unique(self) -> None:
        cases = held_out_cases(self.family)  # the strict reader: exactly one of expect and raises, unique ids
        low, high = self.case_count
        assert low <= len(cases) <= high
        assert len({case.id for case in cases}) == len(cases)
        for case in cases:
            assert case.module.split(".")[0] in self.family.module_names, case.id

    def test_held_out_inputs_never_appear_in_the_visible_suite(self) -> None:
        function, args = self.visible_call
        visible = visible_literal_calls(self.family)
        assert any(call.function == function and list(call.args) == args for call in visible)  # the scan sees it
        assert leaked_held_out_inputs(self.family) == []
