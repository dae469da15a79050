"""Benchmark: what the bwrap sandbox costs per trial, measured on the same certification trials with and without it.

The agent arm of a certification of ``intervals`` (six trials of the command agent
``examples/agents/pattern_fixer.sh``, graded by policy, suite and acceptance) runs
``--repeat`` times under each containment, interleaved, one trial at a time; proving and
calibration run as the harness either way and are left out. Prints the median per-trial
time of the agent, of the grading and in all, for each containment, their difference, the
CPU seconds per trial (this process and all it waited for), the cost of one contained start
of ``/bin/true`` against an uncontained one (each start with cgroups of its own, and in one of
the slots a certification serves its trials from), and the load average before and after (on a
shared machine the wall figures follow it). Target: at most 20 ms per trial.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import attrs

from certlab_core._runtime.containment import choose_containment
from certlab_core._runtime.registry import discover
from certlab_core.certify.instrument import prove
from certlab_core.certify.lab import Task, TrialRecord, TrialSpec, answer_key_paths, preload
from certlab_core.certify.trial_runs import run_trials
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.command import run_contained
from certlab_core.sdk.grading import grader_chain

AGENT = Path(__file__).resolve().parent.parent / "examples" / "agents" / "pattern_fixer.sh"


def per_trial(records: list[TrialRecord], key: str) -> list[float]:
    return [float(r.timings[key]) for r in records]


def cpu_seconds() -> float:
    """CPU seconds of this process and of every process it waited for (the trials, their graders, the agents)."""
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def served(containment: Containment) -> contextlib.AbstractContextManager[None]:
    """The sandbox's warm slots, as a certification's trials get them (``certify.trial_runs.grading_services``)."""
    sandbox = containment.sandbox
    return sandbox.serve(1) if sandbox is not None and sandbox.serve is not None else contextlib.nullcontext()


def start_cost(containment: Containment, runs: int) -> float:
    """Median seconds of one start of /bin/true under ``containment``, subreaper and sweep included."""
    times = []
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"certlab-bench-sandbox-{os.getpid()}"
    work.mkdir(exist_ok=True)
    try:
        for _ in range(runs):
            started = time.perf_counter()
            run_contained(["/bin/true"], cwd=str(work), env=dict(os.environ), timeout_s=30, containment=containment)
            times.append(time.perf_counter() - started)
    finally:
        work.rmdir()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="certifications per containment (interleaved)")
    args = parser.parse_args()
    registry = discover()
    family = registry.get("task_families", "intervals")
    graders = grader_chain(registry)
    proof = prove(family, graders)
    if not proof.holds:
        sys.exit(f"bench: intervals does not prove: {proof.problems}")
    sandboxed = choose_containment(registry, "bwrap", answer_key_paths([family]), print)
    preload()
    agent = registry.get("agents", "command")
    # bwrap as a certification serves it (slots: cgroups kept from trial to trial), and with cgroups of its own per
    # start (no slots: as an executor's worker, regrade or replay starts it), the figure before the slots.
    assert sandboxed.sandbox is not None
    unserved = attrs.evolve(sandboxed, sandbox=attrs.evolve(sandboxed.sandbox, serve=None))
    kinds = {"none": Containment(), "bwrap": sandboxed, "bwrap-own-cgroups": unserved}
    records: dict[str, list[TrialRecord]] = {name: [] for name in kinds}
    cpu: dict[str, float] = dict.fromkeys(kinds, 0.0)
    print(f"load average before: {load()}")
    for _round in range(args.repeat):
        for name, containment in kinds.items():
            before = cpu_seconds()
            specs = [
                TrialSpec(
                    Task(family, defect),
                    agent,
                    1,
                    agent_args=(str(AGENT),),
                    agent_timeout_s=60,
                    expected_tests=proof.expected_tests,
                    containment=containment,
                )
                for defect in family.defects
            ]
            records[name].extend(run_trials(specs, graders, workers=1))
            cpu[name] += cpu_seconds() - before
    medians: dict[str, dict[str, float]] = {}
    for name, done in records.items():
        medians[name] = {key: statistics.median(per_trial(done, key)) for key in ("agent_s", "grading_s", "total_s")}
        verdicts = [r.verdict for r in done]
        print(
            f"{name:>17}: {len(done)} trials, {verdicts.count('fixed')} fixed; median per trial: "
            f"agent {medians[name]['agent_s'] * 1000:.0f} ms, grading {medians[name]['grading_s'] * 1000:.0f} ms, "
            f"total {medians[name]['total_s'] * 1000:.0f} ms; CPU {cpu[name] / len(done) * 1000:.0f} ms per trial"
        )
    for key, label in (("agent_s", "agent"), ("grading_s", "grading"), ("total_s", "total")):
        extra = (medians["bwrap"][key] - medians["none"][key]) * 1000
        own = (medians["bwrap-own-cgroups"][key] - medians["none"][key]) * 1000
        print(f"sandbox overhead per trial, {label}: {extra:+.0f} ms (with cgroups of its own: {own:+.0f} ms)")
    bare, contained = start_cost(Containment(), 20), start_cost(sandboxed, 20)
    with served(sandboxed):
        in_slot = start_cost(sandboxed, 20)
    print(
        f"one start of /bin/true: uncontained {bare * 1000:.1f} ms, in bwrap {contained * 1000:.1f} ms "
        f"({(contained - bare) * 1000:+.1f} ms), in bwrap in a slot {in_slot * 1000:.1f} ms "
        f"({(in_slot - bare) * 1000:+.1f} ms)"
    )
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
