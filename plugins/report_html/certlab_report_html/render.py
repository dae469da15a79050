"""A report model as one self-contained HTML page: no script, no network.

The page shows the verdict (``#verdict``, with ``data-verdict``), one plot per condition
(``svg.condition-plot``: the interval for candidate minus baseline against the margin) and
the plan's operating-characteristic curve (``svg.oc-plot``), computed with the rule's own
``plan`` at the run's design, when the rule is installed and can plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from certlab_core.plugin import ArmSummary, ConditionReport, Report
from certlab_core.sdk import report_format as fmt
from certlab_report_html.svg import VERDICT_COLOURS, OcPoint, condition_plot, oc_plot

# The plan is exact enumeration; past this many trials per arm the curve is drawn with fewer points.
OC_POINTS = 41
OC_POINTS_LARGE = 13
OC_LARGE_N = 1000
OC_MAX_N = 5000
DEFAULT_BASELINE_RATE = 0.9

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #24292f; margin: 2rem auto;
       max-width: 980px; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d0d7de; padding-bottom: .2rem; }
.verdict { padding: .1rem .6rem; border-radius: 6px; color: #fff; }
.meta { color: #57606a; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border: 1px solid #d0d7de; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure.condition { margin: 1rem 0 1.5rem; }
figcaption { font-weight: 600; margin-bottom: .3rem; }
.warn { color: #cf222e; font-weight: 600; }
.note { color: #57606a; border-left: 3px solid #d0d7de; padding-left: .8rem; }
code { background: #f6f8fa; padding: 0 .2rem; border-radius: 3px; }
"""


def _verdict_badge(verdict: str, element_id: str | None = None) -> str:
    colour = VERDICT_COLOURS.get(verdict, "#24292f")
    ident = f' id="{element_id}"' if element_id else ""
    return (
        f'<span{ident} class="verdict verdict-{escape(verdict.lower())}" data-verdict="{escape(verdict)}" '
        f'style="background:{colour}">{escape(verdict)}</span>'
    )


def _condition_badge(condition: ConditionReport) -> str:
    """A gating condition's verdict badge; a ceiling condition is "reported only", with no PASS or BLOCK badge."""
    shown = fmt.shown_verdict(condition)
    if shown == fmt.REPORTED_ONLY:
        return f'<span class="reported-only meta" data-verdict="{escape(shown)}">{escape(shown)}</span>'
    return _verdict_badge(shown)


def _firing(condition: ConditionReport) -> str:
    """How the faults fired, beside the counts: a warning when one never fired, a note when only in some trials."""
    note = fmt.firing(condition)
    if not note:
        return ""
    never = any(f.never_fired for f in condition.faults)
    return f'<p class="firing{" warn" if never else " meta"}">{escape(note)}</p>'


def _arm_rows(arm: ArmSummary, ks: Sequence[int]) -> str:
    cells = [
        f"{escape(arm.arm)} ({escape(arm.label)})",
        escape(arm.agent),
        fmt.counts(arm),
        fmt.rate(arm),
        fmt.interval(arm.exact),
        fmt.interval(arm.wilson),
        *["n/a" if p.value is None else f"{p.value:.3f}" for p in arm.pass_k],
        str(arm.failures),
        str(arm.errors),
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _estimate(condition: ConditionReport) -> float | None:
    if condition.baseline.rate is None or condition.candidate.rate is None:
        return None
    return condition.candidate.rate - condition.baseline.rate


def _condition_section(condition: ConditionReport, report: Report) -> str:
    plot = condition_plot(
        condition.name,
        fmt.shown_verdict(condition),
        condition.lower,
        condition.upper,
        _estimate(condition),
        report.delta,
    )
    header = "".join(
        f"<th>{escape(h)}</th>"
        for h in (
            "arm",
            "agent",
            "successes",
            "rate",
            f"exact {fmt.level(report.alpha)}",
            f"Wilson {fmt.level(report.alpha)}",
            *[f"pass^{k}" for k in report.pass_k],
            "agent failures",
            "infra errors",
        )
    )
    faults = ""
    if condition.faults:
        rows = "".join(
            f"<tr><td>{escape(f.fault)}</td><td>{escape(f.tool)}</td><td>{f.baseline_fired}/{f.baseline_trials}</td>"
            f"<td>{f.candidate_fired}/{f.candidate_trials}</td>"
            f"<td>{'<span class=warn>never fired: not tested as declared</span>' if f.never_fired else ''}</td></tr>"
            for f in condition.faults
        )
        faults = (
            "<table class='faults'><tr><th>fault</th><th>tool</th><th>fired (baseline)</th>"
            f"<th>fired (candidate)</th><th></th></tr>{rows}</table>"
        )
    clusters = ""
    if condition.clusters:
        rows = "".join(
            f"<tr><td class=num>{c.baseline}</td><td class=num>{c.candidate}</td><td>{escape(c.failure_mode)}</td>"
            f"<td>{escape(c.event)}</td><td>{', '.join(f'<code>{escape(e)}</code>' for e in c.examples)}</td></tr>"
            for c in condition.clusters
        )
        clusters = (
            "<table class='clusters'><tr><th>baseline</th><th>candidate</th><th>failure mode</th>"
            f"<th>first diverging event</th><th>examples</th></tr>{rows}</table>"
        )
    return (
        f'<figure class="condition" data-condition="{escape(condition.name)}">'
        f"<figcaption>{escape(condition.name)} <span class=meta>({escape(condition.bucket)}"
        f"{', gating' if condition.gating else ', reported only'})</span> "
        f"{_condition_badge(condition)} candidate − baseline {fmt.bounds(condition)}: "
        f"{escape(fmt.reason(condition, report.delta))}</figcaption>"
        f"{plot}<table class='arms'><tr>{header}</tr>"
        f"{_arm_rows(condition.baseline, report.pass_k)}{_arm_rows(condition.candidate, report.pass_k)}</table>"
        f"{_firing(condition)}"
        f"{faults}{clusters}</figure>"
    )


def _sources(sources: Sequence[str]) -> str:
    return f" ({escape(', '.join(sources))})" if sources else ""


def baseline_rate_for_plan(report: Report) -> float:
    """The baseline success rate the OC curve is drawn at: the baseline's pooled rate over gating conditions."""
    successes = sum(c.baseline.successes for c in report.conditions if c.gating)
    decided = sum(c.baseline.successes + c.baseline.failures for c in report.conditions if c.gating)
    return successes / decided if decided else DEFAULT_BASELINE_RATE


def operating_characteristic(report: Report, rule: Any) -> tuple[list[OcPoint], str] | str:
    """The OC points from the rule's ``plan`` at the run's design, or one line saying why there are none."""
    if rule is None:
        return f"The statistical rule {report.rule!r} is not installed here, so its plan cannot be drawn."
    if getattr(rule, "plan", None) is None:
        return f"The statistical rule {report.rule!r} cannot plan."
    n = report.n_per_arm
    if n > OC_MAX_N:
        return f"The plan is exact enumeration up to {OC_MAX_N} trials per arm; this run has {n}."
    p_baseline = baseline_rate_for_plan(report)
    low = max(-p_baseline, -(3.0 * report.delta + 0.1))
    high = min(1.0 - p_baseline, report.delta + 0.05)
    if high - low < 1e-9:
        low, high = -p_baseline, 1.0 - p_baseline
    count = OC_POINTS if n <= OC_LARGE_N else OC_POINTS_LARGE
    points = []
    try:
        for step in range(count):
            difference = low + (high - low) * step / (count - 1)
            p_candidate = min(1.0, max(0.0, p_baseline + difference))
            plan = rule.plan(
                p_baseline, p_candidate, n, report.alpha, report.delta, report.gating_conditions or 1, report.looks
            )
            points.append(OcPoint(difference, float(plan["PASS"]), float(plan["BLOCK"]), float(plan["INCONCLUSIVE"])))
    except Exception as error:  # a rule that refuses this design says why in the page
        return f"The rule's plan refused this design: {error}"
    caption = (
        f"Operating characteristic of this design ({report.rule}, {n} trials per arm, alpha {report.alpha:g}, "
        f"delta {report.delta:g}, K = {report.gating_conditions}, {report.looks} look(s)) at a baseline rate of "
        f"{p_baseline:.3f}"
    )
    return points, caption


def render(report: Report, rule: Any = None) -> str:
    """The whole HTML page."""
    sections = [_condition_section(c, report) for c in report.conditions]
    oc = operating_characteristic(report, rule)
    if isinstance(oc, str):
        oc_html = f"<p class=note>{escape(oc)}</p>"
    else:
        points, caption = oc
        oc_html = f"<p>{escape(caption)}: the exact probability of each verdict, from the rule's plan.</p>" + oc_plot(
            points, report.delta, caption
        )
    problems = ""
    if report.problems:
        problems = "<h2>Problems</h2><ul>" + "".join(f"<li>{escape(p)}</li>" for p in report.problems) + "</ul>"
    reasons = "".join(f"<li>{escape(r)}</li>" for r in fmt.shown_reasons(report))
    infra = (
        "<p>None.</p>"
        if not report.infra_errors
        else "<ul>"
        + "".join(
            f"<li><code>{escape(e.id)}</code> attempt {e.attempt}: {escape(e.error)}"
            f"{'' if e.final else ' (retried)'}</li>"
            for e in report.infra_errors[:50]
        )
        + (f"<li>… and {len(report.infra_errors) - 50} more</li>" if len(report.infra_errors) > 50 else "")
        + "</ul>"
    )
    recovered_items = "".join(
        f"<li>{escape(condition.name)}, {escape(arm.arm)}: {escape(fmt.recovered(arm))}</li>"
        for condition in report.conditions
        for arm in (condition.baseline, condition.candidate)
        if arm.recovered_errors
    )
    recovered = (
        f"<h3>Errors of the model API the agents recovered from (their trials graded as usual)</h3>"
        f"<ul id=recovered>{recovered_items}</ul>"
        if recovered_items
        else ""
    )
    usage_rows = "".join(
        f"<tr><td>{escape(u.arm)} ({escape(u.label)})</td><td class=num>{u.trials_reporting}/{u.trials}</td>"
        f"<td class=num>{fmt.tokens(u.input_tokens)}</td><td class=num>{fmt.tokens(u.output_tokens)}</td>"
        f"<td class=num>{fmt.cost(u.cost_usd)}{_sources(u.cost_sources)}</td></tr>"
        for u in report.usage
    )
    faults_line = (
        "Every declared fault fired."
        if report.all_faults_fired
        else "<span class=warn>Some declared faults never fired: those conditions were not tested as declared.</span>"
    )
    earlier = ""
    if report.earlier_runs:
        earlier = (
            "<h2>Earlier runs of this experiment</h2><ul>"
            + "".join(
                f"<li><code>{escape(r.run)}</code>: {escape(r.verdict or 'no decision')}</li>"
                for r in report.earlier_runs
            )
            + "</ul>"
        )
    decision_note = (
        ""
        if report.decision_file == "matches"
        else f"<p class=warn>decision.json {escape(report.decision_file)}: the verdict shown is recomputed.</p>"
    )
    untested = ""
    if report.untested:
        items = "".join(
            f"<li><code>{escape(c.name)}</code>: {escape(c.untested)}"
            f"{escape(f' (the rule alone said {c.rule_verdict})') if c.rule_verdict else ''}</li>"
            for c in report.untested
        )
        untested = f"<div id=untested class=warn><p>Nothing was tested:</p><ul>{items}</ul></div>"
    nothing = f"{':' if report.verdict == 'ERROR' else ', but'} <span class=warn>{fmt.NOTHING_TESTED}</span>"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>certlab: {escape(report.verdict)} on '
        f"{escape(report.experiment)}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>certlab: {_verdict_badge(report.verdict, 'verdict')} on <code>{escape(report.experiment)}</code>"
        f"{nothing if report.untested else ''}</h1>"
        f"<p class=meta>exit code {report.exit_code} · {escape(fmt.design(report))}"
        f"{' · run <code>' + escape(report.run) + '</code>' if report.run else ''}</p>{decision_note}{untested}"
        f"<ul class=reasons>{reasons}</ul></header>{problems}"
        f"<h2>Conditions</h2><p class=meta>Each bar is the rule's interval for candidate minus baseline; the dashed "
        f"line is the margin −δ; a drop past it (the shaded side) must not PASS. Arm intervals at "
        f"{fmt.level(report.alpha)} are for reading; the rule decides.</p>"
        f"<section id=conditions>{''.join(sections)}</section>"
        f"<h2>Faults</h2><p>{faults_line}</p>"
        f"<h2>Plan</h2><section id=plan>{oc_html}</section>"
        f"<h2>Infrastructure errors (kept apart from agent failures)</h2>{infra}{recovered}"
        f"<h2>Tokens and estimated cost</h2><table><tr><th>arm</th><th>trials reporting</th><th>input tokens</th>"
        f"<th>output tokens</th><th>estimated cost</th></tr>{usage_rows}</table>"
        f"<ul class=cost>{''.join(f'<li>{escape(line)}</li>' for line in report.cost)}</ul>"
        f"{earlier}<p class=note>{escape(report.trust_note)}</p>"
        "</body></html>\n"
    )
