"""Benchmark: ``make typecheck`` with mypy's cache empty, then warm (the cache a fresh clone finds in ~/.cache).

Runs ``make typecheck`` in this checkout with ``MYPY_CACHE`` pointed at a new temporary folder:
first with it empty (a machine's first check), then ``--repeat`` times with what that run left,
as a fresh clone finds the cache the Makefile keeps outside the checkout. Prints the cold wall
seconds and the warm median. Target: the warm check at most 2 s (it was 11 s with mypy's cache
in the checkout, which a fresh clone never has).

    python3 bench/typecheck.py [--repeat 3]
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


def typecheck(cache: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        ["make", "-s", "typecheck", f"MYPY_CACHE={cache}"], cwd=REPO, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"bench: make typecheck exited {done.returncode}: {(done.stdout + done.stderr).strip()[-400:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="warm runs to take the median of")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="certlab-bench-") as scratch:
        cache = Path(scratch) / "mypy"
        cold = typecheck(cache)
        warm = statistics.median(typecheck(cache) for _ in range(args.repeat))
    said = f"{warm:.2f} s warm (median of {args.repeat}; target 2 s)"
    print(f"make typecheck: {cold:.1f} s with mypy's cache empty, {said}")


if __name__ == "__main__":
    main()
