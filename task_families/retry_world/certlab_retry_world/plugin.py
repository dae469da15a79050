"""The plugin providing the ``retry-inventory`` tool world."""

from __future__ import annotations

from certlab_core.plugin import ToolWorld, hookimpl
from certlab_retry_world import world

NAME = "retry-inventory"


@hookimpl
def certlab_tool_worlds() -> list[ToolWorld]:
    return [
        ToolWorld(
            name=NAME,
            description="inventory reservations (stock, reserve, confirm); some pre-reserved, confirms sometimes busy",
            tools=world.TOOLS,
            build=world.build,
            oracle=world.oracle,
            decisions=True,
            check_input=world.check_input,
        )
    ]
