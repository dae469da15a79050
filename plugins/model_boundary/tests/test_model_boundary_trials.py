"""The model boundary in a trial (``certify.lab.run_trial``): the agent's CLI is pointed at it, its calls are the
trial's record, and the one rule for model errors holds: the real upstream failing is infrastructure, a declared
fault is the condition under test, judged by what the agent left.

The agent here is a small adapter that makes one Anthropic call to wherever its environment points, as a CLI does.
"""

from __future__ import annotations

import http.client
import json
import time
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest
from scripted_process import scripted_process

from certlab_core.certify.lab import Task, TrialSpec, grader_chain, run_trial
from certlab_core.gate.family import model_plans, outcome_of
from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest
from certlab_core.plugin.model_boundary import ModelBoundaryPlan, ModelFaultPlan, judged_status
from certlab_core.plugin.registry import Registry, discover

REAL_KEY = "sk-harness-key-0123456789"
seen: dict[str, Any] = {}


def model_calls(request: AgentRequest, calls: int) -> AgentOutcome:
    """Call the model ``calls`` times, like a CLI: unavailable at the first error the API answers."""
    started = time.monotonic()
    seen["env"] = dict(request.env)
    base = urlsplit(request.env["ANTHROPIC_BASE_URL"])
    status = 200
    for _ in range(calls):
        connection = http.client.HTTPConnection(base.hostname or "", base.port, timeout=10)
        body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": request.prompt[:50]}]}
        connection.request(
            "POST", "/v1/messages", body=json.dumps(body), headers={"x-api-key": request.env["ANTHROPIC_API_KEY"]}
        )
        status = connection.getresponse().status
        connection.close()
        if status != 200:
            break
    return AgentOutcome(
        status="completed" if status == 200 else "unavailable",
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


def test_the_agent_reaches_the_upstream_through_the_boundary_with_a_token(registry: Registry) -> None:
    with scripted_process([{"text": "nothing to do"}]) as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        patch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
        record = trial(registry)
    env = seen["env"]
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
        == "API Error: 500 [model boundary: model-upstream: the anthropic-messages upstream answered HTTP 500]"
    )


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


def test_an_explicit_base_url_takes_a_certification_past_the_boundary(registry: Registry) -> None:
    from certlab_core.plugin.model_boundary import model_plan_for

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
