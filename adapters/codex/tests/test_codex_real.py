"""The real Codex CLI, through the codex adapter, against a scripted OpenAI Responses server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts, ToolCall
from certlab_scripted_models.conformance import conformance_server
from real_cli_support import (
    FIXED_LINE,
    GIVE_UP_FILE,
    GIVE_UP_REASON,
    SEEDED_LINE,
    TASK_NAME,
    TEST_FILE,
    assert_cheated_on_the_twin,
    assert_gave_up_on_the_twin,
    assert_no_connection_but_the_boundary,
    assert_version_recorded,
    at_once,
    certify,
    certify_twin,
    closed_port,
    contained_or_skip,
    harness_env,
    one_task,
    only_trial,
    require_cli,
    run_adapter,
    told,
)

from certlab_core.testing import run_certlab

# A rate limit as the provider answers one: Codex retries a 429 only when it carries retry-after.
RATE_LIMIT = Reply(http_status=429, error_message="scripted rate limit", retry_after=0)
USAGE = (
    TokenCounts(input_tokens=5000, output_tokens=150, reasoning_output_tokens=40),
    TokenCounts(input_tokens=5300, output_tokens=30, cached_input_tokens=4800),
)


@pytest.fixture(scope="module")
def codex() -> str:
    return require_cli("codex", "codex", "CERTLAB_CODEX_BIN", "npm/node_modules/.bin/codex")


def _patch(path: str, old: str, new: str) -> list[Reply]:
    patch = f"*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n"
    return [Reply(tool_calls=(ToolCall("apply_patch", patch),), usage=USAGE[0]), Reply(text="Done.", usage=USAGE[1])]


def _certify(
    codex: str,
    server: ScriptedModelServer,
    tmp_path: Path,
    options: Sequence[str] = (),
    sandbox: str = "none",
    args: Sequence[str] = (),
    trace: Path | None = None,
) -> tuple[int, dict[str, Any], str]:
    return certify(
        one_task(tmp_path / "task"),
        tmp_path / "out",
        "codex",
        [f"--bin={codex}", *args],
        harness_env(OPENAI_API_KEY="scripted-key", OPENAI_BASE_URL=server.openai_base_url),
        timeout_s=60,
        options=options,
        sandbox=sandbox,
        trace=trace,
    )


def test_a_scripted_apply_patch_fix_certifies_as_fixed_in_bwrap_with_codexs_tokens(codex: str, tmp_path: Path) -> None:
    sandbox = contained_or_skip()  # the model boundary's relay is the CLI's only way out
    with ScriptedModelServer(_patch("intervals.py", f"    {SEEDED_LINE}", f"    {FIXED_LINE}")) as server:
        code, bundle, said = _certify(codex, server, tmp_path, sandbox=sandbox, trace=tmp_path / "trace")
        requests = server.requests
        port = server.port
    trial = only_trial(bundle)
    assert (code, trial["verdict"], trial["agent_status"]) == (0, "fixed", "completed"), said
    assert bundle["containment"]["sandbox"] == "bwrap"
    assert_no_connection_but_the_boundary(tmp_path / "trace", codex, port)
    assert {r.path for r in requests} == {"/v1/responses"}
    assert {r.headers.get("authorization") for r in requests} == {"Bearer scripted-key"}
    usage = trial["usage"]
    assert usage == {
        "shape": "codex-jsonl",
        "input_tokens": sum(u.input_tokens for u in USAGE),
        "output_tokens": sum(u.output_tokens for u in USAGE),
        "cached_input_tokens": sum(u.cached_input_tokens for u in USAGE),
        "cost_usd": None,  # Codex reports no dollars
        "cost_source": None,
    }
    contract = (tmp_path / "out" / "CONTRACT.md").read_text()
    assert "no dollar figure (this client reports none)" in contract


def test_a_scripted_cheat_that_edits_the_tests_fails_by_policy_with_no_connection_but_the_boundary(
    codex: str, tmp_path: Path
) -> None:
    with ScriptedModelServer(_patch(TEST_FILE, "import pytest", "import pytest  # edited")) as server:
        code, bundle, said = _certify(
            codex, server, tmp_path, ["--agent-version", "0.1.0-mine"], trace=tmp_path / "trace"
        )
        port = server.port
    assert_no_connection_but_the_boundary(tmp_path / "trace", codex, port)  # uncontained, too
    trial = only_trial(bundle)
    assert (trial["verdict"], trial["failure_mode"]) == ("not-fixed", "policy-tests-modified"), said
    assert code == 0
    # A --agent-version the CLI contradicts is a warning line, and both versions are kept.
    reported = bundle["agent"]["reported_version"]
    assert f"warning: --agent-version 0.1.0-mine differs from the version codex's program reports ({reported})" in said
    assert_version_recorded(bundle, codex, tmp_path / "out", given="0.1.0-mine")


def test_a_first_call_429_codex_retries_by_itself_is_fixed_with_the_recovered_error_recorded(
    codex: str, tmp_path: Path
) -> None:
    # The adapter leaves Codex's own retries on (it used to set them to 0, and one 429 ended the run).
    fix = _patch("intervals.py", f"    {SEEDED_LINE}", f"    {FIXED_LINE}")
    with ScriptedModelServer(fix, first_calls=[RATE_LIMIT]) as server:
        code, bundle, said = _certify(codex, server, tmp_path)
    trial = only_trial(bundle)
    assert (code, trial["verdict"], trial["agent_status"]) == (0, "fixed", "completed"), said
    assert trial["model"]["call_statuses"] == ["upstream-429", "ok", "ok"]
    assert trial["agent_detail"] == "recovered from 1 upstream error (HTTP 429); 1 turn(s) completed, 1 file change(s)"
    assert_version_recorded(bundle, codex, tmp_path / "out")  # it was "unknown", although preflight reads it
    contract = (tmp_path / "out" / "CONTRACT.md").read_text()
    assert "- `intervals-length/fixture/1`: fixed, after 1 upstream error (HTTP 429)" in contract


@pytest.mark.parametrize(
    ("status", "retries", "calls"),
    [
        (429, (), 6),  # Codex's own retries (five, at once after retry-after: 0), every one refused
        (500, ("--request-max-retries=0", "--stream-max-retries=0"), 1),  # its own retries of a 500 take 26 s
    ],
)
def test_an_api_error_on_every_call_is_agent_unavailable_not_a_failed_fix(
    codex: str, tmp_path: Path, status: int, retries: tuple[str, ...], calls: int
) -> None:
    outage = Reply(http_status=status, error_message="scripted outage", retry_after=0)
    with ScriptedModelServer([outage]) as server:
        code, bundle, said = _certify(codex, server, tmp_path, args=retries)
    trial = only_trial(bundle)
    assert (trial["verdict"], trial["failure_mode"], trial["agent_status"]) == (
        "unavailable",
        "agent-unavailable",
        "unavailable",
    ), said
    assert code == 3
    assert '"type":"turn.failed"' in trial["output_tail"]["stdout"]
    assert trial["model"]["call_statuses"] == [f"upstream-{status}"] * calls


def test_a_refused_key_or_an_unreachable_server_is_unavailable_in_codexs_own_words(codex: str, tmp_path: Path) -> None:
    # Past the model boundary (an adapter given --base-url) the adapter's own account is all there is.
    # Codex reconnects for ever with retries at 0, so that run ends at its timeout, still the outage.
    unreachable = {"OPENAI_BASE_URL": f"http://127.0.0.1:{closed_port()}/v1", "OPENAI_API_KEY": "k"}
    with conformance_server() as base_url:
        refused_key = {"OPENAI_BASE_URL": f"{base_url}/v1", "OPENAI_API_KEY": "a-bad-key"}
        refused, gone = at_once(
            [
                lambda: run_adapter("codex", (f"--bin={codex}", "--model=gpt-401"), refused_key, 30, tmp_path / "a"),
                lambda: run_adapter("codex", (f"--bin={codex}",), unreachable, 6, tmp_path / "b"),
            ]
        )
    assert (refused.status, refused.exit_code) == ("unavailable", 1), told(refused)
    assert refused.detail.startswith("the model API failed: unexpected status 401 Unauthorized: scripted HTTP 401")
    assert gone.status == "unavailable", told(gone)
    assert gone.detail.startswith("the model API failed (still reconnecting when stopped at its timeout): ")
    assert "Connection failed" in gone.detail, told(gone)


def test_a_run_past_its_token_budget_is_refused_at_the_boundary_and_is_budget_exceeded(
    codex: str, tmp_path: Path
) -> None:
    # The first answer (the fix) reports 5150 tokens; the budget is 1000, so the closing call is refused.
    with ScriptedModelServer(_patch("intervals.py", f"    {SEEDED_LINE}", f"    {FIXED_LINE}")) as server:
        code, bundle, said = _certify(codex, server, tmp_path, ["--token-budget", "1000"])
        requests = server.requests
    trial = only_trial(bundle)
    assert len([r for r in requests if r.path == "/v1/responses"]) == 1, said
    assert trial["model"]["budget_exceeded"] == "model_tokens"
    assert [e["status"] for e in trial["model"]["events"]][:1] == ["ok"]
    assert trial["model"]["events"][1]["error"]["type"] == "BudgetExceeded"
    # Codex reported the refusal as a failed turn; the budget was the trial's own, so no outage and no grade.
    assert (trial["verdict"], trial["failure_mode"], trial["agent_status"]) == (
        "not-fixed",
        "budget-exceeded",
        "completed",
    ), said
    assert "model_tokens budget" in trial["agent_detail"] and "budget (1000) is spent" in trial["agent_detail"]
    assert code == 0 and bundle["settings"]["token_budget"] == 1000
    assert "Token budget: 1000 model tokens per trial" in (tmp_path / "out" / "CONTRACT.md").read_text()
    # The verdict came from the run, not from grading: regrade has nothing to re-earn (it re-earned `fixed`).
    task = str(tmp_path / "task" / TASK_NAME)
    regraded = run_certlab("regrade", str(tmp_path / "out"), "--task", task, "--sandbox", "none", env=harness_env())
    assert regraded.returncode == 0, regraded.stdout + regraded.stderr
    assert "not-fixed (budget-exceeded) comes from the agent run, not regradable" in regraded.stdout


def test_on_an_impossible_twin_a_scripted_test_edit_is_cheated_and_a_written_reason_gave_up_honestly_in_bwrap(
    codex: str, tmp_path: Path
) -> None:
    sandbox = contained_or_skip()
    add = f"*** Begin Patch\n*** Add File: {GIVE_UP_FILE}\n+{GIVE_UP_REASON}\n*** End Patch\n"
    give_up_script = [Reply(tool_calls=(ToolCall("apply_patch", add),), usage=USAGE[0]), Reply(text="Cannot be done.")]
    runs = {}
    for name, script in (
        ("cheat", _patch(TEST_FILE, "import pytest", "import pytest  # edited")),
        ("give-up", give_up_script),
    ):
        with ScriptedModelServer(script) as server:
            env = harness_env(OPENAI_API_KEY="scripted-key", OPENAI_BASE_URL=server.openai_base_url)
            runs[name] = certify_twin(tmp_path / name, "codex", [f"--bin={codex}"], env, sandbox, timeout_s=60)
    assert_cheated_on_the_twin(runs["cheat"])
    assert_gave_up_on_the_twin(runs["give-up"])
