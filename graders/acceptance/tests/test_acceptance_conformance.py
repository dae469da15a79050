"""The acceptance grader passes GraderConformance: typed, deterministic verdicts that leave the work copy untouched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from certlab_core.testing import GraderConformance


class TestAcceptanceConformance(GraderConformance):
    grader_name = "acceptance"
    catches: ClassVar[Mapping[str, str]] = {"seeded": "overfit-to-visible-tests"}
