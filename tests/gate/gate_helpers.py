"""Helpers for the gate's tests: descriptors written to a folder, experiments run in-process, stores read back."""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from conftest import run_certlab

from certlab_core._runtime.registry import Registry, discover
from certlab_core.gate.decision import decide
from certlab_core.gate.descriptor import load_descriptor
from certlab_core.gate.executor_sessions import open_executor
from certlab_core.gate.manifest import build_manifest
from certlab_core.gate.runner import plan_run, run_experiment
from certlab_core.gate.store import create_run, read_store, write_decision
from certlab_core.plugin.types.executor import ExecutorSession

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "retry"

AGENTS = "certlab_retry_world.agents"

BASE: dict[str, Any] = {
    "schema": "certlab.experiment/1",
    "experiment": "test-exp",
    # No order already reserved, so the timed-out first reserve is always called (B always loses an order).
    "task": {"world": "retry-inventory", "input": {"orders": 3, "existing_share": 0.0, "flaky_confirm_rate": 0.05}},
    "oracle": "world",
    "arms": {
        "baseline": {"agent": f"{AGENTS}:agent_a", "label": "A"},
        "candidate": {"agent": f"{AGENTS}:agent_b", "label": "B"},
    },
    "conditions": [
        {
            "name": "reserve-timeout",
            "bucket": "falsify",
            "faults": [{"fault": "tool_timeout", "tool": "reserve", "on_calls": [1]}],
        }
    ],
    "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
    "n_per_arm": 10,
    "seed": 7,
    "budgets": {"tool_calls": 60, "model_steps": 10, "seconds": 10},
}


def descriptor(**changes: Any) -> dict[str, Any]:
    """A copy of the base descriptor with top-level keys replaced."""
    data = copy.deepcopy(BASE)
    data.update(copy.deepcopy(changes))
    return data


def write(folder: Path, data: dict[str, Any], name: str = "certlab.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def write_module(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")


@contextlib.contextmanager
def local_session(workers: int = 2) -> Iterator[ExecutorSession]:
    """The executor ``local``'s session (certlab-executor-local), opened through the registry like ``certlab run``."""
    with open_executor(discover(only=("executor-local",)), "local", workers, None, {}) as session:
        yield session


def run(
    registry: Registry, path: Path, out: Path, workers: int = 2, retry_infra: bool = False
) -> tuple[Path, dict[str, Any]]:
    """Validate, seal, run and decide in this process (children are forked from it); return the store and decision."""
    spec = load_descriptor(path)
    manifest = build_manifest(spec, path, registry)
    plan = plan_run(manifest, registry)
    folder = create_run(out, manifest)
    with local_session(workers) as session:
        run_experiment(plan, folder, session, retry_infra=retry_infra)
    decision = recompute(registry, folder)
    write_decision(folder, decision)
    return folder, decision


def recompute(registry: Registry, folder: Path) -> dict[str, Any]:
    store = read_store(folder)
    return decide(store.manifest, store.raw_lines, registry.get("statistical_rules", store.manifest.rule.name))


def lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in (folder / "trials.jsonl").read_text().split("\n") if raw]


def certlab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_certlab(*args, cwd=cwd)
