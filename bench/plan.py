"""Benchmark: the time of ``plan`` at N=2000 per arm (target: at most 1 s), for each installed rule.

Prints, per rule, the first call in a fresh interpreter (which loads numpy and scipy.special
lazily), the median warm call, a 5-look design and N=5000, then the whole ``certlab plan -n
2000`` command as a user runs it. Exits 1 if a first call at N=2000 misses the target.
Run: ``.venv/bin/python bench/plan.py``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

TARGET_S = 1.0
N = 2000
RULES = ("clopper-pearson", "newcombe")

# Runs in a fresh interpreter: discovery as the CLI does it, then timed plan calls.
_CHILD = """
import json, statistics, sys, time
from certlab_core._runtime.registry import discover

rule = discover().get("statistical_rules", sys.argv[1])
n = int(sys.argv[2])

def timed(**kwargs):
    started = time.perf_counter()
    chances = rule.plan(0.8, 0.8, kwargs.pop("n", n), **kwargs)
    return time.perf_counter() - started, chances

first, chances = timed()
warm = statistics.median(timed()[0] for _ in range(20))
looks5 = statistics.median(timed(looks=5)[0] for _ in range(5))
n5000 = statistics.median(timed(n=5000)[0] for _ in range(5))
print(json.dumps({"first": first, "warm": warm, "looks5": looks5, "n5000": n5000, "chances": chances}))
"""


def measure(rule: str) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, rule, str(N)], capture_output=True, text=True, check=True, timeout=300
    )
    figures: dict[str, float] = json.loads(result.stdout)
    return figures


def command_wall_s() -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", "plan", "--baseline", "0.8", "--candidate", "0.8", "-n", str(N)],
        capture_output=True,
        check=True,
        timeout=300,
    )
    return time.perf_counter() - started


def main() -> int:
    missed = False
    for rule in RULES:
        figures = measure(rule)
        missed |= figures["first"] > TARGET_S
        print(
            f"plan {rule:<15} N={N} per arm, 1 look: first call {figures['first']:.3f} s (loads numpy, scipy.special), "
            f"warm {figures['warm'] * 1000:.1f} ms; 5 looks {figures['looks5'] * 1000:.1f} ms; "
            f"N=5000 {figures['n5000'] * 1000:.1f} ms"
        )
    walls = [command_wall_s() for _ in range(3)]
    print(f"certlab plan -n {N} (whole command, fresh interpreter): median {statistics.median(walls):.2f} s wall")
    print(f"plan at N={N} per arm: target <= {TARGET_S:g} s: {'MISSED' if missed else 'met'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
