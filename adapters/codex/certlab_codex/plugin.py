"""The codex adapter: ``codex exec --json`` in the work copy, under a timeout.

Each run gets a fresh ``HOME`` and a generated ``CODEX_HOME/config.toml``: one model provider
whose ``base_url`` is the option or the harness's ``OPENAI_BASE_URL`` (the model boundary puts
its proxy here), the Responses wire protocol, no approvals, no update check, no analytics;
its request and stream retries are Codex's own unless ``--request-max-retries`` or
``--stream-max-retries`` set them (Codex retries a 5xx with backoff, and a 429 only when the
answer carries ``retry-after``); ``--disable plugins`` and ``--ephemeral`` keep it from
reaching for remote plugin lists and from writing sessions. Codex loops reconnecting when
its server is unreachable, so the request's timeout always applies. Its JSON lines give the
tokens (Codex reports no dollars). A turn that failed (``turn.failed``, an ``error`` event)
with no completed turn is ``unavailable``: the model API failed, not the agent.

Options (agent arguments): ``--bin``, ``--model`` (``gpt-5.5``: a model Codex knows, so it
offers its ``apply_patch`` tool), ``--base-url``, ``--sandbox-mode`` (``danger-full-access``;
Codex's ``workspace-write`` needs a helper binary that is not always installed),
``--request-max-retries`` and ``--stream-max-retries`` (Codex's own when not given).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from certlab_usage import agent_clis as clis
from certlab_usage import parse_codex

from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest, UsageError, hookimpl
from certlab_core.plugin.types.agent import PreflightCheck

NAME = "codex"
CLI = clis.Cli(NAME, program="codex", variable="CERTLAB_CODEX_BIN", cached="npm/node_modules/.bin/codex")
DEFAULT_MODEL = "gpt-5.5"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_VARIABLE = "OPENAI_API_KEY"
SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")
# The options that set Codex's retries, each the provider setting of the same name (with underscores).
RETRY_OPTIONS = ("request-max-retries", "stream-max-retries")


def _spec() -> clis.OptionSpec:
    return clis.OptionSpec(NAME, ("bin", "model", "base-url", "sandbox-mode", *RETRY_OPTIONS))


def check_args(args: tuple[str, ...]) -> None:
    """Refuse unknown options, sandbox modes and retry counts before anything runs."""
    options = clis.parse_options(_spec(), args)
    for name in RETRY_OPTIONS:
        clis.positive_int(NAME, name, clis.one(options, name), 0)
    mode = clis.one(options, "sandbox-mode")
    if mode is not None and mode not in SANDBOX_MODES:
        raise UsageError(f"the codex adapter's --sandbox-mode must be one of {', '.join(SANDBOX_MODES)} (got {mode!r})")


def _toml_text(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def base_url_of(options: Mapping[str, Sequence[str]], harness: Mapping[str, str]) -> tuple[str, str]:
    """The provider's base URL and where it came from."""
    given = clis.one(options, "base-url")
    if given:
        return given, "--base-url"
    if harness.get("OPENAI_BASE_URL"):
        return harness["OPENAI_BASE_URL"], "OPENAI_BASE_URL"
    return DEFAULT_BASE_URL, "the default"


def config_toml(options: Mapping[str, Sequence[str]], harness: Mapping[str, str]) -> str:
    """``CODEX_HOME/config.toml`` for one run: one provider, the retries asked for, no approvals, no network extras."""
    base_url, _source = base_url_of(options, harness)
    model = clis.one(options, "model") or DEFAULT_MODEL
    sandbox = clis.one(options, "sandbox-mode") or "danger-full-access"
    return (
        f"model = {_toml_text(model)}\n"
        'model_provider = "certlab"\n'
        'approval_policy = "never"\n'
        f"sandbox_mode = {_toml_text(sandbox)}\n"
        "check_for_update_on_startup = false\n\n"
        "[analytics]\nenabled = false\n\n"
        "[model_providers.certlab]\n"
        'name = "certlab"\n'
        f"base_url = {_toml_text(base_url)}\n"
        f"env_key = {_toml_text(KEY_VARIABLE)}\n"
        'wire_api = "responses"\n'
        + "".join(
            f"{name.replace('-', '_')} = {clis.positive_int(NAME, name, clis.one(options, name), 0)}\n"
            for name in RETRY_OPTIONS
            if clis.one(options, name) is not None
        )
    )


def command_line(executable: str, prompt: str, options: Mapping[str, Sequence[str]]) -> list[str]:
    """The ``codex exec --json`` argument vector for one headless run."""
    model = clis.one(options, "model") or DEFAULT_MODEL
    return [
        executable,
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--disable",
        "plugins",
        "--ephemeral",
        "-m",
        model,
        prompt,
    ]


def environment(harness: Mapping[str, str], home: Path, options: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Codex's environment: a fresh HOME holding the generated CODEX_HOME, and the key its provider reads."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(config_toml(options, harness), encoding="utf-8")
    extra = {"CODEX_HOME": str(codex_home)}
    if harness.get(KEY_VARIABLE):
        extra[KEY_VARIABLE] = harness[KEY_VARIABLE]
    env: dict[str, str] = clis.quiet_environment(harness, home, extra)
    return env


def events(stdout: str) -> list[dict[str, Any]]:
    """Codex's JSON lines (anything else it printed is left out)."""
    found = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested past what the decoder can follow
            continue
        if isinstance(event, dict):
            found.append(event)
    return found


def judge(outcome: AgentOutcome) -> AgentOutcome:
    """The run's status read from Codex's JSON lines, with the tokens it reported."""
    usage = parse_codex(outcome.stdout_tail)
    if outcome.status not in ("completed", "timeout"):
        return attrs.evolve(outcome, usage=usage)
    seen = events(outcome.stdout_tail)
    completed = sum(1 for e in seen if e.get("type") == "turn.completed")
    errors = [e for e in seen if e.get("type") in ("turn.failed", "error")]
    if errors and not completed:
        last = errors[-1]
        error = last.get("error") if last.get("type") == "turn.failed" else None
        raw = error.get("message") if isinstance(error, dict) else error
        said = clis.one_line(str(raw or last.get("message") or "no message"))
        stopped = " (still reconnecting when stopped at its timeout)" if outcome.status == "timeout" else ""
        return attrs.evolve(outcome, status="unavailable", usage=usage, detail=f"the model API failed{stopped}: {said}")
    if outcome.status == "completed" and outcome.exit_code != 0 and not seen:
        said = clis.last_line(outcome.stderr_tail) or "nothing"
        return attrs.evolve(
            outcome, status="unavailable", usage=usage, detail=f"codex exited {outcome.exit_code}: {said}"
        )
    items = [e.get("item") for e in seen if e.get("type") == "item.completed"]
    changes = sum(1 for item in items if isinstance(item, dict) and item.get("type") == "file_change")
    detail = outcome.detail or f"{completed} turn(s) completed, {changes} file change(s)"
    return attrs.evolve(outcome, usage=usage, detail=detail)


def run(request: AgentRequest) -> AgentOutcome:
    """Run ``codex exec`` once on the request's work copy."""
    options = clis.parse_options(_spec(), request.agent_args)
    return CLI.run(
        request,
        options,
        lambda executable, _home: command_line(executable, request.prompt, options),
        lambda home: environment(request.env, home, options),
        judge,
    )


def preflight(args: tuple[str, ...], harness: Mapping[str, str]) -> list[PreflightCheck]:
    """The binary, its version, the base URL and the key a live run needs."""
    options = clis.parse_options(_spec(), args)
    executable, checks = CLI.binary_checks(options, harness)
    if executable is None:
        return checks
    base_url, source = base_url_of(options, harness)
    present = bool(harness.get(KEY_VARIABLE))
    return [
        *checks,
        PreflightCheck("base URL", True, f"{base_url} (from {source})"),
        PreflightCheck("credentials", present, f"{KEY_VARIABLE} {'set' if present else 'is not set'}"),
    ]


@hookimpl
def certlab_agents() -> list[AgentAdapter]:
    return [
        AgentAdapter(
            name=NAME,
            description="Codex, headless (codex exec --json, a generated CODEX_HOME, under a timeout): tokens only",
            run=run,
            check_args=check_args,
            preflight=preflight,
            version=lambda args, harness: CLI.reported_version(clis.parse_options(_spec(), args), harness),
            programs=lambda args: CLI.programs(clis.parse_options(_spec(), args), os.environ),
        )
    ]
