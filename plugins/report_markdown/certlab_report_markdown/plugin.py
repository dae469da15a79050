"""The certlab plugin that provides the ``markdown`` reporter."""

from __future__ import annotations

from certlab_core.plugin import Reporter, hookimpl
from certlab_report_markdown.render import render


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
