"""certlab minimize: ddmin over a failed trial's injected faults, re-running it; 1-minimal or only reduced."""

from __future__ import annotations

import json
from pathlib import Path

from certlab_diagnosis.minimize import ddmin
from diagnosis_experiments import FRAGILE_AGENTS, SIX_FAULTS, run_certlab, run_experiment


def test_ddmin_finds_the_two_faults_of_six_that_matter() -> None:
    asked: list[tuple[int, ...]] = []

    def fails(subset: tuple[int, ...]) -> bool:
        asked.append(subset)
        return {1, 4} <= set(subset)

    assert ddmin(range(6), fails) == (1, 4)
    assert len(set(asked)) == 15  # distinct subsets tried, of the 63 non-empty ones


def test_ddmin_of_one_fault_and_of_a_lone_culprit() -> None:
    assert ddmin([3], lambda s: 3 in s) == (3,)
    assert ddmin(range(8), lambda s: 5 in s) == (5,)


def _six_faults(tmp_path: Path, agent: str) -> Path:
    folder = tmp_path / agent
    folder.mkdir()
    (folder / "fragile_agents.py").write_text(FRAGILE_AGENTS, encoding="utf-8")
    done, store = run_experiment(folder, SIX_FAULTS.replace("AGENT", agent))
    assert "verdict:" in done.stdout, done.stdout + done.stderr
    return store


def test_an_agent_that_fails_only_under_two_of_six_faults_shrinks_to_those_two(tmp_path: Path) -> None:
    store = _six_faults(tmp_path, "one_retry")
    out = tmp_path / "min.json"
    done = run_certlab("minimize", str(store), "candidate/six-faults/0", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert [(f["index"], f["fault"], f["tool"]) for f in result["kept"]] == [
        (1, "tool_timeout", "reserve"),
        (4, "tool_error_once", "confirm"),
    ]
    assert [f["index"] for f in result["removed"]] == [0, 2, 3, 5]
    assert result["result"] == "1-minimal"
    assert result["fingerprint"].endswith("end of calls, right after confirm -> error ToolUnavailable (injected)")
    assert "kept     #1 tool_timeout on reserve" in done.stdout
    assert "removed  #0 latency on stock" in done.stdout
    assert "minimize: 1-minimal" in done.stdout
    assert result["reruns"] == len(result["checks"]) >= 5


def test_an_agent_that_does_not_repeat_itself_is_only_reduced(tmp_path: Path) -> None:
    store = _six_faults(tmp_path, "forgetful")
    out = tmp_path / "min.json"
    done = run_certlab("minimize", str(store), "candidate/six-faults/1", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["result"] == "reduced"
    assert "does not repeat itself" in result["note"]


def test_a_passing_trial_cannot_be_minimised(tmp_path: Path) -> None:
    store = _six_faults(tmp_path, "careful")
    done = run_certlab("minimize", str(store), "candidate/six-faults/0", "--out", str(tmp_path / "m.json"))
    assert done.returncode == 4 and "did not fail" in done.stderr
