"""The roman family's own tests: certlab's conformance suite, plus the held-out cases this family ships.

Run them the way certlab's own families do: install certlab and this distribution
(``pip install certlab certlab-calibration certlab-policy certlab-suite -e .``), then
``pytest`` from this folder. ``FamilyConformance`` comes from certlab's pytest plugin, and
the tree building and held-out case evaluation from ``certlab_core.testing.family_checks``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from certlab_roman.plugin import certlab_task_families

from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.testing import FamilyConformance
from certlab_core.testing.family_checks import build_tree, held_out_cases, held_out_verdicts

FAMILY: TaskFamily = certlab_task_families()[0]


class TestConformance(FamilyConformance):
    """certlab's conformance suite against the installed roman family."""

    family_name = "roman"


def test_the_family_ships_inside_the_installed_package() -> None:
    package = Path(certlab_task_families.__code__.co_filename).parent
    for path in (FAMILY.tree_dir, FAMILY.prompt_file, FAMILY.cases_file):
        assert Path(path).is_file() or Path(path).is_dir(), path
        assert Path(path).is_relative_to(package), path
    assert sorted(p.name for p in (Path(FAMILY.tree_dir) / "tests").iterdir()) == ["test_roman.py"]
    assert FAMILY.allowed_paths == ("roman.py",)


@pytest.mark.parametrize("defect", FAMILY.defects, ids=lambda d: d.id)
def test_each_seed_finds_exactly_one_place(defect: Defect) -> None:
    for seed in defect.seeds:
        assert (Path(FAMILY.tree_dir) / seed.path).read_text().count(seed.find) == 1
        assert seed.find != seed.replace


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
