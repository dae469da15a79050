"""certlab's MCP boundary (distribution certlab-mcp-boundary): a command agent that is an MCP client reaches a tool
world only through the harness's recorded tool boundary."""
