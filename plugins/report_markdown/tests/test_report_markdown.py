"""The Markdown reporter: the verdict first, a table row per condition, faults, clusters, errors and cost."""

from __future__ import annotations

import json
from pathlib import Path

from certlab_clopper_pearson.rule import interval as exact_interval
from certlab_report_markdown.render import cell, render

from certlab_core.report.model import Report, build_report

ARCHIVED = Path(__file__).resolve().parents[3] / "tests" / "archived_stores"


def report_of(name: str) -> Report:
    folder = ARCHIVED / name
    manifest = json.loads((folder / "manifest.json").read_text())
    decision = json.loads((folder / "decision.json").read_text())
    lines = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    return build_report(manifest, lines, decision, run=name, exact=exact_interval)


def table_rows(text: str, header: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def test_block_page() -> None:
    text = render(report_of("block"))
    assert text.splitlines()[0] == "## ⛔ certlab: **BLOCK** on `archived-block`"
    rows = table_rows(text, "| condition | bucket |")
    assert [(r[0], r[5]) for r in rows] == [("reserve-timeout", "**BLOCK**"), ("clean", "**INCONCLUSIVE**")]
    assert rows[0][2] == "10/10 (1.000)" and rows[0][3] == "0/10 (0.000)"
    assert "Every declared fault fired." in text
    clusters = table_rows(text, "| condition | fingerprint |")
    assert clusters[0][0] == "reserve-timeout" and clusters[0][3] == "10"
    assert "### Infrastructure errors (kept apart from agent failures)\n\nNone." in text
    assert "no comparison claimed" in text


def test_error_page_lists_problems_and_infrastructure_errors() -> None:
    text = render(report_of("error"))
    assert "**ERROR**" in text.splitlines()[0]
    assert "### Problems (why the verdict is ERROR)" in text
    assert "`baseline/broken-injector/0` attempt 1: injector-broken" in text
    assert "**never fired: not tested as declared**" in text


def test_cells_cannot_break_the_table() -> None:
    assert cell("a|b\nc") == "a\\|b c"


def test_a_ceiling_is_reported_only_and_how_each_fault_fired_is_beside_the_counts() -> None:
    import attrs

    report = report_of("block")
    timeout, clean = report.conditions
    ceiling = attrs.evolve(clean, name="confirm-down", bucket="ceiling", gating=False, verdict="PASS")
    some = attrs.evolve(timeout.faults[0], baseline_fired=4, candidate_fired=3)
    partly = attrs.evolve(timeout, faults=[some])
    rows = table_rows(render(attrs.evolve(report, conditions=[partly, ceiling])), "| condition | bucket |")
    assert rows[1][5] == "_reported only_" and "PASS" not in rows[1][5]
    assert rows[0][5] == "**BLOCK**"
    assert rows[0][7] == "fault tool_timeout on reserve fired in 4/10 baseline and 3/10 candidate trials"
    assert rows[1][7] == "none declared"
    error = table_rows(render(report_of("error")), "| condition | bucket |")
    assert error[0][7] == "**fault json:loads on stock never fired: not tested as declared**"
