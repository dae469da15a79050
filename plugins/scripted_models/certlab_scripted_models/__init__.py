"""A scripted model server on 127.0.0.1: real agent CLIs run offline in tests.

Test support (distribution certlab-scripted-models), not a plugin: it registers no hook and imports nothing
of certlab; the tests, the bench scripts and ``tools/record_agent_fixtures.py`` import it.

It speaks the three wire protocols the agent CLIs use: Anthropic Messages
(``POST /v1/messages``, Claude Code), OpenAI chat completions (``POST /v1/chat/completions``,
aider through litellm) and OpenAI Responses (``POST /v1/responses``, Codex). Each request is
answered from a script: a list of :class:`Reply`, picked by the request's turn number, which is
the number of model turns already in the conversation the client sent (assistant messages for
the two message protocols, runs of consecutive model output items for Responses). The server
keeps no conversation state, so a client that retries a turn gets the same reply again.

It runs as a thread of the process that starts it (a test, or the fixture recorder), binds
127.0.0.1 on a free port, and records every request it receives::

    script = [Reply(tool_calls=(ToolCall("Read", {"file_path": path}),)), Reply(text="Done.")]
    with ScriptedModelServer(script) as server:
        run_cli(env={"ANTHROPIC_BASE_URL": server.base_url, ...})
    assert [r.turn for r in server.requests] == [0, 1]

A turn past the end of the script is answered with HTTP 500 and a message naming the turn, so
a client that goes on longer than scripted fails loudly instead of hanging.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import socket
import sys
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import attrs
from attrs import field, frozen


def text_map(value: Mapping[str, str]) -> dict[str, str]:
    """A request's headers as a plain dict (the converter of :attr:`ReceivedRequest.headers`)."""
    return dict(value)


ANTHROPIC_MESSAGES = "anthropic-messages"
OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"
PROTOCOLS = (ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES)

_ENDPOINTS = {
    "/v1/messages": ANTHROPIC_MESSAGES,
    "/v1/chat/completions": OPENAI_CHAT,
    "/chat/completions": OPENAI_CHAT,
    "/v1/responses": OPENAI_RESPONSES,
    "/responses": OPENAI_RESPONSES,
}

# Responses input items that the model produced (the rest are user, developer or tool output items).
_MODEL_ITEM_TYPES = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "reasoning",
        "local_shell_call",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_call",
    }
)


def _tuple(value: Sequence[Any] | None) -> tuple[Any, ...]:
    return tuple(value or ())


@frozen
class TokenCounts:
    """The token usage a scripted reply reports to the client.

    ``input_tokens`` counts every prompt token, the cached ones included (the OpenAI
    convention); ``cached_input_tokens`` is the part of them read from a cache. On the
    Anthropic wire, where ``input_tokens`` excludes cache reads and writes, the server sends
    ``input_tokens - cached_input_tokens - cache_creation_input_tokens`` (never below zero).
    """

    input_tokens: int = 100
    output_tokens: int = 20
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    reasoning_output_tokens: int = 0


@frozen
class ToolCall:
    """One tool call in a scripted reply.

    ``arguments`` as a mapping is a function-style call: an Anthropic ``tool_use`` block's
    ``input``, a chat completion ``tool_calls`` entry or a Responses ``function_call`` (both
    with the mapping as a JSON string). As a string it is a freeform call: a Responses
    ``custom_tool_call`` (Codex's ``apply_patch`` takes the patch text this way); the two other
    protocols carry the string as the arguments text. ``call_id`` defaults to one derived
    from the turn and position, so that recordings are stable.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(factory=dict)
    call_id: str | None = None


@frozen
class Reply:
    """One scripted model turn: text, tool calls, the usage it reports, or an HTTP error.

    With ``http_status`` other than 200 the server answers that status with the protocol's
    error body carrying ``error_message`` (a 429 as the provider words a rate limit), and
    ignores text and tool calls; ``retry_after`` (seconds) adds the ``retry-after`` header a
    provider sends with a 429, which some CLIs need before they retry at all.
    ``stop_reason`` overrides the protocol's natural one (``end_turn``/``tool_use``,
    ``stop``/``tool_calls``), for example ``max_tokens`` or ``length``.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = field(converter=_tuple, default=())
    usage: TokenCounts = field(factory=TokenCounts)
    http_status: int = 200
    error_message: str = "scripted error"
    stop_reason: str | None = None
    retry_after: float | None = None


@frozen
class Turn:
    """What a script function is given to choose a reply: the protocol, turn number and request body."""

    protocol: str
    number: int
    body: Any


ScriptFunction = Callable[[Turn], Reply]
Script = Sequence[Reply] | ScriptFunction


@frozen
class ReceivedRequest:
    """One HTTP request the server received, and what it answered.

    ``protocol`` is None for a path the server does not serve (answered 404); ``body`` is the
    parsed JSON body (None when there was none or it was not JSON); ``turn`` is the turn
    number the reply was picked by; ``streamed`` says whether the answer was server-sent events.
    """

    method: str
    path: str
    query: str
    protocol: str | None
    headers: Mapping[str, str] = field(converter=text_map)
    body: Any = None
    turn: int | None = None
    streamed: bool = False
    status: int = 200


# --------------------------------------------------------------------------- turn counting


def _count_assistant_messages(body: Mapping[str, Any]) -> int:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return 0
    return sum(1 for message in messages if isinstance(message, dict) and message.get("role") == "assistant")


def _is_model_item(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    kind = item.get("type")
    if kind in _MODEL_ITEM_TYPES:
        return True
    return kind in (None, "message") and item.get("role") == "assistant"


def _count_model_runs(body: Mapping[str, Any]) -> int:
    """Responses turns: runs of consecutive model output items in ``input``."""
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    runs = 0
    inside = False
    for item in items:
        model = _is_model_item(item)
        if model and not inside:
            runs += 1
        inside = model
    return runs


def count_turns(protocol: str, body: Any) -> int:
    """The turn number of a request: how many model turns its conversation already holds."""
    if not isinstance(body, dict):
        return 0
    if protocol == OPENAI_RESPONSES:
        return _count_model_runs(body)
    return _count_assistant_messages(body)


# --------------------------------------------------------------------------- wire formats


def _sse(events: Sequence[tuple[str | None, Any]]) -> bytes:
    chunks = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        prefix = f"event: {name}\n" if name else ""
        chunks.append(f"{prefix}data: {payload}\n\n")
    return "".join(chunks).encode()


def _call_id(prefix: str, turn: int, index: int, call: ToolCall) -> str:
    return call.call_id or f"{prefix}_scripted_{turn:03d}_{index}"


def _arguments_text(call: ToolCall) -> str:
    if isinstance(call.arguments, str):
        return call.arguments
    return json.dumps(dict(call.arguments), separators=(",", ":"))


def _anthropic_usage(usage: TokenCounts) -> dict[str, int]:
    uncached = usage.input_tokens - usage.cached_input_tokens - usage.cache_creation_input_tokens
    return {
        "input_tokens": max(uncached, 0),
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cached_input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
    }


def _anthropic_blocks(reply: Reply, turn: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for index, call in enumerate(reply.tool_calls):
        arguments = call.arguments if not isinstance(call.arguments, str) else {"input": call.arguments}
        blocks.append(
            {
                "type": "tool_use",
                "id": _call_id("toolu", turn, index, call),
                "name": call.name,
                "input": dict(arguments),
            }
        )
    return blocks


def anthropic_message(reply: Reply, turn: int, model: str) -> dict[str, Any]:
    """The plain JSON Anthropic Messages answer for a reply."""
    return {
        "id": f"msg_scripted_{turn:03d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(reply, turn),
        "stop_reason": reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": _anthropic_usage(reply.usage),
    }


def anthropic_events(reply: Reply, turn: int, model: str) -> bytes:
    """The Anthropic Messages server-sent events for a reply."""
    message = anthropic_message(reply, turn, model)
    start_usage = dict(message["usage"], output_tokens=1)
    events: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {"type": "message_start", "message": dict(message, content=[], stop_reason=None, usage=start_usage)},
        )
    ]
    for index, block in enumerate(message["content"]):
        start: dict[str, Any]
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], separators=(",", ":"))}
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": message["usage"],
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return _sse(events)


def _chat_usage(usage: TokenCounts) -> dict[str, Any]:
    """OpenAI's usage object, plus the cache fields other chat-completions servers send.

    ``prompt_cache_hit_tokens``/``prompt_cache_miss_tokens`` (DeepSeek's names) and, when
    non-zero, ``cache_creation_input_tokens`` are what aider (through litellm) reads to report
    cache hits and writes; OpenAI's own ``prompt_tokens_details.cached_tokens`` it ignores.
    """
    wire: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_output_tokens},
        "prompt_cache_hit_tokens": usage.cached_input_tokens,
        "prompt_cache_miss_tokens": max(usage.input_tokens - usage.cached_input_tokens, 0),
    }
    if usage.cache_creation_input_tokens:
        wire["cache_creation_input_tokens"] = usage.cache_creation_input_tokens
    return wire


def _chat_tool_calls(reply: Reply, turn: int) -> list[dict[str, Any]]:
    return [
        {
            "id": _call_id("call", turn, index, call),
            "type": "function",
            "function": {"name": call.name, "arguments": _arguments_text(call)},
        }
        for index, call in enumerate(reply.tool_calls)
    ]


def chat_completion(reply: Reply, turn: int, model: str) -> dict[str, Any]:
    """The plain JSON chat.completion answer for a reply."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = _chat_tool_calls(reply, turn)
    return {
        "id": f"chatcmpl-scripted-{turn:03d}",
        "object": "chat.completion",
        "created": 1_700_000_000 + turn,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop"),
            }
        ],
        "usage": _chat_usage(reply.usage),
    }


def chat_completion_events(reply: Reply, turn: int, model: str) -> bytes:
    """The chat.completion.chunk server-sent events for a reply (usage in the last chunk)."""
    completion = chat_completion(reply, turn, model)
    base = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"], "model": model}
    delta: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        delta["tool_calls"] = [dict(call, index=index) for index, call in enumerate(_chat_tool_calls(reply, turn))]
    finish = completion["choices"][0]["finish_reason"]
    events: list[tuple[str | None, Any]] = [
        (None, dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}])),
        (None, dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}])),
        (None, dict(base, choices=[], usage=completion["usage"])),
        (None, "[DONE]"),
    ]
    return _sse(events)


def _responses_items(reply: Reply, turn: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.text:
        items.append(
            {
                "type": "message",
                "id": f"msg_scripted_{turn:03d}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for index, call in enumerate(reply.tool_calls):
        call_id = _call_id("call", turn, index, call)
        if isinstance(call.arguments, str):
            items.append(
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_scripted_{turn:03d}_{index}",
                    "call_id": call_id,
                    "name": call.name,
                    "input": call.arguments,
                    "status": "completed",
                }
            )
        else:
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_scripted_{turn:03d}_{index}",
                    "call_id": call_id,
                    "name": call.name,
                    "arguments": _arguments_text(call),
                    "status": "completed",
                }
            )
    return items


def responses_object(reply: Reply, turn: int, model: str) -> dict[str, Any]:
    """The plain JSON Responses answer (a completed ``response`` object) for a reply."""
    usage = reply.usage
    return {
        "id": f"resp_scripted_{turn:03d}",
        "object": "response",
        "created_at": 1_700_000_000 + turn,
        "status": "completed",
        "model": model,
        "output": _responses_items(reply, turn),
        "usage": {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_input_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_output_tokens},
            "total_tokens": usage.input_tokens + usage.output_tokens,
        },
    }


def responses_events(reply: Reply, turn: int, model: str) -> bytes:
    """The Responses server-sent events: created, one output_item.done per item, completed."""
    response = responses_object(reply, turn, model)
    created = dict(response, status="in_progress", output=[], usage=None)
    events: list[tuple[str | None, Any]] = [("response.created", {"type": "response.created", "response": created})]
    for index, item in enumerate(response["output"]):
        events.append(
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": index, "item": item})
        )
    events.append(("response.completed", {"type": "response.completed", "response": response}))
    return _sse(events)


def error_body(protocol: str, status: int, message: str) -> dict[str, Any]:
    """The protocol's JSON error body."""
    if protocol == ANTHROPIC_MESSAGES:
        kinds = {429: "rate_limit_error", 529: "overloaded_error"}
        kind = kinds.get(status, "invalid_request_error" if status < 500 else "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if status == 429:
        return {"error": {"message": message, "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
    return {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error"}}


# --------------------------------------------------------------------------- the server


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "certlab-scripted-model/1"
    timeout = 120
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def setup(self) -> None:
        super().setup()
        self.server.owner._connection_opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._connection_closed(self.connection)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            raw = b"".join(parts)
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        encoding = self.headers.get("Content-Encoding", "").lower()
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
        return raw

    def _send(self, status: int, content_type: str, payload: bytes, retry_after: float | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if retry_after is not None:
            self.send_header("retry-after", f"{retry_after:g}")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()

    def _handle(self, method: str) -> None:
        owner = self.server.owner
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        headers = {key.lower(): value for key, value in self.headers.items()}
        try:
            raw = self._read_body()
            body: Any = json.loads(raw) if raw else None
        except (ValueError, OSError, zlib.error, EOFError):
            body = None
        protocol = _ENDPOINTS.get(path) if method == "POST" else None
        record = ReceivedRequest(method, path, split.query, protocol, headers, body)

        if method in ("GET", "HEAD") and path == "/":
            # Claude Code probes the base URL with HEAD / before its first request.
            owner._record(record)
            self._send(200, "text/plain", b"certlab scripted model server\n")
            return
        if method == "GET" and path in ("/v1/models", "/models"):
            model = owner.model or "scripted-model"
            listing = {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "certlab"}]}
            owner._record(record)
            self._send(200, "application/json", json.dumps(listing).encode())
            return
        if method == "POST" and path == "/v1/messages/count_tokens":
            owner._record(record)
            size = len(json.dumps(body)) // 4 if body is not None else 0
            self._send(200, "application/json", json.dumps({"input_tokens": size}).encode())
            return
        if protocol is None:
            owner._record(attrs.evolve(record, status=404))
            message = f"scripted model server: no endpoint {method} {path}"
            self._send(404, "application/json", json.dumps({"error": {"message": message}}).encode())
            return

        turn = owner._turn_number(protocol, body)
        model = owner._model_for(body)
        reply = owner._reply_for(Turn(protocol, turn, body))
        stream = isinstance(body, dict) and body.get("stream") is True
        if reply.http_status != 200:
            owner._record(attrs.evolve(record, turn=turn, status=reply.http_status))
            payload = json.dumps(error_body(protocol, reply.http_status, reply.error_message)).encode()
            self._send(reply.http_status, "application/json", payload, reply.retry_after)
            return
        if protocol == ANTHROPIC_MESSAGES:
            stream = stream and owner.anthropic_sse
            payload = (
                anthropic_events(reply, turn, model)
                if stream
                else json.dumps(anthropic_message(reply, turn, model)).encode()
            )
        elif protocol == OPENAI_CHAT:
            payload = (
                chat_completion_events(reply, turn, model)
                if stream
                else json.dumps(chat_completion(reply, turn, model)).encode()
            )
        else:
            payload = (
                responses_events(reply, turn, model)
                if stream
                else json.dumps(responses_object(reply, turn, model)).encode()
            )
        owner._record(attrs.evolve(record, turn=turn, streamed=stream))
        self._send(200, "text/event-stream" if stream else "application/json", payload)


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedModelServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a CLI killed mid-request, a test's idle connection) is not an error."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class ScriptedModelServer:
    """A model server on 127.0.0.1 that answers from a script; start and stop it with ``with``.

    ``script`` is a list of replies indexed by turn number, or a function of the :class:`Turn`.
    ``model`` is the model name the answers carry (by default the one the request asked for).
    ``anthropic_sse=False`` answers Anthropic streaming requests with a plain JSON message.
    ``relative_turns=True`` numbers turns from the first request's count, for clients (aider)
    whose prompt carries few-shot example exchanges as assistant messages; aider also adds an
    "I updated the files." / "Ok." pair after an edit, so its later turns can jump by two.
    ``first_calls`` answers the first model calls, in arrival order and whatever their turn (a
    brief outage: ``first_calls=[Reply(http_status=429)]``); the script answers the calls after.
    """

    def __init__(
        self,
        script: Script,
        *,
        model: str | None = None,
        anthropic_sse: bool = True,
        relative_turns: bool = False,
        first_calls: Sequence[Reply] = (),
    ) -> None:
        self.script: Script = script if callable(script) else tuple(script)
        self.model = model
        self.anthropic_sse = anthropic_sse
        self.relative_turns = relative_turns
        self.first_calls = tuple(first_calls)
        self._calls = 0
        self._lock = threading.Lock()
        self._requests: list[ReceivedRequest] = []
        self._turn_bases: dict[str, int] = {}
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> ScriptedModelServer:
        """Bind 127.0.0.1 on a free port and serve from a daemon thread."""
        if self._httpd is not None:
            raise RuntimeError("scripted model server is already running")
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-model-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close open client connections and release the port."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=10)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- what a client needs

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("scripted model server is not running: use it inside `with`")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: Claude Code's ``ANTHROPIC_BASE_URL``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: aider's ``OPENAI_API_BASE``, Codex's provider ``base_url``."""
        return f"{self.base_url}/v1"

    @property
    def requests(self) -> tuple[ReceivedRequest, ...]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return tuple(self._requests)

    def requests_for(self, protocol: str) -> tuple[ReceivedRequest, ...]:
        """The requests received on one protocol's endpoint."""
        return tuple(request for request in self.requests if request.protocol == protocol)

    # ---------------------------------------------------------------- internals used by the handler

    def _record(self, request: ReceivedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _connection_opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)

    def _connection_closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)

    def _turn_number(self, protocol: str, body: Any) -> int:
        count = count_turns(protocol, body)
        if not self.relative_turns:
            return count
        with self._lock:
            base = self._turn_bases.setdefault(protocol, count)
        return max(count - base, 0)

    def _model_for(self, body: Any) -> str:
        if self.model:
            return self.model
        requested = body.get("model") if isinstance(body, dict) else None
        return requested if isinstance(requested, str) and requested else "scripted-model"

    def _reply_for(self, turn: Turn) -> Reply:
        with self._lock:
            call, self._calls = self._calls, self._calls + 1
        if call < len(self.first_calls):
            return self.first_calls[call]
        if callable(self.script):
            return self.script(turn)
        if turn.number < len(self.script):
            return self.script[turn.number]
        return Reply(
            http_status=500,
            error_message=(
                f"scripted model server: no reply for turn {turn.number} "
                f"(the script has {len(self.script)}); extend the script"
            ),
        )
