"""The certlab plugin that provides the ``markdown`` reporter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from certlab_core.plugin import Reporter, hookimpl

if TYPE_CHECKING:
    from certlab_core.plugin import Report, StatisticalRule


def render(report: Report, rule: StatisticalRule | None, /) -> str:
    """The Markdown file's text; its renderer is imported by the first report written, not by discovery."""
    from certlab_report_markdown import render as renderer

    return renderer.render(report, rule)


@hookimpl
def certlab_reporters() -> list[Reporter]:
    return [
        Reporter(
            name="markdown",
            description="GitHub-flavoured Markdown: the verdict, a table per condition, faults, failure clusters",
            suffix=".md",
            render=render,
        )
    ]
