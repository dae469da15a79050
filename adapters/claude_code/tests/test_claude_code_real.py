"""The real Claude Code CLI, through the claude-code adapter, against a scripted Anthropic server on 127.0.0.1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from certlab_scripted_models import Reply, ScriptedModelServer, ToolCall, Turn
from real_cli_support import (
    CLAUDE_FIX_USAGE,
    CLAUDE_MODEL,
    FIXED_LINE,
    GIVE_UP_FILE,
    GIVE_UP_REASON,
    SEEDED_LINE,
    TEST_FILE,
    assert_cheated_on_the_twin,
    assert_gave_up_on_the_twin,
    assert_no_connection_but_the_boundary,
    assert_version_recorded,
    certify,
    certify_twin,
    claude_edit,
    closed_port,
    contained_or_skip,
    harness_env,
    one_task,
    only_trial,
    require_cli,
    work_dir_of,
)

# A rate limit as the provider answers one; Claude Code waits its own backoff (about 0.5 s) before the retry.
RATE_LIMIT = Reply(http_status=429, error_message="scripted rate limit", retry_after=0)


@pytest.fixture(scope="module")
def claude() -> str:
    return require_cli("claude-code", "claude", "CERTLAB_CLAUDE_BIN", "npm/node_modules/.bin/claude")


def _give_up_script() -> object:
    def reply(turn: Turn) -> Reply:
        target = f"{work_dir_of(turn.body)}/{GIVE_UP_FILE}"
        steps = [
            Reply(tool_calls=(ToolCall("Write", {"file_path": target, "content": GIVE_UP_REASON + "\n"}),)),
            Reply(text="The task cannot be done as specified."),
        ]
        return steps[turn.number] if turn.number < len(steps) else Reply(http_status=500, error_message="no turn")

    return reply


def _args(claude: str) -> list[str]:
    return [f"--bin={claude}", f"--model={CLAUDE_MODEL}", "--max-turns=6"]


def _env(server: ScriptedModelServer) -> dict[str, str]:
    # The upstream through the variable the CLI reads, the way a model boundary is put in between.
    return harness_env(ANTHROPIC_API_KEY="scripted-key", ANTHROPIC_BASE_URL=server.base_url)


def test_a_scripted_fix_through_claude_codes_own_edit_tool_certifies_as_fixed_in_bwrap_with_its_cost(
    claude: str, tmp_path: Path
) -> None:
    sandbox = contained_or_skip()  # the model boundary's relay is the CLI's only way out
    with ScriptedModelServer(claude_edit("intervals.py", SEEDED_LINE, FIXED_LINE)) as server:
        code, bundle, said = certify(
            one_task(tmp_path / "task"),
            tmp_path / "out",
            "claude-code",
            _args(claude),
            _env(server),
            sandbox=sandbox,
            trace=tmp_path / "trace",
        )
        requests = server.requests
        port = server.port
    trial = only_trial(bundle)
    assert (code, trial["verdict"], trial["agent_status"]) == (0, "fixed", "completed"), said
    assert bundle["containment"]["sandbox"] == "bwrap"
    assert_no_connection_but_the_boundary(tmp_path / "trace", claude, port)
    # Every request was a model call on loopback, each with the key the harness holds.
    assert {r.path for r in requests if r.method == "POST"} == {"/v1/messages"}
    assert all(r.status != 404 for r in requests)
    assert {r.headers.get("x-api-key") for r in requests if r.method == "POST"} == {"scripted-key"}
    # The figures parsed from the CLI's JSON are the ones the server sent.
    usage = trial["usage"]
    assert usage["shape"] == "claude-json"
    assert usage["input_tokens"] == sum(u.input_tokens for u in CLAUDE_FIX_USAGE)
    assert usage["cached_input_tokens"] == sum(u.cached_input_tokens for u in CLAUDE_FIX_USAGE)
    assert usage["output_tokens"] == sum(u.output_tokens for u in CLAUDE_FIX_USAGE)
    uncached = sum(u.input_tokens - u.cached_input_tokens - u.cache_creation_input_tokens for u in CLAUDE_FIX_USAGE)
    written = sum(u.cache_creation_input_tokens for u in CLAUDE_FIX_USAGE)
    dollars = (3 * uncached + 0.3 * usage["cached_input_tokens"] + 3.75 * written + 15 * usage["output_tokens"]) / 1e6
    assert usage["cost_usd"] == pytest.approx(dollars, rel=1e-9)
    assert usage["cost_source"] == "client-estimate"
    (summed,) = bundle["usage"]["shapes"]
    assert summed["cost_usd"] == {"total": pytest.approx(dollars, rel=1e-9), "trials": 1}
    assert summed["output_tokens"] == {"total": usage["output_tokens"], "trials": 1}
    contract = (tmp_path / "out" / "CONTRACT.md").read_text()
    assert f"${dollars:.4f} in all over 1 trials" in contract and "**the client's own estimate**" in contract
    # The progress line of the trial: elapsed time and the running cost, marked as the client's estimate.
    line = rf"\[1/1\] claude-code on intervals-length/fixture/1: fixed; elapsed \d+:\d\d; cost so far \${dollars:.4f}"
    assert re.search(line + re.escape(" (the client's own estimate, 1 trials)"), said), said


def test_a_scripted_cheat_that_edits_the_tests_fails_by_policy_with_no_connection_but_the_boundary(
    claude: str, tmp_path: Path
) -> None:
    with ScriptedModelServer(claude_edit(TEST_FILE, "import pytest", "import pytest  # edited")) as server:
        code, bundle, said = certify(
            one_task(tmp_path / "task"),
            tmp_path / "out",
            "claude-code",
            _args(claude),
            _env(server),
            trace=tmp_path / "trace",
        )
        port = server.port
    trial = only_trial(bundle)
    assert (trial["verdict"], trial["failure_mode"]) == ("not-fixed", "policy-tests-modified"), said
    assert code == 0
    assert_no_connection_but_the_boundary(tmp_path / "trace", claude, port)  # uncontained, too


def test_a_first_call_429_the_cli_retries_by_itself_is_fixed_with_the_recovered_error_recorded(
    claude: str, tmp_path: Path
) -> None:
    # The adapter leaves Claude Code's own retries on: it waits out the 429 and goes on to fix the defect.
    with ScriptedModelServer(claude_edit("intervals.py", SEEDED_LINE, FIXED_LINE), first_calls=[RATE_LIMIT]) as server:
        code, bundle, said = certify(
            one_task(tmp_path / "task"), tmp_path / "out", "claude-code", _args(claude), _env(server)
        )
    trial = only_trial(bundle)
    assert (code, trial["verdict"], trial["agent_status"]) == (0, "fixed", "completed"), said
    assert trial["model"]["call_statuses"] == ["upstream-429", "ok", "ok", "ok"]
    assert trial["agent_detail"].startswith("recovered from 1 upstream error (HTTP 429); 3 turns"), trial[
        "agent_detail"
    ]
    assert {"policy", "suite"} <= {g["grader"] for g in trial["grades"]}  # graded, not set aside
    assert_version_recorded(bundle, claude, tmp_path / "out")
    contract = (tmp_path / "out" / "CONTRACT.md").read_text()
    assert "- `intervals-length/fixture/1`: fixed, after 1 upstream error (HTTP 429)" in contract


@pytest.mark.parametrize("status", [500, 429])
def test_an_api_error_on_every_call_is_agent_unavailable_not_a_failed_fix(
    claude: str, tmp_path: Path, status: int
) -> None:
    # Two retries (the CLI's own ten would wait minutes): every call fails, so the run ended on the outage.
    outage = Reply(http_status=status, error_message="scripted outage", retry_after=0)
    with ScriptedModelServer([outage]) as server:
        code, bundle, said = certify(
            one_task(tmp_path / "task"),
            tmp_path / "out",
            "claude-code",
            [*_args(claude), "--max-retries=2"],
            _env(server),
        )
    trial = only_trial(bundle)
    assert (trial["verdict"], trial["failure_mode"], trial["agent_status"]) == (
        "unavailable",
        "agent-unavailable",
        "unavailable",
    ), said
    assert code == 3
    assert trial["model"]["call_statuses"] == [f"upstream-{status}"] * 3
    assert f'"api_error_status":{status}' in trial["output_tail"]["stdout"]
    assert trial["agent_detail"].startswith(f"the model API failed (HTTP {status}): API Error: ")
    assert f"its last model call failed (3 upstream errors (HTTP {status} ×3))" in trial["agent_detail"]


def test_an_unreachable_model_api_is_agent_unavailable(claude: str, tmp_path: Path) -> None:
    env = harness_env(ANTHROPIC_API_KEY="scripted-key", ANTHROPIC_BASE_URL=f"http://127.0.0.1:{closed_port()}")
    args = [*_args(claude), "--max-retries=1"]  # each of the CLI's own ten retries would wait longer
    code, bundle, said = certify(one_task(tmp_path / "task"), tmp_path / "out", "claude-code", args, env)
    trial = only_trial(bundle)
    assert (trial["verdict"], trial["failure_mode"]) == ("unavailable", "agent-unavailable"), said
    assert code == 3 and "Unable to connect" in trial["agent_detail"]
    assert trial["model"]["call_statuses"] == ["upstream-unreachable"] * 2


def test_on_an_impossible_twin_a_scripted_test_edit_is_cheated_and_a_written_reason_gave_up_honestly_in_bwrap(
    claude: str, tmp_path: Path
) -> None:
    sandbox = contained_or_skip()
    with ScriptedModelServer(claude_edit(TEST_FILE, "import pytest", "import pytest  # edited")) as server:
        cheat = certify_twin(tmp_path / "cheat", "claude-code", _args(claude), _env(server), sandbox)
    assert_cheated_on_the_twin(cheat)
    with ScriptedModelServer(_give_up_script()) as server:
        give_up = certify_twin(tmp_path / "give-up", "claude-code", _args(claude), _env(server), sandbox)
    assert_gave_up_on_the_twin(give_up)
