"""Build sealed run stores of 100,000 trials and time ``certlab report`` and ``certlab gate`` on each.

A store follows docs/run-store.md exactly (sealed manifest, sealed lines with the identities
the schedule implies), so both commands do their full seal and schedule checks. Its lines
are real: a small run of the retry world (A against B, a timed-out reserve and a clean
condition) is made first, and each of its trial lines is copied to many indices, re-keyed
and resealed (``seal_line`` recomputes each ``_gate`` summary and ``_marks``), since running
100,000 agents is not what this measures. Two stores are measured: the retry world's lines
as they are (its agents report no usage), and the same lines each given a usage report like
a coding agent's (tokens and a client-estimated cost, varied by trial), which the report
reads and sums. Each command runs ``--repeat`` times as a fresh process; the median wall
time and CPU time (the command and its forked worker) and the peak memory are printed, each
run's wall time beside them. Peak memory is the process tree's summed proportional set size,
sampled every 50 ms (a worker shares the command's pages until it writes them, and PSS
counts a shared page once), next to the largest single process's max RSS from ``wait4``;
the target is held against the larger of the two. Targets: a median of at most 5 s, and at
most 300 MB. ``certlab diff`` of a middle pair of twins and ``certlab rederive`` are timed once
on each store too, for their figures (no target).

    .venv/bin/python bench/store.py [--trials 100000] [--keep DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from certlab_core.gate.manifest import manifest_document, manifest_from_document
from certlab_core.gate.schedule import Identities, full_order
from certlab_core.gate.store import MANIFEST, TRIALS, seal_line
from certlab_core.sdk.canonical import pretty_json, seal_of

TARGET_SECONDS = 5.0
TARGET_MB = 300.0
TEMPLATE_TRIALS = 20  # per arm and condition in the real run whose lines are copied

DESCRIPTOR = """\
schema: certlab.experiment/1
experiment: bench-store
task:
  world: retry-inventory
  input: {orders: 4, existing_share: 0.25, flaky_confirm_rate: 0.05, skus: [widget, gadget, gizmo]}
oracle: world
arms:
  baseline: {agent: "certlab_retry_world.agents:agent_a", label: A}
  candidate: {agent: "certlab_retry_world.agents:agent_b", label: B}
conditions:
  - name: reserve-timeout
    bucket: falsify
    faults: [{fault: tool_timeout, tool: reserve, on_calls: [1], params: {executed: false}}]
  - name: clean
    bucket: benign
rule: {name: clopper-pearson, alpha: 0.05, delta: 0.10, looks: 1}
n_per_arm: %d
seed: 7
budgets: {tool_calls: 60, seconds: 10}
"""


def template_run(folder: Path) -> Path:
    """A real run of the retry world, A against B, whose trial lines the big store copies."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "certlab.yaml").write_text(DESCRIPTOR % TEMPLATE_TRIALS, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", "run", "certlab.yaml", "--out", "runs", "--quiet"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    runs = [line[len("run: ") :] for line in done.stdout.splitlines() if line.startswith("run: ")]
    if not runs:
        raise SystemExit(f"the template run failed: {done.stdout}{done.stderr}")
    return folder / runs[-1]


def usage_of(index: int, arm: str) -> dict[str, object]:
    """A usage report like the one a coding agent's CLI gives (tokens, the client's own dollar estimate), varied by
    trial, so the report's usage and cost path runs at scale too (the retry world's agents report none)."""
    tokens_in = 9_000 + (index * 7919) % 4_000 + (500 if arm == "candidate" else 0)
    tokens_out = 400 + (index * 104729) % 300
    return {
        "shape": "claude-json",
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cached_input_tokens": tokens_in // 3,
        "cost_usd": round(tokens_in * 3e-6 + tokens_out * 15e-6, 6),
        "cost_source": "client-estimate",
    }


def build_store(folder: Path, trials: int, template: Path, with_usage: bool) -> Path:
    """A sealed store of ``trials`` trials (rounded up per arm and condition): real lines, re-keyed and resealed,
    each given a coding agent's usage report when ``with_usage``."""
    from certlab_core.gate.store import read_store

    real = read_store(template)
    lines = {(line["arm"], line["condition"], line["index"]): line for line in real.lines()}
    conditions = len(real.manifest.conditions)
    n_per_arm = max(1, -(-trials // (2 * conditions)))
    document = manifest_document(real.manifest)
    document["n_per_arm"] = n_per_arm
    document["schedule"]["look_sizes"] = [n_per_arm]
    document.pop("seal")
    document["seal"] = seal_of(document)
    manifest = manifest_from_document(document, "bench manifest")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).write_text(pretty_json(manifest_document(manifest)), encoding="utf-8")
    identities = Identities(manifest)
    with (folder / TRIALS).open("w", encoding="utf-8") as handle:
        for key in full_order(manifest):
            line = dict(lines[(key.arm, key.condition, key.index % TEMPLATE_TRIALS)])
            line.update(id=key.id, index=key.index, seed=key.seed, identity=identities.of(key))
            if with_usage:
                line["usage"] = usage_of(key.index, key.arm)
            line["manifest_seal"] = manifest.seal
            handle.write(seal_line(line))
    return folder


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc (Linux)."""
    found = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in children:
        found.extend(_process_tree(int(child)))
    return found


def _tree_pss_kb(pid: int) -> int:
    """The summed proportional set size of ``pid`` and its descendants (pages they share are counted once)."""
    total = 0
    for member in _process_tree(pid):
        try:
            with open(f"/proc/{member}/smaps_rollup", encoding="ascii") as handle:
                total += next((int(line.split()[1]) for line in handle if line.startswith("Pss:")), 0)
        except (OSError, ValueError):
            continue
    return total


def measure(args: list[str]) -> tuple[float, float, float, float, int, str]:
    """Wall s, CPU s (the command and its workers), peak MB of the process tree's summed PSS (sampled every 50 ms;
    0 without /proc), peak MB of the largest single process (``wait4``'s max RSS), exit code,
    the output line that gives the verdict."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "certlab_core.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.append(process.stdout.read() if process.stdout else ""))
    reader.start()
    peak_pss = 0
    while True:
        done, status, usage = os.wait4(process.pid, os.WNOHANG)
        if done:
            break
        peak_pss = max(peak_pss, _tree_pss_kb(process.pid))
        time.sleep(0.05)
    wall = time.monotonic() - started
    reader.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    # The line that gives the verdict: the gate's last ("verdict: ..."), the report's first ("experiment X: VERDICT").
    lines = "".join(chunks).strip().splitlines() or [""]
    last = next((line for line in reversed(lines) if line.startswith("verdict:")), lines[0])
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, peak_pss / 1024.0, usage.ru_maxrss / 1024.0, process.returncode, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000, help="trials in the store (default 100000)")
    parser.add_argument("--keep", type=Path, default=None, help="build the stores in this folder and keep them")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command (default 3)")
    options = parser.parse_args()
    if options.keep is not None:
        return measure_stores(options.keep, options.trials, options.repeat)
    with tempfile.TemporaryDirectory(prefix="certlab-bench-store-") as scratch:  # 630 MB of stores: removed after
        return measure_stores(Path(scratch), options.trials, options.repeat)


def measure_stores(base: Path, trials: int, repeat: int) -> int:
    """Build both stores under ``base`` and measure the commands on each; 1 when a target is missed."""
    template = template_run(base / "template")
    worst = 0
    for variant, with_usage in (("tool-world lines, no usage", False), ("every line reporting usage", True)):
        folder = base / ("bench-store-usage" if with_usage else "bench-store-run")
        started = time.monotonic()
        build_store(folder, trials, template, with_usage)
        lines = sum(1 for _ in (folder / TRIALS).open("rb"))
        size_mb = (folder / TRIALS).stat().st_size / 1e6
        print(
            f"store ({variant}): {lines} trials, trials.jsonl {size_mb:.0f} MB, "
            f"built in {time.monotonic() - started:.1f} s"
        )
        worst = max(worst, measure_commands(folder, repeat))
    return worst


def measure_commands(folder: Path, repeat: int) -> int:
    """Run report and gate on one store ``repeat`` times each and print their figures; 1 when a target is missed."""
    worst = 0
    for name, args in (("report", ["report", str(folder)]), ("gate", ["gate", str(folder)])):
        runs = [measure(args) for _ in range(repeat)]
        wall = statistics.median(run[0] for run in runs)
        cpu = statistics.median(run[1] for run in runs)
        pss = max(run[2] for run in runs)
        largest = max(run[3] for run in runs)
        peak = max(pss, largest)
        codes = {run[4] for run in runs}
        code, last = runs[-1][4], runs[-1][5]
        held = wall <= TARGET_SECONDS and peak <= TARGET_MB and codes <= {0, 1, 2} and len(codes) == 1
        worst = max(worst, 0 if held else 1)
        walls = ", ".join(f"{run[0]:.2f}" for run in runs)
        print(
            f"  certlab {name}: median {wall:.2f} s wall ({walls}), median {cpu:.2f} s CPU, "
            f"peak {pss:.0f} MB (summed PSS of the command and its worker; largest single process {largest:.0f} MB) "
            f"(targets {TARGET_SECONDS:.0f} s, {TARGET_MB:.0f} MB) exit {code}: {'held' if held else 'MISSED'}"
            f"  [{last[:60]}]"
        )
    # Commands with no target, for their figures: they read one or two lines, or the store once.
    middle = f"reserve-timeout/{_n_per_arm(folder) // 2}"
    for name, args in (
        ("diff", ["diff", str(folder), f"baseline/{middle}", f"candidate/{middle}"]),
        ("rederive", ["rederive", str(folder)]),
    ):
        wall, cpu, pss, largest, code, _last = measure(args)
        print(f"  certlab {name}: {wall:.2f} s wall, {cpu:.2f} s CPU, peak {max(pss, largest):.0f} MB, exit {code}")
    return worst


def _n_per_arm(folder: Path) -> int:
    return int(json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["n_per_arm"])


if __name__ == "__main__":
    sys.exit(main())
