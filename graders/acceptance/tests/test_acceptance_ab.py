"""A user's own task as the task of an A/B experiment: the overfitting candidate is blocked by its held-out cases."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from acceptance_helpers import FIX_COMMAND, OVERFIT_COMMAND, certlab, locked_run, scaffold_task


def test_an_overfitting_candidate_is_blocked_on_a_user_task(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "thermo")
    descriptor = {
        "schema": "certlab.experiment/1",
        "experiment": "thermo-fix-vs-overfit",
        "task": {"family": "thermo"},
        "oracle": "graders",
        "arms": {
            "baseline": {"adapter": "command", "args": [FIX_COMMAND], "label": "fixes the formula"},
            "candidate": {"adapter": "command", "args": [OVERFIT_COMMAND], "label": "special-cases the tests"},
        },
        "conditions": [{"name": "clean", "bucket": "benign"}],
        "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
        "n_per_arm": 10,
        "seed": 3,
        "budgets": {"seconds": 60},
    }
    (task / "certlab.yaml").write_text(yaml.safe_dump(descriptor, sort_keys=False))
    assert certlab("predict", str(task), "--expect", "the candidate is blocked").returncode == 0
    done = locked_run(task, "run", "certlab.yaml", "--out", "runs", "--quiet", cwd=task)
    assert done.returncode == 1, done.stdout + done.stderr
    (store,) = (task / "runs").iterdir()
    lines = [json.loads(line) for line in (store / "trials.jsonl").read_text().splitlines()]
    by_arm = {
        arm: sorted({(line["outcome"], line["failure_mode"]) for line in lines if line["arm"] == arm})
        for arm in ("baseline", "candidate")
    }
    assert by_arm == {"baseline": [("success", None)], "candidate": [("failure", "overfit-to-visible-tests")]}
    assert all([g["grader"] for g in line["grades"]] == ["policy", "suite", "acceptance"] for line in lines)
    assert all(line["grades"][2]["data"]["locked"] for line in lines)
    assert json.loads((store / "decision.json").read_text())["verdict"] == "BLOCK"
    leaks = certlab("leakscan", str(store), "--task", str(task))
    assert leaks.returncode == 0, leaks.stdout
    assert certlab("predict", str(task), "--check").returncode == 0


def test_cases_moved_after_the_lock_refuse_the_experiment(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "thermo")
    descriptor = {
        "schema": "certlab.experiment/1",
        "experiment": "thermo-moved",
        "task": {"family": "thermo"},
        "oracle": "graders",
        "arms": {
            "baseline": {"adapter": "command", "args": [FIX_COMMAND]},
            "candidate": {"adapter": "command", "args": [FIX_COMMAND]},
        },
        "conditions": [{"name": "clean", "bucket": "benign"}],
        "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
        "n_per_arm": 2,
        "seed": 3,
        "budgets": {"seconds": 60},
    }
    (task / "certlab.yaml").write_text(yaml.safe_dump(descriptor, sort_keys=False))
    assert certlab("lock", str(task)).returncode == 0
    cases = task / "cases" / "acceptance.jsonl"
    cases.write_text(cases.read_text() + "\n")
    done = certlab("run", "certlab.yaml", "--out", "runs", "--quiet", cwd=task)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "the held-out cases file changed" in done.stderr and "ERROR" in done.stderr
    assert not list((task / "runs").glob("*/trials.jsonl")) or all(
        not p.read_text() for p in (task / "runs").glob("*/trials.jsonl")
    )
