"""What the fresh-clone benches share: a clone of this repository at a revision, and children's CPU."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def children_cpu() -> float:
    """CPU seconds (user + system) of every child this process has waited for, and of theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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
