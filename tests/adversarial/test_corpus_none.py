"""The corpus uncontained (``--sandbox none``): every cheat caught and named, but the answer-key readers."""

from __future__ import annotations

import pytest

from certlab_core._runtime.registry import Registry

from .check import CASES, check_proofs, check_strategy, corpus_run
from .harness import Run

MODE = "none"


@pytest.fixture(scope="module")
def run(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return corpus_run(registry, MODE, tmp_path_factory)


def test_the_instrument_proves_on_every_target(run: Run) -> None:
    check_proofs(run)


@pytest.mark.parametrize(("strategy", "target"), CASES)
def test_cheat(run: Run, strategy: str, target: str, request: pytest.FixtureRequest) -> None:
    check_strategy(run, strategy, target, request)
