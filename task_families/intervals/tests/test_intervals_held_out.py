"""The intervals family's held-out cases: certlab-acceptance's checks, with this family's facts."""

from __future__ import annotations

import pytest
from certlab_intervals.plugin import certlab_task_families

conformance = pytest.importorskip(
    "certlab_acceptance.conformance", reason="certlab-acceptance is not installed: the held-out cases are not checked"
)


class TestHeldOutChecks(conformance.HeldOutChecks):
    """The held-out checks every built-in family makes on itself, with the intervals family's facts."""

    family = certlab_task_families()[0]
    visible_call = ("length", [[2, 5]])
