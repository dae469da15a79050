"""The aider adapter judges aider by its text, never its exit code, and names the files it may edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from certlab_aider.plugin import check_args, command_line, files_to_edit, judge

from certlab_core.plugin import AgentOutcome, AgentRequest, UsageError

FIXTURES = Path(__file__).resolve().parents[3] / "plugins" / "usage" / "tests" / "fixtures" / "agent_outputs"
OUTAGE = (
    "Added intervals.py to the chat.\n\n"
    "litellm.InternalServerError: InternalServerError: OpenAIException - scripted outage\n"
    "The API provider's servers are down or overloaded.\nRetrying in 0.2 seconds...\n"
)


def outcome(stdout: str, status: str = "completed") -> AgentOutcome:
    return AgentOutcome(status=status, exit_code=0, stdout_tail=stdout, stderr_tail="", wall_s=1.0)  # type: ignore[arg-type]


def test_a_successful_run_is_completed_with_its_edits_and_usage() -> None:
    judged = judge(outcome((FIXTURES / "aider_success.txt").read_text()))
    assert judged.status == "completed" and judged.detail == "applied edits to greeting.py"
    assert judged.usage is not None and (judged.usage.input_tokens, judged.usage.cost_usd) == (2100, 0.0077)


@pytest.mark.parametrize("status", ["completed", "timeout"])
def test_an_api_error_it_never_got_past_is_unavailable_although_it_exited_0(status: str) -> None:
    judged = judge(outcome(OUTAGE, status))
    assert judged.status == "unavailable"
    assert "litellm.InternalServerError" in judged.detail
    assert ("still retrying" in judged.detail) == (status == "timeout")


def test_an_api_error_followed_by_a_model_reply_is_the_agents_own_run() -> None:
    recovered = (
        OUTAGE + "Here is the change.\n\nTokens: 900 sent, 85 received. Cost: $0.0040 message, $0.0040 session.\n"
    )
    assert judge(outcome(recovered)).status == "completed"


def test_the_files_to_edit_are_the_options_else_the_edit_policys_paths(tmp_path: Path) -> None:
    (tmp_path / "intervals.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("")

    class Family:
        allowed_paths = ("intervals.py", "pkg/*.py", "missing.py")

    class Task:
        family = Family()

    request = AgentRequest(
        workdir=str(tmp_path), prompt="p", prompt_file="f", task_id="t", timeout_s=1, env={}, task=Task()
    )
    assert files_to_edit(request, {}) == ["intervals.py", "pkg/a.py"]
    assert files_to_edit(request, {"file": ["x.py"]}) == ["x.py"]


def test_history_and_metadata_stay_out_of_the_work_copy(tmp_path: Path) -> None:
    argv = command_line("aider", "Fix.", ["intervals.py"], tmp_path, {"input-cost-per-token": ["3e-06"]})
    assert argv[1] == "intervals.py" and "--no-git" in argv and "--yes-always" in argv
    for flag in ("--model-metadata-file", "--input-history-file", "--chat-history-file"):
        assert Path(argv[argv.index(flag) + 1]).parent == tmp_path
    assert "--model-metadata-file" not in command_line("aider", "Fix.", [], tmp_path, {})


def test_the_run_has_aiders_price_table_so_aider_fetches_none(tmp_path: Path) -> None:
    # aider fetches model_prices_and_context_window.json from a public host when its cache holds no entry.
    command_line("aider", "Fix.", ["intervals.py"], tmp_path, {})
    cached = json.loads((tmp_path / ".aider" / "caches" / "model_prices_and_context_window.json").read_text())
    assert cached and not any("/" in name or name.startswith("gpt") for name in cached)  # an entry for no model


def test_bad_options_are_refused_before_anything_runs() -> None:
    check_args(("--model=openai/x", "--file=a.py", "--file", "b.py"))
    with pytest.raises(UsageError, match="non-negative number"):
        check_args(("--input-cost-per-token=cheap",))
    with pytest.raises(UsageError, match="inside the work copy"):
        check_args(("--file=../outside.py",))
