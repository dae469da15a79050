"""The roman family's own tests: certlab's conformance suite, and its record and seeds.

Run them the way certlab's own families do: install certlab and this distribution
(``pip install certlab certlab-calibration certlab-policy certlab-suite -e .``), then
``pytest`` from this folder. ``FamilyConformance`` comes from certlab's pytest plugin; the
held-out cases are checked beside (``test_roman_held_out.py``) with certlab-acceptance's kit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from certlab_roman.plugin import certlab_task_families

from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.testing import FamilyConformance

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
