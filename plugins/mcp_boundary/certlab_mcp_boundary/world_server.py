"""A Python tool world as an MCP server over stdio, for any MCP client.

    python -m certlab_mcp_boundary.world_server --plugin certlab_retry_world.plugin \
        --world retry-inventory --input '{"orders": 3}' --seed 7

``--plugin`` is the module that provides the world (its ``certlab_tool_worlds`` hook); the
world is built once for ``(input, seed)`` and each of its tools becomes an MCP tool, with the
JSON Schema of its arguments read from the tool function's signature by the official SDK's
``MCPServer``. A tool's refusal (one of the ``ToolError`` family) reaches the client as a
tool error result. This is the environment's server as a user runs it outside the gate;
inside a gate trial the harness builds the world itself and the agent reaches it through
the recorded boundary (``certlab_mcp_boundary.arm``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any


def world_instance(plugin: str, world: str, task_input: dict[str, Any], seed: int) -> Any:
    """The world ``world`` of the plugin module ``plugin``, built for ``(task_input, seed)``."""
    module = importlib.import_module(plugin)
    worlds = {w.name: w for w in module.certlab_tool_worlds() or ()}
    if world not in worlds:
        raise SystemExit(f"world_server: {plugin} provides no world {world!r}; it provides {', '.join(sorted(worlds))}")
    return worlds[world].build(task_input, seed)


def build_server(plugin: str, world: str, task_input: dict[str, Any], seed: int) -> Any:
    from mcp.server.mcpserver import MCPServer

    instance = world_instance(plugin, world, task_input, seed)
    server = MCPServer(f"certlab-world-{world}")
    for name, fn in sorted(instance.tools.items()):
        server.add_tool(fn, name=name, description=(getattr(fn, "__doc__", None) or f"the world's tool {name}"))
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--plugin", required=True, help="the module providing the world (certlab_tool_worlds)")
    parser.add_argument("--world", required=True, help="the world's name")
    parser.add_argument("--input", default="{}", help="the task input, as JSON")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    build_server(options.plugin, options.world, json.loads(options.input), options.seed).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
