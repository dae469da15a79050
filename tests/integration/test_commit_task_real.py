"""The real Claude Code CLI fixing a real bug of a real project in bwrap: a task built from parse's commit b1d2121.

The task is built from the test data's git bundle (``graders/acceptance/tests/data/parse``) by
``certlab task from-commit``, locked, and certified on with the claude-code adapter against a
scripted Anthropic server on 127.0.0.1. The scripted model makes the fix's own edit through the
CLI's Edit tool; the held-out test (the fix's new test, hidden from the agent) passes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from certlab_scripted_models import Reply, ScriptedModelServer, ToolCall, Turn
from real_cli_support import certify, contained_or_skip, harness_env, only_trial, require_cli, work_dir_of

from certlab_core.testing import run_certlab

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "graders" / "acceptance" / "tests" / "data" / "parse" / "parse.bundle"
COMMIT = "b1d2121902a0d3a2e3a58758d24dad1ead9a3c61"
DEFECT = '"%f": "[0-9]{6}",'
FIX = '"%f": "[0-9]{1,6}",'


def _fix_script(turn: Turn) -> Reply:
    target = f"{work_dir_of(turn.body)}/parse.py"
    steps = [
        Reply(text="Reading.", tool_calls=(ToolCall("Read", {"file_path": target}),)),
        Reply(tool_calls=(ToolCall("Edit", {"file_path": target, "old_string": DEFECT, "new_string": FIX}),)),
        Reply(text="Done."),
    ]
    return steps[turn.number] if turn.number < len(steps) else Reply(http_status=500, error_message="no turn")


def test_claude_code_fixes_a_real_bug_of_parse_and_the_held_out_test_passes_in_bwrap(tmp_path: Path) -> None:
    claude = require_cli("claude-code", "claude", "CERTLAB_CLAUDE_BIN", "npm/node_modules/.bin/claude")
    sandbox = contained_or_skip()
    clone = tmp_path / "parse"
    subprocess.run(["git", "clone", "-q", str(BUNDLE), str(clone)], check=True, capture_output=True)
    task = tmp_path / "task"
    built = run_certlab("task", "from-commit", str(clone), COMMIT, "--out", str(task))
    assert built.returncode == 0, built.stderr
    assert run_certlab("lock", str(task)).returncode == 0
    env = harness_env(ANTHROPIC_API_KEY="scripted-key")
    with ScriptedModelServer(_fix_script) as server:
        env["ANTHROPIC_BASE_URL"] = server.base_url
        args = [f"--bin={claude}", "--model=claude-sonnet-4-5", "--max-turns=6"]
        code, bundle, said = certify(task, tmp_path / "out", "claude-code", args, env, sandbox=sandbox)
    trial = only_trial(bundle)
    assert (code, trial["verdict"], trial["agent_status"]) == (0, "fixed", "completed"), said
    assert bundle["containment"]["sandbox"] == "bwrap"
    assert [g["grader"] for g in trial["grades"]] == ["policy", "suite", "acceptance"]
    assert "1/1 held-out tests held" in trial["grades"][2]["detail"]
