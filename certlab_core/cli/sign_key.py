"""``--sign-key`` of ``certify`` and ``run``: loaded once, kept out of reach.

The signing itself, and the ``keygen``, ``sign`` and ``verify`` commands, are the
``certlab-signing`` distribution's (``certlab_signing.evidence``); without it ``--sign-key``
says what to install.

``--sign-key`` is the harness's alone: the key is read and parsed once, before the first
trial (:func:`check_sign_key`), and the run signs with that loaded key at its end, never
reading the file again. A key inside a folder a sandbox shows a trial (:func:`sandbox_reach`)
is refused in one line before anything runs: a contained agent that can read a key can sign
a forgery with it. Uncontained, every file of the user is in the agent's reach, so
``--sign-key`` says so in one warning line (:func:`check_key_reach`).
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from certlab_core.plugin.errors import UsageError

if TYPE_CHECKING:
    from certlab_core.plugin.types.sandbox import Containment


def signing() -> ModuleType:
    """``certlab_signing.evidence``, or a usage error naming the distribution to install."""
    try:
        return importlib.import_module("certlab_signing.evidence")
    except ImportError:
        raise UsageError("signing needs the certlab-signing distribution; pip install certlab-signing") from None


def sign_evidence(folder: Path, key: Any) -> str:
    """Sign ``folder`` with ``key`` (a key file, or the key :func:`check_sign_key` loaded); the line that says so."""
    signed = signing().sign_folder(folder, key)
    return f"signed: {signed.envelope} ({signed.subjects} files, key {signed.keyid[:16]})"


def check_sign_key(key: Path | None) -> Any:
    """Load ``--sign-key`` before any trial runs (a run must not end unsigned): the loaded key, held in memory, or None.

    A key that cannot sign is refused here, in one line.
    """
    return signing().load_key(key) if key is not None else None


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
    key: Any, containment: Containment, warn: Callable[[str], None], evidence_folder: Path | None = None
) -> None:
    """Refuse a loaded ``--sign-key`` a contained trial could read; uncontained, ``warn`` once that the agent could.

    ``evidence_folder`` is the folder the run writes and signs: a key inside it is refused too.
    """
    if key is None:
        return
    path = Path(key.path)
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
