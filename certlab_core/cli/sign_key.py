"""``--sign-key`` of ``certify`` and ``run``: loaded once, kept out of reach.

The signing itself is an installed evidence signer's (``certlab_evidence_signers``;
certlab-signing provides ``dsse``, and the ``keygen``, ``sign`` and ``verify`` commands);
without one ``--sign-key`` says what to install.

``--sign-key`` is the harness's alone: the key is read and parsed once, before the first
trial (:func:`check_sign_key`), and the run signs with that loaded key at its end, never
reading the file again. A key inside a folder a sandbox shows a trial (:func:`sandbox_reach`)
is refused in one line before anything runs: a contained agent that can read a key can sign
a forgery with it. Uncontained, every file of the user is in the agent's reach, so
``--sign-key`` says so in one warning line (:func:`check_key_reach`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.plugin.types.evidence_signer import EvidenceSigner, SigningKey

if TYPE_CHECKING:
    from certlab_core._runtime.registry import Registry
    from certlab_core.plugin.types.sandbox import Containment


@frozen
class LoadedKey:
    """``--sign-key`` read once: the signer that read it and the key it holds in memory."""

    signer: EvidenceSigner
    key: SigningKey

    @property
    def path(self) -> Path:
        return Path(self.key.path)


def evidence_signer(registry: Registry) -> EvidenceSigner:
    """The one installed evidence signer; none, or two, is one line saying what to do."""
    signers = registry.all(EvidenceSigner)
    if not signers:
        raise UsageError(f"--sign-key needs an evidence signer; {registry.providers.install_line('evidence_signers')}")
    if len(signers) > 1:
        raise UsageError(
            f"--sign-key: {len(signers)} evidence signers are installed ({', '.join(sorted(signers))}); "
            "leave all but one out with CERTLAB_PLUGINS"
        )
    return next(iter(signers.values()))


def check_sign_key(registry: Registry, key: Path | None) -> LoadedKey | None:
    """Load ``--sign-key`` before any trial runs (a run must not end unsigned): the loaded key, held in memory, or None.

    A key that cannot sign is refused here, in one line.
    """
    if key is None:
        return None
    signer = evidence_signer(registry)
    loaded = _signer_call(signer, "load_key", signer.load_key, key)
    if not isinstance(getattr(loaded, "path", None), (str, Path)):
        raise InstrumentError(
            f"the evidence signer {signer.name}'s load_key returned {type(loaded).__name__}, with no path"
        )
    return LoadedKey(signer, loaded)


def sign_evidence(folder: Path, loaded: LoadedKey) -> str:
    """Sign ``folder`` with the key :func:`check_sign_key` loaded; the line that says so."""
    said = _signer_call(loaded.signer, "sign_folder", loaded.signer.sign_folder, folder, loaded.key)
    if not isinstance(said, str):
        raise InstrumentError(
            f"the evidence signer {loaded.signer.name}'s sign_folder returned {type(said).__name__}, not a line"
        )
    return said


def _signer_call(signer: EvidenceSigner, method: str, call: Callable[..., Any], *arguments: Any) -> Any:
    """A signer's method, held to ``CERTLAB_PLUGIN_LOAD_S``: its refusal (a UsageError) goes on as it is; anything
    else it raises, or running past the wait, is one line (a hung ``load_key`` held certify before its first trial
    for good)."""
    from certlab_core.sdk.deadline import plugin_call, plugin_wait_s

    return plugin_call(f"the evidence signer {signer.name}'s {method}", call, *arguments, seconds=plugin_wait_s())


def sandbox_reach(containment: Containment) -> tuple[str, ...]:
    """The host folders a contained trial may read: the work copies' parent temp folder, the agent environment, and
    what the containment itself shows (``Containment.visible_paths()``, where the sandbox says)."""
    from certlab_core.sdk.containment import agent_environment_dir

    shown: Callable[[], Iterable[str]] = getattr(containment, "visible_paths", lambda: ())
    return (tempfile.gettempdir(), str(agent_environment_dir()), *shown())


def key_in_reach(key: Path, visible: Iterable[str]) -> str | None:
    """The folder of ``visible`` (host paths a sandbox binds) that holds the file ``key``, or None; links resolved."""
    real = os.path.realpath(key)
    for folder in visible:
        base = os.path.realpath(folder)
        if real == base or real.startswith(base.rstrip("/") + "/"):
            return str(folder)
    return None


def check_key_reach(
    key: LoadedKey | None,
    containment: Containment,
    warn: Callable[[str], None],
    evidence_folder: Path | None = None,
) -> None:
    """Refuse a loaded ``--sign-key`` a contained trial could read; uncontained, ``warn`` once that the agent could.

    ``evidence_folder`` is the folder the run writes and signs: a key inside it is refused too.
    """
    if key is None:
        return
    path = key.path
    if evidence_folder is not None and key_in_reach(path, [str(evidence_folder)]) is not None:
        raise UsageError(f"--sign-key {path}: the key is inside {evidence_folder}, the evidence it would sign")
    if not containment.contained:
        warn(
            f"warning: --sign-key {path}: the agent runs uncontained and could read the key; "
            "run it in the sandbox, or sign the folder after the run with certlab sign"
        )
        return
    folder = key_in_reach(path, sandbox_reach(containment))
    if folder is not None:
        raise UsageError(
            f"--sign-key {path}: the key is inside {folder}, which the sandbox shows every trial; "
            "keep it in a folder no sandbox binds"
        )
