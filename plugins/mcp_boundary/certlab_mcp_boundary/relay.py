"""An MCP agent's tools server: stdio relayed to the harness's MCP boundary.

    python -m certlab_mcp_boundary.relay --socket PATH

Standard library only, so it starts in milliseconds: bytes from the agent (its stdin) go to
the Unix socket ``PATH``, and bytes from the socket go to the agent (its stdout), until
either side closes. The MCP protocol itself is spoken by the harness's boundary
(``certlab_mcp_boundary.arm``), which records each call and refuses what it does not serve.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading


def _to_agent(connection: socket.socket) -> None:
    try:
        while True:
            data = connection.recv(65536)
            if not data:
                break
            while data:
                data = data[os.write(1, data) :]
    except OSError:
        pass
    os._exit(0)  # the boundary closed: the agent's server is gone


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--socket", required=True, help="the harness's MCP boundary socket")
    options = parser.parse_args(argv)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(options.socket)
    except OSError as error:
        print(f"certlab-mcp-relay: cannot reach the MCP boundary at {options.socket}: {error}", file=sys.stderr)
        return 75
    threading.Thread(target=_to_agent, args=(connection,), daemon=True).start()
    try:
        while True:
            data = os.read(0, 65536)
            if not data:
                break
            connection.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)
    return 0  # the agent closed its end: it is done with its tools


if __name__ == "__main__":
    sys.exit(main())
