"""The ``--sandbox`` choice: bwrap where it works, none, or refuse."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Protocol

from certlab_core.plugin.types.sandbox import SANDBOX_CHOICES, UNCONTAINED, Containment, ResourceLimits, Sandbox
from certlab_core.sdk.containment import installation_paths, runtime_folder


class SandboxIndex(Protocol):
    """The part of the registry the choice reads: the installed sandboxes by name."""

    def all(self, kind: str) -> dict[str, object]: ...


def choose_containment(
    sandboxes: SandboxIndex,
    choice: str,
    hidden: Iterable[str],
    warn: Callable[[str], None],
    limits: ResourceLimits | None = None,
) -> Containment:
    """The containment for ``--sandbox CHOICE``: bwrap where it works (auto), bwrap or refuse, or none.

    ``auto`` without a working sandbox runs uncontained and says so in one ``warn`` line;
    ``bwrap`` without one raises UsageError in one line.
    """
    from certlab_core.plugin.errors import UsageError

    if choice not in SANDBOX_CHOICES:
        raise UsageError(f"--sandbox {choice!r} is not one of {', '.join(SANDBOX_CHOICES)}")
    if choice == UNCONTAINED:
        return Containment(note="--sandbox none: the agent ran as the user, uncontained")
    wanted = "bwrap"
    installed = sandboxes.all("sandboxes")
    sandbox = installed.get(wanted)
    if not isinstance(sandbox, Sandbox):
        reason = f"the sandbox {wanted} is not installed (pip install certlab-sandbox-bwrap)"
    else:
        reason = sandbox.probe() or ""
    wanted_hidden = sorted({*installation_paths(), *(os.path.abspath(p) for p in hidden if p)})
    everything_hidden = tuple(
        p for p in wanted_hidden if not any(p.startswith(q.rstrip("/") + "/") for q in wanted_hidden)
    )
    if isinstance(sandbox, Sandbox) and not reason:
        runtime_folder()  # here, before any trial is forked: every trial shares it, and its maker removes it
        return Containment(sandbox=sandbox, hidden=everything_hidden, limits=limits or ResourceLimits())
    if choice == "bwrap":
        raise UsageError(
            f"--sandbox bwrap: {reason}; install bubblewrap (apt-get install bubblewrap) or use --sandbox auto"
        )
    warn(f"warning: no sandbox: {reason}; the agent runs uncontained (see docs/trust-model.md)")
    return Containment(note=f"--sandbox auto found no sandbox ({reason}); the agent ran uncontained")
