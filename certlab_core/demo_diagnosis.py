"""Demo chapter: from a BLOCK to its cause on the retry world: diff, minimise, bundle, replay, and the repair.

A and B look the same on one clean run; 200 trials per arm under a timed-out reserve
BLOCK B and PASS A against itself; ``diff`` finds where B parts from A, right after the
injected timeout; ``minimize`` shrinks three injected faults to the one that matters; the
bundle replays as reproduced; C, the repair, copes with the reproducer and passes its own
experiment. Every step checks what the commands printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from certlab_core.demo import DemoContext, DemoFailed, DemoStep, certlab

AGENTS = "certlab_retry_world.agents"
TRIALS = 200
SPLIT_TRIAL = 0  # the index whose twins the demo diffs and bundles

DESCRIPTOR = """\
schema: certlab.experiment/1
experiment: {experiment}
task:
  world: retry-inventory
  input: {{orders: 4, existing_share: 0.25, flaky_confirm_rate: 0.05, skus: [widget, gadget, gizmo]}}
oracle: world
arms:
  baseline: {{agent: "{agents}:agent_a", label: A}}
  candidate: {{agent: "{agents}:{candidate}", label: {label}}}
conditions:
{conditions}
rule: {{name: clopper-pearson, alpha: 0.05, delta: 0.10, looks: 1}}
n_per_arm: {trials}
seed: 20240601
budgets: {{tool_calls: 60, seconds: 10}}
"""
CLEAN = "  - {name: clean, bucket: benign}"
TIMEOUT = (
    "  - name: reserve-timeout\n    bucket: falsify\n"
    "    faults: [{fault: tool_timeout, tool: reserve, on_calls: [1], params: {executed: false}}]"
)
THREE_FAULTS = (
    "  - name: three-faults\n    bucket: falsify\n    faults:\n"
    "      - {fault: latency, tool: stock, on_calls: [1], params: {seconds: 0.001}}\n"
    "      - {fault: tool_timeout, tool: reserve, on_calls: [1], params: {executed: false}}\n"
    "      - {fault: latency, tool: confirm, on_calls: all, params: {seconds: 0.001}}"
)


def _folder(ctx: DemoContext) -> Path:
    folder = ctx.workdir / "diagnosis"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _run(ctx: DemoContext, name: str, candidate: str, label: str, conditions: str, trials: int, exit_code: int) -> Path:
    """Write a descriptor, run it, check its exit code, and return the run store."""
    folder = _folder(ctx)
    path = folder / f"{name}.yaml"
    path.write_text(
        DESCRIPTOR.format(
            experiment=name, agents=AGENTS, candidate=candidate, label=label, conditions=conditions, trials=trials
        ),
        encoding="utf-8",
    )
    done = certlab("run", str(path), "--out", str(folder / "runs"), "--quiet", expect_exit=exit_code)
    runs = [line[len("run: ") :] for line in done.stdout.splitlines() if line.startswith("run: ")]
    if not runs:
        raise DemoFailed(f"certlab run {name} printed no 'run:' line")
    (folder / f"{name}.rundir").write_text(runs[-1], encoding="utf-8")
    return Path(runs[-1])


def _store(ctx: DemoContext, name: str) -> Path:
    return Path((_folder(ctx) / f"{name}.rundir").read_text(encoding="utf-8"))


def _report(store: Path) -> dict[str, Any]:
    done = certlab("report", str(store), "--json", show=False)
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _clean_run(ctx: DemoContext) -> str:
    store = _run(ctx, "demo-clean-once", "agent_b", "B", CLEAN, 1, exit_code=2)
    done = certlab("diff", str(store), "baseline/clean/0", "candidate/clean/0")
    report = _report(store)
    (condition,) = report["conditions"]
    counts = (condition["baseline"]["successes"], condition["candidate"]["successes"])
    if counts != (1, 1) or "the two recordings are identical" not in done.stdout:
        raise DemoFailed(f"on one clean run A and B should both succeed the same way; got {counts}")
    return "A and B both succeed, with identical recordings: one clean run cannot tell them apart"


def _a_vs_b(ctx: DemoContext) -> str:
    store = _run(ctx, "demo-a-vs-b", "agent_b", "B", TIMEOUT, TRIALS, exit_code=1)
    report = _report(store)
    (condition,) = report["conditions"]
    if report["verdict"] != "BLOCK" or condition["upper"] >= -0.10:
        raise DemoFailed(f"A vs B under a reserve timeout should BLOCK; got {report['verdict']}")
    return (
        f"BLOCK: A {condition['baseline']['successes']}/{TRIALS}, B {condition['candidate']['successes']}/{TRIALS}, "
        f"B - A in [{condition['lower']:.4f}, {condition['upper']:.4f}], entirely below -0.10"
    )


def _a_vs_a(ctx: DemoContext) -> str:
    store = _run(ctx, "demo-a-vs-a", "agent_a", "A", TIMEOUT, TRIALS, exit_code=0)
    report = _report(store)
    (condition,) = report["conditions"]
    if report["verdict"] != "PASS" or condition["lower"] <= -0.10:
        raise DemoFailed(f"A vs A should PASS; got {report['verdict']}")
    return (
        f"PASS: A - A in [{condition['lower']:.4f}, {condition['upper']:.4f}], above -0.10 (the gate does not cry wolf)"
    )


def _diff(ctx: DemoContext) -> str:
    store = _store(ctx, "demo-a-vs-b")
    baseline, candidate = f"baseline/reserve-timeout/{SPLIT_TRIAL}", f"candidate/reserve-timeout/{SPLIT_TRIAL}"
    done = certlab("diff", str(store), baseline, candidate)
    wanted = "injected fault before it: tool_timeout on reserve"
    if wanted not in done.stdout or "(right before the split)" not in done.stdout:
        raise DemoFailed(f"diff should find the split right after the injected timeout: {done.stdout.strip()}")
    split = next(line for line in done.stdout.splitlines() if line.startswith("first divergence"))
    b_side = next(line for line in done.stdout.splitlines() if line.startswith(f"  B {candidate}"))
    return f"{split[:-1]}, right after the injected reserve timeout: B {b_side.split(candidate, 1)[1].strip()}"


def _minimize(ctx: DemoContext) -> str:
    store = _run(ctx, "demo-three-faults", "agent_b", "B", THREE_FAULTS, 2, exit_code=2)
    out = _folder(ctx) / "min.json"
    certlab("minimize", str(store), "candidate/three-faults/0", "--out", str(out), "--quiet")
    result = json.loads(out.read_text(encoding="utf-8"))
    kept = [(f["fault"], f["tool"]) for f in result["kept"]]
    if kept != [("tool_timeout", "reserve")] or result["result"] != "1-minimal" or len(result["removed"]) != 2:
        raise DemoFailed(f"minimize should keep only the reserve timeout, 1-minimal; got {kept}, {result['result']}")
    return f"kept tool_timeout on reserve, removed both latencies: 1-minimal after {result['reruns']} re-runs"


def _bundle_replay(ctx: DemoContext) -> str:
    out = _folder(ctx) / "repro.json"
    trial = f"candidate/reserve-timeout/{SPLIT_TRIAL}"
    certlab("bundle", str(_store(ctx, "demo-a-vs-b")), trial, "--out", str(out))
    done = certlab("replay", str(out), expect_exit=0)
    if "reproduced: failure tool-fault-uncaught" not in done.stdout:
        raise DemoFailed(f"the reproducer should replay as reproduced: {done.stdout.strip()}")
    return f"{out.name} replays offline against the recorded boundary: reproduced (tool-fault-uncaught)"


def _repair(ctx: DemoContext) -> str:
    out = _folder(ctx) / "repro.json"
    live = certlab("replay", str(out), "--live", "--agent", f"{AGENTS}:agent_c", expect_exit=1)
    if "not reproduced: success instead of failure" not in live.stdout:
        raise DemoFailed(f"C should cope with the reproducer: {live.stdout.strip()}")
    store = _run(ctx, "demo-a-vs-c", "agent_c", "C", TIMEOUT, TRIALS, exit_code=0)
    report = _report(store)
    if report["verdict"] != "PASS":
        raise DemoFailed(f"A vs C should PASS; got {report['verdict']}")
    return "C copes with the reproducer (the trial now succeeds) and passes its own experiment against A"


def steps(context: DemoContext) -> list[DemoStep]:
    return [
        DemoStep("one clean run: A and B look the same", _clean_run),
        DemoStep(f"A vs B, {TRIALS} trials per arm under a reserve timeout", _a_vs_b),
        DemoStep(f"A vs A, {TRIALS} trials per arm under the same timeout", _a_vs_a),
        DemoStep("diff: where B parts from A", _diff),
        DemoStep("minimize: three injected faults, which matter?", _minimize),
        DemoStep("bundle the failing trial and replay it offline", _bundle_replay),
        DemoStep("C, the repair: the reproducer, then its own experiment", _repair),
    ]
