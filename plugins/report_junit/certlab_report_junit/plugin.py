"""The certlab plugin that provides the ``junit`` reporter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from certlab_core.plugin import Reporter, hookimpl

if TYPE_CHECKING:
    from certlab_core.plugin import Report, StatisticalRule


def render(report: Report, rule: StatisticalRule | None, /) -> str:
    """The JUnit XML file's text; its renderer is imported by the first report written, not by discovery."""
    from certlab_report_junit import render as renderer

    return renderer.render(report, rule)


@hookimpl
def certlab_reporters() -> list[Reporter]:
    return [
        Reporter(
            name="junit",
            description="JUnit XML: a test case per condition (BLOCK and INCONCLUSIVE fail, ERROR errs, ceiling skips)",
            suffix=".xml",
            render=render,
        )
    ]
