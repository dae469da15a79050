"""``certlab keygen``, ``sign`` and ``verify``: who produced a folder of evidence, and that none of it moved since.

The signing itself lives in the ``certlab-signing`` distribution (``certlab_signing.evidence``);
without it these commands, and ``--sign-key`` of ``certify`` and ``run``, say what to install.
Exit codes: 0 signed or verified; 3 a tampered, unsigned or unreadable folder; 4 usage.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import typer

from certlab_core.plugin.errors import UsageError


def signing() -> ModuleType:
    """``certlab_signing.evidence``, or a usage error naming the distribution to install."""
    try:
        return importlib.import_module("certlab_signing.evidence")
    except ImportError:
        raise UsageError("signing needs the certlab-signing distribution; pip install certlab-signing") from None


def sign_evidence(folder: Path, key: Path) -> str:
    """Sign ``folder`` with the private key ``key``; the line that says so (for ``--sign-key`` and ``sign``)."""
    signed = signing().sign_folder(folder, key)
    return f"signed: {signed.envelope} ({signed.subjects} files, key {signed.keyid[:16]})"


def check_sign_key(key: Path | None) -> None:
    """Refuse a ``--sign-key`` that cannot sign before any trial runs (a run must not end unsigned)."""
    if key is not None:
        signing().load_signer(key)


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
