"""Helpers for the report and re-derive tests: the archived stores, the real CLI, an A-against-B descriptor."""

from __future__ import annotations

from pathlib import Path

from conftest import run_certlab  # noqa: F401  (the tests import it from here)

REPO = Path(__file__).resolve().parents[2]
ARCHIVED = REPO / "tests" / "archived_stores"
STORES = {"block": "BLOCK", "inconclusive": "INCONCLUSIVE", "error": "ERROR"}


A_VS_B = """\
schema: certlab.experiment/1
experiment: diag-a-vs-b
task:
  world: retry-inventory
  input: {orders: 2, existing_share: 0.0, flaky_confirm_rate: 0.0, skus: [widget, gadget]}
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
n_per_arm: 10
seed: 5
budgets: {tool_calls: 40, seconds: 10}
"""
