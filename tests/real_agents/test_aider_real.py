"""The real aider CLI, through the aider adapter, against a scripted OpenAI chat completions server on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_cli_support import FIXED_LINE, SEEDED_LINE, TEST_FILE, certify, harness_env, one_task, only_trial, require_cli

from certlab_core.testing.scripted_models import Reply, ScriptedModelServer, TokenCounts

MODEL = "openai/certlab-scripted"
PRICES = (3e-06, 1.5e-05)  # dollars per input and output token, given to aider through its model metadata
USAGE = TokenCounts(input_tokens=900, output_tokens=85)  # below 1000, so aider prints the exact figures


@pytest.fixture(scope="module")
def aider() -> str:
    return require_cli("aider", "aider", "CERTLAB_AIDER_BIN", "aider/bin/aider")


def _block(path: str, old: str, new: str) -> Reply:
    text = f"Here is the change.\n\n{path}\n```python\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n```\n"
    return Reply(text=text, usage=USAGE)


def _args(aider: str) -> list[str]:
    return [
        f"--bin={aider}",
        f"--model={MODEL}",
        f"--input-cost-per-token={PRICES[0]}",
        f"--output-cost-per-token={PRICES[1]}",
    ]


def _certify(aider: str, server: ScriptedModelServer, tmp_path: Path, timeout_s: float = 60) -> tuple[int, dict, str]:
    return certify(
        one_task(tmp_path / "task"),
        tmp_path / "out",
        "aider",
        _args(aider),
        harness_env(OPENAI_API_KEY="scripted-key", OPENAI_API_BASE=server.openai_base_url),
        timeout_s=timeout_s,
    )


def test_a_scripted_search_replace_fix_certifies_as_fixed_with_aiders_figures(aider: str, tmp_path: Path) -> None:
    script = [_block("intervals.py", f"    {SEEDED_LINE}", f"    {FIXED_LINE}")]
    with ScriptedModelServer(script, relative_turns=True) as server:
        code, bundle, said = _certify(aider, server, tmp_path)
        requests = server.requests
    trial = only_trial(bundle)
    assert (code, trial["verdict"], trial["agent_status"]) == (0, "fixed", "completed"), said
    assert {r.path for r in requests} == {"/v1/chat/completions"} and len(requests) == 1
    assert requests[0].headers.get("authorization") == "Bearer scripted-key"
    usage = trial["usage"]
    assert (usage["shape"], usage["input_tokens"], usage["output_tokens"]) == ("aider-text", 900, 85)
    dollars = USAGE.input_tokens * PRICES[0] + USAGE.output_tokens * PRICES[1]
    assert usage["cost_usd"] == pytest.approx(dollars, abs=5e-5)  # aider prints two significant digits here
    assert usage["cost_source"] == "client-estimate"


def test_a_scripted_cheat_that_edits_the_tests_fails_by_policy(aider: str, tmp_path: Path) -> None:
    script = [_block(TEST_FILE, "import pytest", "import pytest  # edited")]
    with ScriptedModelServer(script, relative_turns=True) as server:
        code, bundle, said = _certify(aider, server, tmp_path)
    trial = only_trial(bundle)
    assert (trial["verdict"], trial["failure_mode"]) == ("not-fixed", "policy-tests-modified"), said
    assert code == 0


def test_an_api_error_is_agent_unavailable_although_aider_exits_0(aider: str, tmp_path: Path) -> None:
    # aider retries a 500 with backoff for over a minute; stopped at the trial's timeout while it
    # is still retrying, the trial is an outage, not a timeout of the agent's own making.
    with ScriptedModelServer([Reply(http_status=500, error_message="scripted outage")], relative_turns=True) as server:
        code, bundle, said = _certify(aider, server, tmp_path, timeout_s=45)
    trial = only_trial(bundle)
    assert (trial["verdict"], trial["failure_mode"], trial["agent_status"]) == (
        "unavailable",
        "agent-unavailable",
        "unavailable",
    ), said
    assert code == 3
    assert "InternalServerError" in trial["output_tail"]["stdout"] + trial["output_tail"]["stderr"]
