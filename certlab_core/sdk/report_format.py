"""How a report's numbers read: rates, intervals, bounds, verdict reasons."""

from __future__ import annotations

from typing import Any

from certlab_core.plugin.report import ArmSummary, ConditionReport, Report


def level(alpha: float) -> str:
    """``0.05`` as ``95%``."""
    return f"{100.0 * (1.0 - alpha):.4g}%"


def interval(bounds: tuple[float, float] | None) -> str:
    """``[0.525, 0.718]``; ``–`` where there is none (no Clopper-Pearson rule installed for the exact one)."""
    return "–" if bounds is None else f"[{bounds[0]:.3f}, {bounds[1]:.3f}]"


def counts(arm: ArmSummary) -> str:
    """Successes over the trials that ended in a success or an agent failure: ``130/200``."""
    return f"{arm.successes}/{arm.successes + arm.failures}"


def rate(arm: ArmSummary) -> str:
    return "n/a" if arm.rate is None else f"{arm.rate:.3f}"


def bounds(condition: ConditionReport) -> str:
    if condition.lower is None or condition.upper is None:
        return "not evaluated"
    return f"[{condition.lower:.4f}, {condition.upper:.4f}]"


def reason(condition: ConditionReport, delta: float) -> str:
    """Why a condition got its verdict, in words."""
    if not condition.gating:
        return f"{condition.bucket}: reported only, never gated"
    if condition.untested:
        said = f" (the rule alone said {condition.rule_verdict})" if condition.rule_verdict else ""
        return f"nothing was tested: {condition.untested}{said}"
    if condition.lower is None or condition.upper is None:
        return "could not be evaluated"
    if condition.verdict == "PASS":
        return f"lower bound {condition.lower:.4f} > -delta {-delta:.4f}"
    if condition.verdict == "BLOCK":
        return f"upper bound {condition.upper:.4f} < -delta {-delta:.4f}"
    if condition.verdict == "INCONCLUSIVE":
        return f"the bounds contain -delta {-delta:.4f}"
    if condition.verdict == "STOPPED":
        return "cut short: another gating condition blocked"
    return condition.verdict.lower()


REPORTED_ONLY = "reported only"
NOTHING_TESTED = "nothing was tested"


def untested(report: Report) -> list[str]:
    """One line per gating condition that tested nothing, and why: ``clean: the baseline succeeded in 0 of 60 ...``."""
    return [f"{condition.name}: {condition.untested}" for condition in report.untested]


def headline(report: Report) -> str:
    """The verdict as a report's title says it: ``PASS``, or ``PASS, but nothing was tested`` (``ERROR: ...``)."""
    if not report.untested:
        return report.verdict
    return f"{report.verdict}{':' if report.verdict == 'ERROR' else ', but'} {NOTHING_TESTED}"


def shown_verdict(condition: ConditionReport) -> str:
    """The verdict a report shows: a ceiling condition is "reported only", never PASS or BLOCK (an ERROR stays)."""
    if not condition.gating and condition.verdict != "ERROR":
        return REPORTED_ONLY
    return condition.verdict


def shown_reasons(report: Report) -> list[str]:
    """The decision's reasons, with a ceiling condition's said as "reported only" instead of its verdict."""
    ceilings = {f"{c.name} ({c.bucket}): ": c for c in report.conditions if shown_verdict(c) == REPORTED_ONLY}
    shown = []
    for reason_text in report.reasons:
        ceiling = next((c for head, c in ceilings.items() if reason_text.startswith(head)), None)
        if ceiling is None:
            shown.append(reason_text)
        else:
            head = f"{ceiling.name} ({ceiling.bucket}): {REPORTED_ONLY}, never gated"
            shown.append(f"{head}: candidate - baseline {bounds(ceiling)}")
    return shown


def firing(condition: ConditionReport) -> str:
    """How the condition's faults fired, to show beside its counts; empty when each fired in every trial."""
    notes = []
    for fault in condition.faults:
        if fault.never_fired:
            notes.append(f"fault {fault.fault} on {fault.tool} never fired: not tested as declared")
        elif not fault.fired_everywhere:
            notes.append(
                f"fault {fault.fault} on {fault.tool} fired in {fault.baseline_fired}/{fault.baseline_trials} "
                f"baseline and {fault.candidate_fired}/{fault.candidate_trials} candidate trials"
            )
    return "; ".join(notes)


def pass_k(arm: ArmSummary) -> str:
    return ", ".join(f"pass^{p.k} " + ("n/a" if p.value is None else f"{p.value:.3f}") for p in arm.pass_k)


def recovered(arm: ArmSummary) -> str:
    """``recovered from 3 upstream errors in 2 trials``: errors of the model API its trials met and went past."""
    errors, trials = arm.recovered_errors, arm.recovered_trials
    return (
        f"recovered from {errors} upstream error{'s' if errors != 1 else ''} "
        f"in {trials} trial{'s' if trials != 1 else ''}"
    )


def design(report: Report) -> str:
    conditions = (
        "1 gating condition" if report.gating_conditions == 1 else f"{report.gating_conditions} gating conditions"
    )
    looks = "1 look" if report.looks == 1 else f"{report.looks} looks"
    return (
        f"rule {report.rule}, alpha {report.alpha:g}, delta {report.delta:g}, {conditions}, {looks}, "
        f"{report.n_per_arm} trials per arm"
    )


def cost(value: float | None) -> str:
    return "not reported" if value is None else f"${value:.4f}"


def tokens(value: int | None) -> str:
    return "not reported" if value is None else f"{value:,}"


def rate_cell(rate: dict[str, Any]) -> str:
    """``count/n [low, high]`` of a rate the bundle records (its interval when it has one); a dash for none."""
    if not rate["n"]:
        return "–"
    cell = f"{rate['count']}/{rate['n']}"
    if rate.get("interval") is not None:
        cell += f" [{rate['interval'][0]:.3f}, {rate['interval'][1]:.3f}]"
    return cell
