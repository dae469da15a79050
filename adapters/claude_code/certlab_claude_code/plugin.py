"""The claude-code adapter: ``claude -p``, headless, in the work copy.

The CLI gets the task's prompt, tools restricted to reading, editing and running the suite
(``Read, Glob, Grep, Edit, Write, Bash(python -m pytest:*)``) with edits accepted, a fresh
``HOME`` outside the work copy, and the variables that keep its traffic on the model API alone.
Its retries of a failed model call are the CLI's own (ten, with backoff) unless ``--max-retries``
sets ``CLAUDE_CODE_MAX_RETRIES``: a run that retried past an upstream error and went on is
graded as usual, one that gave up on the API is unavailable. Its JSON result gives the
tokens and the dollars (the CLI's own estimate, from its own price table), the turns and
any permission denials. A model API error (``api_error_status``, an ``API Error`` result, a
refused key) is ``unavailable``: an infrastructure failure, never a failed fix.

Options (agent arguments): ``--bin``, ``--model``, ``--base-url`` (else ``ANTHROPIC_BASE_URL``
from the harness; the model boundary puts its proxy here), ``--max-turns`` (30),
``--max-retries`` (the CLI's own when not given), ``--allowed-tools``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from certlab_usage import agent_clis as clis
from certlab_usage import parse_claude_code

from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest, hookimpl
from certlab_core.plugin.types.agent import PreflightCheck

NAME = "claude-code"
CLI = clis.Cli(NAME, program="claude", variable="CERTLAB_CLAUDE_BIN", cached="npm/node_modules/.bin/claude")
ALLOWED_TOOLS = "Read,Glob,Grep,Edit,Write,Bash(python -m pytest:*)"
DEFAULT_MAX_TURNS = 30
CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
# Result texts by which the CLI says the model API, not the agent, failed.
API_FAILURE_MARKS = (
    "API Error",
    "Invalid API key",
    "Please run /login",
    "Credit balance is too low",
    "Connection error",
)


def _spec() -> clis.OptionSpec:
    return clis.OptionSpec(NAME, ("bin", "model", "base-url", "max-turns", "max-retries", "allowed-tools"))


def check_args(args: tuple[str, ...]) -> None:
    """Refuse unknown options or bad numbers before anything runs."""
    options = clis.parse_options(_spec(), args)
    clis.positive_int(NAME, "max-turns", clis.one(options, "max-turns"), DEFAULT_MAX_TURNS)
    clis.positive_int(NAME, "max-retries", clis.one(options, "max-retries"), 0)


def command_line(executable: str, prompt: str, options: Mapping[str, Sequence[str]]) -> list[str]:
    """The ``claude -p`` argument vector for one headless run."""
    max_turns = clis.positive_int(NAME, "max-turns", clis.one(options, "max-turns"), DEFAULT_MAX_TURNS)
    argv = [
        executable,
        "-p",
        prompt,
        "--output-format",
        "json",
        "--allowedTools",
        clis.one(options, "allowed-tools") or ALLOWED_TOOLS,
        "--permission-mode",
        "acceptEdits",
        "--max-turns",
        str(max_turns),
    ]
    model = clis.one(options, "model")
    if model:
        argv += ["--model", model]
    return argv


def environment(harness: Mapping[str, str], home: Path, options: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The CLI's environment: the quiet-traffic settings, the retries asked for, the base URL and credentials."""
    extra = dict(clis.CLAUDE_QUIET)
    retries = clis.one(options, "max-retries")
    if retries is not None:  # else the CLI retries as it ships
        extra["CLAUDE_CODE_MAX_RETRIES"] = str(clis.positive_int(NAME, "max-retries", retries, 0))
    base_url = clis.one(options, "base-url") or harness.get("ANTHROPIC_BASE_URL")
    if base_url:
        extra["ANTHROPIC_BASE_URL"] = base_url
    for name in CREDENTIALS:
        if harness.get(name):
            extra[name] = harness[name]
    env: dict[str, str] = clis.quiet_environment(harness, home, extra)
    return env


def result_object(stdout: str) -> Mapping[str, Any] | None:
    """The ``type: result`` object Claude Code prints last (None when there is none)."""
    text = stdout.strip()
    candidates = [text] if text.startswith("{") else []
    candidates += [line.strip() for line in reversed(text.splitlines()) if line.strip().startswith("{")]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):  # not JSON, or nested past what the decoder can follow
            continue
        if isinstance(value, dict) and value.get("type") == "result":
            return value
    return None


def judge(outcome: AgentOutcome) -> AgentOutcome:
    """The run's status read from its JSON result, with the usage it reported."""
    usage = parse_claude_code(outcome.stdout_tail)
    if outcome.status != "completed":
        return attrs.evolve(outcome, usage=usage)
    result = result_object(outcome.stdout_tail)
    if result is None:
        if outcome.exit_code == 0:
            return attrs.evolve(outcome, usage=usage, detail="claude printed no JSON result")
        said = clis.last_line(outcome.stderr_tail) or clis.last_line(outcome.stdout_tail) or "nothing"
        return attrs.evolve(
            outcome,
            status="unavailable",
            usage=usage,
            detail=f"claude exited {outcome.exit_code} without a result: {said}",
        )
    text = str(result.get("result") or "")
    status = result.get("api_error_status")
    turns = result.get("num_turns")
    denials = result.get("permission_denials") or []
    facts = [f"{turns} turns" if isinstance(turns, int) else "", str(result.get("subtype") or "")]
    if isinstance(denials, list) and denials:
        names = sorted({str(d.get("tool_name", "?")) for d in denials if isinstance(d, dict)})
        facts.append(f"{len(denials)} permission denials ({', '.join(names)})")
    if result.get("is_error") and (status is not None or any(mark in text for mark in API_FAILURE_MARKS)):
        where = f"HTTP {status}" if status is not None else "no HTTP status"
        return attrs.evolve(
            outcome,
            status="unavailable",
            usage=usage,
            detail=f"the model API failed ({where}): {clis.one_line(text)}",
        )
    return attrs.evolve(outcome, usage=usage, detail=clis.one_line("; ".join(f for f in facts if f)))


def run(request: AgentRequest) -> AgentOutcome:
    """Run Claude Code once on the request's work copy."""
    options = clis.parse_options(_spec(), request.agent_args)
    return CLI.run(
        request,
        options,
        lambda executable, _home: command_line(executable, request.prompt, options),
        lambda home: environment(request.env, home, options),
        judge,
    )


def preflight(args: tuple[str, ...], harness: Mapping[str, str]) -> list[PreflightCheck]:
    """The binary, its version, the base URL and the credentials a live run needs."""
    options = clis.parse_options(_spec(), args)
    executable, checks = CLI.binary_checks(options, harness)
    if executable is None:
        return checks
    base_url = clis.one(options, "base-url") or harness.get("ANTHROPIC_BASE_URL")
    source = "--base-url" if clis.one(options, "base-url") else "ANTHROPIC_BASE_URL"
    checks.append(PreflightCheck("base URL", True, f"{base_url} (from {source})" if base_url else "the vendor's API"))
    present = [name for name in CREDENTIALS if harness.get(name)]
    checks.append(
        PreflightCheck(
            "credentials",
            bool(present),
            f"{', '.join(present)} set" if present else f"none of {', '.join(CREDENTIALS)} is set",
        )
    )
    return checks


@hookimpl
def certlab_agents() -> list[AgentAdapter]:
    return [
        AgentAdapter(
            name=NAME,
            description="Claude Code, headless (claude -p, JSON result): tokens and the CLI's own cost estimate",
            run=run,
            check_args=check_args,
            preflight=preflight,
            version=lambda args, harness: CLI.reported_version(clis.parse_options(_spec(), args), harness),
            programs=lambda args: CLI.programs(clis.parse_options(_spec(), args), os.environ),
        )
    ]
