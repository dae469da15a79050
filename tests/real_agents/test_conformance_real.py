"""The real-CLI adapters pass AdapterConformance: timeout, nothing left running, outages unavailable, no stray writes.

The CLIs run against a scripted model server on 127.0.0.1 in a process of its own
(``conformance_server.py``: the checks fork, and refuse to fork with a server thread running).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from real_cli_support import conformance_server, require_cli

from certlab_core.testing import AdapterConformance, Scenario


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with conformance_server() as url:
        yield url


class TestClaudeCode(AdapterConformance):
    adapter_name = "claude-code"

    @pytest.fixture(autouse=True)
    def _scenarios(self, base_url: str) -> None:
        found = require_cli("claude-code", "claude", "CERTLAB_CLAUDE_BIN", "npm/node_modules/.bin/claude")
        env = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "k"}
        self.normal = Scenario(args=(f"--bin={found}",), env=env)  # the checks' fresh HOME has no CLI cache
        self.hanging = Scenario(args=(f"--bin={found}", "--model=certlab-conformance-hang"), env=env)
        # The CLI's own retries of a 500 take minutes: the outage is checked with them off.
        down = (f"--bin={found}", "--model=certlab-conformance-down", "--max-retries=0")
        self.unavailable = Scenario(args=down, env=env)


class TestCodex(AdapterConformance):
    adapter_name = "codex"

    @pytest.fixture(autouse=True)
    def _scenarios(self, base_url: str) -> None:
        found = require_cli("codex", "codex", "CERTLAB_CODEX_BIN", "npm/node_modules/.bin/codex")
        env = {"OPENAI_BASE_URL": f"{base_url}/v1", "OPENAI_API_KEY": "k"}
        self.normal = Scenario(args=(f"--bin={found}",), env=env)
        self.hanging = Scenario(args=(f"--bin={found}", "--model=certlab-conformance-hang"), env=env)
        down = (
            f"--bin={found}",
            "--model=certlab-conformance-down",
            "--request-max-retries=0",
            "--stream-max-retries=0",
        )
        self.unavailable = Scenario(args=down, env=env)


class TestAider(AdapterConformance):
    adapter_name = "aider"

    @pytest.fixture(autouse=True)
    def _scenarios(self, base_url: str) -> None:
        found = require_cli("aider", "aider", "CERTLAB_AIDER_BIN", "aider/bin/aider")
        env = {"OPENAI_API_BASE": f"{base_url}/v1", "OPENAI_API_KEY": "k"}
        # A metadata entry for the model, so that aider looks nothing up online.
        args = (f"--bin={found}", "--max-input-tokens=128000", "--file=README.md")
        self.normal = Scenario(args=(*args, "--model=openai/certlab-conformance-ok"), env=env)
        self.hanging = Scenario(args=(*args, "--model=openai/certlab-conformance-hang"), env=env)
        # aider retries a 500 for over a minute; a CLI that is not there is its quick outage.
        self.unavailable = Scenario(args=("--bin=/nonexistent/aider",))
