"""The progress of a long run: per trial, elapsed time, an ETA, the running cost, the trials in flight; a heartbeat."""

from __future__ import annotations

import json
import re
import signal
import time
from typing import Any

import pytest

from certlab_core._runtime.registry import Registry
from certlab_core.certify.lab import Task, TrialSpec, log_to_stderr
from certlab_core.certify.trial_runs import progress_facts, run_trials
from certlab_core.plugin import UsageError
from certlab_core.plugin.types.agent import Usage
from certlab_core.sdk.canonical import unstructure


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


def test_a_long_trial_of_certify_shows_a_heartbeat_on_stderr_and_nowhere_else(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # certify's trials as certify runs them (forked, progress on stderr), with a slow command agent.
    monkeypatch.setenv("CERTLAB_HEARTBEAT_S", "0.4")
    family = registry.get("task_families", "intervals")
    slow = TrialSpec(
        task=Task(family, family.defects[0]),
        agent=registry.get("agents", "command"),
        repeat=1,
        agent_args=("sleep 1.5",),
        agent_timeout_s=30,
    )
    (record,) = run_trials([slow], [], workers=1, progress=log_to_stderr)
    out, err = capfd.readouterr()
    beats = [line for line in err.splitlines() if line.startswith("still running: ")]
    assert len(beats) >= 2, err
    assert re.fullmatch(rf"still running: {re.escape(slow.id)} for 0:0\d; elapsed 0:0\d", beats[0]), beats
    assert "still running" not in out and record.agent_status == "completed"
    assert "still running" not in json.dumps(unstructure(record))


def test_a_heartbeat_interval_that_is_no_number_is_refused_in_one_line() -> None:
    from certlab_core.certify.heartbeat import heartbeat_interval

    assert heartbeat_interval({}) == 30.0 and heartbeat_interval({"CERTLAB_HEARTBEAT_S": "0"}) is None
    assert heartbeat_interval({"CERTLAB_HEARTBEAT_S": "2.5"}) == 2.5
    for bad in ("soon", "-1", "nan", "1e9"):
        with pytest.raises(UsageError, match=r"CERTLAB_HEARTBEAT_S=.*give seconds between heartbeats"):
            heartbeat_interval({"CERTLAB_HEARTBEAT_S": bad})


def _alarm_state() -> tuple[bool, float]:
    return signal.getsignal(signal.SIGALRM) is PREVIOUS[0], signal.getitimer(signal.ITIMER_REAL)[0]


PREVIOUS: list[object] = []


def test_the_heartbeat_beats_here_only_and_leaves_nothing_behind() -> None:
    from certlab_core.certify.heartbeat import InFlight, beating
    from certlab_core.sdk.forking import call_in_fork

    PREVIOUS[:] = [signal.getsignal(signal.SIGALRM)]
    in_flight, said = InFlight(), []
    in_flight.start("t/1")
    with beating(in_flight, said.append, 0.05):
        in_child = call_in_fork(_alarm_state)  # a forked trial: the handler that was there, and no timer
        time.sleep(0.3)
        in_flight.finish("t/1")
        time.sleep(0.1)
        quiet = len(said)
        time.sleep(0.1)
    assert in_child == (True, 0.0)
    assert said and all(re.fullmatch(r"still running: t/1 for 0:00; elapsed 0:00", line) for line in said), said
    assert len(said) == quiet  # nothing in flight: no line
    assert signal.getsignal(signal.SIGALRM) is PREVIOUS[0] and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0
