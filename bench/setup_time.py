"""Time ``make test``'s setup from a fresh clone: the venv, then the tests' wheelhouse (issue 24).

Each repeat clones a revision (committed work only) into a new temporary folder and runs, as
``make test`` would before its first test, ``make .venv/.installed`` and then ``make wheelhouse``,
each timed on its own: wall seconds, and CPU seconds of ``make`` and every process under it.
pip's cache is this machine's, as it is. With two ``--rev`` the runs alternate (OLD, HEAD,
OLD, ...), so a before/after ratio shares the load; the load average is printed with each.

    python3 bench/setup_time.py [--repeat 3] [--rev OLD --rev HEAD] [--keep NEW_DIR]

Exit 0 when every run finished, 2 when a make step failed (its output's tail printed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fresh_clone import clone_at, run_folders  # bench/fresh_clone.py, beside this script
from measured import children_cpu_s

STEPS = (".venv/.installed", "wheelhouse")


def one_run(rev: str, folder: Path) -> dict[str, tuple[float, float]]:
    """Clone ``rev`` into ``folder`` and run each step there; step -> (wall s, CPU s)."""
    clone_at(rev, folder)
    figures = {}
    for step in STEPS:
        wall, cpu = time.monotonic(), children_cpu_s()
        done = subprocess.run(["make", "-s", step], cwd=folder, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"make {step} exited {done.returncode} at {rev}:\n{done.stderr[-2000:]}")
        figures[step] = (time.monotonic() - wall, children_cpu_s() - cpu)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="clone and run this many times per revision")
    parser.add_argument("--rev", action="append", default=None, help="a revision to time (twice: alternate)")
    parser.add_argument("--keep", type=Path, default=None, help="clone into this new folder and keep the clones")
    args = parser.parse_args()
    if shutil.which("make") is None or shutil.which("git") is None:
        print("bench/setup_time.py: needs make and git on PATH", file=sys.stderr)
        return 2
    revs = args.rev or ["HEAD"]
    results: dict[str, list[dict[str, tuple[float, float]]]] = {rev: [] for rev in revs}
    try:
        with contextlib.closing(run_folders(revs, args.repeat, args.keep, "certlab-bench-setup-")) as runs:
            for rev, folder in runs:
                figures = one_run(rev, folder)
                results[rev].append(figures)
                shown = ", ".join(f"{step} {wall:.1f} s ({cpu:.1f} CPU-s)" for step, (wall, cpu) in figures.items())
                print(f"{rev}: {shown}; load {os.getloadavg()[0]:.1f}", flush=True)
    except (RuntimeError, FileExistsError) as error:
        print(f"bench/setup_time.py: {error}", file=sys.stderr)
        return 2
    for rev, runs in results.items():
        medians = {
            step: (statistics.median(r[step][0] for r in runs), statistics.median(r[step][1] for r in runs))
            for step in STEPS
        }
        shown = ", ".join(f"{step} {wall:.1f} s ({cpu:.1f} CPU-s)" for step, (wall, cpu) in medians.items())
        print(f"median of {len(runs)}, {rev}: {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
