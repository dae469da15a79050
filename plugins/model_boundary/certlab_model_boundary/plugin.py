"""The model boundary plugin: ``model-proxy``, one proxy per agent run."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from certlab_core.plugin import ModelBoundary, ModelRun, hookimpl

if TYPE_CHECKING:
    from certlab_model_boundary.proxy import ModelProxy


class ProxySession:
    """One run's proxy: started when opened, pointed at by the agent's environment, stopped when closed."""

    def __init__(self, run: ModelRun) -> None:
        # The proxy (http.server, ssl, ...) is imported by the first run that opens one, not by discovery.
        from certlab_model_boundary.proxy import DeclaredModelFault, ModelBudgets, ModelProxy, Upstream

        faults = [
            DeclaredModelFault(
                index=plan.index,
                name=plan.fault.name,
                fault=plan.fault,
                on_calls=plan.on_calls,
                params=dict(plan.params),
                rng=random.Random(f"{run.seed}/fault/{plan.index}"),
            )
            for plan in run.faults
        ]
        self.proxy: ModelProxy = ModelProxy(
            None if run.replay is not None else Upstream.from_environment(run.env),
            faults=faults,
            budgets=ModelBudgets(calls=run.max_calls, tokens=run.max_tokens),
            replay=run.replay,
            workdir=run.workdir,
        ).start()

    def agent_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return self.proxy.agent_env(env)

    def recording(self) -> dict[str, Any]:
        return self.proxy.recording()

    def close(self) -> None:
        self.proxy.stop()


def open_session(run: ModelRun) -> ProxySession:
    return ProxySession(run)


@hookimpl
def certlab_model_boundaries() -> list[ModelBoundary]:
    return [
        ModelBoundary(
            name="model-proxy",
            description="a loopback proxy for Anthropic Messages and OpenAI chat/Responses: records, faults, budgets",
            open=open_session,
        )
    ]
