"""Fingerprints of cases, scorer and kernel files, and the check none moved.

A fingerprint set maps a label to a sha256. Labels read ``GROUP`` for a single file (the
cases) or ``GROUP/RELPATH`` for each file below a folder (the kernel package, each
grader's package). The sources, ``{group: file or folder}``, are resolved from the running
installation, never written to disk, so a lock file holds labels and hashes only.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Mapping
from pathlib import Path

import certlab_core.plugin as contract
from certlab_core.plugin.errors import InstrumentError
from certlab_core.plugin.types.grader import AcceptanceLock
from certlab_core.plugin.types.held_out import HeldOutIndex
from certlab_core.sdk.trees import Entry, TreeCaps, TreeTooLarge, walk

SKIPPED_DIRS = frozenset({"__pycache__"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")
KERNEL_GROUP = "kernel:certlab_core"
CASES_GROUP = "cases"
PREDICTIONS_GROUP = "predictions"
ORACLE_GROUP = "oracle"
#: The most a fingerprinted folder (an installed package) may hold; its walk is bounded by them.
SOURCE_CAPS = TreeCaps(max_bytes=4 << 30, max_files=200_000, max_depth=64, max_path=4096)


def kernel_source() -> Path:
    """The folder of the kernel package that is running (the one holding the author API)."""
    return Path(contract.__file__).resolve().parent.parent


def scorer_sources(registry: HeldOutIndex) -> dict[str, str]:
    """{``scorer:NAME``: folder of its package} for every installed grader (the scorer is the whole chain)."""
    sources: dict[str, str] = {}
    for name in registry.names("graders"):
        record, module = registry.get("graders", name), registry.module_of("graders", name)
        origin = getattr(module, "__file__", None)
        if origin is None:
            try:
                origin = inspect.getsourcefile(record.grade)
            except TypeError:
                origin = None
        if origin is None:
            raise InstrumentError(f"the grader {name} has no source file to fingerprint; install it as a distribution")
        path = Path(origin).resolve()
        sources[f"scorer:{name}"] = str(path.parent if (path.parent / "__init__.py").is_file() else path)
    return sources


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(sources: Mapping[str, str]) -> dict[str, str]:
    """{label: sha256} of every source: a file by its group name, a folder's files as GROUP/RELPATH."""
    found: dict[str, str] = {}
    for group, source in sorted(sources.items()):
        path = Path(source)
        if path.is_file():
            found[group] = _hash(path)
            continue
        if not path.is_dir():
            found[group] = "missing"
            continue
        try:
            for entry in walk(path, SOURCE_CAPS, enter=_entered):
                if entry.kind == "folder" or entry.kind == "special" or entry.relpath.endswith(SKIPPED_SUFFIXES):
                    continue
                if entry.kind == "symlink":
                    if not entry.path.is_dir():  # a link to a folder is neither followed nor fingerprinted
                        found[f"{group}/{entry.relpath}"] = "symlink:" + os.readlink(entry.path)
                    continue
                found[f"{group}/{entry.relpath}"] = _hash(entry.path)
        except TreeTooLarge as error:
            raise InstrumentError(f"{path} holds {error.message}: more than a lock fingerprints") from None
    return found


def _entered(entry: Entry) -> bool:
    name = entry.relpath.rsplit("/", 1)[-1]
    return name not in SKIPPED_DIRS and not name.endswith(".egg-info")


def digest_of(fingerprints: Mapping[str, str]) -> str:
    """One sha256 over a fingerprint set (for a one-line summary)."""
    digest = hashlib.sha256()
    for label, sha in sorted(fingerprints.items()):
        digest.update(f"{label} {sha}\n".encode())
    return digest.hexdigest()


def _what(label: str) -> str:
    group, _, rest = label.partition("/")
    if group == CASES_GROUP:
        return "the held-out cases file"
    if group == PREDICTIONS_GROUP:
        return "the predictions file"
    if group == ORACLE_GROUP:
        return f"the oracle's answer {rest}"
    if group.startswith("scorer:"):
        return f"the scorer's file {rest} (grader {group.split(':', 1)[1]})" if rest else f"the grader {group[7:]}"
    if group == KERNEL_GROUP:
        return f"the kernel's file certlab_core/{rest}"
    return label


def movements(locked: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """What moved between two fingerprint sets, one line each (changed, added, removed)."""
    lines: list[str] = []
    for label in sorted(set(locked) | set(now)):
        before, after = locked.get(label), now.get(label)
        if before == after:
            continue
        if before is None or before == "missing":
            lines.append(f"{_what(label)} appeared")
        elif after is None or after == "missing":
            lines.append(f"{_what(label)} disappeared")
        else:
            lines.append(f"{_what(label)} changed")
    return lines


def check_unmoved(lock: AcceptanceLock, moment: str) -> None:
    """Raise InstrumentError (ERROR, exit 3) naming what moved since the lock, and when it was seen."""
    moved = movements(lock.fingerprints, fingerprint(lock.sources))
    copy = Path(lock.cases_file)
    if not copy.is_file() or _hash(copy) != lock.cases_sha256:
        moved.insert(0, "the copy of the held-out cases taken at lock time changed or disappeared")
    if moved:
        shown = "; ".join(moved[:6]) + (f" (+{len(moved) - 6} more)" if len(moved) > 6 else "")
        raise InstrumentError(f"{moment}: moved since the lock: {shown}; the verdict is refused (ERROR)")
