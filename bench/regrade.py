"""Benchmark: ``certlab regrade`` of the oracle's certification on intervals, wall and CPU seconds.

Certifies the oracle on intervals once into a temporary folder (``--no-mutants``), then runs
``certlab regrade FOLDER --sandbox S`` ``--repeat`` times as a user does, printing each run's
wall and CPU seconds (the command and every process it waited for) and their medians. CPU is
the figure to compare across revisions: the gradings' processes are the cost, and wall time on
a shared machine says more about its load. Its temporary folder is removed at the end.
Run: ``.venv/bin/python bench/regrade.py [--repeat 5] [--sandbox bwrap]``.
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

CERTLAB = [sys.executable, "-m", "certlab_core.cli"]


def timed(args: list[str]) -> tuple[float, float]:
    """Run ``certlab ARGS``; its wall and CPU seconds. Exits 1 with its output when it fails."""
    cpu, started = children_cpu_s(), time.monotonic()
    done = subprocess.run([*CERTLAB, *args], capture_output=True, text=True, check=False)
    wall, used = time.monotonic() - started, children_cpu_s() - cpu
    if done.returncode != 0:
        sys.exit(f"bench/regrade.py: certlab {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return wall, used


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="regrades to time (default 5)")
    parser.add_argument("--sandbox", default="auto", help="regrade's --sandbox (default auto: bwrap where it works)")
    options = parser.parse_args()
    if options.repeat < 1:
        parser.error("--repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="certlab-bench-regrade-") as scratch:
        folder = Path(scratch) / "cert-oracle"
        timed(["certify", "-f", "intervals", "-a", "oracle", "--no-mutants", "-q", "-o", str(folder)])
        runs = [timed(["regrade", str(folder), "--sandbox", options.sandbox, "-q"]) for _ in range(options.repeat)]
    for index, (wall, cpu) in enumerate(runs, 1):
        print(f"regrade {index}: {wall:.2f} s wall, {cpu:.2f} CPU-s")
    walls, cpus = zip(*runs, strict=True)
    load = os.getloadavg()[0]
    print(
        f"regrade of the oracle's intervals certification (6 trials, --sandbox {options.sandbox}), "
        f"median of {len(runs)}: {statistics.median(walls):.2f} s wall, {statistics.median(cpus):.2f} CPU-s "
        f"(load average {load:.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
