"""A family whose visible suite was cut in half: the held-out cases still kill 95.7% of its mutants, its visible suite
alone 59.6%, and the visible threshold (``TaskFamily.visible_mutation_threshold``, 0.8 by default) catches it.

The fixture is the intervals family with every other visible test left out (13 of 25, the first kept), installed
as a third party's distribution would be (a package and its dist-info on the path) under the name
``intervals-halved``. Each seeded defect is still caught, so the instrument's proof holds; 28 of its 47 mutants
fail the visible suite and 45 fail it or a held-out case. Before the visible threshold, ``certlab prove --mutants``
said "prove: holds", exit 0, with no warning, even with ``--min-mutation-score 0.9``: a suite that lets plausible
wrong fixes look right to the agent passed as a sound instrument.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from certlab_intervals.plugin import FAMILY_DIR

from certlab_core.testing import run_certlab

HALVED = "intervals-halved"
SCORE_LINE = (
    f"mutants {HALVED}: 47 mutants: the visible suite kills 59.6% (28), the suite and held-out cases 95.7% (45); "
    "2 survive (thresholds: visible suite 80.0%, suite and held-out cases 90.0%)"
)
VISIBLE = f"family {HALVED}: the visible suite alone kills 59.6% of 47 mutants, below "

PLUGIN = '''
"""intervals with every other visible test cut: a family whose visible suite is too weak."""

from pathlib import Path

from certlab_core.plugin import TaskFamily, hookimpl
from certlab_intervals.plugin import DEFECTS, MODULE


@hookimpl
def certlab_task_families():
    return [
        TaskFamily.in_folder(
            Path(__file__).parent / "family",
            name="intervals-halved",
            version="1.0.0",
            description="intervals with every other visible test cut",
            allowed_paths=[MODULE],
            test_paths=["tests"],
            module_names=["intervals"],
            defects=DEFECTS,
        )
    ]
'''

CONFORMANCE = """
from certlab_core.testing import FamilyConformance


class TestHalved(FamilyConformance):
    family_name = "intervals-halved"
"""


def every_other_test(suite: str) -> str:
    """The suite's module header and its 1st, 3rd, 5th, ... test functions."""
    header, *tests = re.split(r"\n\n\n(?=def test_)", suite)
    assert len(tests) == 25, "the intervals suite changed: re-measure the figures of this file"
    return "\n\n\n".join([header, *tests[0::2]]).rstrip("\n") + "\n"


@pytest.fixture(scope="module")
def halved_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment where the halved family is installed, with a mutation cache of its own."""
    site = tmp_path_factory.mktemp("site")
    package = site / "certlab_halved_intervals"
    shutil.copytree(FAMILY_DIR, package / "family", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    suite = package / "family" / "tree" / "tests" / "test_intervals.py"
    suite.write_text(every_other_test(suite.read_text()))
    (package / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "certlab_halved_intervals-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: certlab-halved-intervals\nVersion: 1.0.0\n")
    (info / "entry_points.txt").write_text(f"[certlab.plugins]\n{HALVED} = certlab_halved_intervals\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    env["CERTLAB_CACHE_DIR"] = str(site / "cache")
    return env


@pytest.fixture(scope="module")
def refused_by_minimum(halved_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    minimum = ("--min-mutation-score", "0.9")
    return run_certlab("prove", "--family", HALVED, "--mutants", "--quiet", *minimum, env=halved_env)


def test_prove_min_mutation_score_refuses_a_visible_suite_below_the_family_visible_threshold(
    refused_by_minimum: subprocess.CompletedProcess[str],
) -> None:
    done = refused_by_minimum
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"prove {HALVED}: the clean tree passes 13 tests; all 6 seeded defects are caught" in done.stdout
    assert SCORE_LINE + " in " in done.stdout
    assert done.stdout.rstrip().endswith("prove: REFUSED")
    (problem,) = [line for line in done.stderr.splitlines() if line.startswith("problem: ")]
    assert problem.startswith(
        f"problem: {VISIBLE}80.0% (its visible threshold, binding under --min-mutation-score): plausible wrong "
        "fixes pass the tests an agent sees; it lets through: intervals.py:"
    )
    assert "(+7 more)" in problem  # 19 mutants get past the visible suite: 2 survivors, 17 only held-out cases kill


def test_prove_mutants_warns_that_the_visible_suite_is_below_its_visible_threshold(halved_env: dict[str, str]) -> None:
    done = run_certlab("prove", "--family", HALVED, "--mutants", env=halved_env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("prove: holds")
    assert SCORE_LINE + " in " in done.stdout
    (warning,) = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert warning.startswith(f"warning: {VISIBLE}its visible threshold 80.0%: plausible wrong fixes pass")
    assert "survivor intervals.py:" in done.stdout  # the diffs, unless --quiet


def bundle_trials(out: Path) -> list[object]:
    trials: list[object] = json.loads((out / "bundle.json").read_text())["trials"]
    return trials


def test_certify_refuses_it_from_the_cached_measurement(
    halved_env: dict[str, str], refused_by_minimum: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    """The proof's measurement is in the cache, so certify reuses it: refused before a single trial, exit 3."""

    def certify(out: Path, *minimums: str) -> subprocess.CompletedProcess[str]:
        args = ("--family", HALVED, "--agent", "oracle", "--out", str(out), "--quiet", "--sandbox", "none")
        return run_certlab("certify", *args, *minimums, env=halved_env)

    out = tmp_path / "cert"
    done = certify(out, "--min-mutation-score", "0.9")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("NOT certified: oracle fixed 0/0") and bundle_trials(out) == []
    bundle = json.loads((out / "bundle.json").read_text())
    record = bundle["instrument"][0]["mutation"]
    assert (record["source"], record["suite_score"], record["score"]) == ("cache", 0.5957, 0.9574)
    assert (record["visible_threshold"], record["visible_minimum"], record["minimum"]) == (0.8, 0.8, 0.9)
    assert len(record["refusals"]) == 1 and record["refusals"][0].startswith(VISIBLE)
    lenient = certify(tmp_path / "lenient", "--min-mutation-score", "0.9", "--min-visible-mutation-score", "0.5")
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    assert lenient.stdout.startswith("certified: oracle fixed 6/6")


def test_family_conformance_fails_the_halved_visible_suite_and_passes_the_combined_score(
    halved_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "test_halved_conformance.py").write_text(textwrap.dedent(CONFORMANCE))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "kill", "-rA", "--tb=line"]
    done = subprocess.run(
        [*command, "test_halved_conformance.py"], cwd=tmp_path, env=halved_env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr
    assert (
        "PASSED test_halved_conformance.py::TestHalved::"
        "test_suite_and_held_out_cases_kill_the_family_threshold_of_its_mutants" in done.stdout
    )
    assert (
        "FAILED test_halved_conformance.py::TestHalved::"
        "test_the_visible_suite_alone_kills_the_family_visible_threshold_of_its_mutants" in done.stdout
    )
    assert (
        "family intervals-halved: the visible suite alone kills 59.6% of its 47 mutants, less than its visible "
        "threshold 80.0%" in done.stdout
    )
