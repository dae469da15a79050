"""The MCP boundary's entry point (arms: ``arm.mcp_command``)."""

from __future__ import annotations
