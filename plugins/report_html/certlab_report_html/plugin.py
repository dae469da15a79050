"""The certlab plugin that provides the ``html`` reporter."""

from __future__ import annotations

from certlab_core.plugin import Reporter, hookimpl
from certlab_report_html.render import render


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
