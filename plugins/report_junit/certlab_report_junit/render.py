"""A report model as JUnit XML: a case per condition, one for the verdict.

A gating condition that PASSes is a passed case; BLOCK and INCONCLUSIVE are failures (the
failure ``type`` is the verdict); ERROR is an error; a ``ceiling`` condition ("reported
only", with no PASS or BLOCK) and one STOPPED early are skipped. The case ``experiment verdict`` carries
the experiment's own verdict the same way, with the problems of an ERROR.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from certlab_core.plugin import ConditionReport, Report
from certlab_core.sdk import report_format as fmt


def _condition_details(condition: ConditionReport, report: Report) -> str:
    lines = [f"candidate - baseline {fmt.bounds(condition)}: {fmt.reason(condition, report.delta)}"]
    for arm in (condition.baseline, condition.candidate):
        lines.append(
            f"{arm.arm} ({arm.label}): {fmt.counts(arm)} rate {fmt.rate(arm)} exact {fmt.interval(arm.exact)} "
            f"wilson {fmt.interval(arm.wilson)} {fmt.pass_k(arm)} agent failures {arm.failures} "
            f"infra errors {arm.errors}"
        )
    for fault in condition.faults:
        if fault.never_fired:
            state = "NEVER FIRED: not tested as declared"
        else:
            state = "fired in every trial" if fault.fired_everywhere else "fired in some trials only"
        lines.append(
            f"fault {fault.fault} on {fault.tool}: {state} (baseline {fault.baseline_fired}/{fault.baseline_trials}, "
            f"candidate {fault.candidate_fired}/{fault.candidate_trials})"
        )
    for cluster in condition.clusters:
        lines.append(
            f"{cluster.baseline + cluster.candidate} x {cluster.fingerprint} (e.g. {', '.join(cluster.examples)})"
        )
    return "\n".join(lines)


def _outcome(case: ET.Element, verdict: str, gating: bool, message: str, details: str) -> str:
    """Mark ``case`` by verdict; return which JUnit outcome it got."""
    if not gating or verdict == "STOPPED":
        ET.SubElement(case, "skipped", message=message)
        return "skipped"
    if verdict == "PASS":
        return "passed"
    if verdict == "ERROR":
        element = ET.SubElement(case, "error", type=verdict, message=message)
        element.text = details
        return "errors"
    element = ET.SubElement(case, "failure", type=verdict, message=message)
    element.text = details
    return "failures"


def render(report: Report, rule: Any = None) -> str:
    """The whole JUnit XML document; ``rule`` is not needed."""
    suite_name = f"certlab.{report.experiment}"
    tally = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    suite = ET.Element("testsuite", name=suite_name)
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", report.verdict),
        ("exit_code", str(report.exit_code)),
        ("rule", report.rule),
        ("alpha", f"{report.alpha:g}"),
        ("delta", f"{report.delta:g}"),
        ("looks", str(report.looks)),
        ("n_per_arm", str(report.n_per_arm)),
        ("run", report.run),
        ("all_faults_fired", "true" if report.all_faults_fired else "false"),
    ):
        ET.SubElement(properties, "property", name=name, value=value)

    for condition in report.conditions:
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=f"{condition.name} ({condition.bucket})")
        details = _condition_details(condition, report)
        message = f"{fmt.shown_verdict(condition)}: {fmt.reason(condition, report.delta)}"
        kind = _outcome(case, condition.verdict, condition.gating, message, details)
        out = ET.SubElement(case, "system-out")
        out.text = details
        tally["tests"] += 1
        if kind != "passed":
            tally[kind] += 1

    case = ET.SubElement(suite, "testcase", classname=suite_name, name="experiment verdict")
    reasons = list(report.problems or fmt.shown_reasons(report))
    message = f"{report.verdict} (exit {report.exit_code})" + (f": {reasons[0]}" if reasons else "")
    kind = _outcome(case, report.verdict, True, message, "\n".join(reasons))
    out = ET.SubElement(case, "system-out")
    out.text = "\n".join([*reasons, *report.problems, *report.cost, report.trust_note])
    tally["tests"] += 1
    if kind != "passed":
        tally[kind] += 1

    root = ET.Element("testsuites", name="certlab")
    for key, count in tally.items():
        suite.set(key, str(count))
        root.set(key, str(count))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
