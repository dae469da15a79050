"""Demo chapter: the gate: "I do not know", a plan, then a confirmatory run.

On the retry world, B loses an order only where a reservation is missing, about a third of
the worlds; elsewhere the timed-out reserve is never called. So 20 trials per arm are
INCONCLUSIVE; ``certlab plan`` at the rates seen picks the smallest N at which P(BLOCK) and
A against A's P(PASS) are both at least 0.8; the confirmatory run at that N, with a new
seed, BLOCKs; A against A PASSes; ``certlab selfcheck`` gives the rule's own error rates.
Every figure is compared with the run recorded in ``examples/retry/recorded_run.json``.

The seeds are in the committed descriptors and were fixed before anything was run: a
mismatch with the recording is reported, never worked around with another seed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from certlab_demo.tour import DemoContext, DemoFailed, DemoStep, certlab, say

FIRST_LOOK = "examples/retry/a_vs_b_first_look.yaml"
A_VS_B = "examples/retry/a_vs_b.yaml"
A_VS_A = "examples/retry/a_vs_a.yaml"
RECORDED = "examples/retry/recorded_run.json"
FALSIFY = "reserve-timeout"
# The designs the plan is asked about, and the chance each verdict must have; fixed with the seeds.
PLAN_SIZES: tuple[int, ...] = (50, 100, 150, 200, 250, 300, 400, 500)
WANTED = 0.8
FIGURES = "gate-figures.json"
RECORD_FORMAT = "certlab.demo-gate-record/1"
_FIGURES_LOCK = threading.RLock()


# --------------------------------------------------------------------------- shared with the diagnosis chapter


def store_marker(ctx: DemoContext, name: str) -> Path:
    return ctx.workdir / f"{name}.run"


def recorded_store(ctx: DemoContext, name: str) -> Path:
    """The run store an earlier step of this chapter left (``a-vs-b``, ``a-vs-a``, ``first-look``)."""
    marker = store_marker(ctx, name)
    if not marker.exists():
        raise DemoFailed(f"the {name} run store is missing: the gate chapter runs before this step")
    return Path(marker.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- reading what the commands wrote


def _run_folder(stdout: str) -> Path:
    for line in stdout.splitlines():
        if line.startswith("run: "):
            return Path(line[len("run: ") :])
    raise DemoFailed(f"certlab run printed no 'run: RUNDIR' line: {stdout.strip()[-300:]}")


def _decision(folder: Path) -> dict[str, Any]:
    decision: dict[str, Any] = json.loads((folder / "decision.json").read_text(encoding="utf-8"))
    return decision


def _condition(decision: Mapping[str, Any], name: str) -> dict[str, Any]:
    for condition in decision["conditions"]:
        if condition["name"] == name:
            return dict(condition)
    raise DemoFailed(f"the decision has no condition {name}")


def _figures(ctx: DemoContext) -> dict[str, Any]:
    path = ctx.workdir / FIGURES
    with _FIGURES_LOCK:
        found: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return found


def _keep(ctx: DemoContext, key: str, value: Any) -> None:
    """Add one run's figures to the file: steps that run at once each add theirs, none lost."""
    with _FIGURES_LOCK:
        figures = _figures(ctx)
        figures[key] = value
        (ctx.workdir / FIGURES).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def run_figures(decision: Mapping[str, Any]) -> dict[str, Any]:
    """What the recording keeps of one run: verdict, and per condition counts, bounds, verdict and faults fired."""
    conditions = {}
    for condition in decision["conditions"]:
        bounds = condition["bounds"]
        conditions[condition["name"]] = {
            "verdict": condition["verdict"],
            "gating": condition["gating"],
            "counts": {arm: f"{c['successes']}/{c['trials']}" for arm, c in condition["counts"].items()},
            "bounds": None if bounds is None else [round(bounds["lower"], 6), round(bounds["upper"], 6)],
            "fired": [dict(f["fired"]) for f in condition["faults"]],
        }
    return {"verdict": decision["verdict"], "exit_code": decision["exit_code"], "conditions": conditions}


def _counts(condition: Mapping[str, Any], arm: str) -> tuple[int, int]:
    found = condition["counts"][arm]
    return int(found["successes"]), int(found["trials"])


def _run(ctx: DemoContext, descriptor: Path, expect_exit: int, name: str) -> dict[str, Any]:
    done = certlab("run", str(descriptor), "--out", str(ctx.workdir / "runs"), "--quiet", expect_exit=expect_exit)
    folder = _run_folder(done.stdout)
    store_marker(ctx, name).write_text(str(folder), encoding="utf-8")
    decision = _decision(folder)
    _keep(ctx, name, run_figures(decision))
    return decision


def _descriptor(ctx: DemoContext, relpath: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(ctx.example(relpath).read_text(encoding="utf-8"))
    return data


# --------------------------------------------------------------------------- the steps


def _first_look(ctx: DemoContext) -> str:
    decision = _run(ctx, ctx.example(FIRST_LOOK), 2, "first-look")
    falsify = _condition(decision, FALSIFY)
    if decision["verdict"] != "INCONCLUSIVE" or falsify["verdict"] != "INCONCLUSIVE":
        raise DemoFailed(f"the first look must be INCONCLUSIVE, got {decision['verdict']} ({falsify['verdict']})")
    a, n = _counts(falsify, "baseline")
    b, _n = _counts(falsify, "candidate")
    lower, upper = falsify["bounds"]["lower"], falsify["bounds"]["upper"]
    delta = float(decision["rule"]["delta"])
    if not lower < -delta < upper:
        raise DemoFailed(f"the first look's interval [{lower:.3f}, {upper:.3f}] should contain -delta")
    return (
        f"INCONCLUSIVE, exit 2: under the timed-out reserve A kept {a}/{n}, B {b}/{n}; B - A in "
        f"[{lower:.3f}, {upper:.3f}] contains -delta = {-delta:.2f}: the interval is too wide "
        f"({upper - lower:.2f}) to say whether B lost more than {delta:.2f}"
    )


def planning_rates(decision: Mapping[str, Any]) -> tuple[float, float]:
    """The rates the plan is asked about, from the first look: (s + 1) / (n + 2), so 20/20 is not taken for certain.

    The baseline's rate pools A's trials over the gating conditions (A recovers from both faults);
    the candidate's is B's rate under the falsify condition.
    """
    gating = [c for c in decision["conditions"] if c["gating"]]
    a_successes = sum(_counts(c, "baseline")[0] for c in gating)
    a_trials = sum(_counts(c, "baseline")[1] for c in gating)
    b_successes, b_trials = _counts(_condition(decision, FALSIFY), "candidate")
    return (a_successes + 1) / (a_trials + 2), (b_successes + 1) / (b_trials + 2)


def _plan_table(baseline: float, candidate: float, conditions: int) -> dict[int, dict[str, float]]:
    done = certlab(
        "plan",
        "--baseline",
        f"{baseline:.6f}",
        "--candidate",
        f"{candidate:.6f}",
        "-n",
        ",".join(str(n) for n in PLAN_SIZES),
        "--conditions",
        str(conditions),
        "--json",
    )
    designs = json.loads(done.stdout)["designs"]
    return {int(d["n"]): {k: float(d[k]) for k in ("PASS", "BLOCK", "INCONCLUSIVE")} for d in designs}


def choose_n(block: Mapping[int, Mapping[str, float]], same: Mapping[int, Mapping[str, float]]) -> int | None:
    """The smallest N at which P(BLOCK) of A vs B and P(PASS) of A vs A are both at least WANTED."""
    for n in sorted(block):
        if block[n]["BLOCK"] >= WANTED and same[n]["PASS"] >= WANTED:
            return n
    return None


def _plan(ctx: DemoContext) -> str:
    first = _decision(recorded_store(ctx, "first-look"))
    conditions = sum(1 for c in first["conditions"] if c["gating"])
    p_a, p_b = planning_rates(first)
    block = _plan_table(p_a, p_b, conditions)
    same = _plan_table(p_a, p_a, conditions)
    say(f"  {'N per arm':>10}  {'P(BLOCK), A vs B':>16}  {'P(PASS), A vs A':>15}")
    for n in PLAN_SIZES:
        say(f"  {n:>10}  {block[n]['BLOCK']:>16.4f}  {same[n]['PASS']:>15.4f}")
    chosen = choose_n(block, same)
    _keep(
        ctx,
        "plan",
        {
            "rates": [round(p_a, 6), round(p_b, 6)],
            "conditions": conditions,
            "n": chosen,
            "block": {str(n): round(block[n]["BLOCK"], 4) for n in PLAN_SIZES},
            "pass_a_vs_a": {str(n): round(same[n]["PASS"], 4) for n in PLAN_SIZES},
        },
    )
    if chosen is None:
        raise DemoFailed(f"no N in {PLAN_SIZES} gives both P(BLOCK) and P(PASS of A vs A) >= {WANTED}")
    return (
        f"for A at {p_a:.3f} and B at {p_b:.3f} (the first look's rates, (s + 1) / (n + 2)), the smallest N with "
        f"P(BLOCK) >= {WANTED} and P(PASS of A vs A) >= {WANTED} is {chosen} per arm "
        f"(P(BLOCK) {block[chosen]['BLOCK']:.3f}, P(PASS) {same[chosen]['PASS']:.3f} per gating condition)"
    )


def _at_planned_n(ctx: DemoContext, relpath: str) -> tuple[Path, str]:
    """The committed descriptor, or a copy of it at the planned N when the plan chose another (said so)."""
    planned = _figures(ctx).get("plan", {}).get("n")
    if not isinstance(planned, int):
        raise DemoFailed("the plan step has not chosen N")
    data = _descriptor(ctx, relpath)
    if data["n_per_arm"] == planned:
        return ctx.example(relpath), ""
    data["n_per_arm"] = planned
    path = ctx.workdir / Path(relpath).name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path, f" (the plan chose N={planned}, not the committed {relpath}'s N; ran a copy at {planned})"


def _confirm(ctx: DemoContext) -> str:
    descriptor, note = _at_planned_n(ctx, A_VS_B)
    if _descriptor(ctx, A_VS_B)["seed"] == _descriptor(ctx, FIRST_LOOK)["seed"]:
        raise DemoFailed("the confirmatory run must have a seed of its own")
    decision = _run(ctx, descriptor, 1, "a-vs-b")
    falsify = _condition(decision, FALSIFY)
    if decision["verdict"] != "BLOCK" or falsify["verdict"] != "BLOCK":
        raise DemoFailed(f"the confirmatory run must BLOCK on {FALSIFY}, got {decision['verdict']}")
    a, n = _counts(falsify, "baseline")
    b, _n = _counts(falsify, "candidate")
    fired = falsify["faults"][0]["fired"]
    bounds = falsify["bounds"]
    return (
        f"BLOCK, exit 1: A kept {a}/{n}, B {b}/{n} ({100 * b / n:.0f}%); B - A in "
        f"[{bounds['lower']:.3f}, {bounds['upper']:.3f}], entirely below -0.10. The timeout fired in only "
        f"{fired['candidate']}/{n} trials: elsewhere every order was already reserved{note}"
    )


def _a_vs_a(ctx: DemoContext) -> str:
    descriptor, note = _at_planned_n(ctx, A_VS_A)
    decision = _run(ctx, descriptor, 0, "a-vs-a")
    if decision["verdict"] != "PASS":
        raise DemoFailed(f"A vs A must PASS, got {decision['verdict']}: {decision['reasons']}")
    gating = [c for c in decision["conditions"] if c["gating"]]
    if not all(c["verdict"] == "PASS" for c in gating):
        raise DemoFailed(f"every gating condition of A vs A must PASS: {[(c['name'], c['verdict']) for c in gating]}")
    lowest = min(c["bounds"]["lower"] for c in gating)
    return f"PASS, exit 0: the same agent on both sides; every gating lower bound (lowest {lowest:.3f}) > -0.10{note}"


def _gate_again(ctx: DemoContext) -> str:
    folder = recorded_store(ctx, "a-vs-b")
    done = certlab("gate", str(folder), "--json", expect_exit=1)
    if done.stdout != (folder / "decision.json").read_text(encoding="utf-8"):
        raise DemoFailed("certlab gate recomputed a decision that differs from decision.json")
    return "certlab gate recomputed the same decision, byte for byte, from manifest.json and trials.jsonl alone"


def _selfcheck(ctx: DemoContext) -> str:
    conditions = _figures(ctx)["plan"]["conditions"]
    done = certlab("selfcheck", "--conditions", str(conditions), "--json")
    sweep = json.loads(done.stdout)["sweep"]
    false_pass, false_block = sweep["false_pass_at_margin"], sweep["false_block_no_change"]
    _keep(
        ctx,
        "selfcheck",
        {
            "false_pass": round(false_pass["rate"], 6),
            "false_block": round(false_block["rate"], 6),
            "limit": false_pass["limit"],
            "holds": bool(json.loads(done.stdout)["holds"]),
        },
    )
    sizes = ", ".join(str(n) for n in sweep["sizes"])
    return (
        f"over selfcheck's grid (N = {sizes} per arm, baseline rates in steps of {sweep['step']:g}): false PASS "
        f"at the margin at most {false_pass['rate']:.4f} (N={false_pass['n']}), false BLOCK under no change at "
        f"most {false_block['rate']:.6f} (N={false_block['n']}); both within alpha/K = {false_pass['limit']:g}"
    )


def differences(recorded: Any, found: Any, where: str = "") -> list[str]:
    """Every place where two recordings differ, as ``path: recorded X, this run Y``."""
    if isinstance(recorded, dict) and isinstance(found, dict):
        out: list[str] = []
        for key in sorted(set(recorded) | set(found)):
            path = f"{where}.{key}" if where else str(key)
            if key not in found:
                out.append(f"{path}: recorded, missing from this run")
            elif key not in recorded:
                out.append(f"{path}: new in this run ({found[key]!r})")
            else:
                out.extend(differences(recorded[key], found[key], path))
        return out
    return [] if recorded == found else [f"{where}: recorded {recorded!r}, this run {found!r}"]


def _compare(ctx: DemoContext) -> str:
    found = _figures(ctx)
    path = ctx.example(RECORDED)
    recorded = json.loads(path.read_text(encoding="utf-8"))
    if recorded.get("format") != RECORD_FORMAT:
        raise DemoFailed(f"{RECORDED} is not a {RECORD_FORMAT} recording")
    differ = differences(recorded["figures"], found)
    if differ:
        shown = "; ".join(differ[:6]) + (f"; and {len(differ) - 6} more" if len(differ) > 6 else "")
        raise DemoFailed(f"differs from the recorded run ({RECORDED}): {shown}")
    runs = ", ".join(f"{name} {found[name]['verdict']}" for name in ("first-look", "a-vs-b", "a-vs-a"))
    return f"matched the recorded run ({RECORDED}): every count, bound and verdict ({runs}), the plan's N and rates"


def steps(context: DemoContext) -> list[DemoStep]:
    return [
        DemoStep(f"first look: A against B, N=20 per arm ({FIRST_LOOK})", _first_look, "first-look"),
        DemoStep(
            "certlab plan at the rates seen: P(BLOCK) and P(PASS of A vs A) at several N",
            _plan,
            "plan",
            after=("first-look",),
        ),
        DemoStep(
            f"the confirmatory run: A against B at the planned N, a new seed ({A_VS_B})", _confirm, "a-vs-b", ("plan",)
        ),
        DemoStep(f"A against A at the same N: the same agent must PASS ({A_VS_A})", _a_vs_a, "a-vs-a", ("plan",)),
        DemoStep("recompute the A vs B verdict from the run store alone", _gate_again, after=("a-vs-b",)),
        DemoStep(
            "certlab selfcheck: the rule's own false PASS and false BLOCK rates", _selfcheck, "selfcheck", ("plan",)
        ),
        DemoStep(
            f"compare every figure with the recorded run ({RECORDED})",
            _compare,
            after=("first-look", "plan", "a-vs-b", "a-vs-a", "selfcheck"),
        ),
    ]
