"""``certlab keygen``, ``sign``, ``verify``: who signed evidence; none moved.

The signing itself lives in the ``certlab-signing`` distribution (``certlab_signing.evidence``);
without it these commands, and ``--sign-key`` of ``certify`` and ``run``, say what to install.
Exit codes: 0 signed or verified; 3 a tampered, unsigned or unreadable folder; 4 usage.

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

import typer

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


def keygen_command(
    name: Path = typer.Argument(..., help="The key pair's name: writes NAME.key (private, mode 0600) and NAME.pub."),
) -> None:
    """Make an ed25519 key pair for signing evidence; keep NAME.key out of every repository and folder you sign."""
    private_path, public_path = signing().generate_key_pair(name)
    typer.echo(f"private key: {private_path} (keep it secret; never commit it)")
    typer.echo(f"public key: {public_path}")


def sign_command(
    folder: Path = typer.Argument(..., help="A certification folder or a run store."),
    key: Path = typer.Option(..., "--key", "-k", help="The private key (NAME.key from certlab keygen)."),
) -> None:
    """Sign every file of FOLDER into FOLDER/evidence.dsse.json (an in-toto Statement in a DSSE envelope)."""
    typer.echo(sign_evidence(folder, key))


def verify_command(
    folder: Path = typer.Argument(..., help="A signed certification folder or run store."),
    pubkey: Path = typer.Option(..., "--pubkey", "-p", help="The public key (NAME.pub from certlab keygen)."),
) -> None:
    """Check FOLDER's signature and every file's hash: exit 0 verified, 3 changed, added, removed or badly signed."""
    verified = signing().verify_folder(folder, pubkey)
    typer.echo(f"verified: {folder}: {verified.kind}, {verified.subjects} files signed by key {verified.keyid[:16]}")


def register(app: typer.Typer) -> None:
    app.command("keygen")(keygen_command)
    app.command("sign")(sign_command)
    app.command("verify")(verify_command)
