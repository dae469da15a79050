"""A small MCP client speaking JSON-RPC over stdio by hand (no SDK): the shape of an agent CLI written in any language.

Styles: ``careful`` retries a failed add, ``careless`` does not, ``nosy`` asks for prompts
first, ``hasty`` sends two adds before reading either answer, ``greedy`` never stops adding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


class Session:
    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.next_id = 0

    def send(self, method: str, params: Any = None, notify: bool = False) -> int:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        return self.next_id

    def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise SystemExit(70)  # the server went away
            message = json.loads(line)
            if "id" in message:
                return message

    def request(self, method: str, params: Any = None) -> dict[str, Any]:
        self.send(method, params)
        return self.receive()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


def main(style: str) -> int:
    task = json.loads(os.environ["CERTLAB_TASK"])
    session = Session(json.loads(os.environ["CERTLAB_MCP_SERVER_COMMAND"]))
    hello = session.request(
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    )
    assert "result" in hello, hello
    session.send("notifications/initialized", notify=True)
    tools = session.request("tools/list")["result"]["tools"]
    assert {t["name"] for t in tools} >= {"add", "total"}, tools
    if style == "nosy":
        answer = session.request("prompts/list")
        return 0 if "error" in answer else 1
    if style == "hasty":
        session.send("tools/call", {"name": "add", "arguments": {"amount": 1}})
        session.send("tools/call", {"name": "add", "arguments": {"amount": 1}})
        session.receive()
        session.receive()
        return 0
    done = 0
    while done < task["target"] or style == "greedy":
        answer = session.request("tools/call", {"name": "add", "arguments": {"amount": 1}})
        if "error" in answer:  # a protocol error: the boundary ended the trial
            return 1
        if answer["result"].get("isError") and style == "careful":
            continue
        done += 1
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
