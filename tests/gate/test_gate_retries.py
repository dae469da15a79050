"""Retries: a record is written once, a retry follows only an infrastructure error, and a forged store fails."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from gate_helpers import local_session

from certlab_core._runtime.registry import Registry, discover
from certlab_core.evidence.integrity import attempt_problems, verify_store
from certlab_core.gate.store import seal_line

TOOLSET = """
from certlab_core.plugin.types.tool_world import OracleVerdict, WorldInstance

def build(task_input, seed):
    state = {"count": 0}

    def bump():
        state["count"] += 1
        return {"count": state["count"]}

    return WorldInstance(task={"goal": 2}, tools={"bump": bump}, snapshot=lambda: dict(state))

def oracle(task, snapshot):
    return OracleVerdict(passed=snapshot["count"] == task["goal"], detail=f"count {snapshot['count']}")
"""

AGENTS = """
import os, sys
from pathlib import Path

def good(task, tools, rng):
    for _ in range(task["goal"]):
        tools.call("bump")
    return {}

def sloppy(task, tools, rng):
    tools.call("bump")
    return {}

def infra_once(task, tools, rng):
    marker = Path(os.environ["CERTLAB_TEST_MARKERS"]) / str(rng.random())
    if not marker.exists():
        marker.write_text("seen")
        sys.exit(75)
    return good(task, tools, rng)
"""


def _run(folder: Path, baseline: str, candidate: str, retry: bool) -> Path:
    from certlab_core.gate.descriptor import load_descriptor
    from certlab_core.gate.manifest import build_manifest
    from certlab_core.gate.runner import plan_run, run_experiment
    from certlab_core.gate.store import create_run

    (folder / "toolset.py").write_text(textwrap.dedent(TOOLSET))
    (folder / "agents.py").write_text(textwrap.dedent(AGENTS))
    descriptor = {
        "schema": "certlab.experiment/1",
        "experiment": "retries",
        "task": {"world": "toolset:build", "input": {}},
        "oracle": "toolset:oracle",
        "arms": {"baseline": {"agent": f"agents:{baseline}"}, "candidate": {"agent": f"agents:{candidate}"}},
        "conditions": [{"name": "clean", "bucket": "benign"}],
        "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
        "n_per_arm": 3,
        "seed": 7,
        "budgets": {"tool_calls": 20, "model_steps": 10, "seconds": 5},
    }
    path = folder / "certlab.yaml"
    path.write_text(yaml.safe_dump(descriptor, sort_keys=False))
    registry: Registry = discover()
    manifest = build_manifest(load_descriptor(path), path, registry)
    store = create_run(folder / "runs", manifest)
    with local_session(2) as session:
        run_experiment(plan_run(manifest, registry), store, session, retry_infra=retry)
    return store


@pytest.fixture(scope="module")
def retried_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("retries")
    markers = folder / "markers"
    markers.mkdir()
    import os

    os.environ["CERTLAB_TEST_MARKERS"] = str(markers)
    try:
        return _run(folder, "infra_once", "sloppy", retry=True)
    finally:
        os.environ.pop("CERTLAB_TEST_MARKERS", None)


def raw(store: Path) -> list[str]:
    return (store / "trials.jsonl").read_text().splitlines()


def parsed(store: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in raw(store)]


def test_a_real_store_with_retries_verifies(retried_store: Path) -> None:
    lines = parsed(retried_store)
    baseline = sorted((line["id"], line["attempt"], line["outcome"]) for line in lines if line["arm"] == "baseline")
    assert baseline == [(f"baseline/clean/{i}", a, o) for i in range(3) for a, o in ((1, "error"), (2, "success"))]
    assert any(line["outcome"] == "failure" for line in lines)  # the candidate's failures were not retried
    assert verify_store(retried_store) == []


def _forge(lines: list[dict[str, Any]]) -> list[str]:
    return [seal_line({k: v for k, v in line.items() if k != "seal"}).rstrip("\n") for line in lines]


def test_a_failure_replaced_by_a_retry_fails_verification(retried_store: Path) -> None:
    lines = parsed(retried_store)
    failure = next(line for line in lines if line["outcome"] == "failure")
    # the failure is kept as attempt 1 and a "retry" that succeeded is appended
    retry = dict(failure, attempt=2, outcome="success", failure_mode=None)
    problems = attempt_problems(_forge([*lines, retry]))
    assert problems == [
        f"{failure['id']}: attempt 2 retried attempt 1 (line {lines.index(failure) + 1}), but it was a 'failure', "
        "not an infrastructure error; a retry is allowed only after an infrastructure error"
    ]


def test_a_failure_deleted_and_replaced_by_a_second_attempt_fails(retried_store: Path) -> None:
    lines = parsed(retried_store)
    failure = next(line for line in lines if line["outcome"] == "failure")
    forged = [line for line in lines if line is not failure] + [dict(failure, attempt=2, outcome="success")]
    assert any(
        "do not run 1, 2, ... without a gap: an attempt was removed" in p for p in attempt_problems(_forge(forged))
    )


def test_a_failure_relabelled_as_an_infrastructure_error_fails(retried_store: Path) -> None:
    lines = parsed(retried_store)
    failure = next(line for line in lines if line["outcome"] == "failure")
    relabelled = dict(failure, outcome="error", failure_mode=None, error="runner-broken: it broke, honestly")
    retry = dict(failure, attempt=2, outcome="success", failure_mode=None)
    forged = [relabelled if line is failure else line for line in lines] + [retry]
    problems = attempt_problems(_forge(forged))
    assert len(problems) == 1 and "the oracle judged it, so it ran to the end" in problems[0]
    exit_claim = dict(relabelled, error="infra-exit-code: the agent exited with 75, an infrastructure exit code")
    forged = [exit_claim if line is failure else line for line in lines] + [retry]
    assert any("but the agent exited with" in p for p in attempt_problems(_forge(forged)))


def test_a_record_written_twice_or_edited_or_out_of_order_fails(retried_store: Path) -> None:
    lines = parsed(retried_store)
    assert any("is written more than once" in p for p in attempt_problems(_forge([*lines, lines[0]])))
    text = raw(retried_store)
    edited = text[0].replace('"attempt":1', '"attempt":1 ', 1).replace('"seed":', '"seed": ', 1)
    tampered = json.loads(text[0])
    tampered["outcome"] = "success" if tampered["outcome"] != "success" else "failure"
    assert any(
        "its seal does not hold" in p
        for p in attempt_problems([json.dumps(tampered, separators=(",", ":"), sort_keys=True), *text[1:]])
    )
    assert attempt_problems([edited, *text[1:]]) == []  # spacing alone is not content
    first, second = (
        next(line for line in lines if line["id"] == "baseline/clean/0" and line["attempt"] == n) for n in (1, 2)
    )
    reordered = [line for line in lines if line["id"] != "baseline/clean/0"] + [second, first]
    assert any("was written before the attempt it retries" in p for p in attempt_problems(_forge(reordered)))
    retried_again = dict(second, outcome="error", failure_mode=None, error="runner-broken: x", oracle=None)
    third = dict(second, attempt=3)
    forged = [line for line in lines if line is not second] + [retried_again, third]
    assert any(
        "3 attempts; an infrastructure error is retried once at most" in p for p in attempt_problems(_forge(forged))
    )


def test_certlab_gate_refuses_a_store_with_a_forged_retry(retried_store: Path, tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    forged_store = tmp_path / "forged"
    shutil.copytree(retried_store, forged_store)
    lines = parsed(forged_store)
    failure = next(line for line in lines if line["outcome"] == "failure")
    relabelled = dict(failure, outcome="error", failure_mode=None, error="runner-broken: it broke, honestly")
    retry = dict(failure, attempt=2, outcome="success", failure_mode=None)
    forged = _forge([relabelled if line is failure else line for line in lines] + [retry])
    (forged_store / "trials.jsonl").write_text("\n".join(forged) + "\n")
    (forged_store / "decision.json").unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", "gate", str(forged_store), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    decision = json.loads(done.stdout)
    assert decision["verdict"] == "ERROR"
    assert any("the oracle judged it, so it ran to the end" in problem for problem in decision["problems"])


def test_a_coding_arm_retried_after_a_broken_grader_verifies() -> None:
    from certlab_core.sdk.canonical import sealed

    common = {"schema": "certlab.trial/1", "id": "baseline/clean/0", "identity": "i", "seed": 1, "grades": []}
    first = dict(
        common,
        attempt=1,
        outcome="error",
        failure_mode=None,
        error="grader-broken: grader acceptance broke: InstrumentError: moved since the lock",
        agent={"status": "completed", "exit_code": 0},
        oracle={"passed": False, "detail": "recorded by the coding arm even on errors"},
    )
    second = dict(common, attempt=2, outcome="success", failure_mode=None, error=None, oracle={"passed": True})
    lines = [json.dumps(sealed(first)), json.dumps(sealed(second))]
    assert attempt_problems(lines) == []
