"""The ledger family's held-out cases: certlab-acceptance's checks, and a wrong fix that still fails them."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ledger_family import FAMILY, wrongly_fixed_tree

conformance = pytest.importorskip(
    "certlab_acceptance.conformance", reason="certlab-acceptance is not installed: the held-out cases are not checked"
)


class TestHeldOutChecks(conformance.HeldOutChecks):
    """The held-out checks every built-in family makes on itself, with the ledger family's facts."""

    family = FAMILY
    visible_call = ("parse_amount", ["2.5"])


def test_a_wrong_fix_in_report_still_fails_a_held_out_case(tmp_path: Path) -> None:
    assert not all(conformance.held_out_verdicts(FAMILY, wrongly_fixed_tree(tmp_path)).values())
