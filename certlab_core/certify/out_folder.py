"""A certification's --out folder: its lock, its checks, and its two files."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from certlab_core._runtime.registry import Registry
from certlab_core.certify.certification import BUNDLE_FILE, CONTRACT_FILE, CertifyResult
from certlab_core.certify.journal import JOURNAL_FILE
from certlab_core.plugin.errors import UsageError
from certlab_core.sdk.canonical import pretty_json
from certlab_core.sdk.processes import keep_from_children, release_to_children


def write_certification(out: Path, result: CertifyResult, registry: Registry) -> None:
    """Write bundle.json and CONTRACT.md into ``out`` (which must not hold a certification)."""
    from certlab_core.certify.contract import render_contract

    out.mkdir(parents=True, exist_ok=True)
    _write_new(out / BUNDLE_FILE, pretty_json(result.bundle))
    _write_new(out / CONTRACT_FILE, render_contract(result.bundle, registry))


def _write_new(path: Path, text: str) -> None:
    """Write a file that must not exist yet (a finished certification is never overwritten)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise UsageError(
            f"{path} already exists; a certification is never overwritten: choose a new --out folder"
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


@contextlib.contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder ``out`` for a whole certification (created if need be).

    A second certify into the same folder refuses at once in one line; the kernel drops the
    lock when the process ends, so a killed run leaves none behind. Inside the lock the folder
    is checked again: a finished certification is never overwritten.
    """
    made: list[Path] = []
    try:
        _make_folders(out, made)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        _remove_if_empty(made)
        raise UsageError(f"--out {out}: cannot use the folder ({error.strerror}); choose a writable folder") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"--out {out}: another certlab certify is writing there (it holds the folder's lock); "
                "wait for it to finish or choose a new --out folder"
            ) from None
        check_output_dir(out)
        keep_from_children(fd)  # a trial left running after a kill -9 must not keep the folder locked
        try:
            yield
        finally:
            release_to_children(fd)
    except BaseException:
        _remove_if_empty(made)  # a refused or failed run leaves no empty folder of certlab's behind
        raise
    finally:
        os.close(fd)


def _make_folders(out: Path, made: list[Path]) -> None:
    """Make ``out`` and its missing parents, adding to ``made`` (deepest first) each this call created itself."""
    for folder in reversed((out, *out.parents)):
        try:
            folder.mkdir()
        except FileExistsError:  # there already, or another run made it a moment ago: not ours to remove
            continue
        made.insert(0, folder)


def _remove_if_empty(made: Sequence[Path]) -> None:
    """Remove the folders certlab made for ``--out``, deepest first, while each is still empty."""
    for folder in made:
        try:
            folder.rmdir()
        except OSError:  # something was written there (a journal to resume), or it is not ours to remove now
            return


def check_output_dir(out: Path) -> None:
    """Refuse an ``--out`` that is a file, holds a certification, or holds anything but certify's journal.

    A certification is written into a new or empty folder (or, resumed, one that holds only its
    journal): ``--out /`` or ``--out ''`` wrote bundle.json and CONTRACT.md beside whatever was there.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for the certification")
    for name in (BUNDLE_FILE, CONTRACT_FILE):
        if (out / name).exists():
            raise UsageError(f"{out} already holds a certification ({name}); choose a new --out folder")
    try:
        others = sorted(entry.name for entry in os.scandir(out) if entry.name != JOURNAL_FILE)
    except FileNotFoundError:
        return
    except OSError as error:
        raise UsageError(f"--out {out}: cannot read the folder ({error.strerror}); choose a writable folder") from None
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise UsageError(f"--out {out} holds other files ({shown}); give a new or empty folder for the certification")
