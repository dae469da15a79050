"""Regenerate the archived run stores the tests re-derive byte for byte: a BLOCK, an INCONCLUSIVE and an ERROR.

Each is a real ``certlab run`` of a small descriptor on the retry world. The descriptors are
written to a neutral folder (the manifest seals the descriptor's absolute folder, so no
checkout path enters the archive) and each run store is copied to
``tests/archived_stores/<name>/``. Run it only when the store format or the decision changes
on purpose; the tests then check that ``certlab rederive`` gives back every decision.json.

    .venv/bin/python tools/archived_stores.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARCHIVE = REPO / "tests" / "archived_stores"
NEUTRAL = Path("/tmp/certlab-archived-stores")

WORLD = """\
task:
  world: retry-inventory
  input: {orders: 2, existing_share: 0.0, flaky_confirm_rate: 0.0, skus: [widget, gadget]}
oracle: world
"""

DESCRIPTORS = {
    # B does not retry a timed-out reserve: BLOCK on the falsify condition.
    "block": f"""\
schema: certlab.experiment/1
experiment: archived-block
{WORLD}arms:
  baseline: {{agent: "certlab_retry_world.agents:agent_a", label: A}}
  candidate: {{agent: "certlab_retry_world.agents:agent_b", label: B}}
conditions:
  - name: reserve-timeout
    bucket: falsify
    faults: [{{fault: tool_timeout, tool: reserve, on_calls: [1], params: {{executed: false}}}}]
  - name: clean
    bucket: benign
rule: {{name: clopper-pearson, alpha: 0.05, delta: 0.10, looks: 1}}
n_per_arm: 10
seed: 11
budgets: {{tool_calls: 40, seconds: 10}}
""",
    # A against A with too few trials to tell: INCONCLUSIVE.
    "inconclusive": f"""\
schema: certlab.experiment/1
experiment: archived-inconclusive
{WORLD}arms:
  baseline: {{agent: "certlab_retry_world.agents:agent_a", label: A}}
  candidate: {{agent: "certlab_retry_world.agents:agent_a", label: A}}
conditions:
  - name: clean
    bucket: benign
rule: {{name: newcombe, alpha: 0.05, delta: 0.10, looks: 1}}
n_per_arm: 6
seed: 12
budgets: {{tool_calls: 40, seconds: 10}}
""",
    # A fault whose injector raises (json.loads given a FaultContext): an infrastructure ERROR.
    "error": f"""\
schema: certlab.experiment/1
experiment: archived-error
{WORLD}arms:
  baseline: {{agent: "certlab_retry_world.agents:agent_a", label: A}}
  candidate: {{agent: "certlab_retry_world.agents:agent_c", label: C}}
conditions:
  - name: broken-injector
    bucket: falsify
    faults: [{{fault: "json:loads", tool: stock, on_calls: [1], params: {{}}}}]
rule: {{name: clopper-pearson, alpha: 0.05, delta: 0.10, looks: 1}}
n_per_arm: 3
seed: 13
budgets: {{tool_calls: 40, seconds: 10}}
""",
}
EXPECTED = {"block": (1, "BLOCK"), "inconclusive": (2, "INCONCLUSIVE"), "error": (3, "ERROR")}


def regenerate(name: str) -> Path:
    folder = NEUTRAL / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "certlab.yaml").write_text(DESCRIPTORS[name], encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", "run", "certlab.yaml", "--out", "runs", "--workers", "2", "--quiet"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    code, verdict = EXPECTED[name]
    if done.returncode != code or f"verdict: {verdict}" not in done.stdout:
        raise SystemExit(
            f"{name}: expected {verdict} (exit {code}), got exit {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    (run,) = (folder / "runs").iterdir()
    target = ARCHIVE / name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for file in ("manifest.json", "trials.jsonl", "decision.json"):
        shutil.copyfile(run / file, target / file)
    return target


def main() -> int:
    for name in DESCRIPTORS:
        print(f"{name}: {regenerate(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
