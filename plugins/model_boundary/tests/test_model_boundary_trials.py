"""The model boundary in a trial (``certify.lab.run_trial``): the agent's CLI is pointed at it, its calls are the
trial's record, and the one rule for model errors holds: the real upstream failing is infrastructure, a declared
fault is the condition under test, judged by what the agent left.

The agent here is a small adapter that makes one Anthropic call to wherever its environment points, as a CLI does.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest
from scripted_process import scripted_process

from certlab_core._runtime.registry import Registry, discover
from certlab_core.certify.lab import Task, TrialSpec, run_trial
from certlab_core.gate.family import model_plans, outcome_of
from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest
from certlab_core.plugin.types.model_boundary import ModelFaultPlan
from certlab_core.sdk.grading import grader_chain
from certlab_core.sdk.model_boundary import ModelBoundaryPlan, judged_status, recovered_upstream_errors

REAL_KEY = "sk-harness-key-0123456789"
SEEN_ENV = "CERTLAB_TEST_SEEN_ENV"  # where the adapter writes the environment it got: its run is a forked child's


def model_calls(request: AgentRequest, calls: int, retries: int = 0, says_done: bool = False) -> AgentOutcome:
    """Call the model ``calls`` times, like a CLI: a failed call is tried again up to ``retries`` times, then the
    run gives up, unavailable (or, ``says_done``, completed: a CLI that does not say it gave up)."""
    started = time.monotonic()
    if os.environ.get(SEEN_ENV):
        Path(os.environ[SEEN_ENV]).write_text(json.dumps(dict(request.env)))
    base = urlsplit(request.env["ANTHROPIC_BASE_URL"])
    status, made, left = 200, 0, retries
    while made < calls:
        connection = http.client.HTTPConnection(base.hostname or "", base.port, timeout=10)
        body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": request.prompt[:50]}]}
        connection.request(
            "POST", "/v1/messages", body=json.dumps(body), headers={"x-api-key": request.env["ANTHROPIC_API_KEY"]}
        )
        status = connection.getresponse().status
        connection.close()
        if status == 200:
            made += 1
        elif left:
            left -= 1
        else:
            break
    done = status == 200 or says_done
    return AgentOutcome(
        status="completed" if done else "unavailable",
        wall_s=time.monotonic() - started,
        detail="" if status == 200 else f"API Error: {status}",
    )


AGENT = AgentAdapter(name="one-call", description="one model call", run=lambda request: model_calls(request, 1))


@pytest.fixture(scope="module")
def registry() -> Registry:
    return discover(only=["intervals", "policy", "suite", "faults", "model-boundary"])


def trial(
    registry: Registry,
    faults: tuple[ModelFaultPlan, ...] = (),
    agent: AgentAdapter = AGENT,
    max_tokens: int | None = None,
) -> Any:
    family = registry.get("task_families", "intervals")
    boundary = registry.get("model_boundaries", "model-proxy")
    spec = TrialSpec(
        task=Task(family, family.defects[0]),
        agent=agent,
        repeat=1,
        agent_timeout_s=30,
        model_boundary=ModelBoundaryPlan(boundary, faults, seed=3, max_tokens=max_tokens),
    )
    return run_trial(spec, grader_chain(registry))


def test_the_agent_reaches_the_upstream_through_the_boundary_with_a_token(registry: Registry, tmp_path: Path) -> None:
    with scripted_process([{"text": "nothing to do"}]) as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        patch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
        patch.setenv(SEEN_ENV, str(tmp_path / "env.json"))
        record = trial(registry)
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["ANTHROPIC_BASE_URL"] != server.base_url and REAL_KEY not in json.dumps(env)
    (request,) = [r for r in server.requests if r["protocol"] == "anthropic-messages"]
    assert request["headers"]["x-api-key"] == REAL_KEY
    assert record.model["counts"]["model_calls"] == 1 and record.model["events"][0]["status"] == "ok"
    assert (record.agent_status, record.verdict, record.failure_mode) == ("completed", "not-fixed", "suite-failed")
    assert REAL_KEY not in json.dumps(record.model)


def test_a_declared_429_is_the_condition_under_test_not_an_outage(registry: Registry) -> None:
    rate_limit = ModelFaultPlan(index=0, fault=registry.get("faults", "model_rate_limit"), on_calls=(1,))
    with scripted_process([{"text": "nothing to do"}]) as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        patch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
        record = trial(registry, (rate_limit,))
    assert [r for r in server.requests if r["protocol"] == "anthropic-messages"] == []
    assert record.agent_status == "completed"  # the adapter said unavailable; the 429 was ours
    assert "declared fault under test" in record.agent_detail
    assert (record.verdict, record.failure_mode) == ("not-fixed", "suite-failed")  # judged by what it left
    assert record.model["faults"][0]["fired"] is True


def test_a_call_past_the_token_budget_is_refused_and_the_trial_is_budget_exceeded(registry: Registry) -> None:
    # The first answer reports 100 + 20 tokens (the scripted default); a budget of 100 refuses the second call.
    twice = AgentAdapter(name="two-calls", description="two model calls", run=lambda r: model_calls(r, 2))
    with scripted_process([{"text": "a"}, {"text": "b"}]) as server, pytest.MonkeyPatch.context() as p:
        p.setenv("ANTHROPIC_BASE_URL", server.base_url)
        p.setenv("ANTHROPIC_API_KEY", REAL_KEY)
        record = trial(registry, agent=twice, max_tokens=100)
    assert len([r for r in server.requests if r["protocol"] == "anthropic-messages"]) == 1
    assert record.model["budget_exceeded"] == "model_tokens" and record.model["infra_error"] is None
    assert record.model["events"][1]["error"]["type"] == "BudgetExceeded"
    # The adapter saw an API error; the budget was the trial's own, so it is neither an outage nor a grade.
    assert (record.agent_status, record.verdict, record.failure_mode) == ("completed", "not-fixed", "budget-exceeded")
    assert record.agent_detail.startswith("the model boundary refused a call past the trial's model_tokens budget")
    assert record.grades == ()
    # Replayed from its recording with the same budget (no upstream at all), the trial ends the same way.
    boundary = registry.get("model_boundaries", "model-proxy")
    family = registry.get("task_families", "intervals")
    again = run_trial(
        TrialSpec(
            task=Task(family, family.defects[0]),
            agent=twice,
            repeat=1,
            agent_timeout_s=30,
            model_boundary=ModelBoundaryPlan(boundary, replay=tuple(record.model["events"]), max_tokens=100),
        ),
        grader_chain(registry),
    )
    assert (again.verdict, again.failure_mode, again.model["departure"]) == ("not-fixed", "budget-exceeded", None)
    # In a gate, the line names the descriptor's budget.
    outcome = outcome_of(record, infra_exit_codes=())
    assert (outcome["budget_exceeded"], outcome["family_failure_mode"], outcome["error"]) == (
        "tokens",
        "budget-exceeded",
        None,
    )


def test_a_gates_token_budget_is_each_conditions_model_budget(registry: Registry) -> None:
    condition = SimpleNamespace(name="clean", faults=[])
    manifest = SimpleNamespace(conditions=[condition], budgets=SimpleNamespace(model_steps=9, tokens=700))
    plan = model_plans(manifest, registry)["clean"]
    assert (plan.max_calls, plan.max_tokens) == (9, 700)


def test_an_error_of_the_real_upstream_is_agent_unavailable(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    with scripted_process([{"http_status": 500, "error_message": "outage"}]) as down:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", down.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
        record = trial(registry)
    assert (record.agent_status, record.verdict, record.failure_mode) == (
        "unavailable",
        "unavailable",
        "agent-unavailable",
    )
    assert (
        record.agent_detail
        == "API Error: 500 [model boundary: model-upstream: the anthropic-messages upstream answered HTTP 500; "
        "the run ended on it: its last model call failed (1 upstream error (HTTP 500))]"
    )


def upstream_trial(registry: Registry, agent: AgentAdapter, first_calls: list[dict[str, Any]]) -> Any:
    with scripted_process([{"text": "nothing to do"}], first_calls) as upstream, pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANTHROPIC_BASE_URL", upstream.base_url)
        patch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
        return trial(registry, agent=agent)


RETRYING = AgentAdapter(name="retrying", description="retries twice", run=lambda r: model_calls(r, 1, retries=2))


def test_a_trial_that_recovers_from_an_upstream_429_is_graded_and_says_so(registry: Registry) -> None:
    # The upstream answers the first call HTTP 429; the agent's own retry is answered: the run did not end on the
    # outage, so it is judged by what it left (this agent changes nothing: suite-failed), not agent-unavailable.
    record = upstream_trial(registry, RETRYING, [{"http_status": 429, "error_message": "slow down"}])
    assert record.model["call_statuses"] == ["upstream-429", "ok"]
    assert (record.agent_status, record.verdict, record.failure_mode) == ("completed", "not-fixed", "suite-failed")
    assert record.agent_detail == "recovered from 1 upstream error (HTTP 429)"
    assert [g.grader for g in record.grades] == ["policy", "suite"]
    assert recovered_upstream_errors(record.model, record.verdict) == 1
    # In a gate the line names them, and is a failure of the agent's own (suite-failed), not an ERROR.
    outcome = outcome_of(record, infra_exit_codes=())
    assert (outcome["upstream_errors"], outcome["error"]) == (["upstream-429"], None)


def test_a_trial_whose_last_model_call_failed_upstream_is_agent_unavailable(registry: Registry) -> None:
    # 429 on every call: the agent retries twice and gives up; a CLI that says nothing of it is unavailable too.
    every = [{"http_status": 429, "error_message": "slow down"}] * 3
    gave_up = upstream_trial(registry, RETRYING, every)
    quiet = AgentAdapter(name="quiet", description="", run=lambda r: model_calls(r, 1, retries=2, says_done=True))
    silent = upstream_trial(registry, quiet, every)
    for record in (gave_up, silent):
        assert record.model["call_statuses"] == ["upstream-429"] * 3
        assert (record.agent_status, record.verdict, record.failure_mode) == (
            "unavailable",
            "unavailable",
            "agent-unavailable",
        )
        assert record.grades == ()
        assert "the run ended on it: its last model call failed (3 upstream errors (HTTP 429 ×3))" in (
            record.agent_detail
        )
        assert recovered_upstream_errors(record.model, record.verdict) == 0
    assert gave_up.agent_detail.startswith("API Error: 429 [model boundary: model-upstream: the anthropic-messages")
    assert silent.agent_detail.startswith("model-upstream: the anthropic-messages upstream answered HTTP 429; the run")


def test_the_rule_for_model_errors() -> None:
    fired = {"faults": [{"fired": True}], "infra_error": None}
    assert judged_status("unavailable", "API Error: 429", fired)[0] == "completed"
    assert judged_status("crashed", "", fired) == ("crashed", "")
    assert judged_status("completed", "", {"faults": [], "infra_error": "model-upstream: 401"})[0] == "unavailable"
    assert judged_status("crashed", "exit 1", {"faults": [], "infra_error": "u"}) == ("unavailable", "u; exit 1")
    assert judged_status("unavailable", "x", {"faults": [{"fired": False}], "infra_error": None}) == (
        "unavailable",
        "x",
    )
    assert judged_status("timeout", "", None) == ("timeout", "")
    # With a status per call: an upstream error costs the run only when it ended on one, or the CLI gave up.
    met = {"faults": [], "infra_error": "model-upstream: 429", "call_statuses": ["upstream-429", "ok"]}
    assert judged_status("completed", "2 turns", met) == (
        "completed",
        "recovered from 1 upstream error (HTTP 429); 2 turns",
    )
    assert judged_status("timeout", "", met) == ("timeout", "recovered from 1 upstream error (HTTP 429)")
    assert judged_status("unavailable", "API Error", met) == (
        "unavailable",
        "API Error [model boundary: 1 upstream error (HTTP 429); the last model call was answered]",
    )
    ended = {**met, "call_statuses": ["ok", "upstream-500", "upstream-unreachable"]}
    status, detail = judged_status("completed", "", ended)
    assert status == "unavailable" and detail.endswith(
        "last model call failed (2 upstream errors (HTTP 500, unreachable))"
    )
    assert judged_status("timeout", "", ended)[0] == "unavailable"
    # The boundary's own failure, or a recording with no status per call: unavailable whatever the calls were.
    broken = {**met, "call_statuses": ["boundary-error", "upstream-429", "ok"]}
    assert judged_status("completed", "", broken) == ("unavailable", "model-upstream: 429")
    # A declared fault the CLI gave up on is still the condition under test, after a recovered upstream error.
    faulted = {
        "faults": [{"fired": True}],
        "infra_error": "model-upstream: 429",
        "call_statuses": ["upstream-429", "injected"],
    }
    assert judged_status("unavailable", "", faulted)[0] == "completed"
    # A replayed recording holds the statuses but no infra_error: judged as the run it replays.
    assert judged_status("completed", "", {"faults": [], "call_statuses": ["upstream-429"]})[0] == "unavailable"


def test_an_explicit_base_url_takes_a_certification_past_the_boundary(registry: Registry) -> None:
    from certlab_core.sdk.model_boundary import model_plan_for

    plan = model_plan_for(registry, ("--model=m",))
    assert plan is not None and plan.boundary.name == "model-proxy" and plan.faults == ()
    assert model_plan_for(registry, ("--base-url=http://127.0.0.1:9",)) is None
    assert model_plan_for(registry, ("--base-url", "http://127.0.0.1:9")) is None
    assert model_plan_for(discover(only=["intervals"]), ()) is None  # no boundary installed


def test_a_certified_trial_without_a_model_recording_cannot_be_replayed() -> None:
    import subprocess
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "certifications" / "oracle-all"
    trial = json.loads((folder / "bundle.json").read_text())["trials"][0]["id"]
    done = subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", "replay", str(folder), "--trial", trial],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "invalid: the trial holds no model recording" in done.stdout
    unknown = subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", "replay", str(folder), "--trial", "no/such/1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert unknown.returncode == 4 and "holds no trial 'no/such/1'" in unknown.stderr
