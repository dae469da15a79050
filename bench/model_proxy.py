"""What the model boundary adds to one model call: the scripted server called directly, then through the proxy.

The scripted Anthropic server runs in a process of its own, the proxy (``ModelProxy``,
forwarding to that server) in another, and this process is the client, as an agent's CLI
is: one kept-alive connection, ``--calls`` calls each way, interleaved in rounds so both see
the same machine load. Each call is one turn of a small conversation, answered as one JSON
message or as server-sent events. Prints the median and p90 per call of each way and the
median added by the proxy, for each answer shape; the target is at most 2 ms added.

Usage: ``python bench/model_proxy.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
KEY = "sk-bench-key-0123456789"

# The scripted server writes an answer's headers and body in two sends; without TCP_NODELAY the second waits for
# the client's delayed ACK (about 40 ms here). The bench turns Nagle off in it, so that only the proxy is measured.
SERVER = """
import socket, sys
import certlab_scripted_models as scripted_models
from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts
setup = scripted_models._Handler.setup
def quick_setup(handler):
    setup(handler)
    handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
scripted_models._Handler.setup = quick_setup
with ScriptedModelServer(lambda turn: Reply(text="ok " * 40, usage=TokenCounts(900, 40))) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""

PROXY = """
import sys
from certlab_model_boundary.proxy import ModelProxy, Upstream
with ModelProxy(Upstream(anthropic=sys.argv[1], anthropic_key=sys.argv[2]), token="bench-token") as proxy:
    print(proxy.base_url, flush=True)
    sys.stdin.read()
    print(proxy.recording()["counts"]["model_calls"], flush=True)
"""


def start(code: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    return child, child.stdout.readline().strip()


def body(turn: int, stream: bool) -> bytes:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the bug in intervals.py " * 20}]
    for _ in range(turn):
        messages += [{"role": "assistant", "content": "reading"}, {"role": "user", "content": "file text " * 50}]
    return json.dumps({"model": "m", "max_tokens": 100, "stream": stream, "messages": messages}).encode()


def timed_call(connection: http.client.HTTPConnection, key: str, payload: bytes) -> float:
    started = time.perf_counter()
    connection.request("POST", "/v1/messages", body=payload, headers={"x-api-key": key})
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - started
    assert response.status == 200, response.status
    return elapsed


def connect(base_url: str) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="calls each way and per answer shape")
    options = parser.parse_args()
    server, server_url = start(SERVER)
    proxy, proxy_url = start(PROXY, server_url, KEY)
    try:
        for stream in (False, True):
            direct, through = connect(server_url), connect(proxy_url)
            for warm in range(20):
                timed_call(direct, KEY, body(warm % 3, stream))
                timed_call(through, "bench-token", body(warm % 3, stream))
            plain: list[float] = []
            proxied: list[float] = []
            for n in range(options.calls):
                payload = body(n % 3, stream)
                plain.append(timed_call(direct, KEY, payload))
                proxied.append(timed_call(through, "bench-token", payload))
            direct.close()
            through.close()
            shape = "server-sent events" if stream else "one JSON message"
            for name, values in (("direct", plain), ("proxy", proxied)):
                p90 = statistics.quantiles(values, n=10)[-1]
                print(
                    f"{shape:>18} {name:>6}: median {statistics.median(values) * 1e3:.3f} ms, "
                    f"p90 {p90 * 1e3:.3f} ms ({len(values)} calls)"
                )
            added = statistics.median(p - d for p, d in zip(proxied, plain, strict=True))
            verdict = "within" if added * 1e3 <= 2.0 else "OVER"
            print(f"{shape:>18} added by the proxy: median {added * 1e3:.3f} ms per call ({verdict} the 2 ms target)")
    finally:
        for child in (proxy, server):
            child.communicate("", timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
