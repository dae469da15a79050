"""certlab's cache of measurements: where it is, code digests, safe entries.

A measurement that is a function of its inputs (a family's mutation proof, a constructed
agent's calibration trial) is kept under a digest of those inputs and reused while none moved.
The cache is ``$CERTLAB_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/certlab``
(``~/.cache/certlab``), one folder per kind of measurement, one JSON file per key. Anyone who
can write there can change what is reused: a reader treats an unreadable, oversized or foreign
entry as a miss, never as an error, and the record that reuses an entry says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from certlab_core.sdk.safe_io import MAX_DOCUMENT_BYTES

CACHE_VARIABLE = "CERTLAB_CACHE_DIR"


def cache_dir(kind: str) -> Path:
    """The folder of one kind of measurement: ``$CERTLAB_CACHE_DIR/<kind>``, else ``$XDG_CACHE_HOME/certlab/<kind>``."""
    root = os.environ.get(CACHE_VARIABLE)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "certlab")
    return Path(root) / kind


def folder_digest(folder: Path) -> str:
    """One sha256 over the Python files under ``folder`` (names and contents), bytecode caches left out."""
    digest = hashlib.sha256()
    found: list[tuple[str, Path]] = []
    for parent, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        found.extend((os.path.relpath(os.path.join(parent, f), folder), Path(parent, f)) for f in files)
    for relpath, path in sorted(found):
        if relpath.endswith(".py"):
            digest.update(f"{relpath}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def code_digest(function: object) -> str | None:
    """The digest of the package a plugin's callable comes from (None: it has no source file to key on).

    The whole package folder is hashed, not one file: a grader's ``plugin.py`` runs the code of
    the modules beside it.
    """
    code = getattr(function, "__code__", None)
    origin = getattr(code, "co_filename", None)
    if not origin or not os.path.isfile(origin):
        module = sys.modules.get(getattr(function, "__module__", "") or "")
        origin = getattr(module, "__file__", None)
    if not origin or not os.path.isfile(origin):
        return None
    return folder_digest(Path(origin).parent)


def read_entry(kind: str, key: str) -> Any | None:
    """The JSON document kept under ``key``, or None: missing, not a regular file, over 16 MB or not JSON."""
    path = cache_dir(kind) / f"{key}.json"
    try:  # O_NONBLOCK: a FIFO planted there opens at once; O_NOFOLLOW: a symlink is not followed
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = handle.read(MAX_DOCUMENT_BYTES + 1)
        except OSError:
            return None
    if len(data) > MAX_DOCUMENT_BYTES:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def write_entry(kind: str, key: str, document: Any) -> None:
    """Keep ``document`` under ``key``, whole or not at all; a cache that cannot be written is skipped."""
    folder = cache_dir(kind)
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{key}.", dir=folder)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(document, out, sort_keys=True)
            os.replace(temporary, folder / f"{key}.json")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
