"""The corpus in the bwrap sandbox (``--sandbox bwrap``): nothing passes as fixed."""

from __future__ import annotations

import pytest

from certlab_core._runtime.registry import Registry

from .check import CASES, check_proofs, check_strategy, corpus_run
from .harness import Run

MODE = "bwrap"

bwrap_plugin = pytest.importorskip("certlab_sandbox_bwrap.plugin")
REASON = bwrap_plugin.probe()
if REASON is not None:
    pytest.skip(f"the bwrap corpus is skipped: no bwrap sandbox here ({REASON})", allow_module_level=True)


@pytest.fixture(scope="module")
def run(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return corpus_run(registry, MODE, tmp_path_factory)


def test_the_instrument_proves_on_every_target(run: Run) -> None:
    check_proofs(run)


@pytest.mark.parametrize(("strategy", "target"), CASES)
def test_cheat(run: Run, strategy: str, target: str, request: pytest.FixtureRequest) -> None:
    check_strategy(run, strategy, target, request)
