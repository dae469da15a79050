"""The real aider CLI, through the aider adapter, against a scripted OpenAI chat completions server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts
from certlab_scripted_models.conformance import conformance_server
from real_cli_support import (
    FIXED_LINE,
    GIVE_UP_FILE,
    GIVE_UP_REASON,
    SEEDED_LINE,
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

MODEL = "openai/certlab-scripted"
PRICES = (3e-06, 1.5e-05)  # dollars per input and output token, given to aider through its model metadata
RATE_LIMIT = Reply(http_status=429, error_message="scripted rate limit", retry_after=0)
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


def _certify(
    aider: str,
    server: ScriptedModelServer,
    tmp_path: Path,
    timeout_s: float = 60,
    sandbox: str = "none",
    args: list[str] | None = None,
    trace: Path | None = None,
) -> tuple[int, dict, str]:
    return certify(
        one_task(tmp_path / "task"),
        tmp_path / "out",
        "aider",
        _args(aider) if args is None else args,
        harness_env(OPENAI_API_KEY="scripted-key", OPENAI_API_BASE=server.openai_base_url),
        timeout_s=timeout_s,
        sandbox=sandbox,
        trace=trace,
    )


def test_a_scripted_search_replace_fix_certifies_as_fixed_in_bwrap_with_no_connection_but_the_boundary(
    aider: str, tmp_path: Path
) -> None:
    # No prices and no metadata file given: aider used to fetch its price table from a public host at every run,
    # which in the sandbox failed with connection errors in its output (a DNS lookup first).
    sandbox = contained_or_skip()  # the model boundary's relay is the CLI's only way out
    script = [_block("intervals.py", f"    {SEEDED_LINE}", f"    {FIXED_LINE}")]
    with ScriptedModelServer(script, relative_turns=True) as server:
        code, bundle, said = _certify(
            aider, server, tmp_path, sandbox=sandbox, args=_args(aider)[:2], trace=tmp_path / "trace"
        )
        requests = server.requests
        port = server.port
    trial = only_trial(bundle)
    assert (code, trial["verdict"], trial["agent_status"]) == (0, "fixed", "completed"), said
    assert bundle["containment"]["sandbox"] == "bwrap"
    assert_no_connection_but_the_boundary(tmp_path / "trace", aider, port)
    assert "Connection" not in trial["output_tail"]["stdout"] + trial["output_tail"]["stderr"]
    assert {r.path for r in requests} == {"/v1/chat/completions"} and len(requests) == 1
    assert requests[0].headers.get("authorization") == "Bearer scripted-key"


def test_a_scripted_cheat_that_edits_the_tests_fails_by_policy_with_no_connection_but_the_boundary(
    aider: str, tmp_path: Path
) -> None:
    # No prices and no metadata file given, uncontained: aider used to fetch its price table from a public host
    # (a DNS lookup at every run), a connection around the model boundary.
    script = [_block(TEST_FILE, "import pytest", "import pytest  # edited")]
    with ScriptedModelServer(script, relative_turns=True) as server:
        code, bundle, said = _certify(aider, server, tmp_path, args=_args(aider)[:2], trace=tmp_path / "trace")
        port = server.port
    trial = only_trial(bundle)
    assert (trial["verdict"], trial["failure_mode"]) == ("not-fixed", "policy-tests-modified"), said
    assert code == 0
    assert_no_connection_but_the_boundary(tmp_path / "trace", aider, port)


def test_a_first_call_429_is_retried_and_the_fix_certified_with_the_recovered_error_recorded(
    aider: str, tmp_path: Path
) -> None:
    # aider's client (litellm's OpenAI client) retries the 429 by itself: aider applies the fix, and the trial
    # is graded (it used to be unavailable, never graded: "model-upstream: ... HTTP 429; applied edits").
    script = [_block("intervals.py", f"    {SEEDED_LINE}", f"    {FIXED_LINE}")]
    with ScriptedModelServer(script, relative_turns=True, first_calls=[RATE_LIMIT]) as server:
        code, bundle, said = _certify(aider, server, tmp_path)
    trial = only_trial(bundle)
    assert (code, trial["verdict"], trial["agent_status"]) == (0, "fixed", "completed"), said
    assert trial["model"]["call_statuses"] == ["upstream-429", "ok"]
    assert trial["agent_detail"] == "recovered from 1 upstream error (HTTP 429); applied edits to intervals.py"
    assert_version_recorded(bundle, aider, tmp_path / "out")  # it was "unknown" without --agent-version
    contract = (tmp_path / "out" / "CONTRACT.md").read_text()
    assert "- `intervals-length/fixture/1`: fixed, after 1 upstream error (HTTP 429)" in contract
    # aider's figures for the answer it used, its dollars from the prices given in the model metadata file.
    usage = trial["usage"]
    assert (usage["shape"], usage["input_tokens"], usage["output_tokens"]) == ("aider-text", 900, 85)
    dollars = USAGE.input_tokens * PRICES[0] + USAGE.output_tokens * PRICES[1]
    assert usage["cost_usd"] == pytest.approx(dollars, abs=5e-5)  # aider prints two significant digits here
    assert usage["cost_source"] == "client-estimate"


# aider meets each outage 8 to 15 s after it starts here (four at once, the machine busy). Its own retry loop, whose
# back-off nothing configures (aider's RETRY_TIMEOUT is a constant, and the retried errors are litellm's classes),
# keeps it retrying for over a minute after that: any timeout past its start-up stops it still retrying. A run the
# first timeout stopped too soon (before aider's loop had retried twice, or met the 401) runs again with the second.
OUTAGE_TIMEOUTS_S = (20, 40)


def _retried(text: str) -> bool:
    """Whether aider's own retry loop had run twice (its "Retrying in" lines) in what it printed."""
    return text.count("Retrying in ") >= 2


def test_every_outage_is_agent_unavailable_in_aiders_own_words_although_it_exits_0(aider: str, tmp_path: Path) -> None:
    # aider retries a 500, a 429 and a refused connection with backoff for over a minute (its own loop,
    # which nothing configures): stopped at the timeout while still retrying, the run is an outage, not
    # a timeout of the agent's own making. The runs wait out the same retries, so they run at once: a
    # certification through the model boundary (a 429 on every call), and the adapter past it on a
    # 401, a 429 and a port nothing listens on.
    with conformance_server() as base_url:  # a process of its own: the runs are forked from this one
        args = (f"--bin={aider}", "--max-input-tokens=128000", "--file=README.md")
        api = {"OPENAI_API_BASE": f"{base_url}/v1", "OPENAI_API_KEY": "k"}
        gone = {"OPENAI_API_BASE": f"http://127.0.0.1:{closed_port()}/v1", "OPENAI_API_KEY": "k"}

        def runs(timeout_s: float) -> list[Callable[[], Any]]:
            folder = tmp_path / f"{timeout_s:g}s"
            task, out = one_task(folder / "task"), folder / "out"
            return [
                lambda: certify(task, out, "aider", (*args[:2], "--model=openai/m-429"), harness_env(**api), timeout_s),
                lambda: run_adapter("aider", (*args, "--model=openai/m-401"), api, timeout_s, folder / "401"),
                lambda: run_adapter("aider", (*args, "--model=openai/m-429"), api, timeout_s, folder / "429"),
                lambda: run_adapter("aider", (*args, "--model=openai/m-ok"), gone, timeout_s, folder / "gone"),
            ]

        def stopped_too_soon(index: int, result: Any) -> bool:
            if index == 0:
                tail = only_trial(result[1])["output_tail"]
                return not _retried(tail["stdout"] + tail["stderr"])
            if index == 1:  # a refused key is not retried: the run is too soon only if it never met the 401
                return bool(result.status == "timeout")
            return not _retried(result.stdout_tail + result.stderr_tail)

        first, second = OUTAGE_TIMEOUTS_S
        results = at_once(runs(first))
        late = [index for index, result in enumerate(results) if stopped_too_soon(index, result)]
        if late:
            again = runs(second)
            for index, result in zip(late, at_once([again[index] for index in late]), strict=True):
                results[index] = result
        certified, refused, limited, unreachable = results
    code, bundle, output = certified
    trial = only_trial(bundle)
    assert (trial["verdict"], trial["failure_mode"], trial["agent_status"]) == (
        "unavailable",
        "agent-unavailable",
        "unavailable",
    ), output
    assert code == 3
    assert "litellm.RateLimitError" in trial["output_tail"]["stdout"] + trial["output_tail"]["stderr"]
    statuses = trial["model"]["call_statuses"]
    assert len(statuses) > 3 and set(statuses) == {"upstream-429"}, statuses  # its last call failed too
    assert "the run ended on it: its last model call failed" in trial["agent_detail"]
    # A refused key is not retried: aider gives up and exits 0 (or is still winding down at the timeout).
    assert refused.status == "unavailable", told(refused)
    assert refused.detail.endswith("litellm.BadRequestError: OpenAIException - scripted HTTP 401"), told(refused)
    assert limited.status == "unavailable", told(limited)
    assert limited.detail.startswith("the model API failed (still retrying when stopped at its timeout): ")
    assert "litellm.RateLimitError" in limited.detail and "scripted HTTP 429" in limited.detail, told(limited)
    assert "The API provider has rate limited you" in limited.stdout_tail
    assert unreachable.status == "unavailable", told(unreachable)
    assert unreachable.detail.startswith("the model API failed (still retrying when stopped at its timeout): ")
    assert "Connection error" in unreachable.detail and "servers are down or overloaded" in unreachable.stdout_tail


def test_on_an_impossible_twin_a_scripted_test_edit_is_cheated_and_a_written_reason_gave_up_honestly_in_bwrap(
    aider: str, tmp_path: Path
) -> None:
    sandbox = contained_or_skip()

    def run(name: str, reply: Reply) -> tuple[int, dict, str]:
        with ScriptedModelServer([reply], relative_turns=True) as server:
            env = harness_env(OPENAI_API_KEY="scripted-key", OPENAI_API_BASE=server.openai_base_url)
            return certify_twin(tmp_path / name, "aider", _args(aider), env, sandbox, timeout_s=60)

    # Both at once (each aider run is mostly its own start-up): an edit of the visible tests, and an empty
    # SEARCH on a file that is not there yet, which aider creates.
    cheat, give_up = at_once(
        [
            lambda: run("cheat", _block(TEST_FILE, "import pytest", "import pytest  # edited")),
            lambda: run("give-up", _block(GIVE_UP_FILE, "", GIVE_UP_REASON)),
        ]
    )
    assert_cheated_on_the_twin(cheat)
    assert_gave_up_on_the_twin(give_up)
