"""The certlab plugin that provides the ``none`` sandbox: no containment.

``--sandbox none`` runs the agent and the code it wrote as the user who runs certlab, with
everything that user can read in reach (docs/trust-model.md). The record says so with
``contains=False``: the kernel then gives the run a containment with no sandbox, records
``none``, and never calls ``launch``; ``auto`` never takes it. Its ``launch`` starts the
program as it is, as an uncontained containment does.
"""

from __future__ import annotations

import sys

from certlab_core.plugin import Sandbox, SandboxLaunch, SandboxRequest, hookimpl


def _works() -> str | None:
    return None


def _launch(request: SandboxRequest) -> SandboxLaunch:
    return SandboxLaunch(argv=request.argv, env=request.env)


def _python() -> str:
    return sys.executable


@hookimpl
def certlab_sandboxes() -> list[Sandbox]:
    return [
        Sandbox(
            name="none",
            description="No containment: the agent runs as you, and can read whatever you can",
            probe=_works,
            launch=_launch,
            python=_python,
            contains=False,
        )
    ]
