"""A third party's family used the way one published on PyPI is: wheel, fresh environment, list, certify.

``examples/thirdparty_family`` is built into a wheel and installed without network,
together with certlab and its plugins from the local wheelhouse, into a fresh virtual
environment beside certlab (see ``freshenv``); there its own ``certlab`` lists and
certifies the family, and the family's own tests pass against the installed wheel.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from freshenv import EXAMPLE, EXAMPLE_DISTRIBUTION, REPO, FreshEnv, example_version, is_test_support, run
from freshenv import shared_fresh_env as _shared_fresh_env

FAMILY = "roman"
PACKAGE = "certlab_roman"
DEFECTS = 3


@pytest.fixture(scope="session")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    return _shared_fresh_env(tmp_path_factory)


def test_the_wheel_ships_every_family_file_and_the_entry_point(fresh: FreshEnv) -> None:
    assert fresh.example_wheel.name == f"certlab_family_roman-{example_version()}-py3-none-any.whl"
    with zipfile.ZipFile(fresh.example_wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        declared = archive.read(entry_points).decode()
    family_dir = EXAMPLE / PACKAGE / "family"
    expected = {
        f"{PACKAGE}/family/{path.relative_to(family_dir).as_posix()}"
        for path in family_dir.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert {n for n in names if n.startswith(f"{PACKAGE}/family/")} == expected
    assert f"{PACKAGE}/family/tree/tests/test_roman.py" in expected
    assert f"{PACKAGE}/plugin.py" in names
    assert "[certlab.plugins]\nroman = certlab_roman.plugin" in declared


def test_certlab_and_its_plugins_are_installed_from_wheels_not_from_this_checkout(fresh: FreshEnv) -> None:
    (site_packages,) = fresh.venv.glob("lib/python3*/site-packages")
    assert (site_packages / "certlab_core" / "cli" / "__init__.py").is_file()
    assert (site_packages / PACKAGE / "family" / "tree" / "roman.py").is_file()
    installed = {p.name.split("-")[0].lower() for p in site_packages.glob("*.dist-info")}
    for name, folder in [*fresh.distributions, (EXAMPLE_DISTRIBUTION, EXAMPLE)]:
        if is_test_support(folder):  # certlab-all never brings it
            assert name.replace("-", "_") not in installed, name
        else:
            assert name.replace("-", "_") in installed, name
    links = [
        p.name
        for p in site_packages.iterdir()
        if p.name.startswith("__editable__") or (p.suffix == ".pth" and str(REPO) in p.read_text())
    ]
    assert links == [], "an editable install leaked into the fresh environment"


def test_certlab_plugins_lists_the_family_with_its_distribution_and_version(fresh: FreshEnv) -> None:
    completed = fresh.certlab("plugins")
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == "", "a plugin failed to load in the fresh environment"
    (line,) = [line for line in completed.stdout.splitlines() if line.split()[:1] == [FAMILY]]
    assert line.split()[1:3] == [EXAMPLE_DISTRIBUTION, example_version()]
    assert line.endswith(f"task family: {FAMILY}")


def test_certlab_certify_certifies_the_family(fresh: FreshEnv, tmp_path: Path) -> None:
    out = tmp_path / "certification"
    completed = fresh.certlab("certify", "--family", FAMILY, "--agent", "oracle", "--out", str(out), "--quiet")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.startswith(f"certified: oracle fixed {DEFECTS}/{DEFECTS} (0 unavailable)")
    bundle = json.loads((out / "bundle.json").read_text())
    assert bundle["summary"] == {"scheduled": DEFECTS, "fixed": DEFECTS, "graded": DEFECTS, "unavailable": 0}
    assert len(bundle["trials"]) == DEFECTS
    assert {t["verdict"] for t in bundle["trials"]} == {"fixed"}
    (family,) = bundle["families"]
    assert (family["name"], family["distribution"], family["distribution_version"]) == (
        FAMILY,
        EXAMPLE_DISTRIBUTION,
        example_version(),
    )
    assert {"name": FAMILY, "distribution": EXAMPLE_DISTRIBUTION, "version": example_version()} in bundle["plugins"]
    (proof,) = bundle["instrument"]
    assert proof["holds"] and len(proof["seeded"]) == DEFECTS
    assert len({s["defect_class"] for s in proof["seeded"]}) == DEFECTS
    assert bundle["environment"]["distributions"][EXAMPLE_DISTRIBUTION] == example_version()
    assert (out / "CONTRACT.md").is_file()


def test_the_family_passes_its_own_tests_and_the_conformance_suite(fresh: FreshEnv) -> None:
    """The family's tests/ run as its author runs them, against the installed wheel (the copy has no package)."""
    assert not (fresh.example_copy / PACKAGE).exists()
    pytest_command = [str(fresh.bin / "pytest"), "-v", "-p", "no:cacheprovider"]
    completed = run(pytest_command, cwd=fresh.example_copy, env=fresh.env())
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr
    passed = [line.split()[0] for line in completed.stdout.splitlines() if line.endswith("%]") and " PASSED " in line]
    conformance = {name.rsplit("::", 1)[1] for name in passed if "::TestConformance::" in name}
    assert {
        "test_clean_tree_passes_its_suite",
        "test_each_seeded_tree_fails_its_suite",
        "test_oracle_fixes_each_defect",
        "test_null_agent_fixes_none",
        "test_calibration_holds",
    } <= conformance
    assert sum("test_each_seeded_tree_breaks_some_held_out_case[" in name for name in passed) == DEFECTS
