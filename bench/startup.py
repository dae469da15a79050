"""Start-up cost: wall time of ``discover()``, ``certlab --help``, ``certlab plugins``, ``diff`` and ``gate``.

Each figure is the median of N runs (7 unless ``--runs N``), each in a fresh interpreter:
``discover()`` timed inside the process from before importing the registry to its return
(kernel imports and every installed plugin's entry module), and the whole process for
``certlab --help`` (target: within 0.3 s, with the contract ``certlab_core.plugin`` imported
eagerly), ``certlab plugins`` and for ``certlab diff`` of two trials of the archived block store
``tests/archived_stores/block``; then ``certlab gate`` of that store, wall and CPU seconds (the
command whose rule loads numpy and scipy to recompute the decision). Prints one line per figure
and the load average. Usage: ``python bench/startup.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from measured import children_cpu_s

REPO = Path(__file__).resolve().parent.parent
BLOCK_STORE = REPO / "tests" / "archived_stores" / "block"
TIME_DISCOVER = (
    "import time; started = time.perf_counter(); "
    "from certlab_core._runtime.registry import discover; discover(); "
    "print(time.perf_counter() - started)"
)


def discover_seconds() -> float:
    """Seconds from importing the registry to the return of ``discover()``, in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", TIME_DISCOVER], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def command_cost(*args: str, exit_codes: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """Wall and CPU seconds of one ``certlab ARGS`` process (and its children), start to exit."""
    argv = [sys.executable, "-m", "certlab_core.cli", *args]
    cpu, started = children_cpu_s(), time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - started, children_cpu_s() - cpu
    if done.returncode not in exit_codes:
        raise SystemExit(f"certlab {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return wall, cpu


def command_seconds(*args: str) -> float:
    """Wall seconds of one ``certlab ARGS`` process, start to exit."""
    return command_cost(*args)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per figure; the median is printed")
    runs = parser.parse_args().runs
    figures = {
        "discover()": discover_seconds,
        "certlab --help": lambda: command_seconds("--help"),
        "certlab plugins": lambda: command_seconds("plugins"),
        "certlab diff (archived block store)": lambda: command_seconds(
            "diff", str(BLOCK_STORE), "baseline/clean/0", "candidate/clean/0"
        ),
    }
    for label, measure in figures.items():
        seconds = statistics.median(measure() for _ in range(runs))
        print(f"{label}: {seconds * 1000:.0f} ms (median of {runs})")
    gated = [command_cost("gate", str(BLOCK_STORE), exit_codes=(1,)) for _ in range(runs)]  # BLOCK exits 1
    wall = statistics.median(w for w, _cpu in gated)
    cpu = statistics.median(c for _w, c in gated)
    print(f"certlab gate (archived block store): {wall * 1000:.0f} ms, {cpu * 1000:.0f} CPU ms (medians of {runs})")
    print("load average: " + " ".join(f"{load:.2f}" for load in os.getloadavg()))


if __name__ == "__main__":
    main()
