"""Canonical JSON for records (one cattrs converter) and the seals over it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import cattrs

converter = cattrs.Converter()


def unstructure(obj: Any) -> Any:
    """Turn attrs records (and containers of them) into plain JSON-able data."""
    return converter.unstructure(obj)


def structure(data: Any, cls: Any) -> Any:
    """Build a record of type ``cls`` from plain data; raises on a wrong shape."""
    return converter.structure(data, cls)


def canonical_json(data: Any) -> bytes:
    """The one canonical byte form: sorted keys, no spaces, UTF-8, NaN refused."""
    return json.dumps(
        unstructure(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seal_of(document: dict[str, Any], seal_key: str = "seal") -> str:
    """sha256 of the canonical JSON of ``document`` without its ``seal_key``."""
    body = {k: v for k, v in document.items() if k != seal_key}
    return sha256_hex(canonical_json(body))


def sealed(document: dict[str, Any], seal_key: str = "seal") -> dict[str, Any]:
    """A copy of ``document`` with its seal set."""
    out = dict(document)
    out[seal_key] = seal_of(document, seal_key)
    return out


def seal_holds(document: dict[str, Any], seal_key: str = "seal") -> bool:
    """Whether ``document``'s seal is that of its content; never, when the content has no canonical form (NaN...).

    Every file certlab reads can be hostile: a document certlab could not have sealed fails here,
    instead of raising from the canonical encoder.
    """
    if not isinstance(document.get(seal_key), str):
        return False
    try:
        return bool(document[seal_key] == seal_of(document, seal_key))
    except (TypeError, ValueError):
        return False


def pretty_json(data: Any) -> str:
    """Readable JSON for files people open; its canonical form is what gets sealed."""
    return json.dumps(unstructure(data), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
