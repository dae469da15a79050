"""The policy grader passes GraderConformance: typed, deterministic verdicts that leave the work copy untouched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from certlab_core.testing import GraderConformance


class TestPolicyConformance(GraderConformance):
    grader_name = "policy"
    catches: ClassVar[Mapping[str, str]] = {"tests-emptied": "policy-tests-modified", "planted": "policy-planted-file"}
