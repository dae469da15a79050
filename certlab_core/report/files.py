"""The JUnit and Markdown files ``certlab run`` and ``certlab gate`` write on request.

When a reporter plugin of that name is installed (``certlab_reporters``: ``junit``,
``markdown``) it renders the full report of the store; otherwise a minimal file is written
from the decision alone: one test case (or table row) per condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from certlab_core.plugin.errors import CertlabError, UsageError


def _with_plugin(folder: Path, fmt: str) -> str | None:
    from certlab_core.plugin.registry import discover

    registry = discover()
    if fmt not in registry.names("reporters"):
        return None
    try:
        from certlab_core.report.reading import load_report
    except ImportError:
        return None
    report, rule = load_report(folder, registry, (1, 2, 4))
    text: str = registry.get("reporters", fmt).render(report, rule)
    return text


def minimal_junit(decision: Mapping[str, Any]) -> str:
    """A JUnit XML file with one test case per condition (and one for the experiment's verdict)."""
    cases = []
    failures = 0
    skipped = 0
    for condition in decision["conditions"]:
        body = ""
        verdict = condition["verdict"]
        if verdict in ("BLOCK", "ERROR"):
            failures += 1
            body = f"<failure message={quoteattr(verdict)}>{escape(str(condition.get('bounds')))}</failure>"
        elif verdict != "PASS" or not condition["gating"]:
            skipped += 1
            body = f"<skipped message={quoteattr(verdict)}/>"
        cases.append(
            f"  <testcase classname={quoteattr(decision['experiment'])} name={quoteattr(condition['name'])}>"
            f"{body}</testcase>"
        )
    verdict = decision["verdict"]
    if verdict in ("BLOCK", "ERROR", "INCONCLUSIVE"):
        failures += 1
        detail = "; ".join(list(decision.get("problems") or []) + list(decision.get("reasons") or []))
        cases.append(
            f'  <testcase classname={quoteattr(decision["experiment"])} name="verdict">'
            f"<failure message={quoteattr(verdict)}>{escape(detail)}</failure></testcase>"
        )
    else:
        cases.append(f'  <testcase classname={quoteattr(decision["experiment"])} name="verdict"/>')
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name={quoteattr("certlab " + decision["experiment"])} tests="{len(cases)}" '
        f'failures="{failures}" skipped="{skipped}">\n' + "\n".join(cases) + "\n</testsuite>\n"
    )


def minimal_markdown(decision: Mapping[str, Any]) -> str:
    """A Markdown summary: the verdict, and a row per condition."""
    lines = [
        f"# certlab {decision['experiment']}: {decision['verdict']}",
        "",
        "| condition | bucket | baseline | candidate | candidate - baseline | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for condition in decision["conditions"]:
        counts = condition["counts"]
        bounds = condition["bounds"]
        interval = f"[{bounds['lower']:.4f}, {bounds['upper']:.4f}]" if bounds else "-"
        lines.append(
            f"| {condition['name']} | {condition['bucket']} | "
            f"{counts['baseline']['successes']}/{counts['baseline']['trials']} | "
            f"{counts['candidate']['successes']}/{counts['candidate']['trials']} | "
            f"{interval} | {condition['verdict']} |"
        )
    for title, key in (("Problems", "problems"), ("Reasons", "reasons"), ("Warnings", "warnings")):
        items = decision.get(key) or []
        if items:
            lines += ["", f"## {title}", ""] + [f"- {item}" for item in items]
    return "\n".join(lines) + "\n"


def write_report(folder: Path, decision: Mapping[str, Any], fmt: str, path: Path) -> None:
    try:
        text = _with_plugin(folder, fmt)
    except CertlabError:
        text = None
    if text is None:
        text = minimal_junit(decision) if fmt == "junit" else minimal_markdown(decision)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--{fmt} {path}: cannot write the report ({error.strerror})") from None
