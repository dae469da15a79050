"""The signing plugin: the dsse evidence signer, keygen, sign and verify."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from certlab_core.plugin import Command, EvidenceSigner, hookimpl

if TYPE_CHECKING:
    import typer


def _register(which: str) -> Callable[[typer.Typer], None]:
    """The ``register`` of one command; its module (and the cryptography it loads) is imported only when asked for."""

    def register(app: typer.Typer) -> None:
        from certlab_signing import commands

        app.command(which)(getattr(commands, f"{which}_command"))

    return register


@hookimpl
def certlab_commands() -> list[Command]:
    return [
        Command(
            name="keygen",
            description="Make an ed25519 key pair for signing evidence; keep NAME.key out of every repository and "
            "folder you sign.",
            register=_register("keygen"),
        ),
        Command(
            name="sign",
            description="Sign every file of FOLDER into FOLDER/evidence.dsse.json (an in-toto Statement in a DSSE "
            "envelope).",
            register=_register("sign"),
        ),
        Command(
            name="verify",
            description="Check FOLDER's signature and every file's hash: exit 0 verified, 3 changed, added, removed "
            "or badly signed.",
            register=_register("verify"),
        ),
    ]


def _load_key(path: Path) -> Any:
    """``--sign-key``'s key, read and parsed now (the cryptography is imported only when a run signs)."""
    from certlab_signing import evidence

    return evidence.load_key(path)


def _sign_folder(folder: Path, key: Any) -> str:
    from certlab_signing import evidence

    signed = evidence.sign_folder(folder, key)
    return f"signed: {signed.envelope} ({signed.subjects} files, key {signed.keyid[:16]})"


@hookimpl
def certlab_evidence_signers() -> list[EvidenceSigner]:
    return [
        EvidenceSigner(
            name="dsse",
            description="ed25519 over every file's sha256: an in-toto Statement in a DSSE envelope "
            "(FOLDER/evidence.dsse.json)",
            load_key=_load_key,
            sign_folder=_sign_folder,
        )
    ]
