"""The intervals family plugin: half-open intervals, six defects."""

from __future__ import annotations

from pathlib import Path

from certlab_core.plugin import Defect, Seed, TaskFamily, hookimpl

FAMILY_DIR = Path(__file__).parent / "family"
MODULE = "intervals.py"

DEFECTS = (
    Defect(
        id="length-counts-end",
        defect_class="off-by-one",
        description="length counts the excluded end as if the interval were closed",
        seeds=[Seed(MODULE, "    return end - start\n", "    return end - start + 1\n")],
    ),
    Defect(
        id="intersection-inverted",
        defect_class="inverted-condition",
        description="intersection returns None exactly when the intervals do overlap",
        seeds=[Seed(MODULE, "    if not overlaps(a, b):\n", "    if overlaps(a, b):\n")],
    ),
    Defect(
        id="contains-includes-end",
        defect_class="comparison-strictness",
        description="contains treats the excluded end as a member",
        seeds=[Seed(MODULE, "return start <= point < end", "return start <= point <= end")],
    ),
    Defect(
        id="gaps-swapped-bounds",
        defect_class="argument-order",
        description="gaps builds each hole with its start and end swapped",
        seeds=[Seed(MODULE, "make(previous[1], current[0])", "make(current[0], previous[1])")],
    ),
    Defect(
        id="clamp-to-end",
        defect_class="boundary-clamp",
        description="clamp lets a point above the interval land on the excluded end",
        seeds=[Seed(MODULE, "min(max(point, start), end - 1)", "min(max(point, start), end)")],
    ),
    Defect(
        id="merge-keeps-empty",
        defect_class="dropped-condition",
        description="merge no longer skips empty intervals, so they survive as pieces of the union",
        seeds=[Seed(MODULE, "        if start == end:\n            continue\n", "")],
    ),
)


@hookimpl
def certlab_task_families() -> list[TaskFamily]:
    """The intervals family, with its files at absolute paths inside this installed package."""
    return [
        TaskFamily.in_folder(
            FAMILY_DIR,
            name="intervals",
            version="1.0.0",
            description="one module of half-open integer intervals: length, contains, overlaps, merge, clamp, gaps",
            allowed_paths=[MODULE],
            test_paths=["tests"],
            module_names=["intervals"],
            defects=DEFECTS,
        )
    ]
