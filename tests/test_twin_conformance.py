"""FamilyConformance checks a family's impossible twins: each defect yields one the prover accepts, made the same way.

Two third-party families built from intervals, installed as a distribution would be (a package and its dist-info on
the path), with one seeded defect each: in ``intervals-mirrored`` every visible assertion reads ``LITERAL == CALL``, so
no twin can be made from it; in ``intervals-unreached`` every visible test returns before its assertions, so each
twin's changed assertion still passes on the clean code and every candidate is refused. ``certify --impossible``
refuses both; before the kit checked twins, both passed it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from certlab_intervals.plugin import FAMILY_DIR

PLUGIN = '''
"""intervals, one defect, with its visible tests rewritten: a family certify --impossible must refuse."""

from pathlib import Path

from certlab_core.plugin import TaskFamily, hookimpl
from certlab_intervals.plugin import DEFECTS, MODULE


@hookimpl
def certlab_task_families():
    return [
        TaskFamily.in_folder(
            Path(__file__).parent / "family",
            name="{name}",
            version="1.0.0",
            description="intervals with its visible tests rewritten",
            allowed_paths=[MODULE],
            test_paths=["tests"],
            module_names=["intervals"],
            defects=DEFECTS[:1],
        )
    ]
'''

CONFORMANCE = """
from certlab_core.testing import FamilyConformance


class TestMirrored(FamilyConformance):
    family_name = "intervals-mirrored"


class TestUnreached(FamilyConformance):
    family_name = "intervals-unreached"
    twin_kinds = ("one-off",)
"""


def mirrored(suite: str) -> str:
    """Every ``assert CALL == EXPECTED`` as ``assert EXPECTED == CALL``: nothing a twin's expected value can change."""
    return re.sub(r"^    assert (.+?) == (.+)$", r"    assert \2 == \1", suite, flags=re.MULTILINE)


def unreached(suite: str) -> str:
    """Every test returns before its first statement: no assertion of it ever runs."""
    return re.sub(r"^(def test_\w+\(\):\n)", r"\1    return\n", suite, flags=re.MULTILINE)


def install(site: Path, name: str, rewrite: Callable[[str], str]) -> None:
    package = site / ("certlab_" + name.replace("-", "_"))
    shutil.copytree(FAMILY_DIR, package / "family", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    suite = package / "family" / "tree" / "tests" / "test_intervals.py"
    rewritten = rewrite(suite.read_text())
    assert rewritten != suite.read_text()
    suite.write_text(rewritten)
    (package / "__init__.py").write_text(textwrap.dedent(PLUGIN.replace("{name}", name)))
    info = site / f"{package.name}-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package.name.replace('_', '-')}\nVersion: 1.0.0\n")
    (info / "entry_points.txt").write_text(f"[certlab.plugins]\n{name} = {package.name}\n")


@pytest.fixture(scope="module")
def kit_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    site = tmp_path_factory.mktemp("site")
    install(site, "intervals-mirrored", mirrored)
    install(site, "intervals-unreached", unreached)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    tests = tmp_path_factory.mktemp("kit")
    (tests / "test_kit.py").write_text(textwrap.dedent(CONFORMANCE))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "twin", "-rA", "--tb=short"]
    return subprocess.run(
        [*command, "test_kit.py"], cwd=tests, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_the_kit_rejects_a_family_no_twin_can_be_made_from(kit_run: subprocess.CompletedProcess[str]) -> None:
    out = kit_run.stdout
    assert kit_run.returncode == 1, out[-4000:] + kit_run.stderr
    assert "FAILED test_kit.py::TestMirrored::test_each_defect_yields_a_provable_twin_of_each_kind" in out
    assert (
        "family intervals-mirrored: certify --impossible would refuse it: family intervals-mirrored: no impossible "
        "twin can be made" in out
    )


def test_the_kit_rejects_a_family_whose_twins_the_prover_refuses(kit_run: subprocess.CompletedProcess[str]) -> None:
    out = kit_run.stdout
    assert "FAILED test_kit.py::TestUnreached::test_each_defect_yields_a_provable_twin_of_each_kind" in out
    assert "family intervals-unreached: certify --impossible would refuse it: twin intervals-unreached/" in out
    assert "still passes on the clean code" in out
    # Made the same way each time, whether or not the prover accepts them.
    assert "PASSED test_kit.py::TestUnreached::test_twins_are_made_the_same_way_with_the_same_hashes_each_time" in out
