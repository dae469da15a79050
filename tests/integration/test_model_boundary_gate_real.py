"""The same gate for a real agent: examples/real_agents/retries_under_429.yaml with the real Claude Code CLI.

The model boundary stands between each trial's CLI and a scripted Anthropic server on 127.0.0.1:
it answers the first model call of every trial with a declared 429. Claude Code allowed two
retries recovers and fixes the seeded defect; with retries off it stops at the 429, its trial is
judged by what it left (suite-failed, not an outage), and the gate BLOCKs. The server sees the
harness's key and never the per-trial token; the store holds neither.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts, ToolCall, Turn
from real_cli_support import (
    FIXED_LINE,
    SEEDED_LINE,
    TASK_NAME,
    certify,
    harness_env,
    one_task,
    only_trial,
    require_cli,
    work_dir_of,
)

from certlab_core.testing import run_certlab

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "real_agents" / "retries_under_429.yaml"
KEY = "scripted-harness-key"
USAGE = (TokenCounts(1000, 40), TokenCounts(1200, 60), TokenCounts(1300, 10))


def fix(turn: Turn) -> Reply:
    """Read the seeded file, edit the defect away, say done: one reply per turn of the conversation."""
    target = f"{work_dir_of(turn.body)}/intervals.py"
    steps = [
        Reply(tool_calls=(ToolCall("Read", {"file_path": target}),), usage=USAGE[0]),
        Reply(
            tool_calls=(ToolCall("Edit", {"file_path": target, "old_string": SEEDED_LINE, "new_string": FIXED_LINE}),),
            usage=USAGE[1],
        ),
        Reply(text="Fixed.", usage=USAGE[2]),
    ]
    return steps[turn.number] if turn.number < len(steps) else Reply(http_status=500, error_message="no more turns")


def experiment(task: Path) -> dict[str, Any]:
    """The example's arms, condition, rule and trial count, on the one-task layout of the same defect."""
    config = yaml.safe_load((task / "certlab.yaml").read_text())
    example = yaml.safe_load(EXAMPLE.read_text())
    example["task"] = {**config["task"], "family": TASK_NAME}
    example["arms"] = {
        side: {**arm, "args": [*arm["args"], "--model=claude-sonnet-4-5"]} for side, arm in example["arms"].items()
    }
    (task / "certlab.yaml").write_text(yaml.safe_dump(example, sort_keys=False))
    return dict(example)


def test_a_declared_429_blocks_the_change_that_turned_retries_off(tmp_path: Path) -> None:
    require_cli("claude-code", "claude", "CERTLAB_CLAUDE_BIN", "npm/node_modules/.bin/claude")
    task = one_task(tmp_path / "task")
    example = experiment(task)
    with ScriptedModelServer(fix) as server:
        env = harness_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=KEY)
        # Uncontained: inside the bwrap sandbox the CLI has no network, and the model boundary listens on the
        # harness's loopback (docs/model-boundary.md, "Inside a sandbox").
        argv = ["run", "certlab.yaml", "--out", "runs", "--quiet", "-w", "2", "--sandbox", "none"]
        done = run_certlab(*argv, cwd=task, env=env, timeout=900)
        requests = server.requests
    said = done.stdout + done.stderr
    assert done.returncode == 1, said  # BLOCK
    (store,) = (task / "runs").iterdir()
    lines = [json.loads(line) for line in (store / "trials.jsonl").read_text().splitlines()]
    n = example["n_per_arm"]
    baseline = [t for t in lines if t["arm"] == "baseline"]
    candidate = [t for t in lines if t["arm"] == "candidate"]
    assert (len(baseline), len(candidate)) == (n, n), said
    for trial in baseline:
        assert trial["outcome"] == "success", trial["agent"]
        calls = trial["events"]
        assert calls[0]["error"]["type"] == "ModelRateLimited" and calls[0]["fault"] == 0
        assert [c["status"] for c in calls[1:]] == ["ok"] * 3  # the retry, the edit, the closing turn
        assert trial["faults"] == [
            {"index": 0, "fault": "model_rate_limit", "tool": "model", "fired": True, "fired_at": [0]}
        ]
        assert trial["counts"]["model_steps"] == 4
    for trial in candidate:
        assert (trial["outcome"], trial["failure_mode"]) == ("failure", "suite-failed"), trial["agent"]
        assert [c["error"]["type"] for c in trial["events"]] == ["ModelRateLimited"]
    # Only the calls the boundary forwarded reached the server, each with the harness's key.
    posts = [r for r in requests if r.method == "POST" and r.path == "/v1/messages"]
    assert len(posts) == 3 * n
    assert {r.headers.get("x-api-key") for r in posts} == {KEY}
    store_text = "".join(p.read_text() for p in store.iterdir() if p.is_file())
    assert KEY not in store_text
    report = run_certlab("report", str(store), env=env)
    assert f"baseline: {n} of {n} trials reported usage (claude-json)" in report.stdout, report.stdout
    assert "the client's own estimate" in report.stdout


def test_a_real_certification_records_every_model_call_and_no_key(tmp_path: Path) -> None:
    claude = require_cli("claude-code", "claude", "CERTLAB_CLAUDE_BIN", "npm/node_modules/.bin/claude")
    with ScriptedModelServer(fix) as server:
        code, bundle, said = certify(
            one_task(tmp_path / "task"),
            tmp_path / "out",
            "claude-code",
            [f"--bin={claude}", "--model=claude-sonnet-4-5"],  # no --base-url: the CLI reaches the model boundary
            harness_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=KEY),
        )
        posts = [r for r in server.requests if r.method == "POST" and r.path == "/v1/messages"]
    trial = only_trial(bundle)
    assert (code, trial["verdict"]) == (0, "fixed"), said
    model = trial["model"]
    assert model["counts"] == {
        "model_calls": 3,
        "input_tokens": sum(u.input_tokens for u in USAGE),
        "output_tokens": sum(u.output_tokens for u in USAGE),
        "cached_input_tokens": 0,
    }
    assert [e["status"] for e in model["events"]] == ["ok"] * 3 and model["infra_error"] is None
    assert trial["usage"]["output_tokens"] == model["counts"]["output_tokens"]  # the CLI's account agrees
    assert {r.headers.get("x-api-key") for r in posts} == {KEY}
    assert KEY not in (tmp_path / "out" / "bundle.json").read_text()


def test_a_certified_trial_of_the_real_cli_replays_offline_from_its_recording(tmp_path: Path) -> None:
    claude = require_cli("claude-code", "claude", "CERTLAB_CLAUDE_BIN", "npm/node_modules/.bin/claude")
    args = [f"--bin={claude}", "--model=claude-sonnet-4-5"]
    task = one_task(tmp_path / "task")
    with ScriptedModelServer(fix) as server:
        code, bundle, said = certify(
            task,
            tmp_path / "out",
            "claude-code",
            args,
            harness_env(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY=KEY),
        )
    trial = only_trial(bundle)
    assert (code, trial["verdict"]) == (0, "fixed"), said
    # The server is gone and no key is given: every answer comes from the trial's recording.
    offline = harness_env()
    argv = ["replay", str(tmp_path / "out"), "--trial", trial["id"], "--task", str(task)]
    done = run_certlab(*argv, env=offline, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the agent made exactly the 3 recorded model calls" in done.stdout
    assert "reproduced: fixed (no failure)" in done.stdout
