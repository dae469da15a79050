"""Demo chapter: certify the oracle and a shell-script agent; regrade both."""

from __future__ import annotations

from certlab_demo.tour import DemoContext, DemoFailed, DemoStep, certlab, read_bundle_summary

SCRIPT_AGENT = "examples/agents/pattern_fixer.sh"
SCRIPT_AGENT_FIXES = 2  # it knows exactly two of the six seeded slips


def _certify_oracle(ctx: DemoContext) -> str:
    out = ctx.workdir / "cert-oracle"
    certlab("certify", "--family", "intervals", "--agent", "oracle", "--out", str(out), "--quiet")
    summary = read_bundle_summary(out)
    if summary["fixed"] != summary["scheduled"] or summary["scheduled"] != 6:
        raise DemoFailed(f"the oracle must fix 6/6, it fixed {summary['fixed']}/{summary['scheduled']}")
    return (
        f"instrument proven and calibrated; oracle fixed {summary['fixed']}/{summary['scheduled']} ({out}/CONTRACT.md)"
    )


def _certify_script(ctx: DemoContext) -> str:
    out = ctx.workdir / "cert-pattern-fixer"
    script = ctx.example(SCRIPT_AGENT)
    certlab(
        "certify", "--family", "intervals", "--agent", "command", "--agent-arg", str(script),
        "--agent-name", "pattern-fixer", "--agent-version", "1", "--out", str(out), "--quiet",
    )  # fmt: skip
    summary = read_bundle_summary(out)
    if summary["fixed"] != SCRIPT_AGENT_FIXES:
        raise DemoFailed(f"the pattern fixer knows {SCRIPT_AGENT_FIXES} slips, but fixed {summary['fixed']}")
    return f"a shell-script agent fixed {summary['fixed']}/{summary['scheduled']}; the contract names each failure"


def _regrade(name: str) -> DemoStep:
    def run(ctx: DemoContext) -> str:
        done = certlab("regrade", str(ctx.workdir / name), "--quiet")
        if "regrade: consistent" not in done.stdout:
            raise DemoFailed(f"regrade of {name} did not report consistent: {done.stdout.strip()[-200:]}")
        return f"{name}: every verdict re-earned from the recorded changes, without the agent"

    return DemoStep(f"regrade {name} from its bundle alone", run, after=(name,))


def steps(context: DemoContext) -> list[DemoStep]:
    return [
        DemoStep(
            "certify the oracle on intervals (prove the instrument, calibrate, certify)", _certify_oracle, "cert-oracle"
        ),
        DemoStep("certify a shell-script agent through the command adapter", _certify_script, "cert-pattern-fixer"),
        _regrade("cert-oracle"),
        _regrade("cert-pattern-fixer"),
    ]
