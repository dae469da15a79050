"""Benchmark: making and proving a family's impossible twins, and what ``certify --impossible`` costs.

``make+prove``: each seeded defect's twins made (deterministically) and proven on the clean code,
every grade done for real; target at most 10 s per family. ``--certify``: one certification of
the family by a constructed agent without twins and one with ``--impossible`` (one twin per
defect, mutation proof skipped in both), and their ratio; target at most 2x. The two alternate
(without, with, without, ...), so a load that rises or falls on a shared machine weighs on both;
each pair's ratio is printed, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from certlab_core._runtime.registry import Registry, discover
from certlab_core.certify.certification import CertifyOptions, certify
from certlab_core.certify.instrument import prove_twins
from certlab_core.certify.lab import preload
from certlab_core.certify.twins import TWIN_KINDS, TwinKind, make_twins
from certlab_core.sdk.grading import grader_chain


def make_and_prove(registry: Registry, name: str, kinds: tuple[TwinKind, ...], workers: int) -> float:
    family = registry.get("task_families", name)
    graders = grader_chain(registry)
    started = time.perf_counter()
    twins, problems = make_twins(family, kinds)
    proofs = prove_twins(family, twins, graders, workers=workers)
    refused = [*problems, *(p for proof in proofs for p in proof.problems)]
    if refused:
        sys.exit(f"bench: {name}'s twins are refused: {refused}")
    return time.perf_counter() - started


def certification(registry: Registry, name: str, agent: str, impossible: bool, workers: int) -> float:
    options = CertifyOptions(families=(name,), agent=agent, workers=workers, mutants=False, impossible=impossible)
    started = time.perf_counter()
    result = certify(registry, options, lambda _m: None)
    if result.exit_code != 0:
        sys.exit(f"bench: certify {name} failed: {result.problems}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", default="intervals", help="a family name, or 'all'")
    parser.add_argument("--kinds", default="one-off", help="twin kinds, comma-separated (one-off,conflicting)")
    parser.add_argument("--repeat", type=int, default=3, help="runs to take the median of")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--certify", action="store_true", help="also time certify with and without --impossible")
    parser.add_argument("--agent", default="oracle", help="the constructed agent certified (with --certify)")
    args = parser.parse_args()
    kinds = tuple(k for k in TWIN_KINDS if k in args.kinds.split(","))
    registry = discover()
    names = registry.names("task_families") if args.family == "all" else [args.family]
    names = [
        n for n in names if registry.get("task_families", n).defects and registry.get("task_families", n).clean_tree
    ]
    preload()
    for name in names:
        times = [make_and_prove(registry, name, kinds, args.workers) for _ in range(args.repeat)]
        twins = len(registry.get("task_families", name).defects) * len(kinds)
        print(
            f"twins {name} ({', '.join(kinds)}): make+prove {twins} twins, median {statistics.median(times):.2f} s "
            f"over {args.repeat} runs (min {min(times):.2f}, max {max(times):.2f}); target <= 10 s"
        )
        if args.certify:
            plain: list[float] = []
            twinned: list[float] = []
            for _ in range(args.repeat):
                plain.append(certification(registry, name, args.agent, False, args.workers))
                twinned.append(certification(registry, name, args.agent, True, args.workers))
            ratio = statistics.median(twinned) / statistics.median(plain)
            pairs = ", ".join(f"{t / p:.2f}x" for p, t in zip(plain, twinned, strict=True))
            print(
                f"certify {name} --agent {args.agent} --no-mutants: median {statistics.median(plain):.2f} s without "
                f"twins, {statistics.median(twinned):.2f} s with --impossible: {ratio:.2f}x (pairs: {pairs}; "
                f"load average {os.getloadavg()[0]:.1f} at the end); target <= 2x"
            )


if __name__ == "__main__":
    main()
