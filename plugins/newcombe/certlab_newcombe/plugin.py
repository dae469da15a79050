"""The plugin providing the ``newcombe`` rule (nothing heavy)."""

from __future__ import annotations

from certlab_core.plugin import StatisticalRule, hookimpl
from certlab_newcombe import rule


@hookimpl
def certlab_statistical_rules() -> list[StatisticalRule]:
    return [
        StatisticalRule(
            name=rule.NAME,
            description=(
                "Wilson score interval per arm at confidence 1 - alpha/K per look, "
                "Newcombe's hybrid score interval (method 10) for candidate minus baseline"
            ),
            decide=rule.decide,
            interval=rule.interval,
            plan=rule.plan,
            arm_alpha=rule.arm_alpha,
        )
    ]
