"""The MCP boundary's entry point: arms are built with ``certlab_mcp_boundary.arm.mcp_command``."""

from __future__ import annotations
