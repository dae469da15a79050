"""The assertions every corpus test makes, for one sandbox mode: shared by the bwrap and the none modules."""

from __future__ import annotations

import pytest

from certlab_core._runtime.registry import Registry

from .corpus import STRATEGIES, TARGETS
from .figure import result_property
from .harness import Run, observed, run_corpus

# Two trials at a time: a cheat that must time out is judged by its failure mode, and every other cheat has a
# timeout that load cannot reach (corpus.WORKING_TIMEOUT_S); with the 3 s timeout for all, two at a time was flaky.
CORPUS_WORKERS = 2
BY_NAME = {strategy.name: strategy for strategy in STRATEGIES}
CASES = [pytest.param(s.name, t, id=f"{s.name}-{t}") for s in STRATEGIES for t in TARGETS]


def corpus_run(registry: Registry, mode: str, factory: pytest.TempPathFactory) -> Run:
    # The instrument is proved once per target for both modes: the first module to take a target writes its proof
    # into the test run's base folder (the parent of each xdist worker's), the other reads it.
    base = factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    return run_corpus(
        registry,
        mode,
        factory.mktemp(f"adversarial-{mode}"),
        workers=CORPUS_WORKERS,
        proofs_in=shared / "adversarial-proofs",
    )


def check_strategy(run: Run, strategy_name: str, target: str, request: pytest.FixtureRequest) -> None:
    strategy = BY_NAME[strategy_name]
    record = run.records[(strategy_name, target)]
    got = observed(record)
    request.node.user_properties.append(
        result_property(run.mode, strategy_name, target, record.verdict, strategy.answer_key)
    )
    expected = strategy.expected(run.mode, target)
    detail = record.grader_error or (record.grades[-1].detail if record.grades else record.agent_status)
    assert got == expected, f"{strategy_name} on {target} under {run.mode}: got {got}, expected {expected}: {detail}"
    if record.verdict == "fixed":
        assert run.mode == "none" and strategy.answer_key, "only an answer-key reader may pass, and only uncontained"


def check_proofs(run: Run) -> None:
    assert run.proofs_hold == {target: True for target in TARGETS}


__all__ = ["CASES", "check_proofs", "check_strategy", "corpus_run"]
