"""The canonical JSON form and its sha256 seals, where the kernel has always imported them from.

They live in the author API (``certlab_core.plugin.canonical``), so that a plugin sealing a
document of its own (the acceptance grader's lock and predictions) seals it exactly as the
kernel does; the kernel imports them from here as before.
"""

from __future__ import annotations

from certlab_core.plugin.canonical import (
    canonical_json,
    converter,
    pretty_json,
    seal_holds,
    seal_of,
    sealed,
    sha256_hex,
    structure,
    unstructure,
)

__all__ = [
    "canonical_json",
    "converter",
    "pretty_json",
    "seal_holds",
    "seal_of",
    "sealed",
    "sha256_hex",
    "structure",
    "unstructure",
]
