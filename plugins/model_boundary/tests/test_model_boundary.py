"""certlab-model-boundary: the proxy between a client and a scripted model server, in the three wire protocols.

Each test puts a real ModelProxy on 127.0.0.1 in front of a real ScriptedModelServer and
talks to it over HTTP: what the client receives, what the server received, what was recorded.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import pytest
from certlab_model_boundary import wire
from certlab_model_boundary.proxy import (
    DeclaredModelFault,
    ModelBudgets,
    ModelProxy,
    Upstream,
    declared_model_faults,
)
from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts, ToolCall

from certlab_core._runtime.registry import discover

REAL_KEY = "sk-real-key-that-must-stay-in-the-harness"
PATHS = {
    wire.ANTHROPIC_MESSAGES: "/v1/messages?beta=true",
    wire.OPENAI_CHAT: "/v1/chat/completions",
    wire.OPENAI_RESPONSES: "/v1/responses",
}


def _body(protocol: str, turn: int, stream: bool) -> dict[str, Any]:
    if protocol == wire.OPENAI_RESPONSES:
        items: list[dict[str, Any]] = [{"role": "user", "content": "fix the bug"}]
        for n in range(turn):
            items += [{"type": "function_call", "name": "exec", "arguments": "{}", "call_id": f"c{n}"}]
            items += [{"type": "function_call_output", "call_id": f"c{n}", "output": "ok"}]
        return {"model": "gpt-5.5", "input": items, "stream": stream}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the bug"}]
    for _ in range(turn):
        messages += [{"role": "assistant", "content": "looking"}, {"role": "user", "content": "go on"}]
    body: dict[str, Any] = {"model": "claude-test", "messages": messages, "stream": stream, "max_tokens": 100}
    if protocol == wire.OPENAI_CHAT and stream:
        body["stream_options"] = {"include_usage": True}
    return body


def call(boundary: ModelProxy, protocol: str, body: Any, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """One model call to the boundary as a CLI makes it; returns status, headers and the raw answer."""
    connection = http.client.HTTPConnection("127.0.0.1", boundary.port, timeout=10)
    headers = {"content-type": "application/json"}
    key = boundary.token if token is None else token
    if protocol == wire.ANTHROPIC_MESSAGES:
        headers["x-api-key"] = key
    else:
        headers["authorization"] = f"Bearer {key}"
    try:
        connection.request("POST", PATHS[protocol], body=json.dumps(body), headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def events_of(raw: bytes) -> list[tuple[str | None, Any]]:
    return [wire.parse_event(block) for block in wire.split_events(raw)]


@pytest.fixture()
def server() -> Iterator[ScriptedModelServer]:
    script = [
        Reply(
            tool_calls=(ToolCall("Read", {"file_path": "a.py"}),), usage=TokenCounts(120, 30, cached_input_tokens=20)
        ),
        Reply(text="Fixed.", usage=TokenCounts(200, 10)),
    ]
    with ScriptedModelServer(script) as scripted:
        yield scripted


def upstream_of(server: ScriptedModelServer) -> Upstream:
    return Upstream(
        anthropic=server.base_url, openai=server.openai_base_url, anthropic_key=REAL_KEY, openai_key=REAL_KEY
    )


@pytest.mark.parametrize("protocol", wire.PROTOCOLS)
@pytest.mark.parametrize("stream", [False, True])
def test_each_call_is_relayed_and_recorded_with_its_tokens(
    server: ScriptedModelServer, protocol: wire.Protocol, stream: bool
) -> None:
    with ModelProxy(upstream_of(server)) as boundary:
        for turn in (0, 1):
            status, headers, raw = call(boundary, protocol, _body(protocol, turn, stream))
            assert status == 200
            if stream:
                assert "text/event-stream" in headers["content-type"]
                assert events_of(raw), raw
            else:
                assert json.loads(raw)["usage"]
        recording = boundary.recording()
    assert [e["name"] for e in recording["events"]] == [protocol, protocol]
    assert [e["status"] for e in recording["events"]] == ["ok", "ok"]
    first, second = recording["events"]
    assert first["args"]["body"] == _body(protocol, 0, stream)
    assert first["usage"] == {"input_tokens": 120, "output_tokens": 30, "cached_input_tokens": 20}
    assert second["usage"] == {"input_tokens": 200, "output_tokens": 10, "cached_input_tokens": 0}
    assert recording["counts"] == {
        "model_calls": 2,
        "input_tokens": 320,
        "output_tokens": 40,
        "cached_input_tokens": 20,
    }
    key = "events" if stream else "body"
    assert first["result"][key]
    assert recording["infra_error"] is None
    assert [r.turn for r in server.requests_for(protocol)] == [0, 1]


def test_the_real_key_goes_upstream_and_never_to_the_agent_or_the_record(server: ScriptedModelServer) -> None:
    harness = {
        "ANTHROPIC_API_KEY": REAL_KEY,
        "OPENAI_API_KEY": REAL_KEY,
        "ANTHROPIC_AUTH_TOKEN": REAL_KEY,
        "HOME": "/x",
    }
    upstream = Upstream.from_environment(harness, anthropic=server.base_url, openai=server.openai_base_url)
    with ModelProxy(upstream) as boundary:
        env = boundary.agent_env(harness)
        assert REAL_KEY not in json.dumps(env)
        assert env["ANTHROPIC_API_KEY"] == boundary.token and env["OPENAI_API_KEY"] == boundary.token
        assert env["ANTHROPIC_BASE_URL"] == boundary.base_url
        assert env["OPENAI_BASE_URL"] == env["OPENAI_API_BASE"] == boundary.openai_base_url
        body = _body(wire.ANTHROPIC_MESSAGES, 0, False)
        body["messages"][0]["content"] = f"my key is {REAL_KEY}"  # even an agent that learnt the key cannot record it
        assert call(boundary, wire.ANTHROPIC_MESSAGES, body)[0] == 200
        assert call(boundary, wire.OPENAI_CHAT, _body(wire.OPENAI_CHAT, 0, False))[0] == 200
        recording = boundary.recording()
    anthropic, chat = server.requests
    assert anthropic.headers["x-api-key"] == REAL_KEY and "authorization" not in anthropic.headers
    assert chat.headers["authorization"] == f"Bearer {REAL_KEY}"
    assert boundary.token not in json.dumps([dict(r.headers) for r in server.requests])
    assert REAL_KEY not in json.dumps(recording)
    assert "[redacted]" in json.dumps(recording)


def test_a_call_without_the_trials_token_is_refused_and_never_forwarded(server: ScriptedModelServer) -> None:
    with ModelProxy(upstream_of(server)) as boundary:
        status, _headers, raw = call(boundary, wire.ANTHROPIC_MESSAGES, _body(wire.ANTHROPIC_MESSAGES, 0, False), "x")
        recording = boundary.recording()
    assert status == 401
    assert json.loads(raw)["error"]["type"] == "authentication_error"
    assert server.requests_for(wire.ANTHROPIC_MESSAGES) == ()
    assert "trial's token" in str(recording["infra_error"])


# --------------------------------------------------------------------------- faults


@pytest.fixture(scope="module")
def faults() -> Mapping[str, Any]:
    return discover(only=["faults"]).all("faults")


def declared(faults: Mapping[str, Any], name: str, on_calls: Any = (1,), **params: Any) -> list[DeclaredModelFault]:
    return declared_model_faults([{"fault": name, "on_calls": on_calls, "params": params}], faults.__getitem__, 7)


def test_a_429_on_the_first_call_is_answered_by_the_boundary_and_the_retry_goes_through(
    server: ScriptedModelServer, faults: Mapping[str, Any]
) -> None:
    with ModelProxy(upstream_of(server), faults=declared(faults, "model_rate_limit")) as boundary:
        status, headers, raw = call(boundary, wire.ANTHROPIC_MESSAGES, _body(wire.ANTHROPIC_MESSAGES, 0, True))
        assert status == 429
        assert headers["retry-after"] == "0"
        assert json.loads(raw)["error"]["type"] == "rate_limit_error"
        assert call(boundary, wire.ANTHROPIC_MESSAGES, _body(wire.ANTHROPIC_MESSAGES, 0, True))[0] == 200
        recording = boundary.recording()
    assert len(server.requests_for(wire.ANTHROPIC_MESSAGES)) == 1  # the faulted call never reached the server
    injected, passed = recording["events"]
    assert injected["error"]["type"] == "ModelRateLimited" and injected["fault"] == 0
    assert injected["executed"] is False
    assert passed["status"] == "ok" and passed["fault"] is None
    assert recording["faults"] == [
        {"index": 0, "fault": "model_rate_limit", "tool": "model", "fired": True, "fired_at": [0]}
    ]
    assert recording["infra_error"] is None  # a declared fault is the condition under test, not infrastructure


def test_a_500_fault_answers_the_protocols_own_error(server: ScriptedModelServer, faults: Mapping[str, Any]) -> None:
    with ModelProxy(upstream_of(server), faults=declared(faults, "model_server_error", "all")) as boundary:
        status, _h, raw = call(boundary, wire.OPENAI_CHAT, _body(wire.OPENAI_CHAT, 0, False))
        assert call(boundary, wire.OPENAI_CHAT, _body(wire.OPENAI_CHAT, 0, False))[0] == 500
    assert status == 500 and json.loads(raw)["error"]["type"] == "server_error"
    assert server.requests_for(wire.OPENAI_CHAT) == ()


def test_a_timeout_fault_holds_the_call_and_drops_it(server: ScriptedModelServer, faults: Mapping[str, Any]) -> None:
    with ModelProxy(upstream_of(server), faults=declared(faults, "model_timeout", seconds=0.3)) as boundary:
        started = time.monotonic()
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            call(boundary, wire.ANTHROPIC_MESSAGES, _body(wire.ANTHROPIC_MESSAGES, 0, True))
        held = time.monotonic() - started
        recording = boundary.recording()
    assert 0.3 <= held < 3.0
    assert recording["events"][0]["result"] == {"http_status": None, "body": None, "dropped": True, "delay_s": 0.3}


def test_a_truncated_stream_gives_the_first_events_and_then_nothing(
    server: ScriptedModelServer, faults: Mapping[str, Any]
) -> None:
    with ModelProxy(upstream_of(server), faults=declared(faults, "model_truncated_stream", keep_events=2)) as boundary:
        connection = http.client.HTTPConnection("127.0.0.1", boundary.port, timeout=10)
        body = json.dumps(_body(wire.ANTHROPIC_MESSAGES, 0, True))
        connection.request("POST", "/v1/messages", body=body, headers={"x-api-key": boundary.token})
        response = connection.getresponse()
        assert response.status == 200
        with pytest.raises(http.client.IncompleteRead) as cut:
            response.read()
        connection.close()
        recording = boundary.recording()
    received = events_of(cut.value.partial)
    assert [name for name, _ in received] == ["message_start", "content_block_start"]
    event = recording["events"][0]
    assert event["result"]["cut"] is True and len(event["result"]["events"]) == 2
    assert event["error"]["type"] == "ModelStreamCut"
    assert event["usage"]["output_tokens"] == 30  # the upstream's full answer was read: its tokens were spent
    assert len(server.requests_for(wire.ANTHROPIC_MESSAGES)) == 1


# --------------------------------------------------------------------------- budgets and the upstream's own errors


def test_the_model_call_budget_refuses_the_next_call(server: ScriptedModelServer) -> None:
    with ModelProxy(upstream_of(server), budgets=ModelBudgets(calls=1)) as boundary:
        assert call(boundary, wire.OPENAI_RESPONSES, _body(wire.OPENAI_RESPONSES, 0, True))[0] == 200
        status, _h, raw = call(boundary, wire.OPENAI_RESPONSES, _body(wire.OPENAI_RESPONSES, 1, True))
        recording = boundary.recording()
    assert status == 400 and "model_calls budget (1) is spent" in raw.decode()
    assert recording["budget_exceeded"] == "model_calls"
    assert len(server.requests_for(wire.OPENAI_RESPONSES)) == 1


def test_the_token_budget_counts_what_the_answers_reported(server: ScriptedModelServer) -> None:
    with ModelProxy(upstream_of(server), budgets=ModelBudgets(tokens=150)) as boundary:
        assert call(boundary, wire.ANTHROPIC_MESSAGES, _body(wire.ANTHROPIC_MESSAGES, 0, False))[0] == 200
        assert call(boundary, wire.ANTHROPIC_MESSAGES, _body(wire.ANTHROPIC_MESSAGES, 1, False))[0] == 400
        assert boundary.budget_exceeded == "model_tokens"


def test_an_error_of_the_real_upstream_is_relayed_and_is_infrastructure() -> None:
    scripted = ScriptedModelServer([Reply(http_status=429, error_message="slow down")])
    with scripted, ModelProxy(upstream_of(scripted)) as boundary:
        status, _h, raw = call(boundary, wire.ANTHROPIC_MESSAGES, _body(wire.ANTHROPIC_MESSAGES, 0, True))
        recording = boundary.recording()
    assert status == 429 and b"slow down" in raw
    assert recording["infra_error"] == "model-upstream: the anthropic-messages upstream answered HTTP 429"
    assert recording["events"][0]["error"]["type"] == "Upstream429"


def test_an_unreachable_upstream_is_infrastructure() -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    upstream = Upstream(anthropic=f"http://127.0.0.1:{port}", openai=f"http://127.0.0.1:{port}/v1")
    with ModelProxy(upstream) as boundary:
        status, _h, _raw = call(boundary, wire.OPENAI_CHAT, _body(wire.OPENAI_CHAT, 0, False))
        assert status == 502
        assert str(boundary.infra_error).startswith("model-upstream-unreachable:")


def test_each_call_to_an_unreachable_upstream_on_one_connection_is_recorded_as_such() -> None:
    # A CLI retries on its kept-alive connection: the boundary's spent upstream connection made the second call
    # "model-boundary-broken" (CannotSendRequest), the boundary's own failure instead of the upstream's.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with ModelProxy(Upstream(anthropic=f"http://127.0.0.1:{port}")) as boundary:
        connection = http.client.HTTPConnection("127.0.0.1", boundary.port, timeout=10)
        headers = {"content-type": "application/json", "x-api-key": boundary.token}
        statuses = []
        for _ in range(3):
            connection.request(
                "POST", PATHS[wire.ANTHROPIC_MESSAGES], body=json.dumps({"messages": []}), headers=headers
            )
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
        connection.close()
        assert statuses == [502, 502, 502]
        assert boundary.recording()["call_statuses"] == ["upstream-unreachable"] * 3


def test_the_recording_keeps_a_status_for_every_call(server: ScriptedModelServer, faults: Mapping[str, Any]) -> None:
    with ModelProxy(upstream_of(server), faults=declared(faults, "model_rate_limit", on_calls=(2,))) as boundary:
        for turn in (0, 1, 1):  # the second call is the fault's: the third asks the second turn
            call(boundary, wire.OPENAI_CHAT, _body(wire.OPENAI_CHAT, turn, False))
        call(boundary, wire.OPENAI_CHAT, _body(wire.OPENAI_CHAT, 0, False), token="not-the-trial-token")
        statuses = boundary.recording()["call_statuses"]
    assert statuses == ["ok", "injected", "ok", "boundary-error"]


# --------------------------------------------------------------------------- replay


def test_a_recording_replays_offline_and_a_departure_is_noted(server: ScriptedModelServer) -> None:
    bodies = [_body(wire.ANTHROPIC_MESSAGES, 0, True), _body(wire.ANTHROPIC_MESSAGES, 1, True)]
    with ModelProxy(upstream_of(server), workdir="/tmp/work-a") as live:
        answers = [call(live, wire.ANTHROPIC_MESSAGES, b)[2] for b in bodies]
        recorded = live.recording()["events"]
    # The same conversation in another work copy: the path is not part of what is compared.
    moved = json.loads(json.dumps(bodies).replace("fix the bug", "fix the bug"))
    with ModelProxy(replay=recorded, workdir="/tmp/work-b") as replaying:
        again = [call(replaying, wire.ANTHROPIC_MESSAGES, b)[2] for b in moved]
        assert replaying.recording()["replayed"] == {"served": 2, "recorded": 2}
        assert replaying.departure is None
    assert [events_of(a) for a in again] == [events_of(a) for a in answers]
    with ModelProxy(replay=recorded) as replaying:
        other = _body(wire.ANTHROPIC_MESSAGES, 0, True)
        other["messages"][0]["content"] = "do something else"
        status, _h, _raw = call(replaying, wire.ANTHROPIC_MESSAGES, other)
        assert status == 500
        assert "model call #1" in str(replaying.departure)


def test_the_fingerprint_ignores_the_work_copys_path_and_volatile_fields() -> None:
    first = {"model": "m", "messages": [{"role": "user", "content": "edit /tmp/a/x.py"}], "metadata": {"user_id": "1"}}
    second = {"model": "m", "messages": [{"role": "user", "content": "edit /tmp/b/x.py"}], "metadata": {"user_id": "2"}}
    assert wire.fingerprint(wire.ANTHROPIC_MESSAGES, first, "/tmp/a") == wire.fingerprint(
        wire.ANTHROPIC_MESSAGES, second, "/tmp/b"
    )
    assert wire.fingerprint(wire.ANTHROPIC_MESSAGES, first, "/tmp/a") != wire.fingerprint(
        wire.ANTHROPIC_MESSAGES, second, "/tmp/a"
    )


# --------------------------------------------------------------------------- the Unix socket seam


def test_the_boundary_on_a_unix_socket_is_reached_through_the_relay(server: ScriptedModelServer, tmp_path: Any) -> None:
    path = str(tmp_path / "model.sock")
    with ModelProxy(upstream_of(server), unix_socket=path) as boundary:
        relay = subprocess.Popen(
            [sys.executable, "-m", "certlab_model_boundary.relay", "--socket", path, "--port", "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert relay.stdout is not None
            line = relay.stdout.readline().strip()
            assert line.startswith("listening 127.0.0.1:")
            base = "http://" + line.split()[1]
            env = boundary.agent_env({}, base_url=base)
            parts = urlsplit(env["ANTHROPIC_BASE_URL"])
            connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
            connection.request(
                "POST",
                "/v1/messages",
                body=json.dumps(_body(wire.ANTHROPIC_MESSAGES, 0, False)),
                headers={"x-api-key": env["ANTHROPIC_API_KEY"]},
            )
            response = connection.getresponse()
            assert response.status == 200 and json.loads(response.read())["content"]
            connection.close()
        finally:
            relay.kill()
            relay.wait()
        assert boundary.recording()["counts"]["model_calls"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_calls_on_one_kept_alive_connection_are_each_forwarded_once(server: ScriptedModelServer, stream: bool) -> None:
    with ModelProxy(upstream_of(server)) as boundary:
        connection = http.client.HTTPConnection("127.0.0.1", boundary.port, timeout=10)
        for turn in (0, 1):
            body = json.dumps(_body(wire.ANTHROPIC_MESSAGES, turn, stream))
            connection.request("POST", "/v1/messages", body=body, headers={"x-api-key": boundary.token})
            response = connection.getresponse()
            assert response.status == 200
            response.read()
        connection.close()
        recording = boundary.recording()
    assert [r.turn for r in server.requests_for(wire.ANTHROPIC_MESSAGES)] == [0, 1]
    assert [e["status"] for e in recording["events"]] == ["ok", "ok"]
    assert recording["infra_error"] is None


def test_a_key_too_short_to_be_secret_does_not_mangle_the_record(server: ScriptedModelServer) -> None:
    upstream = Upstream(anthropic=server.base_url, anthropic_key="k")
    with ModelProxy(upstream) as boundary:
        assert call(boundary, wire.ANTHROPIC_MESSAGES, _body(wire.ANTHROPIC_MESSAGES, 0, False))[0] == 200
        recording = boundary.recording()
    assert recording["events"][0]["status"] == "ok"
    assert recording["counts"]["input_tokens"] == 120


def test_stopping_leaves_no_thread_even_with_a_connection_kept_alive() -> None:
    import threading

    from scripted_process import scripted_process

    with scripted_process([{"text": "hello"}]) as served:  # its threads live in its own process
        before = set(threading.enumerate())
        boundary = ModelProxy(Upstream(anthropic=served.base_url, anthropic_key=REAL_KEY)).start()
        connection = http.client.HTTPConnection("127.0.0.1", boundary.port, timeout=10)
        body = json.dumps(_body(wire.ANTHROPIC_MESSAGES, 0, False))
        connection.request("POST", "/v1/messages", body=body, headers={"x-api-key": boundary.token})
        connection.getresponse().read()  # the connection stays open, its handler waiting for the next request
        boundary.stop()
        left = set(threading.enumerate()) - before
        connection.close()
    assert left == set()


def test_a_compressed_request_is_forwarded_as_sent_and_recorded_readable(server: ScriptedModelServer) -> None:
    import gzip

    body = _body(wire.OPENAI_CHAT, 0, False)
    with ModelProxy(upstream_of(server)) as boundary:
        connection = http.client.HTTPConnection("127.0.0.1", boundary.port, timeout=10)
        headers = {"authorization": f"Bearer {boundary.token}", "content-encoding": "gzip"}
        connection.request(
            "POST", "/v1/chat/completions", body=gzip.compress(json.dumps(body).encode()), headers=headers
        )
        assert connection.getresponse().status == 200
        connection.close()
        recording = boundary.recording()
    assert recording["events"][0]["args"]["body"] == body
    assert server.requests_for(wire.OPENAI_CHAT)[0].body == body  # the server decoded what was forwarded


def test_a_replayed_answer_names_this_runs_work_copy_not_the_recorded_one() -> None:
    def read_here(turn: Any) -> Reply:
        folder = turn.body["messages"][0]["content"].split()[-1]
        return Reply(tool_calls=(ToolCall("Read", {"file_path": f"{folder}/x.py"}),))

    def ask(boundary: ModelProxy, folder: str) -> Any:
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": f"fix x.py in {folder}"}]}
        status, _h, raw = call(boundary, wire.ANTHROPIC_MESSAGES, body)
        assert status == 200
        return json.loads(raw)["content"][0]["input"]["file_path"]

    with ScriptedModelServer(read_here) as scripted, ModelProxy(upstream_of(scripted), workdir="/tmp/a/work") as live:
        assert ask(live, "/tmp/a/work") == "/tmp/a/work/x.py"
        recorded = live.recording()["events"]
    with ModelProxy(replay=recorded, workdir="/tmp/b/work") as replaying:
        assert ask(replaying, "/tmp/b/work") == "/tmp/b/work/x.py"
        assert replaying.departure is None
