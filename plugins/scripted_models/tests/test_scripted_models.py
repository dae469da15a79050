"""The scripted model server answers each wire protocol correctly, checked from a plain HTTP client."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from certlab_scripted_models import (
    ANTHROPIC_MESSAGES,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    Reply,
    ScriptedModelServer,
    TokenCounts,
    ToolCall,
    Turn,
    count_turns,
)

PATCH = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"

SCRIPT = [
    Reply(
        text="Reading it.",
        tool_calls=(ToolCall("Read", {"file_path": "/w/a.py"}),),
        usage=TokenCounts(
            input_tokens=3200, output_tokens=60, cached_input_tokens=1000, cache_creation_input_tokens=2000
        ),
    ),
    Reply(tool_calls=(ToolCall("apply_patch", PATCH),), usage=TokenCounts(input_tokens=500, output_tokens=7)),
    Reply(text="Done.", usage=TokenCounts(input_tokens=900, output_tokens=5, reasoning_output_tokens=2)),
]


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(SCRIPT) as running:
        yield running


def post(
    server: ScriptedModelServer, path: str, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request("POST", path, body=payload, headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def sse_events(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event name, decoded data) for each server-sent event."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name = None
        data = ""
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data += line[len("data: ") :]
        events.append((name, data if data == "[DONE]" else json.loads(data)))
    return events


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


# --------------------------------------------------------------------------- Anthropic Messages


def test_anthropic_stream_carries_text_tool_use_and_usage(server: ScriptedModelServer) -> None:
    body = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 100, "messages": [user("fix it")]}
    status, content_type, raw = post(server, "/v1/messages?beta=true", body)
    assert (status, content_type) == (200, "text/event-stream")
    events = sse_events(raw)
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["model"] == "claude-sonnet-4-5"
    assert start["role"] == "assistant"
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "Reading it."}
    tool_start = events[4][1]["content_block"]
    assert (tool_start["type"], tool_start["name"], tool_start["input"]) == ("tool_use", "Read", {})
    assert json.loads(events[5][1]["delta"]["partial_json"]) == {"file_path": "/w/a.py"}
    delta = events[7][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    # Anthropic's input_tokens excludes cache reads and writes: 3200 - 1000 - 2000.
    assert delta["usage"] == {
        "input_tokens": 200,
        "output_tokens": 60,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 2000,
    }
    (request,) = server.requests
    assert (request.protocol, request.path, request.query, request.turn, request.streamed) == (
        ANTHROPIC_MESSAGES,
        "/v1/messages",
        "beta=true",
        0,
        True,
    )
    assert request.body == body


def test_anthropic_plain_json_when_not_streaming(server: ScriptedModelServer) -> None:
    messages = [user("fix it"), assistant("reading"), user("here"), assistant("patching"), user("ok")]
    status, content_type, raw = post(server, "/v1/messages", {"model": "m", "messages": messages})
    assert (status, content_type) == (200, "application/json")
    message = json.loads(raw)
    assert message["type"] == "message"
    assert message["stop_reason"] == "end_turn"
    assert message["content"] == [{"type": "text", "text": "Done."}]
    assert message["usage"]["input_tokens"] == 900
    assert server.requests[0].turn == 2
    assert server.requests[0].streamed is False


def test_anthropic_sse_can_be_refused_for_a_plain_message() -> None:
    with ScriptedModelServer(SCRIPT, anthropic_sse=False, model="fixed-name") as server:
        status, content_type, raw = post(server, "/v1/messages", {"model": "m", "stream": True, "messages": []})
    assert (status, content_type) == (200, "application/json")
    message = json.loads(raw)
    assert message["model"] == "fixed-name"
    assert [block["type"] for block in message["content"]] == ["text", "tool_use"]
    assert message["content"][1]["id"] == "toolu_scripted_000_0"


def test_anthropic_error_body_and_status() -> None:
    script = [Reply(http_status=529, error_message="busy")]
    with ScriptedModelServer(script) as server:
        status, _, raw = post(server, "/v1/messages", {"messages": [user("x")], "stream": True})
    assert status == 529
    assert json.loads(raw) == {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    assert server.requests[0].status == 529


# --------------------------------------------------------------------------- OpenAI chat completions


def test_chat_completion_plain(server: ScriptedModelServer) -> None:
    body = {"model": "gpt-x", "messages": [{"role": "system", "content": "s"}, user("fix"), assistant("a"), user("b")]}
    status, _, raw = post(server, "/v1/chat/completions", body)
    assert status == 200
    completion = json.loads(raw)
    assert completion["object"] == "chat.completion"
    assert completion["model"] == "gpt-x"
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "apply_patch", "arguments": PATCH}
    assert completion["usage"]["prompt_tokens"] == 500
    assert completion["usage"]["completion_tokens"] == 7
    assert completion["usage"]["total_tokens"] == 507
    assert server.requests[0].turn == 1
    assert server.requests[0].protocol == OPENAI_CHAT


def test_chat_completion_stream_ends_with_usage_and_done(server: ScriptedModelServer) -> None:
    status, content_type, raw = post(
        server, "/v1/chat/completions", {"model": "m", "stream": True, "messages": [user("go")]}
    )
    assert (status, content_type) == (200, "text/event-stream")
    events = sse_events(raw)
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    text = "".join(choice["delta"].get("content") or "" for chunk in chunks for choice in chunk["choices"])
    assert text == "Reading it."
    arguments = chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"file_path": "/w/a.py"}
    finishes = [choice["finish_reason"] for chunk in chunks for choice in chunk["choices"] if choice["finish_reason"]]
    assert finishes == ["tool_calls"]
    assert chunks[-1]["usage"]["prompt_tokens"] == 3200
    assert chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 1000}


# --------------------------------------------------------------------------- OpenAI Responses


def test_responses_stream_items_and_usage(server: ScriptedModelServer) -> None:
    body = {
        "model": "gpt-5.5",
        "stream": True,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix"}]},
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": "x = 1"},
        ],
    }
    status, content_type, raw = post(server, "/v1/responses", body)
    assert (status, content_type) == (200, "text/event-stream")
    events = sse_events(raw)
    assert [name for name, _ in events] == ["response.created", "response.output_item.done", "response.completed"]
    item = events[1][1]["item"]
    assert item["type"] == "custom_tool_call"
    assert item["name"] == "apply_patch"
    assert item["input"] == PATCH
    completed = events[2][1]["response"]
    assert completed["status"] == "completed"
    assert completed["usage"]["input_tokens"] == 500
    assert completed["usage"]["output_tokens"] == 7
    assert server.requests[0].turn == 1


def test_responses_function_call_and_message_items() -> None:
    script = [Reply(text="Looking.", tool_calls=(ToolCall("exec_command", {"cmd": "ls"}, call_id="c9"),))]
    with ScriptedModelServer(script) as server:
        status, _, raw = post(server, "/v1/responses", {"model": "m", "input": "fix it"})
    assert status == 200
    response = json.loads(raw)
    assert response["object"] == "response"
    message, call = response["output"]
    assert message["content"] == [{"type": "output_text", "text": "Looking.", "annotations": []}]
    assert (call["type"], call["name"], call["call_id"]) == ("function_call", "exec_command", "c9")
    assert json.loads(call["arguments"]) == {"cmd": "ls"}


# --------------------------------------------------------------------------- turns, errors, lifecycle


def test_turn_counting_per_protocol() -> None:
    assert count_turns(ANTHROPIC_MESSAGES, {"messages": [user("a"), assistant("b"), user("c")]}) == 1
    assert count_turns(OPENAI_CHAT, {"messages": "not a list"}) == 0
    assert count_turns(OPENAI_CHAT, None) == 0
    model_run = [{"type": "reasoning"}, {"type": "message", "role": "assistant"}, {"type": "function_call"}]
    tool_output = {"type": "function_call_output", "output": ""}
    user_item = {"type": "message", "role": "user"}
    body = {"input": [user_item, *model_run, tool_output, {"type": "custom_tool_call"}, tool_output, user_item]}
    assert count_turns(OPENAI_RESPONSES, body) == 2
    assert count_turns(OPENAI_RESPONSES, {"input": "text"}) == 0


def test_past_the_script_is_a_500_naming_the_turn(server: ScriptedModelServer) -> None:
    messages = [user("a"), assistant("b"), user("c"), assistant("d"), user("e"), assistant("f"), user("g")]
    status, _, raw = post(server, "/v1/chat/completions", {"messages": messages})
    assert status == 500
    assert json.loads(raw)["error"]["message"] == (
        "scripted model server: no reply for turn 3 (the script has 3); extend the script"
    )
    assert server.requests[0].status == 500


def test_script_function_gets_the_turn() -> None:
    seen: list[Turn] = []

    def script(turn: Turn) -> Reply:
        seen.append(turn)
        return Reply(text=f"{turn.protocol} turn {turn.number}")

    with ScriptedModelServer(script) as server:
        _, _, raw = post(server, "/v1/messages", {"messages": [user("a"), assistant("b"), user("c")]})
    assert json.loads(raw)["content"][0]["text"] == "anthropic-messages turn 1"
    assert seen[0].body["messages"][0] == user("a")


def test_relative_turns_count_from_the_first_request() -> None:
    examples = [user("e1"), assistant("r1"), user("e2"), assistant("r2")]
    with ScriptedModelServer(SCRIPT, relative_turns=True) as server:
        post(server, "/v1/chat/completions", {"messages": [*examples, user("go")]})
        post(server, "/v1/chat/completions", {"messages": [*examples, user("go"), assistant("x"), user("again")]})
    assert [request.turn for request in server.requests] == [0, 1]


def test_unknown_paths_are_404_and_recorded(server: ScriptedModelServer) -> None:
    status, _, raw = post(server, "/v1/completions", {"prompt": "x"})
    assert status == 404
    assert "no endpoint POST /v1/completions" in json.loads(raw)["error"]["message"]
    (request,) = server.requests
    assert (request.protocol, request.status, request.turn) == (None, 404, None)


def test_probe_models_and_count_tokens(server: ScriptedModelServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("HEAD", "/")
    head = connection.getresponse()
    head.read()
    connection.request("GET", "/v1/models")
    models = json.loads(connection.getresponse().read())
    connection.close()
    assert head.status == 200
    assert models["data"][0]["id"] == "scripted-model"
    status, _, raw = post(server, "/v1/messages/count_tokens", {"messages": [user("x" * 400)]})
    assert status == 200
    assert json.loads(raw)["input_tokens"] > 90
    assert [request.method for request in server.requests] == ["HEAD", "GET", "POST"]


def test_keep_alive_connection_serves_several_turns(server: ScriptedModelServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    texts = []
    for messages in ([user("a")], [user("a"), assistant("b"), user("c"), assistant("d"), user("e")]):
        connection.request("POST", "/v1/messages", body=json.dumps({"messages": messages}))
        texts.append(json.loads(connection.getresponse().read())["content"][0])
    connection.close()
    assert texts[0]["text"] == "Reading it."
    assert texts[1]["text"] == "Done."


def test_gzip_and_chunked_request_bodies(server: ScriptedModelServer) -> None:
    body = json.dumps({"messages": [user("a"), assistant("b"), user("c")]}).encode()
    status, _, _ = post(server, "/v1/messages", gzip.compress(body), headers={"Content-Encoding": "gzip"})
    assert status == 200
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("POST", "/v1/messages", body=iter([body[:10], body[10:]]), encode_chunked=True)
    assert connection.getresponse().status == 200
    connection.close()
    assert [request.turn for request in server.requests] == [1, 1]
    assert server.requests[1].headers["transfer-encoding"] == "chunked"


def test_stop_releases_the_port_and_closes_idle_connections() -> None:
    server = ScriptedModelServer(SCRIPT)
    with pytest.raises(RuntimeError, match="not running"):
        server.base_url  # noqa: B018
    with server:
        port = server.port
        assert server.base_url == f"http://127.0.0.1:{port}"
        assert server.openai_base_url == f"http://127.0.0.1:{port}/v1"
        idle = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        idle.request("POST", "/v1/messages", body=json.dumps({"messages": []}))
        idle.getresponse().read()
    with pytest.raises(OSError):
        idle.request("POST", "/v1/messages", body=json.dumps({"messages": []}))
        idle.getresponse().read()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    assert len(server.requests) == 1
    assert server.requests_for(ANTHROPIC_MESSAGES) == server.requests
    assert server.requests_for(OPENAI_CHAT) == ()


def test_first_calls_answer_a_brief_outage_whatever_the_turn_then_the_script() -> None:
    # A 429 as the providers send one: their rate-limit body and a retry-after header (Codex retries only then).
    limited = Reply(http_status=429, error_message="slow down", retry_after=0)
    with ScriptedModelServer([Reply(text="hello")], first_calls=[limited]) as running:
        connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
        body = {"model": "m", "input": [{"role": "user", "content": "hi"}]}
        connection.request("POST", "/v1/responses", body=json.dumps(body))
        first = connection.getresponse()
        assert (first.status, first.getheader("retry-after")) == (429, "0")
        assert json.loads(first.read())["error"] == {
            "message": "slow down",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
        connection.close()
        status, _, raw = post(running, "/v1/responses", body)  # the same turn again: now the script answers
        assert status == 200 and b"hello" in raw
        status, _, raw = post(running, "/v1/messages", {"model": "m", "messages": []})
        assert status == 200
    assert [r.status for r in running.requests] == [429, 200, 200]
    with ScriptedModelServer([limited]) as running:
        status, _, raw = post(running, "/v1/messages", {"model": "m", "messages": []})
    assert (status, json.loads(raw)["error"]["type"]) == (429, "rate_limit_error")
