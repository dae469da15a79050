"""The roman family's held-out cases, checked with certlab-acceptance's kit (skipped without it, saying so)."""

from __future__ import annotations

from pathlib import Path

import pytest
from certlab_roman.plugin import certlab_task_families

from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.testing.family_checks import build_tree

conformance = pytest.importorskip(
    "certlab_acceptance.conformance", reason="certlab-acceptance is not installed: the held-out cases are not checked"
)
held_out_cases, held_out_verdicts = conformance.held_out_cases, conformance.held_out_verdicts

FAMILY: TaskFamily = certlab_task_families()[0]


def test_held_out_cases_are_well_formed() -> None:
    cases = held_out_cases(FAMILY)  # certlab's strict reader: exactly one of expect and raises, unique ids
    assert len({case.id for case in cases}) == len(cases)
    for case in cases:
        assert case.module in FAMILY.module_names, case.id


def test_the_clean_tree_holds_every_held_out_case(tmp_path: Path) -> None:
    verdicts = held_out_verdicts(FAMILY, build_tree(FAMILY, tmp_path))
    assert len(verdicts) == len(held_out_cases(FAMILY))
    assert [case for case, held in verdicts.items() if not held] == []


@pytest.mark.parametrize("defect", FAMILY.defects, ids=lambda d: d.id)
def test_each_seeded_tree_breaks_some_held_out_case(tmp_path: Path, defect: Defect) -> None:
    verdicts = held_out_verdicts(FAMILY, build_tree(FAMILY, tmp_path, defect))
    assert not all(verdicts.values())
