"""The kernel's exact planning: binomial probabilities against scipy, and no heavy import until a plan is computed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from certlab_rule_support.exact_plan import binomial_pmf
from scipy import stats


@pytest.mark.parametrize(
    ("n", "p"), [(1, 0.3), (16, 0.2), (36, 0.7), (200, 0.95), (2000, 0.5), (5000, 0.8), (7, 0.0), (7, 1.0)]
)
def test_binomial_probabilities_match_scipy(n: int, p: float) -> None:
    mine = binomial_pmf(n, p)
    reference = stats.binom.pmf(np.arange(n + 1), n, p)
    assert float(np.abs(mine - reference).sum()) < 1e-14


def test_the_planning_modules_import_without_numpy_or_scipy() -> None:
    """numpy and scipy made unimportable: the kernel's planning modules still import, and say so when used."""
    code = (
        "import sys\n"
        "sys.modules['numpy'] = sys.modules['scipy'] = None\n"
        "import certlab_rule_support.exact_plan, certlab_rule_support.two_arm_rule, certlab_core.testing.rule_checks\n"
        "try:\n"
        "    certlab_rule_support.exact_plan.binomial_pmf(3, 0.5)\n"
        "except ImportError:\n"
        "    print('numpy is needed only to plan')\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "numpy is needed only to plan"
