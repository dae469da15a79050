"""Demo chapter: your task locked; a real fix certified, an overfit caught."""

from __future__ import annotations

import json
import shutil

from certlab_demo.tour import DemoContext, DemoFailed, DemoStep, certlab

TASK = "my-task"
FIX = "sed -i 's/fahrenheit - 32 \\* 5 \\/ 9/(fahrenheit - 32) * 5 \\/ 9/' temperature.py"
OVERFIT = (
    "sed -i 's/return round(fahrenheit - 32 \\* 5 \\/ 9, 2)/"
    "return {212: 100.0, 32: 0.0, 50: 10.0}.get(fahrenheit, 0.0)/' temperature.py"
)


def _scaffold(ctx: DemoContext) -> str:
    task = ctx.workdir / TASK
    for name, command in (("formula-fixer", FIX), ("test-memoriser", OVERFIT)):
        script = ctx.workdir / f"{name}.sh"
        script.write_text(f"#!/bin/sh\n{command}\n", encoding="utf-8")
        script.chmod(0o755)
    certlab("init-task", str(task))
    return "fixture/ (a defect), tests/ (visible), PROMPT.md, cases/acceptance.jsonl (held out, never issued)"


def _refuse_a_leak(ctx: DemoContext) -> str:
    leaky = ctx.workdir / "leaky-task"
    shutil.copytree(ctx.workdir / TASK, leaky)
    shutil.copy(leaky / "cases" / "acceptance.jsonl", leaky / "fixture" / "examples.jsonl")
    done = certlab("lock", str(leaky), expect_exit=4)
    refused = [line for line in done.stderr.splitlines() if line.startswith("refused: ")]
    if not refused or "fixture/examples.jsonl is a copy of the held-out cases" not in refused[0]:
        raise DemoFailed(f"a copy of the cases in the fixture was not refused: {done.stderr.strip()}")
    return refused[0]


def _certify(name: str, verdict: str, mode: str | None) -> DemoStep:
    def run(ctx: DemoContext) -> str:
        out = ctx.workdir / f"cert-{name}"
        script = str(ctx.workdir / f"{name}.sh")
        certlab(
            "certify", "--task", str(ctx.workdir / TASK), "--agent", "command", "--agent-arg", script,
            "--agent-name", name, "--out", str(out), "--quiet",
        )  # fmt: skip
        (trial,) = json.loads((out / "bundle.json").read_text(encoding="utf-8"))["trials"]
        if (trial["verdict"], trial["failure_mode"]) != (verdict, mode):
            raise DemoFailed(f"{name} scored {trial['verdict']} ({trial['failure_mode']}), expected {verdict} ({mode})")
        acceptance = next(g for g in trial["grades"] if g["grader"] == "acceptance")["data"]
        held = f"{acceptance['held']}/{acceptance['cases']} held-out cases held"
        return f"{name}: {verdict}" + (f" ({mode}: visible tests pass, {held})" if mode else f", {held}")

    return DemoStep(f"certify {name} on the task", run, f"cert-{name}", after=("scaffold",))


def _leakscan(ctx: DemoContext) -> str:
    done = certlab("leakscan", str(ctx.workdir / "cert-formula-fixer"), "--task", str(ctx.workdir / TASK))
    return done.stdout.strip().splitlines()[-1]


def steps(context: DemoContext) -> list[DemoStep]:
    return [
        DemoStep("scaffold a task of your own (certlab init-task)", _scaffold, "scaffold"),
        DemoStep(
            "certlab lock refuses a task whose fixture holds a copy of its cases", _refuse_a_leak, after=("scaffold",)
        ),
        _certify("formula-fixer", "fixed", None),
        _certify("test-memoriser", "not-fixed", "overfit-to-visible-tests"),
        DemoStep(
            "look for held-out answers in the certification's artefacts",
            _leakscan,
            after=("scaffold", "cert-formula-fixer"),
        ),
    ]
