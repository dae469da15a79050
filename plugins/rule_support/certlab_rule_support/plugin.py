"""The rule support's commands: ``stats bounds``, ``plan`` and ``selfcheck``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from certlab_core.plugin import Command, hookimpl

if TYPE_CHECKING:
    import typer


def _stats(app: typer.Typer) -> None:
    from certlab_rule_support import stats_cmd

    stats_cmd.register_stats(app)


def _plan(app: typer.Typer) -> None:
    from certlab_rule_support import stats_cmd

    stats_cmd.register_plan(app)


def _selfcheck(app: typer.Typer) -> None:
    from certlab_rule_support import stats_cmd

    stats_cmd.register_selfcheck(app)


@hookimpl
def certlab_commands() -> list[Command]:
    return [
        Command(name="stats", description="Statistics of a rule: bounds from counts.", register=_stats),
        Command(
            name="plan",
            description="Exact P(PASS), P(BLOCK) and P(INCONCLUSIVE) of each design, by enumerating every binomial "
            "outcome.",
            register=_plan,
        ),
        Command(
            name="selfcheck",
            description="The rule's own operating characteristics by exact enumeration; exit 3 if an error rate "
            "exceeds its limit.",
            register=_selfcheck,
        ),
    ]
