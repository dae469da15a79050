"""The first story at full size (N=200 per arm, a timeout on the first reserve); coding arms graded by the graders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from gate_helpers import EXAMPLES, lines, run, write

from certlab_core.plugin.registry import Registry


def first_story(example: str) -> dict[str, Any]:
    """The example's experiment with its falsify condition alone: N=200 per arm, a timeout on the first reserve."""
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / example).read_text())
    data["conditions"] = [c for c in data["conditions"] if c["name"] == "reserve-timeout"]
    assert data["n_per_arm"] == 200
    return data


def test_a_against_b_at_n_200_blocks(registry: Registry, tmp_path: Path) -> None:
    store, decision = run(registry, write(tmp_path, first_story("a_vs_b.yaml")), tmp_path / "runs")
    assert decision["verdict"] == "BLOCK", decision["reasons"]
    (condition,) = decision["conditions"]
    assert condition["counts"]["baseline"] == {"successes": 200, "trials": 200}
    assert condition["counts"]["candidate"] == {"successes": 0, "trials": 200}
    assert condition["bounds"]["upper"] < -0.9
    assert len(lines(store)) == 400


def test_a_against_a_at_n_200_passes(registry: Registry, tmp_path: Path) -> None:
    _store, decision = run(registry, write(tmp_path, first_story("a_vs_a.yaml")), tmp_path / "runs")
    assert decision["verdict"] == "PASS", decision["reasons"]
    assert decision["conditions"][0]["bounds"]["lower"] > -0.1


def test_coding_arms_are_graded_by_the_family_graders(registry: Registry, tmp_path: Path) -> None:
    data = {
        "experiment": "intervals-oracle-vs-null",
        "task": {"family": "intervals", "defects": ["length-counts-end", "intersection-inverted"]},
        "oracle": "graders",
        "arms": {"baseline": {"adapter": "oracle"}, "candidate": {"adapter": "null"}},
        "conditions": [{"name": "clean", "bucket": "benign"}],
        "n_per_arm": 12,
        "budgets": {"seconds": 120},
    }
    store, decision = run(registry, write(tmp_path, data), tmp_path / "runs")
    assert decision["verdict"] == "BLOCK", decision
    found = lines(store)
    assert {(x["arm"], x["outcome"]) for x in found} == {("baseline", "success"), ("candidate", "failure")}
    null = next(x for x in found if x["arm"] == "candidate")
    assert null["failure_mode"] == "suite-failed" and null["grades"]
    assert null["events"] == [] and null["oracle"]["passed"] is False
