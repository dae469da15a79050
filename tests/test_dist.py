"""certlab-all: the kernel and every built-in plugin as one distribution, installed from wheels without network.

The fresh environment (``freshenv``) is made by installing ``certlab-all`` alone (and the
third party's family) from the wheelhouse; here it certifies intervals with the oracle and runs the demo, and
certlab-all is checked to depend on exactly the distributions this repository holds.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from freshenv import ALL_DISTRIBUTION, REPO, FreshEnv, editable_distributions, is_test_support
from freshenv import shared_fresh_env as _shared_fresh_env


@pytest.fixture(scope="session")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    return _shared_fresh_env(tmp_path_factory)


def test_certlab_all_depends_on_every_distribution_of_the_repository_at_its_version() -> None:
    meta = tomllib.loads((REPO / "plugins" / "all" / "pyproject.toml").read_text())["project"]
    assert meta["name"] == ALL_DISTRIBUTION
    wanted = set()
    for name, folder in editable_distributions():
        if name == ALL_DISTRIBUTION or is_test_support(folder):
            continue
        version = tomllib.loads((folder / "pyproject.toml").read_text())["project"]["version"]
        wanted.add(f"{name}=={version}")
    assert set(meta["dependencies"]) == wanted


def test_the_scripted_model_servers_are_test_support_outside_certlab_all_and_the_demo() -> None:
    # Installed for the tests (requirements-dev.txt), never for a user: no plugin, not in certlab-all or make demo.
    folder = REPO / "plugins" / "scripted_models"
    meta = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    assert is_test_support(folder) and "entry-points" not in meta
    assert ("certlab-scripted-models", folder) in editable_distributions()
    everyone = tomllib.loads((REPO / "plugins" / "all" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in everyone if d.startswith("certlab-scripted-models")]
    assert "plugins/scripted_models" not in (REPO / "requirements-demo.txt").read_text()


def test_make_demo_installs_exactly_the_demo_and_what_it_depends_on() -> None:
    # requirements-demo.txt (what make demo installs) is the demo's dependency closure among our distributions.
    def meta(folder: Path) -> dict[str, Any]:
        project: dict[str, Any] = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        return project

    ours = {meta(folder)["name"]: folder for _name, folder in editable_distributions()}
    closure, todo = set(), ["certlab-demo"]
    while todo:
        name = todo.pop()
        if name not in closure:
            closure.add(name)
            needs = [d.split(">")[0].split("=")[0] for d in meta(ours[name]).get("dependencies", [])]
            todo += [need for need in needs if need in ours]
    lines = (REPO / "requirements-demo.txt").read_text().splitlines()
    listed = {meta(REPO / line[3:])["name"] for line in lines if line.startswith("-e ")}
    assert listed == closure


def test_make_dist_builds_every_distribution_with_only_what_building_needs() -> None:
    # What make would run from nothing (-B): a small venv with the build backend, then one wheel per distribution;
    # never the development venv, which took minutes to make before a single wheel was built.
    done = subprocess.run(["make", "-n", "-B", "dist"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    commands = done.stdout
    assert ".venv/bin/" not in commands and "-r requirements" not in commands, commands
    assert ".venv-build/bin/python -m pip wheel -q --no-deps --no-build-isolation -w dist" in commands, commands
    assert "'setuptools>=77' wheel" in commands, commands


def test_installed_through_certlab_all_certlab_certifies_intervals(fresh: FreshEnv, tmp_path: Path) -> None:
    (site_packages,) = fresh.venv.glob("lib/python3*/site-packages")
    installed = {p.name.split("-")[0].lower() for p in site_packages.glob("*.dist-info")}
    for name, folder in editable_distributions():
        brought = name.replace("-", "_") in installed
        if is_test_support(folder):
            assert not brought, f"certlab-all brought {name}, which is test support"
        else:
            assert brought, f"certlab-all did not bring {name}"
    out = tmp_path / "certification"
    done = fresh.certlab("certify", "--family", "intervals", "--agent", "oracle", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("certified: oracle fixed 6/6 (0 unavailable)")
    bundle = json.loads((out / "bundle.json").read_text())
    assert {p["distribution"] for p in bundle["plugins"]} >= {"certlab-intervals", "certlab-policy", "certlab-suite"}


def test_installed_through_certlab_all_the_demo_runs_from_its_wheel(fresh: FreshEnv, tmp_path: Path) -> None:
    # The demo is a distribution of its own (certlab-demo); its example files are package data, so it runs
    # from the installed wheel in a folder that is not a checkout.
    (site_packages,) = fresh.venv.glob("lib/python3*/site-packages")
    shipped = site_packages / "certlab_demo" / "examples" / "retry" / "a_vs_b.yaml"
    assert shipped.is_file() and not shipped.is_symlink()
    assert shipped.read_bytes() == (REPO / "examples" / "retry" / "a_vs_b.yaml").read_bytes()
    done = fresh.certlab("demo", "--keep", str(tmp_path / "demo"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "demo: all " in done.stdout and " steps held" in done.stdout


def test_every_distribution_asks_for_a_setuptools_that_reads_its_license_field() -> None:
    """A ``license = "MIT"`` string (PEP 639) needs setuptools 77 or later; the pyprojects asked for 68, which
    fails to build them where the build is not isolated (``pip wheel --no-build-isolation``, as the Makefile does)."""
    checked = 0
    for pyproject in REPO.glob("**/pyproject.toml"):
        if {".venv", "build", ".wheelhouse"} & set(pyproject.relative_to(REPO).parts):
            continue
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        if not isinstance(document.get("project", {}).get("license"), str):
            continue
        requires = document["build-system"]["requires"]
        floor = next(r for r in requires if r.startswith("setuptools"))
        version = tuple(int(x) for x in floor.partition(">=")[2].split(".") if x)
        assert version >= (77,), f"{pyproject.relative_to(REPO)}: {floor}"
        checked += 1
    assert checked >= 30
