"""The plugin providing the ``clopper-pearson`` rule (nothing heavy)."""

from __future__ import annotations

from certlab_clopper_pearson import rule
from certlab_core.plugin import StatisticalRule, hookimpl


@hookimpl
def certlab_statistical_rules() -> list[StatisticalRule]:
    return [
        StatisticalRule(
            name=rule.NAME,
            description=(
                "exact Clopper-Pearson interval per arm (tail alpha/(4K) per look), "
                "bounds [L_c - U_b, U_c - L_b] on candidate minus baseline"
            ),
            decide=rule.decide,
            interval=rule.interval,
            plan=rule.plan,
            arm_alpha=rule.arm_alpha,
            default=True,  # the rule a descriptor without rule.name, a contract's intervals and stats use
            interval_name="Clopper-Pearson",  # what heads its exact interval in a contract
        )
    ]
