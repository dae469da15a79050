"""The intervals family proves itself: clean passes, every seeded tree fails (its held-out cases: beside)."""

from __future__ import annotations

from pathlib import Path

from certlab_intervals.plugin import certlab_task_families

from certlab_core.plugin.types.family import TaskFamily
from certlab_core.testing import FamilyConformance
from certlab_core.testing.family_checks import FamilyChecks

FAMILY: TaskFamily = certlab_task_families()[0]


class TestFamilyChecks(FamilyChecks):
    """The checks every built-in family makes on itself, with the intervals family's facts."""

    family = FAMILY
    family_name = "intervals"
    distribution_dir = Path(__file__).parents[1]
    package = "certlab_intervals"
    visible_test_files = ("test_intervals.py",)
    allowed_paths = ("intervals.py",)
    defect_classes = (
        "off-by-one",
        "inverted-condition",
        "comparison-strictness",
        "argument-order",
        "boundary-clamp",
        "dropped-condition",
    )
    shipped_file = "tree/tests/test_intervals.py"


class TestConformance(FamilyConformance):
    """certlab's own conformance suite, run against the installed intervals family."""

    family_name = "intervals"
    # the published proof this one must re-earn: the fast runner grades each mutant as the recorded run did
    recorded_bundle = str(Path(__file__).parents[3] / "certifications" / "oracle-all" / "bundle.json")
