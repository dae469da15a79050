"""The codex adapter passes AdapterConformance with the real Codex CLI: timeouts, leftovers, outages, writes.

The CLI runs against the scripted conformance model server on 127.0.0.1, in a process of its own
(``certlab_scripted_models.conformance``: the checks fork, and refuse to fork with a server thread running).
Without the CLI (``make clis``) the checks skip; under CI they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from certlab_scripted_models.conformance import conformance_server, require_program
from certlab_usage import agent_clis

from certlab_core.testing import AdapterConformance, Scenario


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with conformance_server() as url:
        yield url


class TestCodex(AdapterConformance):
    adapter_name = "codex"

    @pytest.fixture(autouse=True)
    def _scenarios(self, base_url: str) -> None:
        found = require_program(
            lambda: agent_clis.find_cli(
                "codex",
                "codex",
                explicit=None,
                variable="CERTLAB_CODEX_BIN",
                cached="npm/node_modules/.bin/codex",
                env=os.environ,
            ),
            "codex (the codex adapter's CLI)",
        )
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
