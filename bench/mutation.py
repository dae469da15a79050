"""Benchmark: the mutation proof of each family (or one): its mutants, both scores, wall and CPU time.

Every mutant is graded for real, through the installed grader chain, exactly as
``certlab prove --mutants`` grades it. Prints one line per family; the target is at most
30 s of wall time per family on a two-core machine. CPU seconds (this process's children)
are printed too: on a shared machine they are the figure that does not depend on the load.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from certlab_mutation.engine import percent, prove_by_mutation
from measured import children_cpu_s

from certlab_core._runtime.registry import discover
from certlab_core.certify.instrument import prove
from certlab_core.certify.lab import preload
from certlab_core.sdk.grading import grader_chain


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", default="all", help="a family name, or 'all'")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    registry = discover()
    graders = grader_chain(registry)
    names = registry.names("task_families") if args.family == "all" else [args.family]
    names = [n for n in names if registry.get("task_families", n).defects]
    preload()
    print(f"mutation proof, {args.workers} workers, load average {_load():.1f} at the start")
    for name in names:
        family = registry.get("task_families", name)
        proof = prove(family, graders, workers=args.workers)
        if not proof.holds:
            sys.exit(f"bench: {name} does not prove: {proof.problems}")
        cpu = children_cpu_s()
        started = time.perf_counter()
        mutation = prove_by_mutation(family, graders, proof.expected_tests, workers=args.workers)
        wall = time.perf_counter() - started
        cpu = children_cpu_s() - cpu
        timeouts = sum(1 for r in mutation.results if r.outcome == "timeout")
        print(
            f"{name:<10} {mutation.count:>3} mutants: visible suite kills {percent(mutation.suite_score):>6}, "
            f"suite + held-out {percent(mutation.score):>6}; {len(mutation.survivors)} survive, "
            f"{timeouts} at a time limit; {wall:5.1f} s wall, {cpu:5.1f} s CPU, load {_load():.1f}"
        )


if __name__ == "__main__":
    main()
