"""Benchmark: wall time of building a task from a bug-fix commit of the shipped project (parse), checks included.

Clones the test data's bundle (``graders/acceptance/tests/data/parse``) once, then builds the
task of commit b1d2121 with the real CLI (``certlab task from-commit``), its four offline pytest
runs under the sandbox included, ``--repeat`` times into new folders, and prints the median.
Then it certifies the null agent on the task once, and the null agent on the intervals family
once, and prints both. Targets: a build at most 60 s; a certification on the task at most twice
one on a built-in family task.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUNDLE = REPO / "graders" / "acceptance" / "tests" / "data" / "parse" / "parse.bundle"
COMMIT = "b1d2121902a0d3a2e3a58758d24dad1ead9a3c61"
BUILD_TARGET_S = 60.0


def certlab(*args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "certlab_core.cli", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench: certlab {args[0]} failed: {done.stderr.strip()[-400:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="builds to take the median of")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="certlab-bench-commit-") as scratch:
        root = Path(scratch)
        clone = root / "parse"
        subprocess.run(["git", "clone", "-q", str(BUNDLE), str(clone)], check=True)
        builds = [
            certlab("task", "from-commit", str(clone), COMMIT, "--out", str(root / f"task-{n}"))
            for n in range(arguments.repeat)
        ]
        build = statistics.median(builds)
        print(f"from-commit: median {build:.1f} s over {len(builds)} builds (target <= {BUILD_TARGET_S:g} s)")
        task = root / "task-0"
        certlab("lock", str(task))
        on_task = certlab("certify", "--task", str(task), "--agent", "null", "--out", str(root / "cert-task"))
        on_family = certlab("certify", "--family", "intervals", "--agent", "null", "--out", str(root / "cert-fam"))
        print(f"certify null: {on_task:.1f} s on the task, {on_family:.1f} s on the intervals family")
    if build > BUILD_TARGET_S:
        sys.exit(f"bench: a build took {build:.1f} s, past {BUILD_TARGET_S:g} s")


if __name__ == "__main__":
    main()
