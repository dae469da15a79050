"""Evidence signers: what ``--sign-key`` signs a finished run's folder with.

``certlab certify --sign-key`` and ``certlab run --sign-key`` read the key once, before the
first trial (``load_key``), keep it out of every trial's reach, and sign the folder the run
wrote at its end (``sign_folder``). certlab-signing provides ``dsse`` (an in-toto Statement in
a DSSE envelope, ed25519); without a signer installed, ``--sign-key`` is refused in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from attrs import field, frozen

from certlab_core.plugin.types.base import Record


class SigningKey(Protocol):
    """A private key read and parsed once, held in memory; ``path`` is where it was, links resolved."""

    @property
    def path(self) -> Path: ...


class LoadSigningKey(Protocol):
    """Read and parse the key file ``path`` now; a file that cannot sign is one UsageError naming it and the fix."""

    def __call__(self, path: Path, /) -> SigningKey: ...


class SignFolder(Protocol):
    """Sign every file of ``folder`` with ``key`` (what this signer's ``load_key`` returned, of its own type);
    the one line that says what it wrote."""

    def __call__(self, folder: Path, key: Any, /) -> str: ...


@frozen
class EvidenceSigner(Record):
    """A way to sign evidence: ``load_key(path)`` before the run, ``sign_folder(folder, key)`` after it."""

    name: str
    description: str
    load_key: LoadSigningKey = field(eq=False, repr=False)
    sign_folder: SignFolder = field(eq=False, repr=False)
