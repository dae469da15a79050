"""``certlab keygen``, ``sign``, ``verify``: who signed evidence; none moved.

Exit codes: 0 signed or verified; 3 a tampered, unsigned or unreadable folder; 4 usage.
The plugin (``certlab_signing.plugin``) adds each command by its function, ``NAME_command``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from certlab_signing import evidence


def keygen_command(
    name: Path = typer.Argument(..., help="The key pair's name: writes NAME.key (private, mode 0600) and NAME.pub."),
) -> None:
    """Make an ed25519 key pair for signing evidence; keep NAME.key out of every repository and folder you sign."""
    private_path, public_path = evidence.generate_key_pair(name)
    typer.echo(f"private key: {private_path} (keep it secret; never commit it)")
    typer.echo(f"public key: {public_path}")


def sign_command(
    folder: Path = typer.Argument(..., help="A certification folder or a run store."),
    key: Path = typer.Option(..., "--key", "-k", help="The private key (NAME.key from certlab keygen)."),
) -> None:
    """Sign every file of FOLDER into FOLDER/evidence.dsse.json (an in-toto Statement in a DSSE envelope)."""
    signed = evidence.sign_folder(folder, key)
    typer.echo(f"signed: {signed.envelope} ({signed.subjects} files, key {signed.keyid[:16]})")


def verify_command(
    folder: Path = typer.Argument(..., help="A signed certification folder or run store."),
    pubkey: Path = typer.Option(..., "--pubkey", "-p", help="The public key (NAME.pub from certlab keygen)."),
) -> None:
    """Check FOLDER's signature and every file's hash: exit 0 verified, 3 changed, added, removed or badly signed."""
    verified = evidence.verify_folder(folder, pubkey)
    typer.echo(f"verified: {folder}: {verified.kind}, {verified.subjects} files signed by key {verified.keyid[:16]}")
