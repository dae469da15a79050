"""ReporterConformance rejects reporters that break the contract; the shipped reporters pass it in their own tests.

The broken ones: a reporter that writes its file itself, one that assumes a condition ran, one
that pastes names into HTML unescaped, one that stamps the time, one whose XML does not parse,
and one that never shows the verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from certlab_core.plugin.report import Report
from certlab_core.plugin.types.reporter import Reporter
from certlab_core.plugin.types.rule import StatisticalRule
from certlab_core.sdk.forking import call_in_fork
from certlab_core.testing import ReporterConformance
from certlab_core.testing.reporter_checks import render_watched

REJECTED = (AssertionError, pytest.fail.Exception)


def lines(report: Report) -> str:
    return "\n".join([f"{report.experiment}: {report.verdict}", *(c.name for c in report.conditions)]) + "\n"


def writes_its_file(report: Report, rule: StatisticalRule | None) -> str:
    Path("report.md").write_text(lines(report))
    return lines(report)


def first_condition(report: Report, rule: StatisticalRule | None) -> str:
    return f"{report.verdict}: {report.conditions[0].name}\n"


def html_unescaped(report: Report, rule: StatisticalRule | None) -> str:
    return f"<html><body><h1>{report.experiment}</h1><pre>{lines(report)}</pre></body></html>\n"


def stamped(report: Report, rule: StatisticalRule | None) -> str:
    return f"rendered at {time.monotonic_ns()}\n{lines(report)}"


def xml_unclosed(report: Report, rule: StatisticalRule | None) -> str:
    return f"<report verdict='{report.verdict}'>{''.join(c.name for c in report.conditions)}\n"


def no_verdict(report: Report, rule: StatisticalRule | None) -> str:
    return "\n".join(c.name for c in report.conditions) + "\n."


def renderings(render: Callable[..., str], suffix: str, tmp_path: Path) -> tuple[ReporterConformance, dict[str, Any]]:
    reporter = Reporter(name="broken", description="a reporter under test", suffix=suffix, render=render)

    class Broken(ReporterConformance):
        reporter_name = "broken"

        def reporter(self) -> Reporter:
            return reporter

    # In a fork, as the kit renders: render_watched moves its process to fresh folders.
    return Broken(), call_in_fork(render_watched, reporter, None, str(tmp_path / "watched"), timeout=60)


@pytest.mark.parametrize(
    ("render", "suffix", "check", "message"),
    [
        (writes_its_file, ".md", "test_rendering_writes_no_file", r"render wrote files: \['cwd/report.md'\]"),
        (first_condition, ".txt", "test_it_renders_a_report_in_which_nothing_ran", "render raised: .*IndexError"),
        (html_unescaped, ".html", "test_the_text_is_well_formed_for_its_suffix", "unescaped"),
        (stamped, ".txt", "test_the_same_report_renders_to_the_same_text", "two different texts"),
        (xml_unclosed, ".xml", "test_the_text_is_well_formed_for_its_suffix", "not well-formed XML"),
        (no_verdict, ".txt", "test_it_shows_the_verdict_and_every_condition", "verdict BLOCK is not shown"),
    ],
)
def test_a_reporter_that_breaks_the_contract_is_rejected(
    render: Callable[..., str], suffix: str, check: str, message: str, tmp_path: Path
) -> None:
    checks, rendered = renderings(render, suffix, tmp_path)
    with pytest.raises(REJECTED, match=message):
        getattr(checks, check)(rendered)


def test_a_reporter_whose_suffix_is_no_file_ending_is_rejected(tmp_path: Path) -> None:
    checks, _rendered = renderings(writes_its_file, "md", tmp_path)
    with pytest.raises(REJECTED, match="is no file ending"):
        checks.test_its_record_is_well_formed()
