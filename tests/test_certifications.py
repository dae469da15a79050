"""The published record: every committed certification regrades consistent, and COMPARISON.md and
registry.json are exactly what the committed bundles compile to."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, run_certlab

ROOT = REPO / "certifications"
RUNS = sorted(p.name for p in ROOT.iterdir() if (p / "bundle.json").is_file()) if ROOT.is_dir() else []


def test_the_published_runs_exist_and_match_runs_yaml() -> None:
    import yaml

    listed = sorted(r["run"] for r in yaml.safe_load((ROOT / "runs.yaml").read_text())["runs"])
    assert listed == RUNS, "run 'make certifications' to regenerate the published runs"


@pytest.mark.parametrize("run", RUNS)
def test_every_published_certification_regrades_consistent(run: str) -> None:
    done = run_certlab("regrade", str(ROOT / run), "--quiet")
    assert done.returncode == 0, (
        f"certifications/{run} regrades {done.stdout.strip().splitlines()[-1:] or done.stderr}; "
        "a deliberate change to a family or grader needs 'make certifications' and a commit saying why"
    )


def test_comparison_and_registry_are_compiled_from_the_bundles() -> None:
    done = run_certlab("compare", str(ROOT), "--check")
    assert done.returncode == 0, done.stderr
    registry = json.loads((ROOT / "registry.json").read_text())
    assert [r["run"] for r in registry["runs"]] == RUNS


def test_constructed_agents_score_what_they_must_in_the_record() -> None:
    scores = {}
    for run in RUNS:
        bundle = json.loads((ROOT / run / "bundle.json").read_text())
        scores[bundle["agent"]["name"]] = (bundle["summary"], {t["failure_mode"] for t in bundle["trials"]})
    assert scores["oracle"][0]["fixed"] == scores["oracle"][0]["scheduled"] == 18
    assert scores["null"][0]["fixed"] == 0
    assert scores["test-deleter"][1] == {"policy-tests-modified"}
    assert scores["forbidden-file"][1] == {"policy-planted-file"}


@pytest.mark.parametrize("run", RUNS)
def test_every_published_certification_is_signed_by_the_committed_key(run: str) -> None:
    """certifications/certlab.pub verifies each run's evidence.dsse.json and every file's hash (docs/trust-model.md)."""
    done = run_certlab("verify", str(ROOT / run), "--pubkey", str(ROOT / "certlab.pub"))
    assert done.returncode == 0, (
        f"certifications/{run}: {done.stderr.strip()}; re-sign the published runs with "
        "'python tools/publish_certifications.py --sign-only' and commit certifications/"
    )


def test_no_private_key_is_published() -> None:
    for path in ROOT.rglob("*"):
        if path.is_file():
            assert b"PRIVATE KEY" not in path.read_bytes(), f"{path} holds a private key"
