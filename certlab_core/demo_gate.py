"""Demo chapter: the A/B gate on the retry world, N=200 per arm: A against B BLOCKs, A against A PASSes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from certlab_core.demo import DemoContext, DemoFailed, DemoStep, certlab

A_VS_B = "examples/retry/a_vs_b.yaml"
A_VS_A = "examples/retry/a_vs_a.yaml"
FALSIFY = "reserve-timeout"


def _run_folder(stdout: str) -> Path:
    for line in stdout.splitlines():
        if line.startswith("run: "):
            return Path(line[len("run: ") :])
    raise DemoFailed(f"certlab run printed no 'run: RUNDIR' line: {stdout.strip()[-300:]}")


def _decision(folder: Path) -> dict[str, Any]:
    decision: dict[str, Any] = json.loads((folder / "decision.json").read_text(encoding="utf-8"))
    return decision


def _condition(decision: dict[str, Any], name: str) -> dict[str, Any]:
    for condition in decision["conditions"]:
        if condition["name"] == name:
            return dict(condition)
    raise DemoFailed(f"the decision has no condition {name}")


def _a_vs_b(ctx: DemoContext) -> str:
    done = certlab("run", str(ctx.example(A_VS_B)), "--out", str(ctx.workdir / "runs"), "--quiet", expect_exit=1)
    folder = _run_folder(done.stdout)
    decision = _decision(folder)
    falsify = _condition(decision, FALSIFY)
    counts = falsify["counts"]
    if decision["verdict"] != "BLOCK" or falsify["verdict"] != "BLOCK":
        raise DemoFailed(f"A vs B must BLOCK on {FALSIFY}, got {decision['verdict']} ({falsify['verdict']})")
    if counts["baseline"]["trials"] != 200 or counts["candidate"]["trials"] != 200:
        raise DemoFailed(f"A vs B must run 200 trials per arm, ran {counts}")
    if falsify["faults"][0]["fired"] != {"baseline": 200, "candidate": 200}:
        raise DemoFailed(f"the reserve timeout must fire in every trial: {falsify['faults'][0]['fired']}")
    ctx.workdir.joinpath("a-vs-b.run").write_text(str(folder), encoding="utf-8")
    bounds = falsify["bounds"]
    return (
        f"BLOCK, exit 1: under a timeout on the first reserve A kept {counts['baseline']['successes']}/200, "
        f"B {counts['candidate']['successes']}/200; "
        f"candidate - baseline in [{bounds['lower']:.3f}, {bounds['upper']:.3f}]"
    )


def _a_vs_a(ctx: DemoContext) -> str:
    done = certlab("run", str(ctx.example(A_VS_A)), "--out", str(ctx.workdir / "runs"), "--quiet", expect_exit=0)
    decision = _decision(_run_folder(done.stdout))
    if decision["verdict"] != "PASS":
        raise DemoFailed(f"A vs A must PASS, got {decision['verdict']}: {decision['reasons']}")
    gating = [c for c in decision["conditions"] if c["gating"]]
    if not all(c["verdict"] == "PASS" for c in gating):
        raise DemoFailed(f"every gating condition of A vs A must PASS: {[(c['name'], c['verdict']) for c in gating]}")
    falsify = _condition(decision, FALSIFY)
    return f"PASS, exit 0: the same agent on both sides; the lower bound {falsify['bounds']['lower']:.3f} > -delta"


def _gate_again(ctx: DemoContext) -> str:
    marker = ctx.workdir / "a-vs-b.run"
    if not marker.exists():
        raise DemoFailed("the A vs B run is missing")
    folder = Path(marker.read_text(encoding="utf-8"))
    done = certlab("gate", str(folder), "--json", expect_exit=1)
    if done.stdout != (folder / "decision.json").read_text(encoding="utf-8"):
        raise DemoFailed("certlab gate recomputed a decision that differs from decision.json")
    return "certlab gate recomputed the same decision, byte for byte, from manifest.json and trials.jsonl alone"


def steps(context: DemoContext) -> list[DemoStep]:
    return [
        DemoStep(
            "gate A against B, N=200 per arm, a timeout on the first reserve (examples/retry/a_vs_b.yaml)", _a_vs_b
        ),
        DemoStep("gate A against A: the same agent must PASS (examples/retry/a_vs_a.yaml)", _a_vs_a),
        DemoStep("recompute the A vs B verdict from the run store alone", _gate_again),
    ]
