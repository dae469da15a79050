"""The html reporter passes ReporterConformance: well-formed text for any report, stable, and nothing written."""

from __future__ import annotations

from certlab_core.testing import ReporterConformance


class TestHtmlConformance(ReporterConformance):
    reporter_name = "html"
