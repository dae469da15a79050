"""certlab's MCP boundary: an MCP client agent reaches tools only through it.

Distribution certlab-mcp-boundary: a command agent that is an MCP client reaches a tool
world only through the harness's recorded tool boundary.
"""
