"""The text reporter passes ReporterConformance: well-formed text for any report, stable, and nothing written."""

from __future__ import annotations

from certlab_core.testing import ReporterConformance


class TestTextConformance(ReporterConformance):
    reporter_name = "text"
