"""Helpers for the diagnosis plugin's tests: the real CLI and small experiments on the retry world."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from certlab_core.testing import run_certlab

__all__ = ["A_VS_B", "FRAGILE_AGENTS", "SIX_FAULTS", "run_certlab", "run_experiment"]


def run_experiment(folder: Path, descriptor: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Write ``descriptor`` to ``folder``/certlab.yaml, run it, and return the run and its store."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "certlab.yaml").write_text(textwrap.dedent(descriptor), encoding="utf-8")
    done = run_certlab("run", "certlab.yaml", "--out", "runs", "--quiet", *extra, cwd=folder)
    lines = [line for line in done.stdout.splitlines() if line.startswith("run: ")]
    assert lines, f"no 'run:' line: {done.stdout}{done.stderr}"
    return done, folder / lines[-1][len("run: ") :]


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

# Agents for minimisation. ``careful`` retries everything. ``one_retry`` has a single retry for the
# whole trial: it survives a timed-out reserve or a busy confirm, not both. ``forgetful`` is
# one_retry for its first three runs and never fails after that: it does not repeat itself.
FRAGILE_AGENTS = '''\
"""Agents for the minimisation tests (written by the test into the descriptor's folder)."""

from pathlib import Path

from certlab_core.gate.boundary import ToolTimeout, ToolUnavailable

COUNTER = Path(__file__).with_name("forgetful-runs.txt")


def _call(tools, budget, name, **args):
    while True:
        try:
            return tools.call(name, **args)
        except (ToolTimeout, ToolUnavailable):
            if budget[0] <= 0:
                raise
            budget[0] -= 1


def _stock(tools, sku):
    for _ in range(5):  # the stock read is always retried: its faults never matter
        try:
            return tools.call("stock", sku=sku)
        except (ToolTimeout, ToolUnavailable):
            continue
    return None


def _run(task, tools, retries):
    budget = [retries]
    for order in task["orders"]:
        _stock(tools, order["sku"])
        _call(tools, budget, "reserve", order=order["order"], sku=order["sku"], qty=order["qty"])
        _call(tools, budget, "confirm", order=order["order"])
    return {"confirmed": len(task["orders"])}


def careful(task, tools, rng):
    return _run(task, tools, retries=100)


def one_retry(task, tools, rng):
    return _run(task, tools, retries=1)


def forgetful(task, tools, rng):
    runs = int(COUNTER.read_text()) if COUNTER.exists() else 0
    COUNTER.write_text(str(runs + 1))
    return _run(task, tools, retries=1 if runs < 3 else 100)
'''

SIX_FAULTS = """\
schema: certlab.experiment/1
experiment: diag-six-faults
task:
  world: retry-inventory
  input: {orders: 1, existing_share: 0.0, flaky_confirm_rate: 0.0, skus: [widget]}
oracle: world
arms:
  baseline: {agent: "fragile_agents:careful", label: careful}
  candidate: {agent: "fragile_agents:AGENT", label: AGENT}
conditions:
  - name: six-faults
    bucket: falsify
    faults:
      - {fault: latency, tool: stock, on_calls: [1], params: {seconds: 0.001}}
      - {fault: tool_timeout, tool: reserve, on_calls: [1], params: {executed: false}}
      - {fault: tool_error_once, tool: stock, on_calls: [1], params: {error: ToolUnavailable}}
      - {fault: latency, tool: confirm, on_calls: all, params: {seconds: 0.001}}
      - {fault: tool_error_once, tool: confirm, on_calls: [1], params: {error: ToolUnavailable}}
      - {fault: empty_result, tool: stock, on_calls: [2], params: {}}
rule: {name: clopper-pearson, alpha: 0.05, delta: 0.10, looks: 1}
n_per_arm: 2
seed: 3
budgets: {tool_calls: 40, seconds: 10}
"""
