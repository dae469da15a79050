"""Benchmark: wall time of prove plus the full constructed-agent calibration of one family (or all).

Every grade is done for real; nothing is reused between agents. Prints one line per family
and, for ``--family all``, the total. Targets: at most 4 s per family, 12 s for all three.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from certlab_core._runtime.registry import discover
from certlab_core.certify.instrument import calibrate, constructed_agents, prove
from certlab_core.certify.lab import preload
from certlab_core.sdk.grading import grader_chain


def measure(family_names: list[str], workers: int) -> float:
    registry = discover()
    graders = grader_chain(registry)
    agents = constructed_agents(registry)
    started = time.perf_counter()
    proven = []
    for name in family_names:
        family = registry.get("task_families", name)
        proof = prove(family, graders, workers=workers)
        if not proof.holds:
            sys.exit(f"bench: {name} does not prove: {proof.problems}")
        proven.append((family, proof))
    calibrated = calibrate(proven, agents, graders, workers=workers)
    if calibrated.problems:
        sys.exit(f"bench: calibration failed: {calibrated.problems}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", default="intervals", help="a family name, or 'all'")
    parser.add_argument("--repeat", type=int, default=3, help="runs to take the median of")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    registry = discover()
    names = registry.names("task_families") if args.family == "all" else [args.family]
    names = [n for n in names if registry.get("task_families", n).defects]
    preload()
    times = [measure(names, args.workers) for _ in range(args.repeat)]
    tasks = sum(len(registry.get("task_families", n).defects) for n in names)
    agents = len(constructed_agents(registry))
    print(
        f"calibration ({', '.join(names)}): median {statistics.median(times):.2f} s over {args.repeat} runs "
        f"(min {min(times):.2f}, max {max(times):.2f}); prove + {agents} constructed agents x {tasks} tasks, "
        f"{args.workers} workers"
    )


if __name__ == "__main__":
    main()
