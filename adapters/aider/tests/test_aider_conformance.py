"""The aider adapter passes AdapterConformance with the real aider: timeouts, leftovers, outages, writes.

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


class TestAider(AdapterConformance):
    adapter_name = "aider"

    @pytest.fixture(autouse=True)
    def _scenarios(self, base_url: str) -> None:
        found = require_program(
            lambda: agent_clis.find_cli(
                "aider", "aider", explicit=None, variable="CERTLAB_AIDER_BIN", cached="aider/bin/aider", env=os.environ
            ),
            "aider (the aider adapter's CLI)",
        )
        env = {"OPENAI_API_BASE": f"{base_url}/v1", "OPENAI_API_KEY": "k"}
        # A metadata entry for the model, so that aider looks nothing up online.
        args = (f"--bin={found}", "--max-input-tokens=128000", "--file=README.md")
        self.normal = Scenario(args=(*args, "--model=openai/certlab-conformance-ok"), env=env)
        self.hanging = Scenario(args=(*args, "--model=openai/certlab-conformance-hang"), env=env)
        # aider retries a 500 for over a minute; a CLI that is not there is its quick outage.
        self.unavailable = Scenario(args=("--bin=/nonexistent/aider",))
