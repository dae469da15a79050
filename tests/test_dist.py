"""certlab-all: the kernel and every built-in plugin as one distribution, installed from wheels without network.

The fresh environment (``freshenv``) is made by installing ``certlab-all`` alone (and the
third party's family) from the wheelhouse; here it certifies intervals with the oracle, and
certlab-all is checked to depend on exactly the distributions this repository holds.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from freshenv import ALL_DISTRIBUTION, REPO, FreshEnv, editable_distributions
from freshenv import shared_fresh_env as _shared_fresh_env


@pytest.fixture(scope="session")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    return _shared_fresh_env(tmp_path_factory)


def test_certlab_all_depends_on_every_distribution_of_the_repository_at_its_version() -> None:
    meta = tomllib.loads((REPO / "plugins" / "all" / "pyproject.toml").read_text())["project"]
    assert meta["name"] == ALL_DISTRIBUTION
    wanted = set()
    for name, folder in editable_distributions():
        if name == ALL_DISTRIBUTION:
            continue
        version = tomllib.loads((folder / "pyproject.toml").read_text())["project"]["version"]
        wanted.add(f"{name}=={version}")
    assert set(meta["dependencies"]) == wanted


def test_make_dist_builds_every_distribution() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert (
        "\ndist: $(STAMP)" in makefile and "-w dist $$(sed -n 's/^-e \\(.*\\)/\\1/p' requirements-dev.txt)" in makefile
    )


def test_installed_through_certlab_all_certlab_certifies_intervals(fresh: FreshEnv, tmp_path: Path) -> None:
    (site_packages,) = fresh.venv.glob("lib/python3*/site-packages")
    installed = {p.name.split("-")[0].lower() for p in site_packages.glob("*.dist-info")}
    for name, _folder in editable_distributions():
        assert name.replace("-", "_") in installed, f"certlab-all did not bring {name}"
    out = tmp_path / "certification"
    done = fresh.certlab("certify", "--family", "intervals", "--agent", "oracle", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("certified: oracle fixed 6/6 (0 unavailable)")
    bundle = json.loads((out / "bundle.json").read_text())
    assert {p["distribution"] for p in bundle["plugins"]} >= {"certlab-intervals", "certlab-policy", "certlab-suite"}
