"""The roman family's own tests: certlab's conformance suite, plus the held-out cases this family ships.

Run them the way certlab's own families do: install certlab and this distribution
(``pip install certlab certlab-calibration certlab-policy certlab-suite -e .``), then
``pytest`` from this folder. ``FamilyConformance`` comes from certlab's pytest plugin.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from certlab_roman.plugin import certlab_task_families

from certlab_core.records import Defect, TaskFamily
from certlab_core.testing import FamilyConformance

FAMILY: TaskFamily = certlab_task_families()[0]

# Evaluates every held-out case against the tree given as argv[1]; prints one JSON verdict a line.
CASE_RUNNER = r"""
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
for line in sys.stdin:
    if not line.strip():
        continue
    case = json.loads(line)
    module_name, function_name = case["call"].split(":")
    module = importlib.import_module(module_name)
    if not module.__file__.startswith(sys.argv[1]):
        raise SystemExit(f"{module_name} was imported from {module.__file__}, not from the tree under test")
    try:
        result = getattr(module, function_name)(*case["args"])
    except Exception as error:
        print(json.dumps({"id": case["id"], "held": type(error).__name__ == case.get("raises")}))
        continue
    print(json.dumps({"id": case["id"], "held": "raises" not in case and result == case["expect"]}))
"""


class TestConformance(FamilyConformance):
    """certlab's conformance suite against the installed roman family."""

    family_name = "roman"


def load_cases() -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(FAMILY.cases_file).read_text().splitlines() if line.strip()]


def build_tree(destination: Path, defect: Defect | None = None) -> Path:
    tree = destination / "tree"
    shutil.copytree(FAMILY.tree_dir, tree)
    for seed in defect.seeds if defect else ():
        target = tree / seed.path
        target.write_text(target.read_text().replace(seed.find, seed.replace))
    return tree


def held_out_verdicts(tree: Path) -> dict[str, bool]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    completed = subprocess.run(
        [sys.executable, "-c", CASE_RUNNER, str(tree)],
        input=Path(FAMILY.cases_file).read_text(),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    verdicts = [json.loads(line) for line in completed.stdout.splitlines()]
    return {verdict["id"]: verdict["held"] for verdict in verdicts}


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
    cases = load_cases()
    assert len({case["id"] for case in cases}) == len(cases)
    for case in cases:
        assert ("expect" in case) != ("raises" in case), case["id"]
        assert case["call"].split(":")[0] in FAMILY.module_names


def test_the_clean_tree_holds_every_held_out_case(tmp_path: Path) -> None:
    verdicts = held_out_verdicts(build_tree(tmp_path))
    assert len(verdicts) == len(load_cases())
    assert [case for case, held in verdicts.items() if not held] == []


@pytest.mark.parametrize("defect", FAMILY.defects, ids=lambda d: d.id)
def test_each_seeded_tree_breaks_some_held_out_case(tmp_path: Path, defect: Defect) -> None:
    verdicts = held_out_verdicts(build_tree(tmp_path, defect))
    assert not all(verdicts.values())
