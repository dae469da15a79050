"""The model boundary's caps: what it reads, answers, serves at once and records stays bounded, whatever is sent.

The boundary runs in the harness, outside the sandbox's memory limit: a 300 MB request body
once drove the harness to 5.4 GB and wrote a 1.89 GB bundle. Each test runs a real
ModelProxy with small limits in front of a real scripted model server on 127.0.0.1, and
sends a little past a cap (never hundreds of megabytes): the request is answered HTTP 413 or
503 without being read into memory, it is recorded as the agent's (a refusal of the
boundary, never ``infra_error``), and the recording stays small.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from certlab_model_boundary import wire
from certlab_model_boundary.proxy import ModelLimits, ModelProxy, Upstream
from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts

from certlab_core.sdk.model_boundary import judged_status

KIB = 1024
SMALL = ModelLimits(request_bytes=64 * KIB, response_bytes=64 * KIB, connections=3, recorded_bytes=16 * KIB)


@pytest.fixture()
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer([Reply(text="Fixed.", usage=TokenCounts(100, 10))]) as scripted:
        yield scripted


def upstream_of(server: ScriptedModelServer) -> Upstream:
    return Upstream(anthropic=server.base_url, openai=server.openai_base_url, anthropic_key="k" * 20)


def message_body(padding: int = 0, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 100,
        "stream": stream,
        "messages": [{"role": "user", "content": "fix the bug" + "." * padding}],
    }


def post(
    boundary: ModelProxy, raw: bytes, extra: dict[str, str] | None = None, connection: Any = None
) -> tuple[int, bytes]:
    """One Anthropic call with ``raw`` as its body; returns the status and the answer."""
    own = connection is None
    connection = connection or http.client.HTTPConnection("127.0.0.1", boundary.port, timeout=10)
    try:
        headers = {"content-type": "application/json", "x-api-key": boundary.token, **(extra or {})}
        connection.request("POST", "/v1/messages?beta=true", body=raw, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        if own:
            connection.close()


def raw_post(boundary: ModelProxy, head: dict[str, str], chunks: Iterator[bytes]) -> tuple[int, bytes]:
    """A call sent over a plain socket, its body streamed from ``chunks``: the client holds one chunk at a time."""
    with socket.create_connection(("127.0.0.1", boundary.port), timeout=10) as client:
        lines = ["POST /v1/messages HTTP/1.1", "Host: boundary", f"x-api-key: {boundary.token}"]
        lines += [f"{name}: {value}" for name, value in head.items()]
        client.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        for chunk in chunks:
            client.sendall(chunk)
        answer = b""
        while data := client.recv(65536):
            answer += data
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_a_body_a_little_past_the_cap_is_answered_413_unread_and_recorded_as_the_agents(
    server: ScriptedModelServer,
) -> None:
    raw = json.dumps(message_body(padding=64 * KIB)).encode()
    assert SMALL.request_bytes < len(raw) < SMALL.request_bytes + KIB
    with ModelProxy(upstream_of(server), limits=SMALL) as boundary:
        status, answer = post(boundary, raw)
        fits, _ = post(boundary, json.dumps(message_body(padding=60 * KIB)).encode())  # just under: relayed
        recording = boundary.recording()
    assert status == 413
    assert json.loads(answer)["error"]["type"] == "request_too_large"
    assert fits == 200 and len(server.requests) == 1  # the refused body never reached the upstream
    refused, relayed = recording["events"]
    assert refused["error"]["type"] == "RequestTooLarge" and refused["source"] == "boundary"
    assert refused["executed"] is False and refused["result"]["http_status"] == 413
    assert refused["args"] == {"path": "/v1/messages", "stream": None, "body": None, "bytes": len(raw)}
    assert relayed["status"] == "ok"
    assert recording["limit_exceeded"] == "model_request_bytes"
    assert recording["refused"] == {"model_request_bytes": 1, "model_connections": 0}
    assert recording["infra_error"] is None  # the agent sent it: never the harness's infrastructure
    assert len(json.dumps(refused)) < 2 * KIB  # the record holds the size, not the body
    # Judged with the rest of the trial: an adapter that went on is judged by what it left, not as an outage.
    assert judged_status("completed", "", recording) == ("completed", "")


def test_the_boundary_never_holds_more_of_a_body_than_its_cap(server: ScriptedModelServer) -> None:
    """A 4 MiB body against a 64 KiB cap: the boundary's peak allocation stays far below the body."""
    piece = b" " * (64 * KIB)  # the client holds this one piece, sent again and again
    total = 64 * len(piece)
    with ModelProxy(upstream_of(server), limits=SMALL) as boundary:
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            status, answer = raw_post(
                boundary, {"Content-Length": str(total), "Content-Type": "application/json"}, iter([piece] * 64)
            )
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        chunked_status, _ = raw_post(
            boundary,
            {"Transfer-Encoding": "chunked"},
            iter([b"%x\r\n%s\r\n" % (len(piece), piece)] * 4 + [b"0\r\n\r\n"]),
        )
        recording = boundary.recording()
    assert status == 413 and b"request_too_large" in answer
    assert peak < total // 8, f"the boundary held {peak} bytes of a {total}-byte body it refused"
    assert chunked_status == 413  # a chunked body is counted as it comes, and refused at the cap
    assert recording["refused"]["model_request_bytes"] == 2
    assert not server.requests


def test_a_small_compressed_body_is_never_decompressed_past_the_cap(server: ScriptedModelServer) -> None:
    bomb = gzip.compress(json.dumps(message_body(padding=8 << 20)).encode())  # 8 MiB of text in a few KiB
    assert len(bomb) < 64 * KIB
    with ModelProxy(upstream_of(server), limits=SMALL) as boundary:
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            status, _answer = post(boundary, bomb, {"content-encoding": "gzip"})
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        small, _ = post(boundary, gzip.compress(json.dumps(message_body()).encode()), {"content-encoding": "gzip"})
        recording = boundary.recording()
    assert status == 413 and peak < 1 << 20, peak
    assert small == 200 and recording["events"][1]["args"]["body"] == message_body()
    assert recording["limit_exceeded"] == "model_request_bytes" and recording["infra_error"] is None


def _boundary_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("certlab-model-boundary"))


def test_past_the_connection_cap_a_call_is_answered_503_and_the_threads_stay_bounded(
    server: ScriptedModelServer,
) -> None:
    body = json.dumps(message_body()).encode()
    with ModelProxy(upstream_of(server), limits=SMALL) as boundary:
        held = [http.client.HTTPConnection("127.0.0.1", boundary.port, timeout=10) for _ in range(3)]
        for connection in held:  # each kept alive after its call: three connections served at once
            assert post(boundary, body, connection=connection)[0] == 200
        status, answer = post(boundary, body)
        flood = [socket.create_connection(("127.0.0.1", boundary.port), timeout=10) for _ in range(200)]
        time.sleep(0.3)
        threads = _boundary_threads()
        for client in flood:
            client.close()
        held.pop().close()
        deadline = time.monotonic() + 5
        while (again := post(boundary, body)[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.05)  # the freed slot is taken once its thread has seen the connection end
        for connection in held:
            connection.close()
        recording = boundary.recording()
    assert status == 503
    assert json.loads(answer)["error"]["type"] == "overloaded_error"
    assert threads <= 3 + 2, f"{threads} boundary threads for 3 connections served (a thread per connection?)"
    assert again == 200
    assert recording["limit_exceeded"] == "model_connections"
    assert recording["refused"]["model_connections"] >= 201
    assert recording["infra_error"] is None
    assert _boundary_threads() == 0  # stopped: nothing left running for the trial's fork


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_past_its_cap_is_the_upstreams_failure_and_is_not_held(stream: bool) -> None:
    reply = Reply(text="x" * (80 * KIB), usage=TokenCounts(10, 10))
    with ScriptedModelServer([reply]) as big, ModelProxy(upstream_of(big), limits=SMALL) as boundary:
        connection = http.client.HTTPConnection("127.0.0.1", boundary.port, timeout=10)
        headers = {"content-type": "application/json", "x-api-key": boundary.token}
        connection.request("POST", "/v1/messages", body=json.dumps(message_body(stream=stream)), headers=headers)
        response = connection.getresponse()
        status = response.status
        try:
            received = response.read()
        except http.client.IncompleteRead as cut:
            received = cut.partial
        connection.close()
        recording = boundary.recording()
    (event,) = recording["events"]
    assert event["error"]["type"] == "UpstreamOversized"
    assert str(recording["infra_error"]).startswith("model-upstream-oversized:")  # not the agent's doing
    assert recording["limit_exceeded"] is None
    assert len(received) <= SMALL.response_bytes and len(json.dumps(recording)) < SMALL.response_bytes
    if not stream:
        assert status == 502


def test_the_recording_keeps_bodies_up_to_its_cap_then_sizes_then_counts(server: ScriptedModelServer) -> None:
    limits = ModelLimits(recorded_bytes=8 * KIB)
    with ModelProxy(upstream_of(server), limits=limits) as boundary:
        for _ in range(40):
            assert post(boundary, json.dumps(message_body(padding=3 * KIB)).encode())[0] == 200
        recording = boundary.recording()
    events = recording["events"]
    whole = [e for e in events if e["args"]["body"] is not None]
    sized = [e for e in events if e["args"]["body"] is None]
    assert whole and sized and recording["omitted"]["events"] > 0
    assert len(events) + recording["omitted"]["events"] == 40
    assert recording["omitted"]["bodies"] == len(sized) + recording["omitted"]["events"]
    assert len(json.dumps(events)) <= 2 * limits.recorded_bytes
    assert recording["counts"]["model_calls"] == 40 and recording["counts"]["input_tokens"] == 40 * 100
    stub = sized[0]
    assert stub["fingerprint"] == whole[0]["fingerprint"]  # still comparable with another run's calls
    assert stub["args"]["omitted"]["bytes"] > 3 * KIB and len(stub["args"]["omitted"]["sha256"]) == 64
    assert stub["result"]["body"] is None and stub["usage"] == whole[0]["usage"]


def test_a_replay_reaching_an_answer_the_recording_left_out_departs_there(server: ScriptedModelServer) -> None:
    limits = ModelLimits(recorded_bytes=1 * KIB)
    with ModelProxy(upstream_of(server), limits=limits) as recorder:
        post(recorder, json.dumps(message_body(padding=2 * KIB)).encode())
        events = recorder.recording()["events"]
    assert events[0]["result"]["omitted"]
    with ModelProxy(None, replay=events) as replaying:
        status, _ = post(replaying, json.dumps(message_body(padding=2 * KIB)).encode())
        recording = replaying.recording()
    assert status == 500 and "kept no answer" in str(recording["departure"])


def test_an_unreadable_length_is_the_agents_bad_request_not_a_broken_boundary(server: ScriptedModelServer) -> None:
    with ModelProxy(upstream_of(server), limits=SMALL) as boundary:
        status, _ = raw_post(boundary, {"Content-Length": "lots"}, iter([]))
        recording = boundary.recording()
    assert status == 400 and recording["infra_error"] is None
    assert wire.error_body(wire.ANTHROPIC_MESSAGES, 413, "m")["error"]["type"] == "request_too_large"


def _threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


UNIX_ECHO = r"""
import socket, sys, threading
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
server.listen(256)
print("ready", flush=True)
def echo(connection):
    with connection:
        while data := connection.recv(65536):
            connection.sendall(data)
while True:
    threading.Thread(target=echo, args=(server.accept()[0],), daemon=True).start()
"""


def test_the_socket_relay_closes_connections_past_its_cap_and_its_threads_stay_bounded(tmp_path: Path) -> None:
    """``python -m certlab_model_boundary.relay``, the seam for a sandbox that binds the boundary's socket (here an
    echo server in its place, so that only the relay's cap is seen)."""
    path = str(tmp_path / "model.sock")
    echo = subprocess.Popen([sys.executable, "-c", UNIX_ECHO, path], stdout=subprocess.PIPE, text=True)
    relay = subprocess.Popen(
        [sys.executable, "-m", "certlab_model_boundary.relay", "--socket", path, "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    clients: list[socket.socket] = []
    try:
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        assert relay.stdout is not None
        port = int(relay.stdout.readline().strip().rsplit(":", 1)[1])
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(40)]
        echoed = 0
        for client in clients:
            try:
                client.sendall(b"ping")
                echoed += client.recv(100) == b"ping"
            except OSError:  # closed by the relay: reset
                pass
        threads = _threads_of(relay.pid)
    finally:
        for client in clients:
            client.close()
        for process in (relay, echo):
            process.kill()
            process.wait()
    assert echoed == 32  # the relay's cap: 32 at once, the others closed as they came
    assert threads <= 1 + 2 * 32, f"{threads} relay threads for 40 connections"
