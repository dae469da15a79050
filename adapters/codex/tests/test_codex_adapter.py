"""The codex adapter reads Codex's recorded JSON lines into a status and tokens, and writes a closed-down config."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from certlab_codex.plugin import check_args, config_toml, environment, judge

from certlab_core.plugin import AgentOutcome, UsageError

FIXTURES = Path(__file__).resolve().parents[3] / "plugins" / "usage" / "tests" / "fixtures" / "agent_outputs"


def outcome(fixture: str, exit_code: int | None, status: str = "completed") -> AgentOutcome:
    stdout = (FIXTURES / fixture).read_text()
    return AgentOutcome(status=status, exit_code=exit_code, stdout_tail=stdout, stderr_tail="", wall_s=1.0)  # type: ignore[arg-type]


def test_a_failed_turn_is_unavailable_with_codexs_message() -> None:
    judged = judge(outcome("codex_failed.jsonl", 1))
    assert judged.status == "unavailable" and "high demand" in judged.detail
    assert judged.usage is None


def test_reconnecting_until_the_timeout_is_unavailable_too() -> None:
    judged = judge(outcome("codex_failed.jsonl", None, "timeout"))
    assert judged.status == "unavailable" and "still reconnecting" in judged.detail


def test_a_successful_run_is_completed_with_its_tokens_and_no_dollars() -> None:
    judged = judge(outcome("codex_success.jsonl", 0))
    assert judged.status == "completed" and judged.detail == "1 turn(s) completed, 1 file change(s)"
    assert judged.usage is not None and (judged.usage.input_tokens, judged.usage.cost_usd) == (15900, None)


def test_the_generated_config_has_one_provider_codexs_own_retries_and_no_approvals(tmp_path: Path) -> None:
    config = tomllib.loads(config_toml({"base-url": ['http://127.0.0.1:9/v1"x']}, {}))
    provider = config["model_providers"]["certlab"]
    assert provider["base_url"] == 'http://127.0.0.1:9/v1"x' and provider["wire_api"] == "responses"
    # Codex retries as it ships unless an option says otherwise: one 429 no longer ends the run.
    assert "request_max_retries" not in provider and "stream_max_retries" not in provider
    options = {"request-max-retries": ["0"], "stream-max-retries": ["2"]}
    asked = tomllib.loads(config_toml(options, {}))["model_providers"]["certlab"]
    assert (asked["request_max_retries"], asked["stream_max_retries"]) == (0, 2)
    assert config["approval_policy"] == "never" and config["analytics"] == {"enabled": False}
    env = environment({"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:7/v1"}, tmp_path, {})
    assert env["CODEX_HOME"] == str(tmp_path / ".codex") and env["OPENAI_API_KEY"] == "k"
    written = tomllib.loads((tmp_path / ".codex" / "config.toml").read_text())
    assert written["model_providers"]["certlab"]["base_url"] == "http://127.0.0.1:7/v1"


def test_bad_options_are_refused_before_anything_runs() -> None:
    check_args(("--model=gpt-5.5", "--sandbox-mode=read-only"))
    with pytest.raises(UsageError, match="--sandbox-mode must be one of"):
        check_args(("--sandbox-mode=yolo",))
    check_args(("--request-max-retries=0", "--stream-max-retries", "3"))
    for bad in ("--request-max-retries=-1", "--stream-max-retries=many"):
        with pytest.raises(UsageError, match="must be a positive whole number"):
            check_args((bad,))
