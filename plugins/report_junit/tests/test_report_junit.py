"""The JUnit reporter's file, read back by a real JUnit parser (junitparser)."""

from __future__ import annotations

import json
from pathlib import Path

from certlab_clopper_pearson.rule import interval as exact_interval
from certlab_report_junit.render import render
from junitparser import Error, Failure, JUnitXml, Skipped

from certlab_core.report.model import Report, build_report

ARCHIVED = Path(__file__).resolve().parents[3] / "tests" / "archived_stores"


def report_of(name: str) -> Report:
    folder = ARCHIVED / name
    manifest = json.loads((folder / "manifest.json").read_text())
    decision = json.loads((folder / "decision.json").read_text())
    lines = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    return build_report(manifest, lines, decision, run=name, exact=exact_interval)


def parsed(name: str, tmp_path: Path) -> tuple[Report, JUnitXml]:
    report = report_of(name)
    path = tmp_path / "junit.xml"
    path.write_text(render(report), encoding="utf-8")
    return report, JUnitXml.fromfile(str(path))


def outcomes(xml: JUnitXml) -> dict[str, list[tuple[str, str | None]]]:
    (suite,) = list(xml)
    return {case.name: [(type(r).__name__, r.type) for r in case.result] for case in suite}


def test_block_fails_its_case_and_the_verdict(tmp_path: Path) -> None:
    _report, xml = parsed("block", tmp_path)
    (suite,) = list(xml)
    assert suite.name == "certlab.archived-block"
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (3, 3, 0, 0)
    assert outcomes(xml) == {
        "reserve-timeout (falsify)": [("Failure", "BLOCK")],
        "clean (benign)": [("Failure", "INCONCLUSIVE")],
        "experiment verdict": [("Failure", "BLOCK")],
    }
    properties = {p.name: p.value for p in suite.properties()}
    assert properties["verdict"] == "BLOCK" and properties["rule"] == "clopper-pearson"
    case = next(c for c in suite if c.name == "reserve-timeout (falsify)")
    failure = case.result[0]
    assert isinstance(failure, Failure) and "upper bound" in (failure.message or "")
    assert "tool-fault-uncaught" in (case.system_out or "")


def test_error_is_an_error_with_its_problem(tmp_path: Path) -> None:
    _report, xml = parsed("error", tmp_path)
    (suite,) = list(xml)
    assert suite.errors == 2 and suite.failures == 0
    verdict = next(c for c in suite if c.name == "experiment verdict")
    assert isinstance(verdict.result[0], Error) and "injector-broken" in (verdict.result[0].message or "")


def test_inconclusive_fails_the_verdict_case(tmp_path: Path) -> None:
    _report, xml = parsed("inconclusive", tmp_path)
    assert outcomes(xml) == {
        "clean (benign)": [("Failure", "INCONCLUSIVE")],
        "experiment verdict": [("Failure", "INCONCLUSIVE")],
    }


def test_a_ceiling_condition_is_a_skipped_case(tmp_path: Path) -> None:
    import attrs

    report = report_of("block")
    clean = attrs.evolve(report.conditions[1], bucket="ceiling", gating=False)
    reasons = [r.replace("clean (benign)", "clean (ceiling)") for r in report.reasons]
    report = attrs.evolve(report, conditions=[report.conditions[0], clean], reasons=reasons)
    path = tmp_path / "junit.xml"
    path.write_text(render(report), encoding="utf-8")
    (suite,) = list(JUnitXml.fromfile(str(path)))
    case = next(c for c in suite if c.name == "clean (ceiling)")
    assert isinstance(case.result[0], Skipped) and "never gated" in (case.result[0].message or "")
    assert (case.result[0].message or "").startswith("reported only:")  # no PASS or BLOCK for a ceiling
    verdict = next(c for c in suite if c.name == "experiment verdict")
    assert "clean (ceiling): reported only, never gated" in (verdict.system_out or "")
    assert suite.skipped == 1
