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

from certlab_core.plugin.errors import InstrumentError
from certlab_core.sdk.safe_io import MAX_DOCUMENT_BYTES, parse_json
from certlab_core.sdk.trees import WORK_COPY_CAPS, TreeTooLarge, walk

CACHE_VARIABLE = "CERTLAB_CACHE_DIR"


def cache_dir(kind: str) -> Path:
    """The folder of one kind of measurement: ``$CERTLAB_CACHE_DIR/<kind>``, else ``$XDG_CACHE_HOME/certlab/<kind>``."""
    root = os.environ.get(CACHE_VARIABLE)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "certlab")
    return Path(root) / kind


def folder_digest(folder: Path) -> str:
    """One sha256 over the Python files under ``folder`` (names and contents), bytecode caches left out.

    Walked within the work copy's caps, never following a link to a folder (:func:`certlab_core.sdk.trees.walk`);
    raises :class:`certlab_core.sdk.trees.TreeTooLarge` past them.
    """
    digest = hashlib.sha256()
    files = (
        entry
        for entry in walk(folder, WORK_COPY_CAPS, enter=lambda entry: entry.path.name != "__pycache__")
        if entry.relpath.endswith(".py")
        and (entry.kind == "file" or (entry.kind == "symlink" and entry.path.is_file()))
    )
    for entry in sorted(files, key=lambda entry: entry.relpath.split("/")):
        digest.update(f"{entry.relpath}\0".encode())
        digest.update(hashlib.sha256(entry.path.read_bytes()).digest())
    return digest.hexdigest()


def code_digest(function: object) -> str | None:
    """The digest of the code a plugin's callable comes from (None: it has no source file to key on).

    The whole package folder is hashed, not one file: a grader's ``plugin.py`` runs the code of
    the modules beside it. A module outside any package (``site-packages/fixbot.py``) is hashed
    alone: its folder is everything installed beside it.
    """
    code = getattr(function, "__code__", None)
    origin = getattr(code, "co_filename", None)
    if not origin or not os.path.isfile(origin):
        module = sys.modules.get(getattr(function, "__module__", "") or "")
        origin = getattr(module, "__file__", None)
    if not origin or not os.path.isfile(origin):
        return None
    folder = Path(origin).parent
    if not (folder / "__init__.py").is_file():
        return hashlib.sha256(Path(origin).read_bytes()).hexdigest()
    try:
        return folder_digest(folder)
    except TreeTooLarge:  # a package past the work copy's caps is not keyed: it is measured every time
        return None


def read_entry(kind: str, key: str) -> Any | None:
    """The JSON document kept under ``key``, or None: missing, a link, not a regular file, or past the caps of
    :func:`certlab_core.sdk.safe_io.parse_json` (over 16 MB, nested over 200 levels) or not JSON."""
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
    try:  # the caps of every document certlab reads: 16 MB, 200 levels of nesting, integers of 4,300 digits
        return parse_json(data, str(path), what="cache entry")
    except InstrumentError:
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
        except BaseException:  # only its own temporary file, and only while it is still there under its name
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
