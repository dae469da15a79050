"""The plain-text report: a ceiling condition is "reported only", and each fault says how it fired beside the counts."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
from certlab_clopper_pearson.rule import interval as exact_interval
from certlab_report_text.render import render_text

from certlab_core.report.model import Report, build_report

ARCHIVED = Path(__file__).resolve().parents[3] / "tests" / "archived_stores"


def report_of(name: str) -> Report:
    folder = ARCHIVED / name
    manifest = json.loads((folder / "manifest.json").read_text())
    decision = json.loads((folder / "decision.json").read_text())
    lines = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    return build_report(manifest, lines, decision, run=name, exact=exact_interval)


def test_a_ceiling_condition_is_reported_only_without_a_verdict() -> None:
    report = report_of("block")
    timeout, clean = report.conditions
    ceiling = attrs.evolve(clean, name="confirm-down", bucket="ceiling", gating=False, verdict="PASS")
    text = render_text(attrs.evolve(report, conditions=[timeout, ceiling]))
    (line,) = [x for x in text.splitlines() if x.startswith("  confirm-down")]
    assert line.startswith("  confirm-down (ceiling): reported only  candidate - baseline")
    assert "PASS" not in line and "BLOCK" not in line
    assert "  reserve-timeout (falsify): BLOCK" in text


def test_each_fault_says_whether_it_fired_in_every_trial_some_or_none() -> None:
    report = report_of("block")
    timeout = report.conditions[0]
    every = render_text(report)
    assert "fault tool_timeout on reserve: fired in every trial (baseline 10/10, candidate 10/10)" in every
    some = attrs.evolve(timeout.faults[0], baseline_fired=4, candidate_fired=3)
    partly = render_text(attrs.evolve(report, conditions=[attrs.evolve(timeout, faults=[some])]))
    assert "fault tool_timeout on reserve: fired in some trials only (baseline 4/10, candidate 3/10)" in partly
    never = render_text(report_of("error"))
    assert "fault json:loads on stock: NEVER FIRED: not tested as declared (baseline 0/" in never
