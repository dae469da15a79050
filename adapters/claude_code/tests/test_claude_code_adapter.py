"""The claude-code adapter reads Claude Code's recorded JSON results: status, usage, bad options."""

from __future__ import annotations

from pathlib import Path

import pytest
from certlab_claude_code.plugin import check_args, command_line, environment, judge

from certlab_core.plugin import AgentOutcome, UsageError

FIXTURES = Path(__file__).resolve().parents[3] / "plugins" / "usage" / "tests" / "fixtures" / "agent_outputs"


def outcome(fixture: str, exit_code: int) -> AgentOutcome:
    stdout = (FIXTURES / fixture).read_text()
    return AgentOutcome(status="completed", exit_code=exit_code, stdout_tail=stdout, stderr_tail="", wall_s=1.0)


def test_an_api_error_result_is_unavailable_naming_the_http_status() -> None:
    judged = judge(outcome("claude_code_api_error.json", 1))
    assert judged.status == "unavailable"
    assert judged.detail.startswith("the model API failed (HTTP 500): API Error: 500")


def test_a_successful_run_is_completed_with_its_usage_and_turns() -> None:
    judged = judge(outcome("claude_code_success.json", 0))
    assert judged.status == "completed"
    assert judged.usage is not None and judged.usage.cost_usd == pytest.approx(0.019425)
    assert judged.usage.cost_source == "client-estimate"
    assert "turns" in judged.detail


def test_running_out_of_turns_is_the_agents_own_result_not_an_outage() -> None:
    judged = judge(outcome("claude_code_max_turns.json", 1))
    assert judged.status == "completed" and "error_max_turns" in judged.detail


def test_no_result_at_all_with_a_failing_exit_is_unavailable() -> None:
    judged = judge(
        AgentOutcome(status="completed", exit_code=2, stdout_tail="", stderr_tail="boom: no config\n", wall_s=0.1)
    )
    assert judged.status == "unavailable" and "boom: no config" in judged.detail


def test_options_are_checked_before_anything_runs() -> None:
    check_args(("--model=claude-sonnet-4-5", "--max-turns", "4"))
    with pytest.raises(UsageError, match="no option --colour"):
        check_args(("--colour=blue",))
    with pytest.raises(UsageError, match="--max-turns must be a positive whole number"):
        check_args(("--max-turns=0",))
    with pytest.raises(UsageError, match="not 'claude-sonnet'"):
        check_args(("claude-sonnet",))


def test_the_run_is_headless_with_tools_restricted_and_the_clis_own_retries(tmp_path: Path) -> None:
    argv = command_line("claude", "Fix it.", {"model": ["m"], "max-turns": ["4"]})
    assert argv[:3] == ["claude", "-p", "Fix it."]
    assert argv[argv.index("--allowedTools") + 1] == "Read,Glob,Grep,Edit,Write,Bash(python -m pytest:*)"
    assert argv[argv.index("--max-turns") + 1] == "4" and argv[argv.index("--model") + 1] == "m"
    harness = {"PATH": "/usr/bin", "ANTHROPIC_API_KEY": "k", "AWS_SECRET_ACCESS_KEY": "x", "HOME": "/root"}
    env = environment(harness, tmp_path, {"base-url": ["http://127.0.0.1:9"]})
    # Claude Code retries a failed call as it ships (ten times, with backoff): a brief outage is not the agent's.
    assert env["HOME"] == str(tmp_path) and "CLAUDE_CODE_MAX_RETRIES" not in env
    assert environment(harness, tmp_path, {"max-retries": ["0"]})["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert environment(harness, tmp_path, {"max-retries": ["3"]})["CLAUDE_CODE_MAX_RETRIES"] == "3"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9" and env["ANTHROPIC_API_KEY"] == "k"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and "AWS_SECRET_ACCESS_KEY" not in env
