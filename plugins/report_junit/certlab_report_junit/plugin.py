"""The certlab plugin that provides the ``junit`` reporter."""

from __future__ import annotations

from certlab_core.plugin import Reporter, hookimpl
from certlab_report_junit.render import render


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
