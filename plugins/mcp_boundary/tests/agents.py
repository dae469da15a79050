"""The MCP command arms of the tests: each a program that is an MCP client of the trial's tools."""

from __future__ import annotations

import sys
from pathlib import Path

import counter_world
from certlab_mcp_boundary.arm import mcp_command

# Found through the world's module, not this file: a reproducer carries this file alone, and replays it elsewhere.
CLIENTS = Path(counter_world.__file__).resolve().parent / "clients"


def _raw(style: str) -> object:
    return mcp_command([sys.executable, str(CLIENTS / "raw_client.py"), style])


sdk_careful = mcp_command([sys.executable, str(CLIENTS / "counter_client.py"), "careful"])
sdk_careless = mcp_command([sys.executable, str(CLIENTS / "counter_client.py"), "careless"])
careful = _raw("careful")
careless = _raw("careless")
nosy = _raw("nosy")
hasty = _raw("hasty")
greedy = _raw("greedy")
