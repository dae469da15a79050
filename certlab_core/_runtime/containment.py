"""``--sandbox``: the first sandbox that works (auto), or one by its name."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, cast

import attrs

from certlab_core._runtime.providers import Providers
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.sandbox import (
    SANDBOX_CHOICES,
    UNCONTAINED,
    Containment,
    ResourceLimits,
    Sandbox,
    SandboxLaunch,
    SandboxLauncher,
)
from certlab_core.sdk.containment import installation_paths, runtime_folder
from certlab_core.sdk.deadline import TooSlow, deadline, plugin_call, plugin_wait_s

KIND = "sandboxes"


#: How long a sandbox's probe may take before it is taken as not working (bwrap's takes about 0.05 s).
PROBE_DEADLINE_S = 20.0


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
    """The containment for ``--sandbox CHOICE``: the first sandbox that works (auto), or the one named.

    ``auto`` without a working sandbox runs uncontained and says so in one ``warn`` line; a
    named sandbox that is not installed, or does not work here, raises UsageError in one line.
    The sandbox that does not contain (``none``) gives a containment with no sandbox.
    """
    from certlab_core.plugin.errors import UsageError

    installed = {name: s for name, s in sandboxes.all(KIND).items() if isinstance(s, Sandbox)}
    providers = _providers(sandboxes)
    check_choice(choice, installed, getattr(sandboxes, "excluded", {}), providers)
    if choice != "auto" and not installed[choice].contains:
        return Containment(note=f"--sandbox {choice}: the agent ran as the user, uncontained")
    if choice == "auto":
        candidates = sorted(
            (s for s in installed.values() if s.auto_order is not None and s.contains),
            key=lambda s: (s.auto_order, s.name),
        )
    else:
        candidates = [installed[choice]]
    reasons: list[str] = []
    for sandbox in candidates:
        reason = _probed(sandbox)
        if not reason:
            wanted_hidden = sorted({*installation_paths(), *(os.path.abspath(p) for p in hidden if p)})
            everything_hidden = tuple(
                p for p in wanted_hidden if not any(p.startswith(q.rstrip("/") + "/") for q in wanted_hidden)
            )
            runtime_folder()  # here, before any trial is forked: every trial shares it, and its maker removes it
            return Containment(sandbox=held(sandbox), hidden=everything_hidden, limits=limits or ResourceLimits())
        reasons.append(reason + (f"; {sandbox.install_hint}" if sandbox.install_hint else ""))
    if choice != "auto":
        raise UsageError(f"--sandbox {choice}: {reasons[0]}, or use --sandbox auto")
    found = "; ".join(reasons) or f"no sandbox is installed ({providers.install_line(KIND, [UNCONTAINED])})"
    warn(f"warning: no sandbox: {found}; the agent runs uncontained (see docs/trust-model.md)")
    return Containment(note=f"--sandbox auto found no sandbox ({found}); the agent ran uncontained")


def _probed(sandbox: Sandbox) -> str | None:
    """The sandbox's probe: None when it works here, else why not; a probe that raises, answers something
    else than a line or None, or runs past ``PROBE_DEADLINE_S`` says so instead (a plugin's failure is named,
    never a traceback or a hang)."""
    try:
        with deadline(PROBE_DEADLINE_S):
            reason = sandbox.probe()
    except TooSlow:
        return f"the sandbox {sandbox.name}'s probe did not answer within {PROBE_DEADLINE_S:g} s"
    except Exception as error:  # a third party's probe
        return f"the sandbox {sandbox.name}'s probe raised {type(error).__name__}: {str(error)[:160]}"
    if reason is not None and not isinstance(reason, str):
        return f"the sandbox {sandbox.name}'s probe returned {type(reason).__name__}, not a line or None"
    return reason or None


def held(sandbox: Sandbox) -> Sandbox:
    """``sandbox`` with its ``launch``, ``python`` and ``visible`` held to ``CERTLAB_PLUGIN_LOAD_S`` and to their types.

    A third party's launch that raised or answered a dict was "internal error" in certify's check of the agent's
    programs, and one that never returned held it for good. Each is now one line naming the sandbox (an
    InstrumentError); an OSError, a launch's refusal to show what a program needs, goes on as it is.
    """
    visible = sandbox.visible
    return attrs.evolve(
        sandbox,
        launch=cast(SandboxLauncher, HeldCall(sandbox.name, "launch", sandbox.launch, (SandboxLaunch,))),
        python=HeldCall(sandbox.name, "python", sandbox.python, (str,)),
        visible=None if visible is None else HeldCall(sandbox.name, "visible", visible, (tuple, list)),
    )


@attrs.frozen
class HeldCall:
    """One of a sandbox's callables under the plugin wait, its answer's type checked (a class: it pickles)."""

    sandbox: str
    method: str
    call: Callable[..., Any]
    returns: tuple[type, ...]

    def __call__(self, *args: Any) -> Any:
        whose = f"the sandbox {self.sandbox}'s {self.method}"
        passes = (UsageError, OSError)  # an OSError is a launch's refusal to show what a program needs
        return plugin_call(whose, self.call, *args, seconds=plugin_wait_s(), returns=self.returns, passes=passes)


def _providers(sandboxes: object) -> Providers:
    """The registry's provider lists, or the installed ones read afresh for an index without them."""
    found = getattr(sandboxes, "providers", None)
    if isinstance(found, Providers):
        return found
    from certlab_core._runtime.registry import KINDS

    return Providers(KINDS)


def check_choice(
    choice: str,
    installed: Mapping[str, object],
    excluded: Mapping[str, str] | None = None,
    providers: Providers | None = None,
) -> None:
    """Refuse in one line a ``--sandbox`` that is neither auto nor an installed sandbox's name; for one a provider
    list names, the line says what to install, or which plugin ``CERTLAB_PLUGINS`` leaves out (``excluded``:
    the registry's entry point names it left out, with their distributions)."""
    from certlab_core.plugin.errors import UsageError

    if choice in SANDBOX_CHOICES or choice in installed:
        return
    listed = (providers or _providers(None)).of(KIND, choice)
    left_out = sorted((name, dist) for name, dist in (excluded or {}).items() if dist in listed)
    if left_out:
        raise UsageError(
            f"--sandbox {choice}: the sandbox {choice!r} is {left_out[0][1]}'s, installed but left out by "
            f"CERTLAB_PLUGINS; add {left_out[0][0]} to CERTLAB_PLUGINS"
        )
    if listed:
        raise UsageError(
            f"--sandbox {choice}: the sandbox {choice!r} is not installed; pip install {' or '.join(listed)}"
        )
    install = (providers or _providers(None)).install_line(KIND, [UNCONTAINED])
    names = ", ".join(sorted(installed)) or f"none installed: {install}"
    raise UsageError(f"--sandbox {choice!r} is not one of {', '.join(SANDBOX_CHOICES)} or a sandbox ({names})")
