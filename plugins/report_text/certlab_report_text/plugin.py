"""The certlab plugin that provides the ``text`` reporter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from certlab_core.plugin import Reporter, hookimpl

if TYPE_CHECKING:
    from certlab_core.plugin import Report, StatisticalRule


def render(report: Report, rule: StatisticalRule | None, /) -> str:
    """The plain text; its renderer is imported by the first report written, not by discovery (the rule unused)."""
    from certlab_report_text.render import render_text

    return render_text(report)


@hookimpl
def certlab_reporters() -> list[Reporter]:
    return [
        Reporter(
            name="text",
            description="Plain text for a terminal: the verdict, then per condition its bounds, arms, faults and "
            "failure clusters",
            suffix=".txt",
            render=render,
        )
    ]
