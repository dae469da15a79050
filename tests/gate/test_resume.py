"""Crash-safe runs, tested with real signals: kill -9 then --resume, a torn last line, a second writer, Ctrl-C."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import CERTLAB_AS_IN_A_TERMINAL, WaitingAgent
from gate_helpers import write, write_module

from certlab_core.gate.manifest import ARMS
from certlab_core.gate.store import DECISION, TRIALS, seal_line

# Each trial takes a little while, so a signal lands while the run is writing; the candidate fails
# on some seeds (its random stream is the trial's seed), so a resumed run that ran a trial twice or
# lost one would count differently from an uninterrupted run.
SLOW_TOOLSET = """
import time

from certlab_core.plugin.types.tool_world import OracleVerdict, WorldInstance

def build(task_input, seed):
    state = {"on": False}

    def switch(on):
        state["on"] = bool(on)
        return {"on": state["on"]}

    return WorldInstance(task={"want": True}, tools={"switch": switch}, snapshot=lambda: dict(state))

def oracle(task, snapshot):
    return OracleVerdict(passed=snapshot["on"] == task["want"])

def steady(task, tools, rng):
    time.sleep(0.25)
    tools.call("switch", on=True)
    return {}

def shaky(task, tools, rng):
    time.sleep(0.25)
    if rng.random() < 0.6:
        tools.call("switch", on=True)
    return {}
"""

N_PER_ARM = 8
SCHEDULED = 2 * N_PER_ARM


def slow_experiment(folder: Path, n_per_arm: int = N_PER_ARM) -> Path:
    write_module(folder, "slow", SLOW_TOOLSET)
    return write(
        folder,
        {
            "schema": "certlab.experiment/1",
            "experiment": "resume-exp",
            "task": {"world": "slow:build", "input": {}},
            "oracle": "slow:oracle",
            "arms": {
                "baseline": {"agent": "slow:steady", "label": "steady"},
                "candidate": {"agent": "slow:shaky", "label": "shaky"},
            },
            "conditions": [{"name": "plain", "bucket": "falsify", "faults": []}],
            "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
            "n_per_arm": n_per_arm,
            "seed": 3,
            "budgets": {"tool_calls": 10, "model_steps": 10, "seconds": 10},
        },
    )


def certlab_argv(*args: str) -> list[str]:
    return [*CERTLAB_AS_IN_A_TERMINAL, *args]


def finish(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(certlab_argv(*args), capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


def start_run(cwd: Path, out: str) -> subprocess.Popen[str]:
    # Killed with SIGKILL, it cannot delete its temp folders: they are left in the test's folder, not the host's /tmp.
    (cwd / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen(
        certlab_argv("run", "certlab.yaml", "--out", out, "-q", "-w", "2"),
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(cwd / "tmp")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a terminal's job is
    )


def store_of(cwd: Path, out: str) -> Path:
    (store,) = (cwd / out).iterdir()
    return store


def wait_for_lines(runner: subprocess.Popen[str], cwd: Path, out: str, count: int) -> Path:
    """The run store once ``count`` trials are recorded (the runner still running)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert runner.poll() is None, "the run ended before it could be interrupted"
        stores = list((cwd / out).iterdir()) if (cwd / out).is_dir() else []
        if stores and (stores[0] / TRIALS).is_file() and (stores[0] / TRIALS).read_bytes().count(b"\n") >= count:
            return stores[0]
        time.sleep(0.05)
    raise AssertionError("the run recorded too few trials in time")


def trial_ids(store: Path) -> collections.Counter[str]:
    return collections.Counter(json.loads(raw)["id"] for raw in (store / TRIALS).read_text().splitlines())


def counts(decision: dict[str, Any]) -> list[Any]:
    return [(c["name"], c["counts"], c["verdict"]) for c in decision["conditions"]]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("whole")
    slow_experiment(folder)
    done = finish("run", "certlab.yaml", "--out", "runs", "-q", cwd=folder)
    assert done.returncode in (0, 1, 2), done.stderr
    decision: dict[str, Any] = json.loads((store_of(folder, "runs") / DECISION).read_text())
    return decision


def test_kill_9_then_resume_records_every_trial_once_and_gives_the_uninterrupted_verdict(
    tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    """kill -9 mid-run, with the last record torn as a kill during its write leaves it; --resume completes the run."""
    slow_experiment(tmp_path)
    runner = start_run(tmp_path, "runs")
    store = wait_for_lines(runner, tmp_path, "runs", 4)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    assert not (store / DECISION).exists()
    lines = (store / TRIALS).read_text().splitlines(keepends=True)
    recorded = {json.loads(line)["id"] for line in lines}
    assert 4 <= len(lines) < SCHEDULED
    # The record of a trial not yet recorded, cut in the middle of its write.
    victim = next(f"{arm}/plain/{i}" for i in range(N_PER_ARM) for arm in ARMS if f"{arm}/plain/{i}" not in recorded)
    forged = json.loads(lines[0])
    forged["id"], forged["arm"], forged["index"] = victim, victim.split("/")[0], int(victim.rsplit("/", 1)[1])
    torn = seal_line(forged)
    with (store / TRIALS).open("a") as handle:
        handle.write(torn[: len(torn) // 2])
    resumed = finish("run", "--resume", str(store), "-q", cwd=tmp_path)
    assert resumed.returncode == uninterrupted["exit_code"], resumed.stdout + resumed.stderr
    assert f"resuming {store}: {len(lines)} of {SCHEDULED} trials recorded" in resumed.stderr
    assert "a torn last line is cut" in resumed.stderr
    ids = trial_ids(store)
    assert len(ids) == SCHEDULED and set(ids.values()) == {1}  # every scheduled trial, each recorded once
    decision = json.loads((store / DECISION).read_text())
    assert counts(decision) == counts(uninterrupted) and decision["verdict"] == uninterrupted["verdict"]
    gate = finish("gate", str(store), cwd=tmp_path)
    assert gate.returncode == uninterrupted["exit_code"] and "problem:" not in gate.stdout


def test_a_second_runner_on_the_same_store_refuses_in_one_line(tmp_path: Path) -> None:
    slow_experiment(tmp_path, n_per_arm=60)  # long enough to outlast the second runner's start
    runner = start_run(tmp_path, "runs")
    try:
        store = wait_for_lines(runner, tmp_path, "runs", 1)
        second = finish("run", "--resume", str(store), "-q", cwd=tmp_path)
        assert second.returncode == 4, second.stdout + second.stderr
        refusal = [line for line in second.stderr.splitlines() if line.startswith("certlab: error:")]
        assert len(refusal) == 1 and "another certlab run is writing this run store" in refusal[0]
    finally:
        runner.kill()
        runner.wait(timeout=30)
    assert sum(trial_ids(store).values()) == len(trial_ids(store))  # the second runner wrote nothing


@pytest.mark.parametrize(("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_sigint_or_sigterm_says_how_many_trials_are_recorded_and_how_to_resume(
    tmp_path: Path, uninterrupted: dict[str, Any], stop: signal.Signals, code: int
) -> None:
    # SIGTERM (a cancelled CI job, timeout, docker stop) killed the run where it stood, saying nothing. Sent to
    # the whole group (Ctrl-C; timeout's SIGTERM), it killed each arm's zygote alone, which left its calls' temp
    # folder behind.
    slow_experiment(tmp_path)
    runner = start_run(tmp_path, "runs")
    store = wait_for_lines(runner, tmp_path, "runs", 2)
    os.killpg(runner.pid, stop)
    _out, err = runner.communicate(timeout=60)
    assert runner.returncode == code, err
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == []
    recorded = len(trial_ids(store))
    where = store.relative_to(tmp_path)  # as the run was given it: relative to its working folder
    expected = f"interrupted: {recorded} of {SCHEDULED} trials recorded; resume with certlab run --resume {where}"
    assert expected in err.splitlines()[-1]
    assert not (store / DECISION).exists()
    resumed = finish("run", "--resume", str(store), "-q", cwd=tmp_path)
    assert resumed.returncode == uninterrupted["exit_code"], resumed.stderr
    assert counts(json.loads((store / DECISION).read_text())) == counts(uninterrupted)


def test_resume_refuses_a_finished_run_and_an_edited_store(tmp_path: Path, uninterrupted: dict[str, Any]) -> None:
    slow_experiment(tmp_path)
    done = finish("run", "certlab.yaml", "--out", "runs", "-q", cwd=tmp_path)
    store = store_of(tmp_path, "runs")
    assert done.returncode == uninterrupted["exit_code"]
    finished = finish("run", "--resume", str(store), cwd=tmp_path)
    assert finished.returncode == 4 and "this run is finished" in finished.stderr
    (store / DECISION).unlink()
    lines = (store / TRIALS).read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace('"outcome":"', '"outcome":"x', 1)  # edited, not resealed
    (store / TRIALS).write_text("".join(lines))
    edited = finish("run", "--resume", str(store), cwd=tmp_path)
    assert edited.returncode == 3 and "cannot be resumed" in edited.stderr
    both = finish("run", "certlab.yaml", "--resume", str(store), cwd=tmp_path)
    assert both.returncode == 4 and "give no descriptor" in both.stderr


@pytest.mark.parametrize(("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_of_coding_arms_leaves_no_agent_and_nothing_in_the_temp_folder(
    tmp_path: Path, stop: signal.Signals, code: int
) -> None:
    # Its trials' forks were killed when the run stopped, before they could delete their trial folders: each
    # left its seeded work copy, prompt and agent capture in TMPDIR, however often the run was interrupted. And
    # sent to the whole process group (Ctrl-C; timeout's SIGTERM), the signal killed each trial's fork alone: its
    # adapter's process and agent ran on, holding the run's pipes.
    agent = WaitingAgent(tmp_path)
    write(
        tmp_path,
        {
            "experiment": "waiting-arms",
            "task": {"family": "intervals", "defects": ["length-counts-end"]},
            "oracle": "graders",
            "arms": {arm: {"adapter": "command", "args": [str(agent.script)]} for arm in ARMS},
            "conditions": [{"name": "clean", "bucket": "benign"}],
            "n_per_arm": 2,
            "budgets": {"seconds": 120},
        },
    )
    (tmp_path / "tmp").mkdir()
    runner = subprocess.Popen(
        certlab_argv("run", "certlab.yaml", "--out", "runs", "-q", "-w", "2", "--sandbox", "none"),
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    agent.wait_until_started(2, runner, timeout_s=120)
    os.killpg(runner.pid, stop)  # as Ctrl-C and timeout do: to every process of the group
    _out, err = runner.communicate(timeout=60)
    assert runner.returncode == code, err
    assert agent.alive() == [], "an agent outlived the run"
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == []
