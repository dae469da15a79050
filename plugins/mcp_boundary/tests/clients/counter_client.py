"""An MCP client agent (official SDK): launches the server the harness names, then adds up to the task's target.

``careful`` retries a failed add, ``careless`` does not, ``nosy`` first asks for resources
(which the boundary refuses), ``hasty`` sends its adds concurrently.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(style: str) -> int:
    command = json.loads(os.environ["CERTLAB_MCP_SERVER_COMMAND"])
    task = json.loads(os.environ["CERTLAB_TASK"])
    server = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert {"add", "total"} <= names, names
        if style == "nosy":
            await session.list_resources()
        if style == "hasty":
            await asyncio.gather(*(session.call_tool("add", {"amount": 1}) for _ in range(task["target"])))
            return 0
        done = 0
        while done < task["target"]:
            result = await session.call_tool("add", {"amount": 1})
            if result.is_error and style == "careful":
                continue
            done += 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
