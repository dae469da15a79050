"""The plain text: what ``certlab report`` prints without ``--format``."""

from __future__ import annotations

from certlab_core.plugin.report import ArmSummary, Report
from certlab_core.sdk import report_format as fmt


def _arm_line(arm: ArmSummary, alpha: float) -> str:
    return (
        f"    {arm.arm:<9} {arm.label:<12} {fmt.counts(arm):>9}  rate {fmt.rate(arm):>5}  "
        f"exact {fmt.interval(arm.exact)}  wilson {fmt.interval(arm.wilson)}  {fmt.pass_k(arm)}"
        + (f"  infra errors {arm.errors}" if arm.errors else "")
        + (f"  contract violations {arm.contract_violations}" if arm.contract_violations else "")
        + (f"  {fmt.recovered(arm)}" if arm.recovered_errors else "")
    )


def render_text(report: Report) -> str:
    """The whole report as plain text: the verdict, then each condition's bounds, arms, faults and clusters."""
    lines = [
        f"experiment {report.experiment}: {fmt.headline(report)} (exit {report.exit_code})",
        f"  {fmt.design(report)}; arm intervals at {fmt.level(report.alpha)}, for reading",
    ]
    lines.extend(f"  {fmt.NOTHING_TESTED.upper()} in {line}" for line in fmt.untested(report))
    if report.decision_file != "matches":
        lines.append(f"  note: decision.json {report.decision_file}; the verdict above is recomputed from the store")
    for condition in report.conditions:
        lines.append("")
        lines.append(
            f"  {condition.name} ({condition.bucket}): {fmt.shown_verdict(condition)}  candidate - baseline "
            f"{fmt.bounds(condition)}: {fmt.reason(condition, report.delta)}"
        )
        lines.append(_arm_line(condition.baseline, report.alpha))
        lines.append(_arm_line(condition.candidate, report.alpha))
        for fault in condition.faults:
            if fault.never_fired:
                state = "NEVER FIRED: not tested as declared"
            else:
                state = "fired in every trial" if fault.fired_everywhere else "fired in some trials only"
            lines.append(
                f"    fault {fault.fault} on {fault.tool}: {state} (baseline {fault.baseline_fired}/"
                f"{fault.baseline_trials}, candidate {fault.candidate_fired}/{fault.candidate_trials})"
            )
        for cluster in condition.clusters:
            lines.append(
                f"    {cluster.baseline + cluster.candidate:>5} x {cluster.fingerprint} "
                f"(baseline {cluster.baseline}, candidate {cluster.candidate}; e.g. {', '.join(cluster.examples)})"
            )
    lines.append("")
    lines.append(
        "  faults: every declared fault fired"
        if report.all_faults_fired
        else "  faults: some declared faults never fired (those conditions were not tested as declared)"
    )
    if report.infra_errors:
        lines.append(f"  infrastructure errors (not agent failures): {len(report.infra_errors)}")
        for error in report.infra_errors[:10]:
            later = "" if error.final else " (retried)"
            lines.append(f"    {error.id} attempt {error.attempt}: {error.error}{later}")
    else:
        lines.append("  infrastructure errors: none")
    lines.append("  tokens and estimated cost:")
    lines.extend(f"    {line}" for line in report.cost)
    for problem in report.problems:
        lines.append(f"  problem: {problem}")
    if report.earlier_runs:
        lines.append(
            "  earlier runs of this experiment: "
            + ", ".join(f"{run.run} ({run.verdict or 'no decision'})" for run in report.earlier_runs)
        )
    lines.append(f"  {report.trust_note}")
    return "\n".join(lines) + "\n"
