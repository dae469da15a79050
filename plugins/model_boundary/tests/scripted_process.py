"""A scripted model server in a process of its own, for tests that fork (a forking process must hold no thread)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

SERVE = """
import json, sys
from certlab_scripted_models import Reply, ScriptedModelServer
script = [Reply(**reply) for reply in json.loads(sys.argv[1])]
first = [Reply(**reply) for reply in json.loads(sys.argv[2])]
with ScriptedModelServer(script, first_calls=first) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
    for request in server.requests:
        print(json.dumps({"path": request.path, "protocol": request.protocol, "headers": dict(request.headers)}))
"""


class ScriptedProcess:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.requests: list[dict[str, Any]] = []


@contextlib.contextmanager
def scripted_process(
    replies: list[dict[str, Any]], first_calls: list[dict[str, Any]] | None = None
) -> Iterator[ScriptedProcess]:
    """Serve ``replies`` (Reply fields as JSON) from a child process; ``requests`` is filled in when it ends.

    ``first_calls`` answer the first model calls, whatever their turn (``ScriptedModelServer(first_calls=...)``).
    """
    argv = [sys.executable, "-c", SERVE, json.dumps(replies), json.dumps(first_calls or [])]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdin is not None
    served = ScriptedProcess(child.stdout.readline().strip())
    try:
        yield served
    finally:
        output, _ = child.communicate("", timeout=30)
        served.requests = [json.loads(line) for line in output.splitlines() if line.strip()]
