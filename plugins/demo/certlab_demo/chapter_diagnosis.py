"""Demo chapter: from a BLOCK to its cause on the retry world, and the repair.

It reads the gate chapter's confirmatory A-against-B store rather than running A against B
again. A and B look the same on one clean run; in the confirmatory run B failed exactly
where the timed-out reserve fired; ``diff`` finds where B parts from A, right after the
injected timeout; ``minimize`` shrinks three injected faults to the one that matters; the
bundle replays as reproduced; C, the repair, copes with the reproducer and passes its own
experiment. Every step checks what the commands printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from certlab_demo.chapter_gate import FALSIFY, recorded_store
from certlab_demo.tour import DemoContext, DemoFailed, DemoStep, certlab

AGENTS = "certlab_retry_world.agents"
ARMS = ("baseline", "candidate")
TRIALS = 200  # A against C, under the timed-out reserve alone
# The small runs of this chapter (one clean trial, the minimisation) use worlds where no order is
# already reserved, so the timed-out reserve is always called; A against C uses the story's world.
NO_EXISTING = "{orders: 2, existing_share: 0.0, flaky_confirm_rate: 0.1, skus: [widget, gadget, gizmo]}"
STORY_WORLD = "{orders: 2, existing_share: 0.82, flaky_confirm_rate: 0.1, skus: [widget, gadget, gizmo]}"

DESCRIPTOR = """\
schema: certlab.experiment/1
experiment: {experiment}
task:
  world: retry-inventory
  input: {world}
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


def _run(
    ctx: DemoContext,
    name: str,
    candidate: str,
    label: str,
    conditions: str,
    trials: int,
    exit_code: int,
    world: str = NO_EXISTING,
) -> Path:
    """Write a descriptor, run it, check its exit code, and return the run store."""
    folder = _folder(ctx)
    path = folder / f"{name}.yaml"
    path.write_text(
        DESCRIPTOR.format(
            experiment=name,
            agents=AGENTS,
            candidate=candidate,
            label=label,
            conditions=conditions,
            trials=trials,
            world=world,
        ),
        encoding="utf-8",
    )
    done = certlab("run", str(path), "--out", str(folder / "runs"), "--quiet", expect_exit=exit_code)
    runs = [line[len("run: ") :] for line in done.stdout.splitlines() if line.startswith("run: ")]
    if not runs:
        raise DemoFailed(f"certlab run {name} printed no 'run:' line")
    return Path(runs[-1])


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


def _lines(store: Path) -> list[dict[str, Any]]:
    with (store / "trials.jsonl").open(encoding="utf-8") as trials:
        return [json.loads(line) for line in trials if line.strip()]


def split_trial(store: Path) -> int:
    """The first index whose candidate failed under the falsify condition while its baseline twin succeeded."""
    outcomes = {(x["arm"], x["index"]): x["outcome"] for x in _lines(store) if x["condition"] == FALSIFY}
    for (arm, index), outcome in sorted(outcomes.items(), key=lambda item: item[0][1]):
        if arm == "candidate" and outcome == "failure" and outcomes.get(("baseline", index)) == "success":
            return int(index)
    raise DemoFailed(f"no trial of {store.name} has B failing where A succeeded")


def _where_b_failed(ctx: DemoContext) -> str:
    store = recorded_store(ctx, "a-vs-b")
    falsify = [x for x in _lines(store) if x["condition"] == FALSIFY]
    failed = {arm: {x["index"] for x in falsify if x["arm"] == arm and x["outcome"] == "failure"} for arm in ARMS}
    fired = {x["index"] for x in falsify if x["arm"] == "candidate" and any(f["fired"] for f in x["faults"])}
    if not fired <= failed["candidate"] or not failed["candidate"] - fired <= failed["baseline"]:
        raise DemoFailed(f"B should fail where the timeout fired ({len(fired)}), and elsewhere only where A failed")
    report = _report(store)
    condition = next(c for c in report["conditions"] if c["name"] == FALSIFY)
    cluster = max(condition["clusters"], key=lambda c: int(c["candidate"]))
    shared = len(failed["candidate"] - fired)
    return (
        f"of {len(falsify) // 2} trials, B failed in all {len(fired)} where a reservation was missing and the timeout "
        f"fired, and in {shared} more where A failed too; largest cluster ({cluster['candidate']}): "
        f"{cluster['failure_mode']}, {cluster['event']}"
    )


def _diff(ctx: DemoContext) -> str:
    store = recorded_store(ctx, "a-vs-b")
    index = split_trial(store)
    baseline, candidate = f"baseline/{FALSIFY}/{index}", f"candidate/{FALSIFY}/{index}"
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
    store = recorded_store(ctx, "a-vs-b")
    trial = f"candidate/{FALSIFY}/{split_trial(store)}"
    certlab("bundle", str(store), trial, "--out", str(out))
    done = certlab("replay", str(out), expect_exit=0)
    if "reproduced: failure tool-fault-uncaught" not in done.stdout:
        raise DemoFailed(f"the reproducer should replay as reproduced: {done.stdout.strip()}")
    return f"{out.name} replays offline against the recorded boundary: reproduced (tool-fault-uncaught)"


def _repair(ctx: DemoContext) -> str:
    out = _folder(ctx) / "repro.json"
    live = certlab("replay", str(out), "--live", "--agent", f"{AGENTS}:agent_c", expect_exit=1)
    if "not reproduced: success instead of failure" not in live.stdout:
        raise DemoFailed(f"C should cope with the reproducer: {live.stdout.strip()}")
    store = _run(ctx, "demo-a-vs-c", "agent_c", "C", TIMEOUT, TRIALS, exit_code=0, world=STORY_WORLD)
    report = _report(store)
    if report["verdict"] != "PASS":
        raise DemoFailed(f"A vs C should PASS; got {report['verdict']}")
    return "C copes with the reproducer (the trial now succeeds) and passes its own experiment against A"


def steps(context: DemoContext) -> list[DemoStep]:
    return [
        DemoStep("one clean run: A and B look the same", _clean_run),
        DemoStep(
            "the confirmatory A vs B store (no second run): where did B fail?", _where_b_failed, after=("a-vs-b",)
        ),
        DemoStep("diff: where B parts from A", _diff, after=("a-vs-b",)),
        DemoStep("minimize: three injected faults, which matter?", _minimize),
        DemoStep("bundle the failing trial and replay it offline", _bundle_replay, "reproducer", ("a-vs-b",)),
        DemoStep("C, the repair: the reproducer, then its own experiment", _repair, after=("reproducer",)),
    ]
