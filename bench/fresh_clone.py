"""What the fresh-clone benches share: clones at revisions, and their folders."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def clone_at(rev: str, folder: Path) -> None:
    """Clone this repository's committed work into ``folder`` (which must not exist) and check out ``rev``.

    Raises RuntimeError with git's own words when either step fails."""
    for what, git in (
        ("clone", ["clone", "-q", str(REPO), str(folder)]),
        ("checkout", ["-C", str(folder), "checkout", "-q", rev]),
    ):
        done = subprocess.run(["git", *git], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"git {what} of {rev} failed: {done.stderr.strip()[-500:]}")


def run_folders(revs: Sequence[str], repeat: int, keep: Path | None, prefix: str) -> Iterator[tuple[str, Path]]:
    """Each run's revision and folder (not made yet), the revisions alternating, ``repeat`` rounds.

    The folders lie in a new temporary folder (``prefix``) and each goes when its run ends, the
    temporary folder at the end; with ``keep`` (a new folder: FileExistsError when it exists)
    they lie there and stay. Close it (``contextlib.closing``) so a run that stops early cleans up."""
    if keep is not None and keep.exists():
        raise FileExistsError(f"--keep {keep} exists; name a new folder")
    scratch = keep or Path(tempfile.mkdtemp(prefix=prefix))
    try:
        for round_number in range(repeat):
            for rev in revs:
                folder = scratch / f"{rev.replace('/', '_')}-{round_number}"
                yield rev, folder
                if keep is None:
                    shutil.rmtree(folder, ignore_errors=True)
    finally:
        if keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
