"""The aider adapter: aider headless (``--message``) in the work copy.

aider gets the task's prompt, the files it may change named explicitly (the ``--file``
options, else the literal paths of the task's edit policy that exist in the work copy), no
git, no repository map, no linting or testing of its own, and its history files (and the
model metadata file, when prices are given) in a fresh ``HOME`` outside the work copy.
It makes no connection but to its model API: ``LITELLM_LOCAL_MODEL_COST_MAP`` makes litellm read
the price map it ships, update checks and analytics are off, and the fresh ``HOME`` is given
the price table aider would otherwise fetch from a public host on every run
(``~/.aider/caches/model_prices_and_context_window.json``, :data:`OFFLINE_PRICE_TABLE`): an
entry for no model, so aider takes what it knows of a model from litellm's shipped map.

Its exit code is not trusted: aider exits 0 even when the model API is down. An API error
it printed and never got past (no model reply after it) is ``unavailable``, an
infrastructure failure, whether aider gave up or was still retrying at its timeout. Its
``Tokens: ... Cost: ...`` lines give the usage; the dollars are aider's own estimate.

Options (agent arguments): ``--bin``, ``--model`` (``openai/gpt-4o``), ``--base-url`` (else
``OPENAI_API_BASE`` or ``OPENAI_BASE_URL`` from the harness; the model boundary puts its proxy
here), ``--file`` (repeatable), ``--edit-format`` (``diff``), ``--input-cost-per-token`` and
``--output-cost-per-token`` and ``--max-input-tokens`` (a model metadata file written for the
run: an entry replaces all aider knows of the model), or ``--model-metadata-file PATH``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
from certlab_usage import agent_clis as clis
from certlab_usage import parse_aider

from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest, UsageError, hookimpl
from certlab_core.plugin.types.agent import PreflightCheck
from certlab_core.sdk.workcopy import in_allowed_paths

NAME = "aider"
CLI = clis.Cli(NAME, program="aider", variable="CERTLAB_AIDER_BIN", cached="aider/bin/aider")
DEFAULT_MODEL = "openai/gpt-4o"
BASE_URL_VARIABLES = ("OPENAI_API_BASE", "OPENAI_BASE_URL")
CREDENTIALS = ("OPENAI_API_KEY",)
FIXED_FLAGS = (
    "--no-git",
    "--yes-always",
    "--no-pretty",
    "--no-fancy-input",
    "--no-stream",
    "--no-check-update",
    "--no-show-model-warnings",
    "--analytics-disable",
    "--map-tokens",
    "0",
    "--no-auto-lint",
    "--no-auto-test",
    "--no-detect-urls",
    "--no-show-release-notes",
    "--no-gitignore",
    "--no-restore-chat-history",
)
# What aider prints when the model API failed (litellm's exception names and aider's own advice).
API_FAILURE = re.compile(
    r"litellm\.\w*(?:Error|Timeout)\b|The API provider (?:has rate limited you|is not able to authenticate you|"
    r"timed out)|The API provider's servers are down or overloaded|Retrying in \d+(?:\.\d+)? seconds"
)
MODEL_REPLY = re.compile(r"^Tokens: ", re.MULTILINE)
# aider's price table cache, relative to HOME: while it holds an entry no younger than a day, aider fetches
# nothing (an empty one is fetched again). Ours names no model: what aider knows of a model comes from the
# price map litellm ships (LITELLM_LOCAL_MODEL_COST_MAP), or from the run's model metadata file.
PRICE_TABLE_CACHE = (".aider", "caches", "model_prices_and_context_window.json")
OFFLINE_PRICE_TABLE = {
    "certlab-offline": {"note": "written by certlab's aider adapter so that aider fetches no price table"}
}


def _spec() -> clis.OptionSpec:
    return clis.OptionSpec(
        NAME,
        (
            "bin",
            "model",
            "base-url",
            "edit-format",
            "input-cost-per-token",
            "output-cost-per-token",
            "max-input-tokens",
            "model-metadata-file",
        ),
        repeated=("file",),
    )


def _price(name: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        price = float(value)
    except ValueError:
        price = -1.0
    if not price >= 0:
        raise UsageError(f"the aider adapter's --{name} must be a non-negative number of dollars (got {value!r})")
    return price


def check_args(args: tuple[str, ...]) -> None:
    """Refuse unknown options, bad prices and paths outside the work copy before anything runs."""
    options = clis.parse_options(_spec(), args)
    for name in ("input-cost-per-token", "output-cost-per-token"):
        _price(name, clis.one(options, name))
    clis.positive_int(NAME, "max-input-tokens", clis.one(options, "max-input-tokens"), 128000)
    for path in options.get("file", []):
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise UsageError(f"the aider adapter's --file {path} must be a path inside the work copy")


def files_to_edit(request: AgentRequest, options: Mapping[str, Sequence[str]]) -> list[str]:
    """The files aider may edit: ``--file`` options, else the edit policy's literal paths present in the work copy."""
    named = list(options.get("file", []))
    if named:
        return named
    policy = getattr(getattr(request.task, "family", None), "allowed_paths", ()) or ()
    work = Path(request.workdir)
    found = []
    for pattern in policy:
        if any(ch in pattern for ch in "*?["):
            found += sorted(
                str(p.relative_to(work))
                for p in work.rglob("*")
                if p.is_file() and in_allowed_paths(p.relative_to(work).as_posix(), [pattern])
            )
        elif (work / pattern).is_file():
            found.append(pattern)
    return list(dict.fromkeys(found))


def metadata(options: Mapping[str, Sequence[str]], model: str) -> dict[str, dict[str, object]] | None:
    """aider's model metadata (context limits and prices), when prices or limits are given; else None.

    An entry replaces everything aider knows of the model, so none is written unless asked:
    without one, aider looks a model it has no cached entry for up online.
    """
    if not any(
        clis.one(options, name) for name in ("input-cost-per-token", "output-cost-per-token", "max-input-tokens")
    ):
        return None
    entry: dict[str, object] = {
        "max_input_tokens": clis.positive_int(NAME, "max-input-tokens", clis.one(options, "max-input-tokens"), 128000),
        "max_output_tokens": 4096,
        "litellm_provider": model.split("/", 1)[0] if "/" in model else "openai",
        "mode": "chat",
    }
    for name, key in (
        ("input-cost-per-token", "input_cost_per_token"),
        ("output-cost-per-token", "output_cost_per_token"),
    ):
        price = _price(name, clis.one(options, name))
        if price is not None:
            entry[key] = price
    return {model: entry}


def command_line(
    executable: str, prompt: str, files: Sequence[str], home: Path, options: Mapping[str, Sequence[str]]
) -> list[str]:
    """The ``aider --message`` argument vector for one headless run; its files all live in ``home``."""
    cache = home.joinpath(*PRICE_TABLE_CACHE)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(OFFLINE_PRICE_TABLE), encoding="utf-8")
    model = clis.one(options, "model") or DEFAULT_MODEL
    metadata_file = clis.one(options, "model-metadata-file")
    entry = metadata(options, model)
    if entry is not None and metadata_file is None:
        written = home / "model-metadata.json"
        written.write_text(json.dumps(entry), encoding="utf-8")
        metadata_file = str(written)
    return [
        executable,
        *files,
        "--message",
        prompt,
        "--model",
        model,
        "--edit-format",
        clis.one(options, "edit-format") or "diff",
        *FIXED_FLAGS,
        *(["--model-metadata-file", metadata_file] if metadata_file else []),
        "--input-history-file",
        str(home / "input.history"),
        "--chat-history-file",
        str(home / "chat.history.md"),
    ]


def environment(harness: Mapping[str, str], home: Path, options: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """aider's environment: the base URL and key, litellm's local price map, unbuffered and unwrapped output."""
    extra = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1", "COLUMNS": "1000"}
    base_url = clis.one(options, "base-url") or next((harness[v] for v in BASE_URL_VARIABLES if harness.get(v)), None)
    if base_url:
        extra["OPENAI_API_BASE"] = base_url
    for name in CREDENTIALS:
        if harness.get(name):
            extra[name] = harness[name]
    env: dict[str, str] = clis.quiet_environment(harness, home, extra)
    return env


def api_failure(text: str) -> str | None:
    """The API error aider printed and never got past (no model reply after it), else None."""
    failures = list(API_FAILURE.finditer(text))
    if not failures:
        return None
    last = failures[-1]
    if any(reply.start() > last.start() for reply in MODEL_REPLY.finditer(text)):
        return None
    first = failures[0]
    line_start = text.rfind("\n", 0, first.start()) + 1
    line_end = text.find("\n", first.start())
    return text[line_start : line_end if line_end != -1 else len(text)].strip()[:300]


def judge(outcome: AgentOutcome) -> AgentOutcome:
    """The run's status read from aider's text (never its exit code), with the usage it reported."""
    text = outcome.stdout_tail + "\n" + outcome.stderr_tail
    usage = parse_aider(outcome.stdout_tail)
    if outcome.status not in ("completed", "timeout"):
        return attrs.evolve(outcome, usage=usage)
    failure = api_failure(text)
    if failure is not None:
        retrying = " (still retrying when stopped at its timeout)" if outcome.status == "timeout" else ""
        return attrs.evolve(
            outcome, status="unavailable", usage=usage, detail=f"the model API failed{retrying}: {failure}"
        )
    applied = sorted(set(re.findall(r"^Applied edit to (.+)$", outcome.stdout_tail, re.MULTILINE)))
    detail = f"applied edits to {', '.join(applied)}" if applied else "aider applied no edit"
    return attrs.evolve(outcome, usage=usage, detail=outcome.detail or detail)


def run(request: AgentRequest) -> AgentOutcome:
    """Run aider once on the request's work copy."""
    options = clis.parse_options(_spec(), request.agent_args)
    files = files_to_edit(request, options)
    return CLI.run(
        request,
        options,
        lambda executable, home: command_line(executable, request.prompt, files, home, options),
        lambda home: environment(request.env, home, options),
        judge,
        readable=list(options.get("model-metadata-file", [])),  # the user's own file, shown in a sandbox
    )


def preflight(args: tuple[str, ...], harness: Mapping[str, str]) -> list[PreflightCheck]:
    """The binary, its version, the base URL and the key a live run needs."""
    options = clis.parse_options(_spec(), args)
    executable, checks = CLI.binary_checks(options, harness)
    if executable is None:
        return checks
    base_url = clis.one(options, "base-url")
    source = "--base-url"
    if not base_url:
        source, base_url = next(((v, harness[v]) for v in BASE_URL_VARIABLES if harness.get(v)), ("", None))
    checks.append(
        PreflightCheck("base URL", True, f"{base_url} (from {source})" if base_url else "the provider's own API")
    )
    present = [name for name in CREDENTIALS if harness.get(name)]
    checks.append(
        PreflightCheck("credentials", bool(present), "OPENAI_API_KEY set" if present else "OPENAI_API_KEY is not set")
    )
    return checks


@hookimpl
def certlab_agents() -> list[AgentAdapter]:
    return [
        AgentAdapter(
            name=NAME,
            description="aider, headless (--message, no git): API failures read from its text; tokens, cost estimate",
            run=run,
            check_args=check_args,
            preflight=preflight,
            version=lambda args, harness: CLI.reported_version(clis.parse_options(_spec(), args), harness),
            programs=lambda args: CLI.programs(clis.parse_options(_spec(), args), os.environ),
        )
    ]
