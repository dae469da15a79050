"""A coding trial's time: its agent is held to the seconds budget, its grading is not charged to it."""

from __future__ import annotations

from pathlib import Path

import pytest
from gate_helpers import REPO, lines, run, write

from certlab_core._runtime.registry import Registry
from certlab_core.gate import runner

CLEAN = REPO / "task_families" / "intervals" / "certlab_intervals" / "family" / "tree" / "intervals.py"
SUITE_S = 7.0  # the fix's pause when the suite's pytest imports it (the held-out cases import it at once)


def slow_to_import_fix(folder: Path) -> Path:
    """An agent that returns at once with the family's own fix, whose suite then takes SUITE_S longer."""
    pause = f"import sys, time\nif 'pytest' in sys.modules:\n    time.sleep({SUITE_S})"
    agent = folder / "slow_fix.sh"
    agent.write_text(f'#!/bin/sh\n{{ cat "{CLEAN}"; printf "%s\\n" "{pause}"; }} > intervals.py\n')
    agent.chmod(0o755)
    return agent


def coding_arms(folder: Path) -> Path:
    return write(
        folder,
        {
            "experiment": "slow-grading",
            "task": {"family": "intervals", "defects": ["length-counts-end"]},
            "oracle": "graders",
            "arms": {
                "baseline": {"adapter": "oracle"},
                "candidate": {"adapter": "command", "args": [str(slow_to_import_fix(folder))]},
            },
            "conditions": [{"name": "clean", "bucket": "benign"}],
            "n_per_arm": 1,
            "budgets": {"seconds": 1},
        },
    )


def test_grading_past_the_agents_budget_is_not_charged_to_the_agent(registry: Registry, tmp_path: Path) -> None:
    # The trial's process was killed at the budget plus 5 s, grading included: an agent that returned a right fix
    # at once, its suite run in 7 s, was recorded agent-timeout with its seconds budget exceeded.
    store, _decision = run(registry, coding_arms(tmp_path), tmp_path / "runs")
    candidate = next(x for x in lines(store) if x["arm"] == "candidate")
    assert (candidate["outcome"], candidate["budget_exceeded"], candidate["agent"]["status"]) == (
        "success",
        None,
        "completed",
    ), candidate


def test_a_coding_trial_past_its_backstop_is_an_error_of_the_harness_not_a_failure_of_the_agent(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if a grader had hung: the trial's limit (its agent's budget and every grader's limit) made shorter than
    # its grading. The agent had returned in time, so the trial is an error (the run's verdict ERROR), never a
    # failure of the agent's.
    monkeypatch.setattr(runner, "trial_time_limit_s", lambda _seconds, _graders: 2.0)
    store, decision = run(registry, coding_arms(tmp_path), tmp_path / "runs")
    candidate = next(x for x in lines(store) if x["arm"] == "candidate")
    assert candidate["outcome"] == "error" and candidate["error"].startswith("runner-broken: the trial ran past")
    assert decision["verdict"] == "ERROR"
