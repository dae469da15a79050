"""Scale-out: the same work on the executor ``local`` and on ``dask`` (a local cluster), side by side in one run.

Prints, for each executor:
- the retry experiment (``examples/retry/a_vs_b.yaml``, ``certlab run``): trials per second over
  the whole command and over the trials alone (from the run store's creation, which comes after
  the executor is open, to ``decision.json``), and the CPU milliseconds per trial of every
  process of the run (runner, zygotes, trials and oracles; on dask also the scheduler, nannies
  and workers: a worker closing stops its zygotes and their host and waits for them, so their
  time and their trials' reach it);
- a certification of all three families by the oracle agent (``certlab certify --family all``);
then a fleet of slow agents (each trial's agent sleeps 2 s) on a local cluster of 8
single-thread workers: 64 tool-world trials, each in a fresh process; then what the cost per
trial is made of as the cluster grows: the scheduler tasks a trial takes, a task's round trip
and the scheduler's CPU per task (measured on a cluster whose scheduler runs in this process),
and the store writer's sealed lines per second.

Usage: ``python bench/scale.py [--workers 2] [--skip-certify] [--skip-fleet]``.
Targets: dask at least half of local's trials/s; the fleet's 64 trials in at most 20 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from measured import children_cpu_s

REPO = Path(__file__).resolve().parent.parent
RETRY = REPO / "examples" / "retry" / "a_vs_b.yaml"

SLEEPY = """
import time
from certlab_retry_world.agents import agent_a


def sleepy(task, tools, rng):
    time.sleep(2.0)
    return agent_a(task, tools, rng)
"""


def certlab(*args: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run the certlab command; its result, wall seconds and CPU seconds (all its processes)."""
    cpu = children_cpu_s()
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "certlab_core.cli", *args], capture_output=True, text=True)
    return done, time.time() - started, children_cpu_s() - cpu


def executor_args(executor: str, workers: int) -> list[str]:
    return ["--workers", str(workers)] + (["--executor", "dask"] if executor == "dask" else [])


def run_figures(descriptor: Path, executor: str, workers: int, *extra: str) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="certlab-scale-"))
    try:
        done, wall, cpu = certlab(
            "run", str(descriptor), "--out", str(out), "--quiet", *executor_args(executor, workers), *extra
        )
        if done.returncode not in (0, 1, 2):
            raise SystemExit(f"bench: certlab run on {executor} exited {done.returncode}: {done.stderr.strip()[-400:]}")
        (folder,) = [p for p in out.iterdir() if p.is_dir()]
        decision = json.loads((folder / "decision.json").read_text(encoding="utf-8"))
        trials = int(decision["trials"]["scheduled"])
        created = (folder / "manifest.json").stat().st_mtime
        trial_phase = (folder / "decision.json").stat().st_mtime - created
        last_record = (folder / "trials.jsonl").stat().st_mtime - created
        sample = (folder / "trials.jsonl").open(encoding="utf-8").readline()
        return {
            "trials": trials,
            "wall": wall,
            "trial_phase": trial_phase,
            "last_record": last_record,
            "cpu": cpu,
            "cpu_ms": 1000.0 * cpu / trials,
            "verdict": decision["verdict"],
            "sample": sample,
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


def certify_figures(executor: str, workers: int) -> tuple[float, float, str]:
    out = Path(tempfile.mkdtemp(prefix="certlab-scale-")) / "cert"
    try:
        args = ["certify", "--family", "all", "--agent", "oracle", "--out", str(out), "--quiet"]
        done, wall, cpu = certlab(*args, *executor_args(executor, workers))
        return wall, cpu, done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


def fleet_descriptor(folder: Path) -> Path:
    (folder / "sleepy.py").write_text(textwrap.dedent(SLEEPY), encoding="utf-8")
    text = textwrap.dedent(
        """
        schema: certlab.experiment/1
        experiment: slow-fleet
        task: {world: retry-inventory, input: {orders: 2}}
        oracle: world
        arms:
          baseline: {agent: "sleepy:sleepy", label: A}
          candidate: {agent: "sleepy:sleepy", label: A}
        conditions:
          - {name: calm, bucket: benign, faults: []}
        rule: {name: clopper-pearson, alpha: 0.05, delta: 0.10, looks: 1}
        n_per_arm: 32
        seed: 5
        budgets: {tool_calls: 60, model_steps: 10, seconds: 30}
        """
    )
    path = folder / "fleet.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def scheduler_figures(workers: int, tasks: int = 200) -> dict[str, float]:
    """On a local cluster whose scheduler runs in this process: a task's round trip, one after the other
    (milliseconds); then the retry experiment run on it through ``--scheduler``: the tasks its trials
    took per trial, and the scheduler's CPU milliseconds per task (this process holds only the
    scheduler and an idle client while certlab runs)."""
    from distributed import Client, LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin

    class TaskCount(SchedulerPlugin):  # type: ignore[misc]
        name = "certlab-scale-task-count"

        def __init__(self) -> None:
            self.done = 0

        def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
            if finish == "memory" and str(key).startswith("run_units-"):
                self.done += 1

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=":0", silence_logs=50)
    with cluster, Client(cluster) as client:
        client.submit(abs, -1, pure=False).result()
        started = time.perf_counter()
        for index in range(tasks):
            client.submit(abs, -index, pure=False).result()
        rtt_ms = 1000.0 * (time.perf_counter() - started) / tasks
        counter = TaskCount()
        client.register_plugin(counter)
        cpu = process_cpu()
        run = run_figures(RETRY, "dask", workers, "--scheduler", cluster.scheduler_address)
        scheduler_cpu = process_cpu() - cpu
        done = int(client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins[TaskCount.name].done))
    return {
        "rtt_ms": rtt_ms,
        "trials": run["trials"],
        "tasks_per_trial": done / run["trials"],
        "scheduler_ms_per_task": 1000.0 * scheduler_cpu / max(1, done),
    }


def writer_lines_per_s(sample: str, lines: int = 20000) -> tuple[float, float]:
    """Sealed trial lines the one store writer appends per second of wall time and per CPU second (a real
    line, its seal recomputed each time)."""
    from certlab_core.gate.store import TrialSink

    line = json.loads(sample)
    line.pop("seal", None)
    folder = Path(tempfile.mkdtemp(prefix="certlab-scale-sink-"))
    try:
        with TrialSink(folder) as sink:
            started, cpu = time.perf_counter(), process_cpu()
            for index in range(lines):
                sink.append(dict(line, index=index))
            return lines / (time.perf_counter() - started), lines / (process_cpu() - cpu)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="local: processes at once; dask: cluster workers")
    parser.add_argument("--skip-certify", action="store_true")
    parser.add_argument("--skip-fleet", action="store_true")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"scale: {cores} CPUs, load average {os.getloadavg()[0]:.1f}, --workers {args.workers}")
    runs = {name: run_figures(RETRY, name, args.workers) for name in ("local", "dask")}
    for name, figures in runs.items():
        print(
            f"  retry experiment on {name:5}: {figures['trials']} trials, verdict {figures['verdict']}, "
            f"{figures['trials'] / figures['wall']:.1f} trials/s over the command ({figures['wall']:.1f} s), "
            f"{figures['trials'] / figures['trial_phase']:.1f} trials/s over the trials "
            f"({figures['trial_phase']:.1f} s), "
            f"{figures['cpu_ms']:.1f} CPU ms per trial"
        )
    rates = {name: figures["trials"] / figures["trial_phase"] for name, figures in runs.items()}
    ratio = rates["dask"] / rates["local"]
    print(f"  dask / local trials per second (trials alone): {ratio:.2f} (target at least 0.5)")
    if not args.skip_certify:
        for name in ("local", "dask"):
            wall, cpu, result = certify_figures(name, args.workers)
            print(f"  certify all three families on {name:5}: {wall:.1f} s wall, {cpu:.1f} CPU s; {result}")
    if not args.skip_fleet:
        folder = Path(tempfile.mkdtemp(prefix="certlab-scale-fleet-"))
        try:
            fleet = run_figures(fleet_descriptor(folder), "dask", 8)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(
            f"  slow fleet on dask, 8 single-thread workers: {fleet['trials']} trials whose agents sleep 2 s "
            f"(16 s at best): {fleet['last_record']:.1f} s from the run store's creation to the last record, "
            f"{fleet['trial_phase']:.1f} s to decision.json (target at most 20 s), {fleet['wall']:.1f} s with the "
            f"cluster's start and stop; {fleet['cpu']:.1f} CPU s in all, {os.getloadavg()[0]:.1f} load average"
        )
    sched = scheduler_figures(args.workers)
    writer, writer_cpu = writer_lines_per_s(runs["local"]["sample"])
    print(
        f"  cost per trial as the cluster grows: {sched['tasks_per_trial']:.2f} scheduler tasks per trial "
        f"(retry experiment, {sched['trials']} trials on {args.workers} workers: a trial and its oracle, several "
        f"short units to a task), a task's round trip {sched['rtt_ms']:.1f} ms, the scheduler's CPU "
        f"{sched['scheduler_ms_per_task']:.1f} ms per task (at most {1000.0 / sched['scheduler_ms_per_task']:.0f} "
        f"tasks/s); the store writer seals and appends {writer:.0f} lines/s ({writer_cpu:.0f} per CPU second; one line "
        f"per attempt)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
