"""The machine family's held-out cases: certlab-acceptance's checks, and what its tricky defects do to them."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_machine_family import FAMILY, wrongly_fixed_tree

from certlab_core.testing.family_checks import build_tree, find_defect

conformance = pytest.importorskip(
    "certlab_acceptance.conformance", reason="certlab-acceptance is not installed: the held-out cases are not checked"
)


class TestHeldOutChecks(conformance.HeldOutChecks):
    """The held-out checks every built-in family makes on itself, with the machine family's facts."""

    family = FAMILY
    visible_call = ("parse_sexpr", ["1 + 2 * 3"])


def test_power_split_is_half_compensated_with_the_wrong_grouping(tmp_path: Path) -> None:
    tree = build_tree(FAMILY, tmp_path, find_defect(FAMILY, "power-split-into-stars"))
    verdicts = conformance.held_out_verdicts(FAMILY, tree)
    assert verdicts["dump-power-negation"] is False  # the tokenizer splits "**"
    assert verdicts["power-tower"] is False  # the parser's glue groups powers to the left
    assert verdicts["let-power"] is True  # a lone power still works: the hack half-compensates


def test_a_wrong_fix_in_the_api_still_fails_a_held_out_case(tmp_path: Path) -> None:
    assert conformance.held_out_verdicts(FAMILY, wrongly_fixed_tree(tmp_path))["malformed-number-column"] is False
