"""Record what the real agent CLIs print, driven offline by the scripted model server, as test fixtures.

Each scenario starts a :class:`ScriptedModelServer` on 127.0.0.1, lays a small work directory
with one file to edit, runs the real CLI headless against the server with a fresh HOME and the
environment that keeps every connection on loopback, checks the CLI did what the script told it
(the file was edited, or the run failed as scripted), and saves the CLI's stdout under
``plugins/usage/tests/fixtures/agent_outputs/``. The temporary directory's path is replaced by
``<recording-dir>`` so no machine path is kept. ``VERSIONS.json`` records each CLI's version and,
per fixture, the exit code and the token figures the server reported.

This script installs nothing. Install the CLIs outside the repository, for example::

    npm install --prefix PREFIX @anthropic-ai/claude-code @openai/codex
    python3 -m venv PREFIX/aider && PREFIX/aider/bin/pip install aider-chat
    python tools/record_agent_fixtures.py --prefix PREFIX

``--claude``, ``--codex`` and ``--aider`` name each executable instead; ``--only`` records one
CLI's scenarios; ``--out`` writes elsewhere (the CLI-backed test records into a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certlab_scripted_models import (
    ReceivedRequest,
    Reply,
    Script,
    ScriptedModelServer,
    TokenCounts,
    ToolCall,
    Turn,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "plugins" / "usage" / "tests" / "fixtures" / "agent_outputs"
PLACEHOLDER = "<recording-dir>"

ORIGINAL = 'def greet(name):\n    return "Hello, " + name\n'
EDITED = 'def greet(name):\n    return "Hi, " + name\n'
PROMPT = 'In greeting.py, make greet say "Hi, " instead of "Hello, ".'

CLAUDE_MODEL = "claude-sonnet-4-5"
CODEX_MODEL = "gpt-5.5"
AIDER_MODEL = "openai/certlab-scripted"
# Prices aider is told through its model metadata file: $3 and $15 per million tokens.
AIDER_PRICES = {"input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05}


@dataclass
class Scenario:
    """One recording: which CLI, what the model says, and what must hold afterwards."""

    name: str
    cli: str
    fixture: str
    script: Script
    expect_edit: bool
    extra_args: tuple[str, ...] = ()
    relative_turns: bool = False
    aider_prices: bool = True
    anthropic_sse: bool = True
    timeout_s: float = 180.0


@dataclass
class Recording:
    """What one scenario produced."""

    scenario: Scenario
    stdout: str
    stderr: str
    exit_code: int | None
    requests: tuple[ReceivedRequest, ...]
    edited: bool
    wall_s: float
    problems: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- scripts


def _claude_success_script(path_of: Callable[[str], str]) -> Script:
    def reply(turn: Turn) -> Reply:
        target = path_of("greeting.py")
        script = [
            Reply(
                text="I'll read the file first.",
                tool_calls=(ToolCall("Read", {"file_path": target}),),
                usage=TokenCounts(input_tokens=3200, output_tokens=60, cache_creation_input_tokens=2800),
            ),
            Reply(
                tool_calls=(
                    ToolCall("Edit", {"file_path": target, "old_string": '"Hello, "', "new_string": '"Hi, "'}),
                ),
                usage=TokenCounts(
                    input_tokens=3400, output_tokens=90, cached_input_tokens=2800, cache_creation_input_tokens=400
                ),
            ),
            Reply(
                text='greet now says "Hi, ".',
                usage=TokenCounts(input_tokens=3600, output_tokens=25, cached_input_tokens=3200),
            ),
        ]
        return script[turn.number] if turn.number < len(script) else Reply(http_status=500, error_message="no turn")

    return reply


def _claude_reads_forever(path_of: Callable[[str], str]) -> Script:
    def reply(turn: Turn) -> Reply:
        return Reply(
            text="Reading again.",
            tool_calls=(ToolCall("Read", {"file_path": path_of("greeting.py")}),),
            usage=TokenCounts(input_tokens=1500, output_tokens=40, cached_input_tokens=1000),
        )

    return reply


def _claude_api_error(path_of: Callable[[str], str]) -> Script:
    return [Reply(http_status=500, error_message="scripted internal error")]


PATCH = """*** Begin Patch
*** Update File: greeting.py
@@
-    return "Hello, " + name
+    return "Hi, " + name
*** End Patch
"""


def _codex_success_script(path_of: Callable[[str], str]) -> Script:
    return [
        Reply(
            tool_calls=(ToolCall("exec_command", {"cmd": "cat greeting.py"}),),
            usage=TokenCounts(input_tokens=5000, output_tokens=120, reasoning_output_tokens=40),
        ),
        Reply(
            tool_calls=(ToolCall("apply_patch", PATCH),),
            usage=TokenCounts(input_tokens=5300, output_tokens=150, cached_input_tokens=4800),
        ),
        Reply(
            text='greet now says "Hi, ".',
            usage=TokenCounts(input_tokens=5600, output_tokens=30, cached_input_tokens=5200),
        ),
    ]


def _codex_failed_script(path_of: Callable[[str], str]) -> Script:
    return [Reply(http_status=500, error_message="scripted internal error")]


AIDER_BLOCK = """greeting.py
```python
<<<<<<< SEARCH
    return "Hello, " + name
=======
    return "Hi, " + name
>>>>>>> REPLACE
```
"""

AIDER_WRONG_BLOCK = """greeting.py
```python
<<<<<<< SEARCH
    return "Howdy, " + name
=======
    return "Hi, " + name
>>>>>>> REPLACE
```
"""


def _aider_success_script(path_of: Callable[[str], str]) -> Script:
    return [Reply(text="Here is the change.\n\n" + AIDER_BLOCK, usage=TokenCounts(input_tokens=2140, output_tokens=85))]


def _aider_retry_script(path_of: Callable[[str], str]) -> Script:
    # aider's reflection request carries more than one new assistant message (its relative turn
    # number is 2, not 1), so the script answers "first request" and "any later request".
    def reply(turn: Turn) -> Reply:
        if turn.number == 0:
            return Reply(
                text="Here is the change.\n\n" + AIDER_WRONG_BLOCK,
                usage=TokenCounts(input_tokens=12345, output_tokens=95),
            )
        return Reply(
            text="Sorry, the line reads differently.\n\n" + AIDER_BLOCK,
            usage=TokenCounts(
                input_tokens=12800, output_tokens=1234, cached_input_tokens=12000, cache_creation_input_tokens=500
            ),
        )

    return reply


def _aider_big_script(path_of: Callable[[str], str]) -> Script:
    # Figures large enough that aider's report is wider than its 80-column console and wraps.
    return [
        Reply(
            text="Here is the change.\n\n" + AIDER_BLOCK,
            usage=TokenCounts(input_tokens=123456, output_tokens=9876, cached_input_tokens=120000),
        )
    ]


SCENARIOS: dict[str, tuple[str, str, Callable[[Callable[[str], str]], Script], dict[str, Any]]] = {
    # name: (cli, fixture, script factory, options)
    "claude_code_success": ("claude", "claude_code_success.json", _claude_success_script, {"expect_edit": True}),
    "claude_code_success_stream": (
        "claude",
        "claude_code_success_stream.jsonl",
        _claude_success_script,
        {"expect_edit": True, "extra_args": ("--output-format", "stream-json", "--verbose")},
    ),
    "claude_code_max_turns": (
        "claude",
        "claude_code_max_turns.json",
        _claude_reads_forever,
        {"expect_edit": False, "extra_args": ("--max-turns", "2")},
    ),
    "claude_code_api_error": ("claude", "claude_code_api_error.json", _claude_api_error, {"expect_edit": False}),
    "claude_code_plain_json": (
        "claude",
        "claude_code_plain_json.json",
        _claude_success_script,
        {"expect_edit": True, "anthropic_sse": False},
    ),
    "codex_success": ("codex", "codex_success.jsonl", _codex_success_script, {"expect_edit": True}),
    "codex_failed": ("codex", "codex_failed.jsonl", _codex_failed_script, {"expect_edit": False, "timeout_s": 90}),
    # aider's prompt holds few-shot examples and file pairs as assistant messages: count turns from the first request.
    "aider_success": (
        "aider",
        "aider_success.txt",
        _aider_success_script,
        {"expect_edit": True, "relative_turns": True},
    ),
    "aider_retry": ("aider", "aider_retry.txt", _aider_retry_script, {"expect_edit": True, "relative_turns": True}),
    "aider_no_cost": (
        "aider",
        "aider_no_cost.txt",
        _aider_success_script,
        {"expect_edit": True, "aider_prices": False, "relative_turns": True},
    ),
    "aider_wrapped_report": (
        "aider",
        "aider_wrapped_report.txt",
        _aider_big_script,
        {"expect_edit": True, "relative_turns": True},
    ),
}


# --------------------------------------------------------------------------- running one CLI


def _base_env(home: Path) -> dict[str, str]:
    """A minimal environment: nothing of the caller's (keys, proxies) reaches the CLI."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": str(home),
    }


def _claude_command(
    executable: str, scenario: Scenario, server: ScriptedModelServer, home: Path
) -> tuple[list[str], dict[str, str]]:
    env = _base_env(home) | {
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": "scripted-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    args = [
        executable,
        "-p",
        PROMPT,
        "--model",
        CLAUDE_MODEL,
        "--allowedTools",
        "Read,Edit,Write",
        "--permission-mode",
        "acceptEdits",
    ]
    if "--output-format" not in scenario.extra_args:
        args += ["--output-format", "json"]
    if "--max-turns" not in scenario.extra_args:
        args += ["--max-turns", "6"]
    return args + list(scenario.extra_args), env


def _codex_command(
    executable: str, scenario: Scenario, server: ScriptedModelServer, home: Path
) -> tuple[list[str], dict[str, str]]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f"""model = "{CODEX_MODEL}"
model_provider = "scripted"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.scripted]
name = "scripted"
base_url = "{server.openai_base_url}"
env_key = "SCRIPTED_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""
    )
    env = _base_env(home) | {"CODEX_HOME": str(codex_home), "SCRIPTED_API_KEY": "scripted-key"}
    args = [
        executable,
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--disable",
        "plugins",
        "--ephemeral",
        "-m",
        CODEX_MODEL,
        *scenario.extra_args,
        PROMPT,
    ]
    return args, env


def _aider_command(
    executable: str, scenario: Scenario, server: ScriptedModelServer, home: Path
) -> tuple[list[str], dict[str, str]]:
    metadata: dict[str, Any] = {
        "max_input_tokens": 128000,
        "max_output_tokens": 4096,
        "litellm_provider": "openai",
        "mode": "chat",
    }
    if scenario.aider_prices:
        metadata |= AIDER_PRICES
    metadata_file = home / "model-metadata.json"
    metadata_file.write_text(json.dumps({AIDER_MODEL: metadata}))
    env = _base_env(home) | {
        "OPENAI_API_BASE": server.openai_base_url,
        "OPENAI_API_KEY": "scripted-key",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    args = [
        executable,
        "greeting.py",
        "--message",
        PROMPT,
        "--model",
        AIDER_MODEL,
        "--edit-format",
        "diff",
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
        "--model-metadata-file",
        str(metadata_file),
        *scenario.extra_args,
    ]
    return args, env


COMMANDS = {"claude": _claude_command, "codex": _codex_command, "aider": _aider_command}


def _scrub(text: str, root: Path, port: int) -> str:
    """Replace the temporary directory (also in Claude Code's dashed project-folder form) and the port."""
    for form in sorted({str(root), str(root.resolve())}, key=len, reverse=True):
        text = text.replace(form, PLACEHOLDER).replace(form.replace("/", "-"), PLACEHOLDER)
    return text.replace(f"127.0.0.1:{port}", "127.0.0.1:PORT")


def record(scenario_name: str, executable: str) -> Recording:
    """Run one scenario against the real CLI and return what it printed, scrubbed of the temp path."""
    cli, fixture, factory, options = SCENARIOS[scenario_name]
    with tempfile.TemporaryDirectory(prefix="certlab-rec-") as temp:
        root = Path(temp)
        work, home = root / "project", root / "home"
        work.mkdir()
        home.mkdir()
        (work / "greeting.py").write_text(ORIGINAL)

        def path_of(name: str) -> str:
            return str(work / name)

        scenario = Scenario(scenario_name, cli, fixture, factory(path_of), **options)
        with ScriptedModelServer(
            scenario.script, relative_turns=scenario.relative_turns, anthropic_sse=scenario.anthropic_sse
        ) as server:
            args, env = COMMANDS[cli](executable, scenario, server, home)
            started = time.monotonic()
            try:
                done = subprocess.run(
                    args,
                    cwd=work,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=scenario.timeout_s,
                )
                stdout, stderr, exit_code = done.stdout, done.stderr, done.returncode
            except subprocess.TimeoutExpired as timed_out:
                stdout = _text(timed_out.stdout)
                stderr = _text(timed_out.stderr)
                exit_code = None
            wall_s = time.monotonic() - started
            requests = server.requests
            port = server.port
        edited = (work / "greeting.py").read_text() == EDITED
        recording = Recording(
            scenario, _scrub(stdout, root, port), _scrub(stderr, root, port), exit_code, requests, edited, wall_s
        )
    if exit_code is None:
        recording.problems.append(f"timed out after {scenario.timeout_s:.0f} s")
    if edited != scenario.expect_edit:
        recording.problems.append("the file was edited" if edited else "the file was not edited")
    if not stdout.strip():
        recording.problems.append("nothing on stdout")
    unserved = [f"{r.method} {r.path}" for r in requests if r.status == 404]
    if unserved:
        recording.problems.append("requests outside the model endpoints: " + ", ".join(unserved))
    return recording


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def cli_version(cli: str, executable: str) -> str:
    """The version string a CLI prints for --version (its first number)."""
    with tempfile.TemporaryDirectory(prefix="certlab-ver-") as home:
        done = subprocess.run(
            [executable, "--version"],
            env=_base_env(Path(home)),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    match = re.search(r"\d+\.\d+\.\d+\S*", done.stdout + done.stderr)
    return match.group(0) if match else (done.stdout + done.stderr).strip()


def _scripted_totals(requests: Sequence[ReceivedRequest], script: Script) -> dict[str, int]:
    """The token figures the server reported over the turns it answered successfully."""
    totals = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    for request in requests:
        if request.protocol is None or request.status != 200 or request.turn is None:
            continue
        reply = script(Turn(request.protocol, request.turn, request.body)) if callable(script) else script[request.turn]
        totals["input_tokens"] += reply.usage.input_tokens
        totals["cached_input_tokens"] += reply.usage.cached_input_tokens
        totals["output_tokens"] += reply.usage.output_tokens
    return totals


PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex", "aider": "aider-chat"}


def resolve_executables(prefix: str | None, explicit: Mapping[str, str | None]) -> dict[str, str]:
    """Each CLI's executable: the explicit option, else its place under the install prefix."""
    found: dict[str, str] = {}
    for cli in COMMANDS:
        path = explicit.get(cli)
        if not path and prefix:
            # An npm prefix of its own, or the cache `make clis` fills (its npm packages under npm/).
            npm = [f"node_modules/.bin/{cli}", f"npm/node_modules/.bin/{cli}"]
            places = ["aider/bin/aider"] if cli == "aider" else npm
            path = next((str(Path(prefix) / p) for p in places if (Path(prefix) / p).exists()), None)
        if path:
            found[cli] = path
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", help="install prefix: node_modules/.bin/{claude,codex} and aider/bin/aider")
    parser.add_argument("--claude", help="the claude executable")
    parser.add_argument("--codex", help="the codex executable")
    parser.add_argument("--aider", help="the aider executable")
    parser.add_argument("--only", action="append", choices=sorted(COMMANDS), help="record only this CLI (repeatable)")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="record only this scenario")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="folder for the fixtures and VERSIONS.json")
    options = parser.parse_args(argv)

    executables = resolve_executables(
        options.prefix, {"claude": options.claude, "codex": options.codex, "aider": options.aider}
    )
    wanted = set(options.only or COMMANDS)
    names = [
        name
        for name in (options.scenario or SCENARIOS)
        if SCENARIOS[name][0] in wanted and SCENARIOS[name][0] in executables
    ]
    missing = sorted(wanted - set(executables))
    if missing:
        print(f"skipping {', '.join(missing)}: no executable given (--prefix, or --claude/--codex/--aider)")
    if not names:
        print("nothing to record: give --prefix or the executables", file=sys.stderr)
        return 4

    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    versions_file = out / "VERSIONS.json"
    versions: dict[str, Any] = json.loads(versions_file.read_text()) if versions_file.exists() else {}
    versions.setdefault("clis", {})
    versions.setdefault("fixtures", {})
    for cli in sorted({SCENARIOS[name][0] for name in names}):
        versions["clis"][cli] = {"package": PACKAGES[cli], "version": cli_version(cli, executables[cli])}

    failed = 0
    for name in names:
        cli, fixture = SCENARIOS[name][0], SCENARIOS[name][1]
        recording = record(name, executables[cli])
        (out / fixture).write_text(recording.stdout)
        versions["fixtures"][fixture] = {
            "cli": cli,
            "version": versions["clis"][cli]["version"],
            "exit_code": recording.exit_code,
            "file_edited": recording.edited,
            "model_requests": sum(1 for r in recording.requests if r.protocol is not None),
            "scripted_usage": _scripted_totals(recording.requests, recording.scenario.script),
        }
        status = "ok" if not recording.problems else "PROBLEM: " + "; ".join(recording.problems)
        print(f"{name}: exit {recording.exit_code}, {recording.wall_s:.1f} s, {status}")
        if recording.problems:
            failed += 1
            tail = recording.stderr.strip().splitlines()[-15:]
            print("  stderr tail:\n    " + "\n    ".join(tail))
    versions_file.write_text(json.dumps(versions, indent=2, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
