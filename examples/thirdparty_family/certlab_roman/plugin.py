"""The roman family plugin: the module the entry point ``roman`` loads.

A family is data: a clean tree (the module and its visible tests), the prompt every
agent gets (TASK.md), held-out acceptance cases that never enter a work copy, the
paths an agent may change, and the seeded defects, each a textual edit of the clean
tree. certlab proves every defect (the clean tree passes its suite, each seeded tree
fails it) before it certifies anything on this family.
"""

from __future__ import annotations

from pathlib import Path

from certlab_core.plugin import Defect, Seed, TaskFamily, hookimpl

FAMILY_DIR = Path(__file__).parent / "family"
MODULE = "roman.py"
VERSION = "1.0.0"

DEFECTS = (
    Defect(
        id="range-drops-last",
        defect_class="off-by-one",
        description="numeral_range stops before its last numeral",
        seeds=[Seed(MODULE, "range(start, stop + 1)", "range(start, stop)")],
    ),
    Defect(
        id="equal-symbols-subtract",
        defect_class="comparison-strictness",
        description="from_roman subtracts a symbol followed by an equal one, so III is not 3",
        seeds=[Seed(MODULE, "if value < following:", "if value <= following:")],
    ),
    Defect(
        id="non-canonical-accepted",
        defect_class="dropped-condition",
        description="from_roman no longer checks that a numeral is canonical, so IIII passes as 4",
        seeds=[
            Seed(
                MODULE,
                "    if not MIN_VALUE <= total <= MAX_VALUE or to_roman(total) != numeral:\n",
                "    if not MIN_VALUE <= total <= MAX_VALUE:\n",
            )
        ],
    ),
)


@hookimpl
def certlab_task_families() -> list[TaskFamily]:
    """The roman family, its files at absolute paths inside this installed package."""
    return [
        TaskFamily.in_folder(
            FAMILY_DIR,
            name="roman",
            version=VERSION,
            description="one module of Roman numerals: to_roman, from_roman, is_roman, compare, add, numeral_range",
            allowed_paths=[MODULE],
            test_paths=["tests"],
            module_names=["roman"],
            defects=DEFECTS,
        )
    ]
