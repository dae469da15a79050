"""The progress line of a long run: elapsed time, an ETA, the running cost and the trials still in flight."""

from __future__ import annotations

from typing import Any

from certlab_core.certify.lab import progress_facts
from certlab_core.plugin.records import Usage


class _Spec:
    def __init__(self, ident: str) -> None:
        self.id = ident


class _Record:
    def __init__(self, cost: float | None) -> None:
        self.usage = (
            Usage(shape="claude-json", cost_usd=cost, cost_source="client-estimate") if cost is not None else None
        )


def test_after_two_of_five_trials_with_two_workers() -> None:
    specs: list[Any] = [_Spec(f"t/{i}") for i in range(5)]
    results: list[Any] = [_Record(0.25), None, _Record(0.5), None, None]  # trials 0 and 2 are done; 1 and 3 run
    line = progress_facts(specs, results, done=2, workers=2, elapsed_s=130.0)
    assert line == (
        "; elapsed 2:10; ETA 3:15; cost so far $0.7500 (the client's own estimate, 2 trials); in flight: t/1, t/3"
    )


def test_the_last_trial_has_no_eta_and_a_run_without_dollars_says_no_cost() -> None:
    specs: list[Any] = [_Spec("t/0")]
    assert progress_facts(specs, [_Record(None)], done=1, workers=2, elapsed_s=3725.0) == "; elapsed 1:02:05"
