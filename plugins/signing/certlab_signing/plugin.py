"""The signing plugin's commands: ``keygen``, ``sign`` and ``verify``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from certlab_core.plugin import Command, hookimpl

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
