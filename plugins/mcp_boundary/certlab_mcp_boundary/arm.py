"""Command agents behind MCP: any MCP program, its tools the trial's boundary.

In a descriptor, an arm's ``agent`` names an object built by :func:`mcp_command`::

    # my_agents.py, next to certlab.yaml
    from certlab_mcp_boundary.arm import mcp_command
    careful = mcp_command(["node", "agent.js", "{mcp_config}"])

    # certlab.yaml
    arms:
      baseline: {agent: "my_agents:careful"}

In each trial the harness opens the MCP boundary (a Unix socket in certlab's runtime folder) over the
trial's tool boundary, which records every call and applies the condition's budgets and
faults, and starts the program in a new session with:

- ``CERTLAB_MCP_SERVER_COMMAND``: the server command to launch over stdio, as a JSON list
  (``python -m certlab_mcp_boundary.relay --socket PATH``), and ``CERTLAB_MCP_CONFIG``: the
  same as an ``mcpServers`` file (the format Claude Code's ``--mcp-config`` reads);
- ``CERTLAB_TASK``: the task as JSON (also in the argument ``{task}``).

The program's exit code is its ending: 0 completed (then the oracle judges the world), any
other an ``exited`` agent (75 is an infrastructure failure by default). A request the relay
refuses (``mcp-unsupported: METHOD``) makes the trial ERROR. A spent budget or a broken
world ends the program and the trial as it would a Python agent.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from certlab_core.plugin import BoundaryBroken, BudgetExceeded, ToolError
from certlab_core.sdk.containment import contained_environment, runtime_folder
from certlab_core.sdk.trees import temporary_folder

TAIL = 2000
KILL_GRACE_S = 2.0
GENERIC_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}
ALLOWED_REQUESTS = frozenset({"initialize", "tools/list", "tools/call"})
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
POLL_S = 0.02
SETTLE_S = 30.0  # how long stop() waits for tool calls already accepted to return from the world


class McpBoundary:
    """The MCP boundary the harness owns for one trial: an MCP server (official SDK) on a Unix socket.

    Each connection (a relay the agent launched) is one MCP session served from a thread of
    the trial's process. ``tools`` is what a Python agent would receive (the recorded tool
    boundary, or a replay of it): every ``tools/call`` becomes one ``tools.call``, one at a
    time. ``initialize`` and ``tools/list`` are answered here; any other request, or a tool
    call while one is in flight, is refused as ``mcp-unsupported: METHOD`` and noted in
    ``refusals``. A spent budget or a broken world is kept in ``fatal``.
    """

    def __init__(self, tools: Any, path: str, schemas: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.tools = tools
        self.path = path
        self.schemas = dict(schemas or {})
        self.refusals: list[str] = []
        self.fatal: BaseException | None = None
        self.calls = 0
        self.ended = threading.Event()  # set when the trial must end now (a refusal, a fatal error)
        self._lock = threading.Lock()  # one tool call at a time reaches the world
        self._accepted = 0  # tool calls accepted and not yet returned from the world
        self._closed = False  # stop() has begun: no new tool call is accepted
        self._settled = threading.Condition()
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []

    def start(self) -> McpBoundary:
        """Listen on the socket; a socket that cannot be made is the harness's failure, never the agent's."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.path)
            listener.listen(8)
        except OSError as error:
            listener.close()
            line = f"runner-broken: the MCP boundary's socket {self.path} cannot be made: {error}"
            raise BoundaryBroken(line) from None
        self._listener = listener
        threading.Thread(target=self._accept, name="certlab-mcp-boundary", daemon=True).start()
        return self

    def stop(self) -> None:
        """Close the socket and its sessions, then wait for the tool calls already accepted.

        A call accepted before the trial ended (say, the one in flight when a concurrent call was
        refused) still reaches the world; waiting for it keeps the trial's record whole and
        ensures nothing reaches the world after the trial has ended.
        """
        with self._settled:
            self._closed = True
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        for connection in self._connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        with self._settled:
            self._settled.wait_for(lambda: self._accepted == 0, timeout=SETTLE_S)

    def accept_call(self) -> bool:
        """Count one tool call as accepted; False once the boundary is stopping."""
        with self._settled:
            if self._closed:
                return False
            self._accepted += 1
            return True

    def call_returned(self) -> None:
        """One accepted tool call has been answered (or its session has gone)."""
        with self._settled:
            self._accepted -= 1
            self._settled.notify_all()

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                connection, _address = listener.accept()
            except OSError:
                return
            self._connections.append(connection)
            threading.Thread(target=self._session_thread, args=(connection,), daemon=True).start()

    def _session_thread(self, connection: socket.socket) -> None:
        import anyio

        with contextlib.suppress(Exception):
            anyio.run(self._session, connection)
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
        connection.close()

    async def _session(self, connection: socket.socket) -> None:
        import anyio
        from mcp.server.stdio import stdio_server

        reader = anyio.wrap_file(io.TextIOWrapper(connection.makefile("rb"), encoding="utf-8", errors="replace"))
        writer = anyio.wrap_file(io.TextIOWrapper(connection.makefile("wb"), encoding="utf-8", write_through=True))
        server = self._server()
        async with stdio_server(stdin=reader, stdout=writer) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    # ------------------------------------------------------------------ the MCP server

    def tool_list(self) -> list[dict[str, Any]]:
        return [
            {
                "name": name,
                "description": f"the world's tool {name}",
                "input_schema": dict(self.schemas.get(name, GENERIC_SCHEMA)),
            }
            for name in self.tools.names
        ]

    def refuse(self, what: str) -> None:
        with self._lock:
            self.refusals.append(what)
        self.ended.set()

    def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """One tool call through the trial's boundary: ``{"result"}``, ``{"error"}`` or ``{"fatal"}``."""
        with self._lock:
            if self.fatal is not None:
                return {"fatal": f"{type(self.fatal).__name__}: {self.fatal}"}
            self.calls += 1
            try:
                return {"result": self.tools.call(name, **{str(k): v for k, v in arguments.items()})}
            except ToolError as error:
                return {"error": {"type": type(error).__name__, "message": str(error)}}
            except (BudgetExceeded, BoundaryBroken) as error:
                self.fatal = error
                self.ended.set()
                return {"fatal": f"{type(error).__name__}: {error}"}

    def _server(self) -> Any:
        import anyio
        import mcp_types as types
        from mcp.server.lowlevel import Server
        from mcp.shared.exceptions import MCPError

        in_flight = [0]

        async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(
                tools=[
                    types.Tool(name=t["name"], description=t["description"], input_schema=t["input_schema"])
                    for t in self.tool_list()
                ]
            )

        async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            answer = await anyio.to_thread.run_sync(self.call, params.name, dict(params.arguments or {}))
            if "fatal" in answer:
                raise MCPError(INTERNAL_ERROR, str(answer["fatal"]))
            if "error" in answer:
                error = answer["error"]
                text = f"{error['type']}: {error['message']}"
                return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
            result = answer["result"]
            return types.CallToolResult(
                content=[types.TextContent(text=json.dumps(result))],
                structured_content={"result": result},
                is_error=False,
            )

        async def refuse_the_unsupported(ctx: Any, call_next: Any) -> Any:
            method = str(ctx.method)
            if ctx.request_id is None:  # a notification: nothing to answer, nothing the boundary records
                return await call_next(ctx)
            if method not in ALLOWED_REQUESTS or (method == "tools/call" and in_flight[0]):
                what = "concurrent tools/call" if method == "tools/call" else method
                self.refuse(what)
                raise MCPError(METHOD_NOT_FOUND, f"mcp-unsupported: {what}")
            if method != "tools/call":
                return await call_next(ctx)
            if not self.accept_call():
                raise MCPError(INTERNAL_ERROR, "the trial has ended")
            in_flight[0] += 1
            try:
                return await call_next(ctx)  # the world's call runs in a thread that a cancel waits for
            finally:
                in_flight[0] -= 1
                self.call_returned()

        server = Server("certlab-mcp-boundary", on_list_tools=list_tools, on_call_tool=call_tool)
        server.middleware.insert(0, refuse_the_unsupported)
        return server


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-TAIL:].decode("utf-8", "replace")
    except OSError:
        return ""


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # the relay and anything else left in its session
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=KILL_GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


class McpCommandAgent:
    """A tool-world agent ``(task, tools, rng)`` that runs a program speaking MCP (see the module's docstring)."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        schemas: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        if not argv:
            raise ValueError("mcp_command needs a command line")
        self.argv = tuple(str(a) for a in argv)
        self.env = dict(env or {})
        self.schemas = dict(schemas or {})
        # Built where the arm's agent is loaded (its zygote): the SDK is imported once there, and every
        # trial forked from it starts warm. The runner's parent never imports an agent's module.
        import mcp.server.lowlevel
        import mcp.server.stdio  # noqa: F401

    def __repr__(self) -> str:
        return f"mcp_command({list(self.argv)!r})"

    def __call__(self, task: Any, tools: Any, rng: Any) -> dict[str, Any]:
        # The socket lives in certlab's runtime folder, whose path leaves room for one (a trial's own temp
        # folder below a long TMPDIR did not: every trial was agent-crashed, "AF_UNIX path too long").
        with (
            tempfile.TemporaryDirectory(prefix="certlab-mcp-") as scratch,
            temporary_folder("certlab-mcp-", runtime_folder()) as sockets,
        ):
            folder = Path(scratch)
            boundary = McpBoundary(tools, str(sockets.as_path / "tools.sock"), self.schemas).start()
            server = [sys.executable, "-m", "certlab_mcp_boundary.relay", "--socket", boundary.path]
            config = folder / "mcp.json"
            config.write_text(json.dumps({"mcpServers": {"certlab": {"command": server[0], "args": server[1:]}}}))
            task_text = json.dumps(task)
            env = {**contained_environment(os.environ), **self.env}  # no key or token of the harness's
            env.update(
                CERTLAB_MCP_SERVER_COMMAND=json.dumps(server),
                CERTLAB_MCP_CONFIG=str(config),
                CERTLAB_TASK=task_text,
            )
            argv = [a.replace("{mcp_config}", str(config)).replace("{task}", task_text) for a in self.argv]
            out_path, err_path = folder / "stdout", folder / "stderr"
            with out_path.open("wb") as out, err_path.open("wb") as err:
                try:
                    process = subprocess.Popen(
                        argv,
                        cwd=scratch,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        start_new_session=True,
                    )
                except OSError as error:
                    boundary.stop()
                    raise BoundaryBroken(f"agent-unavailable: could not start {argv[0]}: {error}") from None
                try:
                    while process.poll() is None and not boundary.ended.wait(POLL_S):
                        pass
                    code = process.poll()
                finally:
                    _kill(process)
                    boundary.stop()
            if boundary.fatal is not None:
                raise boundary.fatal
            if boundary.refusals:
                raise BoundaryBroken(f"mcp-unsupported: {boundary.refusals[0]}")
            if code is None or code != 0:
                raise SystemExit(1 if code is None else code)
            return {"exit_code": 0, "tool_calls": boundary.calls, "stdout_tail": _tail(out_path)}


def mcp_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> McpCommandAgent:
    """An arm's agent that runs ``argv`` as an MCP client of the trial's tools.

    ``{mcp_config}`` and ``{task}`` in ``argv`` become the MCP config file's path and the task
    as JSON; ``env`` is added to the harness's environment; ``schemas`` gives a tool's JSON
    Schema for its arguments (otherwise any object is accepted, and the world refuses bad ones).
    """
    return McpCommandAgent(argv, env=env, schemas=schemas)
