"""action.yml: its shell steps run here as GitHub runs them, with a fake job summary and output files.

Each ``run`` step gets its ``env`` with every ``${{ ... }}`` expression evaluated from the
inputs (or their defaults), ``runner.temp`` and the outputs earlier steps wrote, a fresh
``GITHUB_OUTPUT`` file per step and one ``GITHUB_STEP_SUMMARY`` for the job; the job fails at
the first step that exits non-zero, like a composite action.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ACTION = REPO / "action.yml"
EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")

SMALL = textwrap.dedent(
    """\
    schema: certlab.experiment/1
    experiment: action-EXPERIMENT
    task:
      world: retry-inventory
      input: {orders: 1, existing_share: 0.0, flaky_confirm_rate: 0.0, skus: [widget]}
    oracle: world
    arms:
      baseline: {agent: "certlab_retry_world.agents:agent_a", label: A}
      candidate: {agent: "certlab_retry_world.agents:CANDIDATE", label: candidate}
    conditions:
      - name: reserve-timeout
        bucket: falsify
        faults: [{fault: FAULT, tool: reserve, on_calls: [1], params: {}}]
    rule: {name: clopper-pearson, alpha: 0.05, delta: DELTA, looks: 1}
    n_per_arm: 10
    seed: 9
    budgets: {tool_calls: 40, seconds: 10}
    """
)

# An experiment of A against B on the retry world, with a fault under test: what the action gates.
A_VS_B = """\
schema: certlab.experiment/1
experiment: diag-a-vs-b
task:
  world: retry-inventory
  input: {orders: 2, existing_share: 0.0, flaky_confirm_rate: 0.0, skus: [widget, gadget]}
oracle: world
arms:
  baseline: {agent: "certlab_retry_world.agents:agent_a", label: A}
  candidate: {agent: "certlab_retry_world.agents:agent_b", label: B}
conditions:
  - name: reserve-timeout
    bucket: falsify
    faults: [{fault: tool_timeout, tool: reserve, on_calls: [1], params: {executed: false}}]
  - name: clean
    bucket: benign
rule: {name: clopper-pearson, alpha: 0.05, delta: 0.10, looks: 1}
n_per_arm: 10
seed: 5
budgets: {tool_calls: 40, seconds: 10}
"""


def descriptor(folder: Path, name: str, candidate: str, delta: float, fault: str = "tool_timeout") -> str:
    text = SMALL.replace("EXPERIMENT", name).replace("CANDIDATE", candidate).replace("DELTA", str(delta))
    (folder / f"{name}.yaml").write_text(text.replace("FAULT", fault), encoding="utf-8")
    return f"{name}.yaml"


def read_outputs(path: Path) -> dict[str, str]:
    outputs = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        outputs[key] = value
    return outputs


def run_action(workspace: Path, inputs: dict[str, str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run every step of the composite action; the job's exit code, its summary and each step's outputs."""
    action = yaml.safe_load(ACTION.read_text())
    values = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    values.update(inputs)
    missing = [name for name, spec in action["inputs"].items() if spec.get("required") and name not in inputs]
    assert not missing, f"required inputs not given: {missing}"
    temp = workspace / "runner-temp"
    temp.mkdir(exist_ok=True)
    summary = workspace / "summary.md"
    summary.touch()
    steps: dict[str, dict[str, str]] = {}

    def evaluate(expression: str) -> str:
        scope, _, rest = expression.partition(".")
        if scope == "inputs":
            return values[rest]
        if scope == "runner" and rest == "temp":
            return str(temp)
        if scope == "steps":
            step, _, output = rest.partition(".outputs.")
            return steps.get(step, {}).get(output, "")
        raise AssertionError(f"the test cannot evaluate ${{{{ {expression} }}}}")

    code = 0
    for step in action["runs"]["steps"]:
        assert step["shell"] == "bash" and "run" in step, step
        output = temp / f"output-{step['id']}"
        output.touch()
        step_env = {**os.environ, **(env or {}), "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)}
        for key, value in (step.get("env") or {}).items():
            step_env[key] = EXPRESSION.sub(lambda m: evaluate(m.group(1)), str(value))
        done = subprocess.run(
            # as GitHub runs a bash step: bash --noprofile --norc -eo pipefail {0}
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=workspace,
            env=step_env,
            capture_output=True,
            text=True,
            check=False,
        )
        steps[step["id"]] = read_outputs(output)
        if done.returncode != 0:
            code = done.returncode
            steps[step["id"]]["log"] = done.stdout + done.stderr
            break
        steps[step["id"]]["log"] = done.stdout + done.stderr
    outputs = {
        name: EXPRESSION.sub(lambda m: evaluate(m.group(1)), spec["value"]) for name, spec in action["outputs"].items()
    }
    return {"code": code, "summary": summary.read_text(), "outputs": outputs, "steps": steps}


def on_path() -> dict[str, str]:
    """certlab on PATH: this interpreter's environment."""
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_block_fails_the_job_and_writes_the_summary(tmp_path: Path) -> None:
    (tmp_path / "certlab.yaml").write_text(A_VS_B, encoding="utf-8")
    job = run_action(tmp_path, {"descriptor": "certlab.yaml", "install": "false"}, on_path())
    assert job["code"] == 1, job["steps"]
    assert job["outputs"]["verdict"] == "BLOCK" and job["outputs"]["exit-code"] == "1"
    assert job["summary"].startswith("## ⛔ certlab: **BLOCK** on `diag-a-vs-b`")
    assert (tmp_path / job["outputs"]["report"]).read_text() == job["summary"]
    assert (tmp_path / job["outputs"]["run-dir"] / "decision.json").is_file()
    assert "::error::certlab: BLOCK" in job["steps"]["verdict"]["log"]


def test_pass_passes_the_job(tmp_path: Path) -> None:
    name = descriptor(tmp_path, "pass", "agent_a", 0.4)
    job = run_action(tmp_path, {"descriptor": name, "install": "false"}, on_path())
    assert job["code"] == 0, job["steps"]
    assert job["outputs"]["verdict"] == "PASS" and "**PASS**" in job["summary"]


def test_inconclusive_fails_unless_allowed(tmp_path: Path) -> None:
    name = descriptor(tmp_path, "unsure", "agent_a", 0.1)
    refused = run_action(tmp_path, {"descriptor": name, "install": "false", "out": "first"}, on_path())
    assert refused["code"] == 2 and refused["outputs"]["verdict"] == "INCONCLUSIVE"
    allowed = run_action(
        tmp_path, {"descriptor": name, "install": "false", "out": "second", "allow-inconclusive": "true"}, on_path()
    )
    assert allowed["code"] == 0 and allowed["outputs"]["verdict"] == "INCONCLUSIVE"
    assert "::warning::certlab: INCONCLUSIVE" in allowed["steps"]["verdict"]["log"]


def test_error_fails_the_job_even_when_inconclusive_is_allowed(tmp_path: Path) -> None:
    name = descriptor(tmp_path, "broken", "agent_a", 0.1, fault='"json:loads"')
    job = run_action(tmp_path, {"descriptor": name, "install": "false", "allow-inconclusive": "true"}, on_path())
    assert job["code"] == 3 and job["outputs"]["verdict"] == "ERROR"
    assert "injector-broken" in job["summary"]


def test_a_descriptor_that_does_not_exist_is_an_error_with_its_line_in_the_summary(tmp_path: Path) -> None:
    job = run_action(tmp_path, {"descriptor": "nowhere.yaml", "install": "false"}, on_path())
    assert job["code"] == 3 and job["outputs"]["verdict"] == "ERROR" and job["outputs"]["exit-code"] == "4"
    assert "nowhere.yaml" in job["summary"]


def test_the_install_step_installs_certlab_and_the_named_plugins(tmp_path: Path, tmp_path_factory: Any) -> None:
    from freshenv import pip_env, shared_wheelhouse

    wheelhouse = shared_wheelhouse(tmp_path_factory)
    name = descriptor(tmp_path, "installed", "agent_a", 0.4)
    plugins = "certlab-retry-world\ncertlab-faults certlab-clopper-pearson certlab-report-markdown"
    job = run_action(
        tmp_path,
        {
            "descriptor": name,
            "certlab": "certlab",
            "plugins": plugins,
            "python": sys.executable,
            # --no-compile: pip's byte-compiling of every installed module is no part of what is checked here
            "pip-args": f"--no-index --no-compile --find-links {wheelhouse}",
        },
        # PYTHONDONTWRITEBYTECODE empty (unset, as on GitHub's runners): the install step's certlab plugins writes the
        # bytecode of what it imports once, not each of the job's three certlab processes compiling it again
        {**pip_env(use_config=False), "PYTHONDONTWRITEBYTECODE": ""},
    )
    assert job["code"] == 0, job["steps"]
    venv_certlab = tmp_path / "runner-temp" / "certlab-venv" / "bin" / "certlab"
    assert job["steps"]["install"]["certlab-bin"] == str(venv_certlab)
    assert "report-markdown" in job["steps"]["install"]["log"]
    assert job["outputs"]["verdict"] == "PASS" and "**PASS**" in job["summary"]


CRASHED = textwrap.dedent(
    """\
    schema: certlab.experiment/1
    experiment: action-crashed
    task:
      world: retry-inventory
      input: {orders: 1, existing_share: 0.0, flaky_confirm_rate: 0.0, skus: [widget]}
    oracle: world
    arms:
      baseline: {agent: "crashing_client:agent", label: old}
      candidate: {agent: "crashing_client:agent", label: new}
    conditions:
      - name: reserve-timeout
        bucket: falsify
        faults: [{fault: tool_timeout, tool: reserve, on_calls: [1], params: {}}]
    rule: {name: clopper-pearson, alpha: 0.05, delta: 0.1, looks: 1}
    n_per_arm: 60
    seed: 9
    """
)
CRASHING_CLIENT = 'def agent(task, tools, rng):\n    raise RuntimeError("the session was never initialised")\n'


def test_a_pass_in_which_every_trial_crashed_says_nothing_was_tested_in_the_summary_and_warns(tmp_path: Path) -> None:
    (tmp_path / "crashing_client.py").write_text(CRASHING_CLIENT, encoding="utf-8")
    (tmp_path / "crashed.yaml").write_text(CRASHED, encoding="utf-8")
    job = run_action(tmp_path, {"descriptor": "crashed.yaml", "install": "false"}, on_path())
    assert job["code"] == 0, job["steps"]  # the rule's verdict, unchanged: PASS
    why = (
        "reserve-timeout: the baseline succeeded in 0 of 60 trials (0.0%), no more than delta 0.1, so no drop of more "
        "than delta could be seen; all 120 trials of both arms failed as agent-crashed"
    )
    assert job["outputs"]["verdict"] == "PASS" and job["outputs"]["untested"] == why
    assert job["summary"].startswith("## ⚠️ certlab: **PASS** on `action-crashed`, but nothing was tested\n")
    assert "> **Nothing was tested** in `reserve-timeout`: the baseline succeeded in 0 of 60 trials" in job["summary"]
    assert f"::warning::certlab: PASS, but nothing was tested: {why}" in job["steps"]["verdict"]["log"]


def test_below_a_declared_min_baseline_success_the_job_fails_as_error(tmp_path: Path) -> None:
    (tmp_path / "crashing_client.py").write_text(CRASHING_CLIENT, encoding="utf-8")
    (tmp_path / "crashed.yaml").write_text(CRASHED + "min_baseline_success: 0.2\n", encoding="utf-8")
    job = run_action(tmp_path, {"descriptor": "crashed.yaml", "install": "false"}, on_path())
    assert job["code"] == 3 and job["outputs"]["verdict"] == "ERROR", job["steps"]
    assert job["outputs"]["untested"].startswith("reserve-timeout: the baseline succeeded in 0 of 60 trials (0.0%), "
                                                 "below the declared min_baseline_success 0.2")  # fmt: skip
    assert job["summary"].startswith("## ⚠️ certlab: **ERROR** on `action-crashed`: nothing was tested\n")
    assert "::error::certlab: ERROR (exit 3)" in job["steps"]["verdict"]["log"]


@pytest.mark.parametrize("needed", ["descriptor"])
def test_every_required_input_is_documented(needed: str) -> None:
    action = yaml.safe_load(ACTION.read_text())
    assert action["inputs"][needed]["required"] is True
    assert set(action["outputs"]) == {"verdict", "exit-code", "run-dir", "report", "untested"}
