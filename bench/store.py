"""Build a sealed run store of 100,000 trials and time ``certlab report`` and ``certlab gate`` on it.

The store follows docs/run-store.md exactly (sealed manifest, sealed lines with the
identities the schedule implies), so both commands do their full seal and schedule checks;
the trials are written directly rather than run, since running agents is not what this
measures. Each command runs as a fresh process; its wall time and peak memory (max RSS of
that process, from ``wait4``) are printed. Targets: at most 5 s and 300 MB each.

    .venv/bin/python bench/store.py [--trials 100000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from certlab_core import __version__
from certlab_core.canonical import pretty_json, seal_of
from certlab_core.gate.manifest import manifest_document, manifest_from_document
from certlab_core.gate.schedule import Identities, full_order
from certlab_core.gate.store import DECISION, MANIFEST, TRIALS, seal_line

TARGET_SECONDS = 5.0
TARGET_MB = 300.0
CONDITIONS = (
    ("reserve-timeout", "falsify", [{"fault": "tool_timeout", "tool": "reserve", "on_calls": [1], "params": {}}]),
    ("clean", "benign", []),
)
# Success rates per (arm, condition): the candidate does not retry a timed-out reserve.
RATES = {
    ("baseline", "reserve-timeout"): 0.97,
    ("candidate", "reserve-timeout"): 0.30,
    ("baseline", "clean"): 0.97,
    ("candidate", "clean"): 0.965,
}


def manifest_for(n_per_arm: int) -> Any:
    document: dict[str, Any] = {
        "schema": "certlab.manifest/1",
        "experiment": "bench-store",
        "descriptor_file": "certlab.yaml",
        "descriptor_sha256": "0" * 64,
        "descriptor_dir": ".",
        "task": {
            "kind": "tool-world",
            "world": "retry-inventory",
            "input": {"orders": 1},
            "family": None,
            "defects": [],
            "tools": ["confirm", "reserve", "stock"],
            "decisions": False,
        },
        "oracle": "world",
        "arms": {
            "baseline": {
                "agent": "bench:agent_a",
                "adapter": None,
                "args": [],
                "label": "A",
                "source_sha256": "a" * 64,
            },
            "candidate": {
                "agent": "bench:agent_b",
                "adapter": None,
                "args": [],
                "label": "B",
                "source_sha256": "b" * 64,
            },
        },
        "conditions": [
            {"name": name, "bucket": bucket, "gating": True, "faults": faults} for name, bucket, faults in CONDITIONS
        ],
        "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
        "n_per_arm": n_per_arm,
        "seed": 7,
        "budgets": {"tool_calls": 50, "model_steps": None, "seconds": 10.0},
        "contract": {"max_tool_calls": None, "forbidden_tools": [], "required_tools": [], "max_calls_per_tool": {}},
        "infra_exit_codes": [75],
        "schedule": {"order": "interleaved", "look_sizes": [n_per_arm], "gating_conditions": len(CONDITIONS)},
        "plugins": {"certlab-clopper-pearson": "0.1.0"},
        "certlab_version": __version__,
    }
    document["seal"] = seal_of(document)
    return manifest_from_document(document, "bench manifest")


def event(seq: int, name: str, args: dict[str, Any], result: Any = None, error: Any = None, fault: Any = None) -> dict:
    return {
        "seq": seq,
        "kind": "tool",
        "name": name,
        "args": args,
        "status": "ok" if error is None else "error",
        "result": result,
        "error": error,
        "fault": fault,
    }


def trial_line(manifest: Any, identities: Identities, key: Any, rng: random.Random) -> dict[str, Any]:
    order = {"order": f"o-{key.seed}", "sku": "widget", "qty": 2}
    faulted = key.condition == "reserve-timeout"
    success = rng.random() < RATES[(key.arm, key.condition)]
    events = [event(0, "stock", {"sku": "widget"}, {"sku": "widget", "available": 9})]
    faults = []
    if faulted:
        events.append(
            event(1, "reserve", order, error={"type": "ToolTimeout", "message": "reserve timed out"}, fault=0)
        )
        events[-1]["executed"] = False
        faults = [{"index": 0, "fault": "tool_timeout", "tool": "reserve", "fired": True, "fired_at": [1]}]
    agent = {"status": "completed", "exit_code": None, "detail": "", "returned": {"confirmed": success}}
    if success or not faulted:
        events.append(event(len(events), "reserve", order, {"reservation": f"r-{key.seed}"}))
        confirm_ok = success
        events.append(
            event(
                len(events),
                "confirm",
                {"reservation": f"r-{key.seed}"},
                {"confirmed": True} if confirm_ok else None,
                None if confirm_ok else {"type": "ToolError", "message": "confirm failed"},
            )
        )
    else:
        agent = {"status": "crashed", "exit_code": None, "detail": "ToolTimeout: reserve timed out", "returned": None}
    return {
        "schema": "certlab.trial/1",
        "id": key.id,
        "arm": key.arm,
        "condition": key.condition,
        "index": key.index,
        "seed": key.seed,
        "attempt": 1,
        "identity": identities.of(key),
        "manifest_seal": manifest.seal,
        "outcome": "success" if success else "failure",
        "failure_mode": None if success else ("tool-fault-uncaught" if faulted else "oracle-rejected"),
        "error": None,
        "agent": agent,
        "oracle": {"passed": success, "detail": "" if success else "order not confirmed"},
        "events": events,
        "faults": faults,
        "counts": {"tool_calls": len(events), "model_steps": 0, "by_tool": {}},
        "budget_exceeded": None,
        "contract_violations": [],
        "usage": {
            "shape": "bench",
            "input_tokens": 1200,
            "output_tokens": 80,
            "cached_input_tokens": None,
            "cost_usd": 0.0021,
            "cost_source": "client-estimate",
        },
        "timings": {"agent_s": 0.001, "oracle_s": 0.001, "total_s": 0.003},
    }


def build_store(folder: Path, trials: int) -> Path:
    """A run store of ``trials`` trials (rounded up to a whole number per arm and condition)."""
    n_per_arm = max(1, -(-trials // (2 * len(CONDITIONS))))
    manifest = manifest_for(n_per_arm)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).write_text(pretty_json(manifest_document(manifest)), encoding="utf-8")
    identities = Identities(manifest)
    rng = random.Random(20250101)
    with (folder / TRIALS).open("w", encoding="utf-8") as handle:
        for key in full_order(manifest):
            handle.write(seal_line(trial_line(manifest, identities, key, rng)))
    return folder


def measure(args: list[str]) -> tuple[float, float, float, int, str]:
    """Wall seconds, CPU seconds, peak MB (max RSS of that process alone), exit code, and the last output line."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "certlab_core.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    last = (output.strip().splitlines() or [""])[-1]
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, process.returncode, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000, help="trials in the store (default 100000)")
    parser.add_argument("--keep", type=Path, default=None, help="build the store in this folder and keep it")
    options = parser.parse_args()
    base = options.keep or Path(tempfile.mkdtemp(prefix="certlab-bench-store-"))
    folder = base / "bench-store-run"
    started = time.monotonic()
    build_store(folder, options.trials)
    lines = sum(1 for _ in (folder / TRIALS).open("rb"))
    size_mb = (folder / TRIALS).stat().st_size / 1e6
    print(f"store: {lines} trials, trials.jsonl {size_mb:.0f} MB, built in {time.monotonic() - started:.1f} s")
    worst = 0
    for name, args in (("report", ["report", str(folder)]), ("gate", ["gate", str(folder)])):
        wall, cpu, peak, code, last = measure(args)
        held = wall <= TARGET_SECONDS and peak <= TARGET_MB and code in (0, 1, 2)
        worst = max(worst, 0 if held else 1)
        print(
            f"certlab {name}: {wall:.2f} s wall, {cpu:.2f} s CPU, peak {peak:.0f} MB "
            f"(targets {TARGET_SECONDS:.0f} s, {TARGET_MB:.0f} MB) exit {code}: {'held' if held else 'MISSED'}"
            f"  [{last[:100]}]"
        )
    if (folder / DECISION).exists():
        print(f"decision.json written by certlab gate: {(folder / DECISION).stat().st_size} bytes")
    return worst


if __name__ == "__main__":
    sys.exit(main())
