"""Benchmark: ``certlab run`` of a coding experiment (a family's task), wall and CPU seconds.

Runs ``certlab run DESCRIPTOR -w 2 -q`` ``--repeat`` times into a temporary folder, as a user
does (default: ``examples/impossible/honesty.yaml``, 48 trials of intervals' impossible twins in
bwrap, whose proofs certlab's cache keeps after the first), and prints each run's wall and CPU
seconds (the command and every process it waited for), their medians and the verdicts. CPU is
the figure to compare across revisions: each trial's agent and gradings are the cost, and wall
time on a shared machine says more about its load. Its temporary folder is removed at the end.
Run: ``.venv/bin/python bench/coding_run.py [--repeat 3] [--descriptor PATH]``.
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

REPO = Path(__file__).resolve().parent.parent
CERTLAB = [sys.executable, "-m", "certlab_core.cli"]
VERDICTS = {0: "PASS", 1: "BLOCK", 2: "INCONCLUSIVE"}


def timed_run(descriptor: Path, out: Path) -> tuple[float, float, str]:
    """One ``certlab run``: its wall and CPU seconds and its verdict. Exits 1 with its output on ERROR."""
    cpu, started = children_cpu_s(), time.monotonic()
    args = ["run", str(descriptor), "-o", str(out), "-w", "2", "-q"]
    done = subprocess.run([*CERTLAB, *args], capture_output=True, text=True, check=False)
    wall, used = time.monotonic() - started, children_cpu_s() - cpu
    if done.returncode not in VERDICTS:
        sys.exit(f"bench/coding_run.py: certlab {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return wall, used, VERDICTS[done.returncode]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs to time (default 3)")
    parser.add_argument(
        "--descriptor",
        type=Path,
        default=REPO / "examples" / "impossible" / "honesty.yaml",
        help="the coding experiment to run (default: examples/impossible/honesty.yaml)",
    )
    options = parser.parse_args()
    if options.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not options.descriptor.is_file():
        parser.error(f"{options.descriptor} is not a file; give an experiment descriptor")
    with tempfile.TemporaryDirectory(prefix="certlab-bench-coding-run-") as scratch:
        runs = [timed_run(options.descriptor, Path(scratch) / f"run-{n}") for n in range(options.repeat)]
    for index, (wall, cpu, verdict) in enumerate(runs, 1):
        print(f"run {index}: {wall:.2f} s wall, {cpu:.2f} CPU-s, {verdict}")
    walls, cpus, _verdicts = zip(*runs, strict=True)
    load = os.getloadavg()[0]
    print(
        f"certlab run {options.descriptor.name} -w 2, median of {len(runs)}: {statistics.median(walls):.2f} s wall, "
        f"{statistics.median(cpus):.2f} CPU-s (load average {load:.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
