"""certlab preflight: the adapter's checks, then one smoke call through the real CLI, against a scripted server."""

from __future__ import annotations

from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts
from real_cli_support import harness_env, require_cli

from certlab_core.testing import run_certlab


def test_preflight_names_the_binary_version_base_url_and_key_then_makes_one_smoke_call() -> None:
    claude = require_cli("claude-code", "claude", "CERTLAB_CLAUDE_BIN", "npm/node_modules/.bin/claude")
    with ScriptedModelServer([Reply(text="OK", usage=TokenCounts(input_tokens=400, output_tokens=2))]) as server:
        args = [f"--agent-arg=--bin={claude}", f"--agent-arg=--base-url={server.base_url}"]
        done = run_certlab(
            "preflight", "--agent", "claude-code", *args, env=harness_env(ANTHROPIC_API_KEY="k"), timeout=120
        )
        calls = [r for r in server.requests if r.method == "POST"]
        base_url = server.base_url
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"ok   binary: {claude}"
    assert lines[1].startswith("ok   version: 2.")
    assert lines[2] == f"ok   base URL: {base_url} (from --base-url)"
    assert lines[3] == "ok   credentials: ANTHROPIC_API_KEY set"
    assert lines[4].startswith("ok   smoke call: completed in ") and "tokens 400 in, 2 out" in lines[4]
    assert "(the client's own estimate)" in lines[4]
    assert lines[-1] == "preflight claude-code: ready" and len(calls) == 1


def test_preflight_fails_on_an_api_error_and_on_missing_credentials() -> None:
    claude = require_cli("claude-code", "claude", "CERTLAB_CLAUDE_BIN", "npm/node_modules/.bin/claude")
    with ScriptedModelServer([Reply(http_status=401, error_message="invalid x-api-key")]) as server:
        args = [f"--agent-arg=--bin={claude}", f"--agent-arg=--base-url={server.base_url}"]
        done = run_certlab("preflight", "--agent", "claude-code", *args, env=harness_env(), timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "FAIL credentials: none of ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN is set" in done.stdout
    assert "FAIL smoke call: unavailable" in done.stdout
    assert done.stdout.splitlines()[-1] == "preflight claude-code: NOT ready"


def test_preflight_of_a_missing_binary_is_one_failed_line_and_no_call() -> None:
    done = run_certlab("preflight", "--agent", "codex", "--agent-arg=--bin=/nonexistent/codex", env=harness_env())
    assert done.returncode == 3
    assert (
        done.stdout.splitlines()[0]
        == "FAIL binary: the codex adapter's --bin /nonexistent/codex is not an executable file"
    )
