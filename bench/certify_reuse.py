"""Benchmark: CPU and wall of one certify proving and calibrating afresh, and of one reusing both.

Runs ``certlab certify --family F --agent oracle`` as a user does, alternating
``--fresh-instrument`` with a run that reuses the proof and calibration kept by the run before,
in a cache folder of its own (the mutation proof is reused in both: it is measured once, first).
``--impossible`` certifies with impossible twins too, whose proofs are reused the same way.
Prints the medians and their ratio. Target: a certification reusing its proof and calibration
costs at most 0.6 times the CPU of one measuring them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measured import children_cpu_s


def certify(family: str, out: Path, cache: Path, fresh: bool, more: tuple[str, ...] = ()) -> tuple[float, float]:
    """One certify in a new process: (CPU-seconds of it and its children, wall seconds)."""
    before = children_cpu_s()
    started = time.perf_counter()
    command = [sys.executable, "-m", "certlab_core.cli", "certify", "-f", family, "-a", "oracle", "-q", "-o", str(out)]
    done = subprocess.run(
        [*command, *more, *(["--fresh-instrument"] if fresh else [])],
        env={**os.environ, "CERTLAB_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    cpu = children_cpu_s() - before
    if done.returncode != 0:
        sys.exit(f"bench: certify exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", default="intervals")
    parser.add_argument("--pairs", type=int, default=3, help="pairs (measured, reused) to take the medians of")
    parser.add_argument("--impossible", action="store_true", help="certify with impossible twins too")
    args = parser.parse_args()
    more = ("--impossible",) if args.impossible else ()
    with tempfile.TemporaryDirectory(prefix="certlab-bench-") as scratch:
        root = Path(scratch)
        certify(args.family, root / "warm", root / "cache", True, more)  # the mutation proof and calibration kept
        measured: list[tuple[float, float]] = []
        reused: list[tuple[float, float]] = []
        for index in range(args.pairs):
            measured.append(certify(args.family, root / f"measured-{index}", root / "cache", True, more))
            reused.append(certify(args.family, root / f"reused-{index}", root / "cache", False, more))
    cpu_measured = statistics.median(c for c, _ in measured)
    cpu_reused = statistics.median(c for c, _ in reused)
    what = f"certify {args.family} oracle{' --impossible' if more else ''}"
    print(
        f"{what}, medians of {args.pairs} pairs: proof and calibration measured "
        f"{cpu_measured:.2f} CPU-s ({statistics.median(w for _, w in measured):.2f} s wall), reused "
        f"{cpu_reused:.2f} CPU-s ({statistics.median(w for _, w in reused):.2f} s wall): "
        f"{cpu_reused / cpu_measured:.2f}x the CPU (target at most 0.60x)"
    )


if __name__ == "__main__":
    main()
