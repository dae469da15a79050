"""A rule that breaks in ``stats bounds``, ``plan`` or ``selfcheck`` is one line naming it, exit 3, never a hang.

Before, these commands called the rule's code bare: a rule that raised or answered the wrong
shape was ``certlab: internal error: RuntimeError`` (or ``ValueError: too many values to
unpack``), and one that never returned hung the command until it was killed.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from certlab_core.testing import run_certlab

BROKEN_RULE = """
import os, time
from collections.abc import Mapping
from certlab_core.plugin import Bounds, StatisticalRule, hookimpl

class SlowChances(Mapping):
    # A mapping of the rule's own whose every read waits for good: read past the deadline, it hung the command.
    def __getitem__(self, key):
        while True:
            time.sleep(0.05)

    def __iter__(self):
        return iter(("PASS", "BLOCK", "INCONCLUSIVE"))

    def __len__(self):
        return 3

def breaks(answer):
    how = os.environ["HOW"]
    if how == "slow-mapping":
        return SlowChances()
    if how == "hang":
        while True:
            time.sleep(0.05)
    if how == "raise":
        raise RuntimeError("not today")
    return answer

def decide(x, n, y, m, alpha, delta, conditions, looks):
    return Bounds(lower=-0.5, upper=0.1, verdict="INCONCLUSIVE") if os.environ["HOW"] == "interval" else breaks({})

def interval(successes, n, alpha):
    return breaks("wide")

def plan(p, q, n, alpha, delta, conditions, looks):
    return breaks({"PASS": 0.5, "BLOCK": "half"})

@hookimpl
def certlab_statistical_rules():
    return [StatisticalRule(name="broken", description="breaks", decide=decide, interval=interval, plan=plan)]
"""

BOUNDS = ("stats", "bounds", "--baseline", "20/20", "--candidate", "15/20", "--rule", "broken")
PLAN = ("plan", "--baseline", "0.8", "--candidate", "0.8", "-n", "20", "--rule", "broken")
SELFCHECK = ("selfcheck", "--rule", "broken")
WHOSE = "certlab: error: the statistical rule broken's {} (certlab-broken) "
WAITED = "did not return within 1 s (CERTLAB_PLUGIN_LOAD_S sets the wait)"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("broken-rule")
    (folder / "certlab_broken.py").write_text(textwrap.dedent(BROKEN_RULE), encoding="utf-8")
    info = folder / "certlab_broken-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: certlab-broken\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[certlab.plugins]\nbroken = certlab_broken\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("how", "args", "said"),
    [
        ("raise", BOUNDS, WHOSE.format("decide") + "raised RuntimeError: not today"),
        ("raise", PLAN, WHOSE.format("plan") + "raised RuntimeError: not today"),
        ("raise", SELFCHECK, WHOSE.format("plan") + "raised RuntimeError: not today"),
        ("shape", BOUNDS, WHOSE.format("decide") + "returned dict, not Bounds"),
        ("interval", BOUNDS, WHOSE.format("interval") + "returned str, not tuple or list"),
        ("shape", PLAN, WHOSE.format("plan") + "returned no number for each of PASS, BLOCK and INCONCLUSIVE"),
        ("hang", BOUNDS, WHOSE.format("decide") + WAITED),
        ("hang", PLAN, WHOSE.format("plan") + WAITED),
        ("hang", SELFCHECK, WHOSE.format("plan") + WAITED),
        # Before: the answer was held to the wait, but read after it: a mapping whose get never returns hung plan.
        ("slow-mapping", PLAN, WHOSE.format("plan") + WAITED),
    ],
)
def test_a_broken_rule_is_one_line_naming_it(site: Path, how: str, args: tuple[str, ...], said: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(site), "HOW": how, "CERTLAB_PLUGIN_LOAD_S": "1"}
    done = run_certlab(*args, env=env, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [said]
