"""A real CLI adapter as an arm of ``certlab run``: its trials graded, its cost per arm reported, an outage is ERROR."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from certlab_scripted_models import Reply, ScriptedModelServer, ToolCall
from certlab_usage import agent_clis
from real_cli_support import (
    CLAUDE_FIX_USAGE,
    CLAUDE_MODEL,
    TASK_NAME,
    claude_edit,
    harness_env,
    one_task,
    require_cli,
)

from certlab_core.testing import run_certlab

SEEDED, FIXED = "return end - start + 1", "return end - start"
# The sandbox gives a contained agent no network; the scripted servers are on the harness's loopback.
UNCONTAINED = ("--sandbox", "none")


def _experiment(task: Path, adapter: str, args: list[str], baseline_url: str, candidate_url: str) -> Path:
    config = yaml.safe_load((task / "certlab.yaml").read_text())
    config["task"]["family"] = TASK_NAME

    def arm(url: str, label: str) -> dict[str, Any]:
        return {"adapter": adapter, "args": [*args, f"--base-url={url}"], "label": label}

    config.update(
        {
            "schema": "certlab.experiment/1",
            "experiment": f"{adapter}-outage",
            "oracle": "graders",
            "arms": {"baseline": arm(baseline_url, "model up"), "candidate": arm(candidate_url, "model down")},
            "conditions": [{"name": "clean", "bucket": "benign"}],
            "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
            "n_per_arm": 1,
            "budgets": {"seconds": 90},
        }
    )
    (task / "certlab.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return task


def test_claude_code_as_an_arm_fixes_reports_its_cost_and_an_outage_makes_the_gate_error(tmp_path: Path) -> None:
    claude = require_cli("claude-code", "claude", "CERTLAB_CLAUDE_BIN", "npm/node_modules/.bin/claude")
    fixing = ScriptedModelServer(claude_edit("intervals.py", SEEDED, FIXED))
    down = ScriptedModelServer([Reply(http_status=500, error_message="scripted outage")])
    with fixing, down:
        # The outage at once, not after 10 retries.
        args = [f"--bin={claude}", f"--model={CLAUDE_MODEL}", "--max-retries=0"]
        task = _experiment(one_task(tmp_path / "task"), "claude-code", args, fixing.base_url, down.base_url)
        env = harness_env(ANTHROPIC_API_KEY="scripted-key")
        done = run_certlab(
            "run", "certlab.yaml", "--out", "runs", "--quiet", *UNCONTAINED, cwd=task, env=env, timeout=300
        )
    assert done.returncode == 3, done.stdout + done.stderr
    (store,) = (task / "runs").iterdir()
    lines = {line["arm"]: line for line in map(json.loads, (store / "trials.jsonl").read_text().splitlines())}
    assert lines["baseline"]["outcome"] == "success"
    assert lines["baseline"]["usage"]["output_tokens"] == sum(u.output_tokens for u in CLAUDE_FIX_USAGE)
    assert lines["candidate"]["outcome"] == "error"
    assert "agent-unavailable" in lines["candidate"]["error"]
    assert json.loads((store / "decision.json").read_text())["verdict"] == "ERROR"
    report = run_certlab("report", str(store), env=env)
    assert "baseline: 1 of 1 trials reported usage (claude-json)" in report.stdout, report.stdout
    assert "the client's own estimate" in report.stdout


def test_codex_as_an_arm_fixes_and_an_outage_makes_the_gate_error(tmp_path: Path) -> None:
    codex = require_cli("codex", "codex", "CERTLAB_CODEX_BIN", "npm/node_modules/.bin/codex")
    patch = f"*** Begin Patch\n*** Update File: intervals.py\n@@\n-    {SEEDED}\n+    {FIXED}\n*** End Patch\n"
    fixing = ScriptedModelServer([Reply(tool_calls=(ToolCall("apply_patch", patch),)), Reply(text="Done.")])
    down = ScriptedModelServer([Reply(http_status=500, error_message="scripted outage")])
    with fixing, down:
        args = [f"--bin={codex}", "--request-max-retries=0", "--stream-max-retries=0"]  # the outage at once
        task = _experiment(one_task(tmp_path / "task"), "codex", args, fixing.openai_base_url, down.openai_base_url)
        env = harness_env(OPENAI_API_KEY="scripted-key")
        done = run_certlab(
            "run", "certlab.yaml", "--out", "runs", "--quiet", *UNCONTAINED, cwd=task, env=env, timeout=300
        )
    assert done.returncode == 3, done.stdout + done.stderr
    (store,) = (task / "runs").iterdir()
    lines = {line["arm"]: line for line in map(json.loads, (store / "trials.jsonl").read_text().splitlines())}
    assert lines["baseline"]["outcome"] == "success" and lines["baseline"]["usage"]["shape"] == "codex-jsonl"
    assert lines["candidate"]["outcome"] == "error" and "agent-unavailable" in lines["candidate"]["error"]
    # The manifest seals each arm with the version its CLI reports (as preflight reads it).
    arms = json.loads((store / "manifest.json").read_text())["arms"]
    assert {arm["agent_version"] for arm in arms.values()} == {agent_clis.cli_version(codex, os.environ)}
