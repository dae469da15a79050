"""The certlab plugin that provides the ``html`` reporter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from certlab_core.plugin import Reporter, hookimpl

if TYPE_CHECKING:
    from certlab_core.plugin import Report, StatisticalRule


def render(report: Report, rule: StatisticalRule | None, /) -> str:
    """The HTML file's text; its renderer is imported by the first report written, not by discovery."""
    from certlab_report_html import render as renderer

    return renderer.render(report, rule)


@hookimpl
def certlab_reporters() -> list[Reporter]:
    return [
        Reporter(
            name="html",
            description="one self-contained HTML file: the verdict, each condition's interval against the margin, "
            "the plan's operating characteristic (inline SVG, no network)",
            suffix=".html",
            render=render,
        )
    ]
