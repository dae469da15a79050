"""Trial overhead of the A/B gate: ``certlab run examples/retry/a_vs_b.yaml`` with full isolation, timed.

Every trial runs in a fresh forked process and its oracle in another; the figure is the
scheduled trials over the wall time from starting ``certlab run`` until ``decision.json``
is written, and the CPU time of the run (every process, children included) per trial.
Prints one line ending ``trials/s``. Usage: ``python bench/trial_overhead.py [--workers N]
[--descriptor FILE] [--n-per-arm N] [--repeat R]`` (the best of R runs is printed, each run
on its own line). ``--n-per-arm 10`` runs a copy of the descriptor with 10 trials per arm and
condition: its CPU seconds in all are mostly what a run costs before its first trial (the
executor's zygotes, the run store, the decision), which per trial the default run hides.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measured import children_cpu_s

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DESCRIPTOR = REPO / "examples" / "retry" / "a_vs_b.yaml"


def one_run(descriptor: Path, workers: int) -> tuple[int, float, float, str]:
    """(scheduled trials, wall seconds to decision.json, CPU seconds, verdict) of one ``certlab run``."""
    out = Path(tempfile.mkdtemp(prefix="certlab-bench-"))
    try:
        argv = [sys.executable, "-m", "certlab_core.cli", "run", str(descriptor), "--out", str(out), "--quiet"]
        if workers:
            argv += ["--workers", str(workers)]
        cpu_before = children_cpu_s()
        started = time.time()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        cpu = children_cpu_s() - cpu_before
        if done.returncode not in (0, 1, 2):
            raise SystemExit(f"certlab run exited {done.returncode}: {done.stderr.strip()[-500:]}")
        (folder,) = [p for p in out.iterdir() if p.is_dir()]
        decision_path = folder / "decision.json"
        wall = decision_path.stat().st_mtime - started
        decision = json.loads(decision_path.read_text())
        return int(decision["trials"]["scheduled"]), wall, cpu, str(decision["verdict"])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def with_n_per_arm(descriptor: Path, n_per_arm: int) -> Path:
    """A copy of ``descriptor`` (in a temp folder removed at exit) whose ``n_per_arm`` is ``n_per_arm``."""
    import atexit
    import re

    text, count = re.subn(r"^n_per_arm:.*$", f"n_per_arm: {n_per_arm}", descriptor.read_text(), flags=re.M)
    if count != 1:
        raise SystemExit(f"{descriptor}: no top-level n_per_arm line to change")
    folder = Path(tempfile.mkdtemp(prefix="certlab-bench-"))
    atexit.register(shutil.rmtree, folder, True)
    copy = folder / descriptor.name
    copy.write_text(text)
    return copy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--descriptor", type=Path, default=DEFAULT_DESCRIPTOR)
    parser.add_argument("--workers", type=int, default=0, help="trials at once (default: certlab's, the CPUs)")
    parser.add_argument("--n-per-arm", type=int, default=0, help="run a copy of the descriptor with this n_per_arm")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if args.n_per_arm:
        args.descriptor = with_n_per_arm(args.descriptor, args.n_per_arm)
    best: tuple[int, float, float, str] | None = None
    for _ in range(max(1, args.repeat)):
        result = one_run(args.descriptor, args.workers)
        trials, wall, cpu, verdict = result
        if args.repeat > 1:
            print(f"  run: {trials} trials, {wall:.2f} s, {trials / wall:.1f} trials/s", file=sys.stderr)
        if best is None or wall < best[1]:
            best = result
    assert best is not None
    trials, wall, cpu, verdict = best
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"trial_overhead: {args.descriptor.name}, {trials} trials, verdict {verdict}, {cores} CPUs, "
        f"{wall:.2f} s wall, {cpu:.2f} CPU s in all, {1000.0 * cpu / trials:.2f} CPU ms per trial, "
        f"{trials / wall:.1f} trials/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
