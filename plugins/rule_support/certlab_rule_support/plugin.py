"""The rule support's commands: ``stats bounds``, ``plan`` and ``selfcheck``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from certlab_core.plugin import Command, hookimpl

if TYPE_CHECKING:
    import typer


def _register(which: str) -> Callable[[typer.Typer], None]:
    """The ``register`` of one command: ``stats_cmd.register_WHICH``, imported only when that command is asked for."""

    def register(app: typer.Typer) -> None:
        from certlab_rule_support import stats_cmd

        getattr(stats_cmd, f"register_{which}")(app)

    return register


@hookimpl
def certlab_commands() -> list[Command]:
    return [
        Command(name="stats", description="Statistics of a rule: bounds from counts.", register=_register("stats")),
        Command(
            name="plan",
            description="Exact P(PASS), P(BLOCK) and P(INCONCLUSIVE) of each design, by enumerating every binomial "
            "outcome.",
            register=_register("plan"),
        ),
        Command(
            name="selfcheck",
            description="The rule's own operating characteristics by exact enumeration; exit 3 if an error rate "
            "exceeds its limit.",
            register=_register("selfcheck"),
        ),
    ]
