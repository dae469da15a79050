"""A report model as GitHub-flavoured Markdown (for the job summary)."""

from __future__ import annotations

from typing import Any

from certlab_core.plugin import ArmSummary, ConditionReport, Report
from certlab_core.sdk import report_format as fmt

VERDICT_MARKS = {"PASS": "✅", "BLOCK": "⛔", "INCONCLUSIVE": "❔", "ERROR": "⚠️"}


def _verdict_cell(condition: ConditionReport) -> str:
    """A gating verdict in bold; a ceiling condition is "reported only", with no PASS or BLOCK."""
    shown = fmt.shown_verdict(condition)
    return f"_{shown}_" if shown == fmt.REPORTED_ONLY else f"**{shown}**"


def _faults_cell(condition: ConditionReport) -> str:
    """How the condition's faults fired, beside its counts: never, in some trials, or in every trial."""
    if not condition.faults:
        return "none declared"
    firing = fmt.firing(condition)
    if any(f.never_fired for f in condition.faults):
        return f"**{firing}**"
    return firing or "fired in every trial"


def cell(text: object) -> str:
    """Text safe inside a table cell: pipes escaped, newlines as spaces."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _row(*cells: object) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def _arm(arm: ArmSummary) -> str:
    return f"{fmt.counts(arm)} ({fmt.rate(arm)})"


def render(report: Report, rule: Any = None) -> str:
    """The whole Markdown page; ``rule`` is not needed."""
    mark = VERDICT_MARKS["ERROR"] if report.untested else VERDICT_MARKS.get(report.verdict, "")
    nothing = f"{':' if report.verdict == 'ERROR' else ', but'} {fmt.NOTHING_TESTED}" if report.untested else ""
    out = [
        f"## {mark} certlab: **{report.verdict}** on `{report.experiment}`{nothing}",
        "",
        f"Exit code {report.exit_code} · {fmt.design(report)}" + (f" · run `{report.run}`" if report.run else ""),
        "",
    ]
    for condition in report.untested:
        said = f" (the rule alone said {condition.rule_verdict})" if condition.rule_verdict else ""
        out += [f"> **Nothing was tested** in `{condition.name}`: {cell(condition.untested)}{said}.", ""]
    if report.decision_file != "matches":
        out += [f"> decision.json {report.decision_file}: the verdict shown is recomputed from the store.", ""]
    baseline, candidate = report.arm_label("baseline"), report.arm_label("candidate")
    out += [
        _row(
            "condition",
            "bucket",
            f"baseline ({baseline})",
            f"candidate ({candidate})",
            "candidate − baseline",
            "verdict",
            "why",
            "faults",
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for condition in report.conditions:
        out.append(
            _row(
                condition.name,
                condition.bucket,
                _arm(condition.baseline),
                _arm(condition.candidate),
                fmt.bounds(condition),
                _verdict_cell(condition),
                fmt.reason(condition, report.delta),
                _faults_cell(condition),
            )
        )
    if report.problems:
        out += ["", "### Problems (why the verdict is ERROR)", ""]
        out += [f"- {cell(problem)}" for problem in report.problems]

    out += [
        "",
        f"### Arms ({fmt.level(report.alpha)} intervals, for reading; the rule above decides)",
        "",
        _row(
            "condition",
            "arm",
            "successes",
            "rate",
            f"exact ({report.exact_name})" if report.exact_name else "exact",
            "Wilson",
            *[f"pass^{k}" for k in report.pass_k],
            "agent failures",
            "infra errors",
        ),
        "|---|---|---|---|---|---|" + "---|" * len(report.pass_k) + "---|---|",
    ]
    for condition in report.conditions:
        for arm in (condition.baseline, condition.candidate):
            out.append(
                _row(
                    condition.name,
                    f"{arm.arm} ({arm.label})",
                    fmt.counts(arm),
                    fmt.rate(arm),
                    fmt.interval(arm.exact),
                    fmt.interval(arm.wilson),
                    *["n/a" if p.value is None else f"{p.value:.3f}" for p in arm.pass_k],
                    arm.failures,
                    arm.errors,
                )
            )

    out += ["", "### Faults", ""]
    faults = [(c, f) for c in report.conditions for f in c.faults]
    if not faults:
        out.append("No faults were declared.")
    else:
        out += [
            _row("condition", "fault", "tool", "fired (baseline)", "fired (candidate)", ""),
            "|---|---|---|---|---|---|",
        ]
        for condition, fault in faults:
            note = "**never fired: not tested as declared**" if fault.never_fired else ""
            out.append(
                _row(
                    condition.name,
                    fault.fault,
                    fault.tool,
                    f"{fault.baseline_fired}/{fault.baseline_trials}",
                    f"{fault.candidate_fired}/{fault.candidate_trials}",
                    note,
                )
            )
        out += [
            "",
            "Every declared fault fired." if report.all_faults_fired else "**Some declared faults never fired.**",
        ]

    out += ["", "### Failure clusters (failure mode @ first diverging event)", ""]
    clusters = [(c, k) for c in report.conditions for k in c.clusters]
    if not clusters:
        out.append("No agent failures.")
    else:
        out += [_row("condition", "fingerprint", "baseline", "candidate", "examples"), "|---|---|---|---|---|"]
        for condition, cluster in clusters:
            out.append(
                _row(
                    condition.name,
                    cluster.fingerprint,
                    cluster.baseline,
                    cluster.candidate,
                    ", ".join(f"`{e}`" for e in cluster.examples),
                )
            )

    out += ["", "### Infrastructure errors (kept apart from agent failures)", ""]
    if not report.infra_errors:
        out.append("None.")
    else:
        for error in report.infra_errors[:20]:
            retried = " (retried)" if not error.final else ""
            out.append(f"- `{error.id}` attempt {error.attempt}: {cell(error.error)}{retried}")
        if len(report.infra_errors) > 20:
            out.append(f"- … and {len(report.infra_errors) - 20} more")
    recovered = [
        f"- {condition.name}, {arm.arm}: {fmt.recovered(arm)}"
        for condition in report.conditions
        for arm in (condition.baseline, condition.candidate)
        if arm.recovered_errors
    ]
    if recovered:
        out += ["", "### Errors of the model API the agents recovered from (their trials graded as usual)", ""]
        out += recovered

    out += [
        "",
        "### Tokens and estimated cost",
        "",
        _row("arm", "trials reporting", "input tokens", "output tokens", "estimated cost"),
        "|---|---|---|---|---|",
    ]
    for usage in report.usage:
        source = f" ({', '.join(usage.cost_sources)})" if usage.cost_sources else ""
        out.append(
            _row(
                f"{usage.arm} ({usage.label})",
                f"{usage.trials_reporting}/{usage.trials}",
                fmt.tokens(usage.input_tokens),
                fmt.tokens(usage.output_tokens),
                fmt.cost(usage.cost_usd) + source,
            )
        )
    if report.cost:
        out += [""] + [f"- {cell(line)}" for line in report.cost]
    if report.earlier_runs:
        out += ["", "### Earlier runs of this experiment", ""]
        out += [f"- `{run.run}`: {run.verdict or 'no decision'}" for run in report.earlier_runs]
    out += ["", f"> {report.trust_note}", ""]
    return "\n".join(out)
