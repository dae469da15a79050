"""The usage parsers read the real CLIs' recorded outputs exactly, and never raise on garbage."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from certlab_usage import (
    AIDER_TEXT,
    CLAUDE_JSON,
    CODEX_JSONL,
    SHAPE_OF_AGENT,
    parse_aider,
    parse_claude_code,
    parse_codex,
    parse_usage,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certlab_core.plugin import UsageError
from certlab_core.plugin.types.agent import Usage

REPO = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agent_outputs"
VERSIONS = json.loads((FIXTURES / "VERSIONS.json").read_text())
PARSERS = {CLAUDE_JSON: parse_claude_code, CODEX_JSONL: parse_codex, AIDER_TEXT: parse_aider}
SHAPE_OF_CLI = {"claude": CLAUDE_JSON, "codex": CODEX_JSONL, "aider": AIDER_TEXT}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def estimate(cost: float, **tokens: int | None) -> Usage:
    return Usage(shape="", cost_usd=cost, cost_source="client-estimate", **tokens)


# What the real CLIs printed, driven by the scripted model server (tools/record_agent_fixtures.py).
EXPECTED: dict[str, Usage | None] = {
    # Three turns: 3200 + 3400 + 3600 prompt tokens, of which 0 + 2800 + 3200 cache reads.
    "claude_code_success.json": Usage(CLAUDE_JSON, 10200, 175, 6000, 0.019425, "client-estimate"),
    "claude_code_success_stream.jsonl": Usage(CLAUDE_JSON, 10200, 175, 6000, 0.019425, "client-estimate"),
    # Its top-level usage is all zeros here; modelUsage and the cost hold the figures.
    "claude_code_plain_json.json": Usage(CLAUDE_JSON, 10200, 175, 6000, 0.019425, "client-estimate"),
    "claude_code_max_turns.json": Usage(CLAUDE_JSON, 3000, 80, 2000, 0.0048000000000000004, "client-estimate"),
    # The API failed: the CLI reports zero of everything, which is a report.
    "claude_code_api_error.json": Usage(CLAUDE_JSON, 0, 0, 0, 0.0, "client-estimate"),
    "codex_success.jsonl": Usage(CODEX_JSONL, 15900, 300, 10000, None, None),
    "codex_failed.jsonl": None,
    # aider rounds: 2140 prompt tokens print as 2.1k.
    "aider_success.txt": Usage(AIDER_TEXT, 2100, 85, None, 0.0077, "client-estimate"),
    "aider_no_cost.txt": Usage(AIDER_TEXT, 2100, 85, None, None, None),
    # Two requests: 12k + 13k sent (12345, then 12800 plus 500 cache writes), 95 + 1.2k received.
    "aider_retry.txt": Usage(AIDER_TEXT, 25000, 1295, 12000, 0.10, "client-estimate"),
    # The report wraps at aider's 80 columns: "... $0.55 \nsession."
    "aider_wrapped_report.txt": Usage(AIDER_TEXT, 123000, 9900, 120000, 0.55, "client-estimate"),
}


def test_every_recorded_fixture_has_expected_figures() -> None:
    recorded = set(VERSIONS["fixtures"])
    assert recorded == set(EXPECTED)
    for name in recorded:
        assert (FIXTURES / name).read_text().strip(), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_fixture_parses_to_exact_figures(name: str) -> None:
    cli = VERSIONS["fixtures"][name]["cli"]
    shape = SHAPE_OF_CLI[cli]
    parsed = PARSERS[shape](fixture(name))
    assert parsed == EXPECTED[name]
    assert parse_usage(shape, fixture(name)) == parsed
    assert parse_usage({"claude": "claude-code"}.get(cli, cli), fixture(name)) == parsed


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if not n.startswith("aider")))
def test_parsed_tokens_are_what_the_scripted_server_reported(name: str) -> None:
    parsed = PARSERS[SHAPE_OF_CLI[VERSIONS["fixtures"][name]["cli"]]](fixture(name))
    scripted = VERSIONS["fixtures"][name]["scripted_usage"]
    if parsed is None:
        assert scripted == {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
        return
    # Answered with plain JSON, Claude Code asks every turn twice (streaming, then not) and counts once.
    asked = 2 if name == "claude_code_plain_json.json" else 1
    assert parsed.input_tokens == scripted["input_tokens"] // asked
    assert parsed.cached_input_tokens == scripted["cached_input_tokens"] // asked
    assert parsed.output_tokens == scripted["output_tokens"] // asked


def test_dollars_are_always_labelled_as_the_clients_estimate() -> None:
    for name in EXPECTED:
        parsed = parse_usage(VERSIONS["fixtures"][name]["cli"], fixture(name))
        if parsed is not None:
            assert (parsed.cost_usd is None) == (parsed.cost_source is None)
            assert parsed.cost_source in (None, "client-estimate")


def test_fixtures_keep_no_machine_path() -> None:
    machine_path = re.compile(r"(?<![>\w.])/(?:tmp|root|work|home|Users)/")
    for path in FIXTURES.iterdir():
        assert not machine_path.search(path.read_text()), path.name


# --------------------------------------------------------------------------- missing reports


@pytest.mark.parametrize("shape", sorted(PARSERS))
@pytest.mark.parametrize("text", ["", "\n\n", "Error: something broke\n", "{}", "[]", "null", '{"type": "result"}'])
def test_no_report_is_none(shape: str, text: str) -> None:
    assert parse_usage(shape, text) is None


def test_claude_without_a_result_object_is_none() -> None:
    init_only = fixture("claude_code_success_stream.jsonl").splitlines()[0]
    assert json.loads(init_only)["type"] == "system"
    assert parse_claude_code(init_only) is None


def test_codex_without_a_completed_turn_is_none() -> None:
    lines = fixture("codex_success.jsonl").splitlines()
    assert parse_codex("\n".join(line for line in lines if "turn.completed" not in line)) is None


def test_aider_api_down_prints_no_report() -> None:
    text = "litellm.InternalServerError: InternalServerError: OpenAIException\nRetrying in 0.2 seconds...\n"
    assert parse_aider(text) is None


def test_unknown_shape_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"unknown usage report shape or agent 'cursor'.*aider-text"):
        parse_usage("cursor", "")
    assert set(SHAPE_OF_AGENT.values()) == set(PARSERS)


# --------------------------------------------------------------------------- partial and hostile reports


def test_claude_partial_fields() -> None:
    report: dict[str, Any] = {
        "type": "result",
        "total_cost_usd": "free",
        "usage": {"input_tokens": 5, "output_tokens": -3},
    }
    assert parse_claude_code(json.dumps(report)) == Usage(CLAUDE_JSON, 5, None, None, None, None)
    report = {"type": "result", "total_cost_usd": 1e400, "usage": {"input_tokens": True, "output_tokens": 2.0}}
    assert parse_claude_code(json.dumps(report)) == Usage(CLAUDE_JSON, None, 2, None, None, None)
    nan_cost = '{"type": "result", "total_cost_usd": NaN, "usage": {"output_tokens": 7}}'
    assert parse_claude_code(nan_cost) == Usage(CLAUDE_JSON, None, 7, None, None, None)


def test_claude_reads_the_last_result_among_noise() -> None:
    success = fixture("claude_code_success.json").strip()
    noisy = "warning: something\n" + fixture("claude_code_api_error.json").strip() + "\n" + success + "\ntrailer\n"
    assert parse_claude_code(noisy) == EXPECTED["claude_code_success.json"]
    as_array = "[" + json.dumps({"type": "system"}) + "," + success + "]"
    assert parse_claude_code(as_array) == EXPECTED["claude_code_success.json"]


def test_claude_model_usage_with_a_bad_entry_claims_no_total() -> None:
    report = json.loads(fixture("claude_code_success.json"))
    report["modelUsage"]["claude-haiku-4-5"] = {"inputTokens": "many", "outputTokens": 3, "costUSD": 0.001}
    parsed = parse_claude_code(json.dumps(report))
    assert parsed is not None
    assert (parsed.input_tokens, parsed.output_tokens, parsed.cost_usd) == (None, 178, 0.019425)


def test_codex_sums_turns_and_refuses_a_partial_total() -> None:
    turn = '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,"output_tokens":3}}'
    assert parse_codex(turn + "\n" + turn) == Usage(CODEX_JSONL, 20, 6, 8)
    broken = '{"type":"turn.completed","usage":{"input_tokens":10,"output_tokens":"x"}}'
    assert parse_codex(turn + "\n" + broken) == Usage(CODEX_JSONL, 20, None, None)
    assert parse_codex('{"type":"turn.completed","usage":{"other":1}}') is None


def test_aider_formats_and_ansi() -> None:
    line = (
        "\x1b[32mTokens: 1.2k sent, 300 cache write, 9.9k cache hit, 15 received.\x1b[0m\n"
        "Cost: $0.0012 message, $1.50 session."
    )
    assert parse_aider(line) == Usage(AIDER_TEXT, 1200, 15, 9900, 1.50, "client-estimate")
    decimal_without_k = "Tokens: 1.5 sent, 2 received."
    assert parse_aider(decimal_without_k) == Usage(AIDER_TEXT, None, 2, None, None, None)
    assert parse_aider("Tokens: lots sent, 2 received.") is None


def test_deeply_nested_and_huge_inputs_are_refused_quietly() -> None:
    deep = "[" * 200_000 + "]" * 200_000
    for parser in PARSERS.values():
        assert parser(deep) is None
        assert parser("{" * 200_000) is None
    huge_int = '{"type":"result","usage":{"input_tokens":' + "9" * 5000 + "}}"
    assert parse_claude_code(huge_int) is None
    assert parse_claude_code(b"bytes are not text") is None  # type: ignore[arg-type]


def _check(parsed: Usage | None, shape: str) -> None:
    if parsed is None:
        return
    assert parsed.shape == shape
    for tokens in (parsed.input_tokens, parsed.output_tokens, parsed.cached_input_tokens):
        assert tokens is None or (type(tokens) is int and tokens >= 0)
    assert parsed.cost_usd is None or (math.isfinite(parsed.cost_usd) and parsed.cost_usd >= 0)
    assert (parsed.cost_usd is None) == (parsed.cost_source is None)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    for shape, parser in PARSERS.items():
        _check(parser(text), shape)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
claude_keys = st.sampled_from(
    ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "inputTokens",
     "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens", "costUSD"]
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    usage=json_values | st.dictionaries(claude_keys, json_values, max_size=5),
    model_usage=json_values
    | st.dictionaries(st.text(max_size=4), st.dictionaries(claude_keys, json_values), max_size=3),
    cost=json_values,
)
def test_hostile_claude_fields_never_raise(usage: Any, model_usage: Any, cost: Any) -> None:
    report = {"type": "result", "usage": usage, "modelUsage": model_usage, "total_cost_usd": cost}
    _check(parse_claude_code(json.dumps(report)), CLAUDE_JSON)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(json_values | st.dictionaries(st.sampled_from(["input_tokens", "output_tokens", "x"]), json_values)))
def test_hostile_codex_turns_never_raise(usages: list[Any]) -> None:
    lines = [json.dumps({"type": "turn.completed", "usage": usage}) for usage in usages]
    _check(parse_codex("\n".join(lines)), CODEX_JSONL)


aider_pieces = st.sampled_from(
    ["Tokens:", "sent,", "received.", "Cost:", "message,", "session.", "cache", "write,", "hit,", "$", "k", ".",
     " ", "\n", "\r\n", "\t", "0", "1.2k", "999999999999", "12k", "$0.01", "\x1b[0m"]
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(aider_pieces, max_size=40))
def test_aider_like_fragments_never_raise(pieces: list[str]) -> None:
    _check(parse_aider("".join(pieces)), AIDER_TEXT)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(EXPECTED)), cut=st.floats(min_value=0, max_value=1))
def test_truncated_fixtures_never_raise(name: str, cut: float) -> None:
    text = fixture(name)
    shape = SHAPE_OF_CLI[VERSIONS["fixtures"][name]["cli"]]
    _check(PARSERS[shape](text[: int(len(text) * cut)]), shape)


# --------------------------------------------------------------------------- re-recording with the real CLIs

AGENT_CLIS = os.environ.get("CERTLAB_AGENT_CLIS")


@pytest.mark.skipif(not AGENT_CLIS, reason="set CERTLAB_AGENT_CLIS to the CLIs' install prefix to re-record")
def test_rerecorded_outputs_have_the_kept_shapes_and_figures(tmp_path: Path) -> None:
    recorder = REPO / "tools" / "record_agent_fixtures.py"
    done = subprocess.run(
        [sys.executable, str(recorder), "--prefix", str(AGENT_CLIS), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fresh = json.loads((tmp_path / "VERSIONS.json").read_text())
    assert set(fresh["fixtures"]) == set(VERSIONS["fixtures"])
    for name, facts in fresh["fixtures"].items():
        kept_facts = VERSIONS["fixtures"][name]
        assert (facts["exit_code"], facts["file_edited"]) == (kept_facts["exit_code"], kept_facts["file_edited"]), name
        shape = SHAPE_OF_CLI[facts["cli"]]
        new, kept = PARSERS[shape]((tmp_path / name).read_text()), EXPECTED[name]
        if kept is None or new is None:
            assert new == kept, name
            continue
        assert (new.shape, new.input_tokens, new.output_tokens, new.cached_input_tokens) == (
            kept.shape,
            kept.input_tokens,
            kept.output_tokens,
            kept.cached_input_tokens,
        ), name
        # A new CLI version may carry a new price table: then only the presence of dollars must hold.
        if facts["version"] == kept_facts["version"]:
            assert new.cost_usd == kept.cost_usd, name
        else:
            assert (new.cost_usd is None) == (kept.cost_usd is None), name
