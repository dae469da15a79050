"""The scripted model server the adapters' conformance tests run against.

``python -m certlab_scripted_models.conformance`` prints its port, then serves until killed. The
model name a request asks for picks the answer: ``...-down`` gets HTTP 500, ``...-401`` (or any
other three-digit status after the last dash) that status, ``...-hang`` no answer for a minute,
any other "OK". ``conformance_server()`` starts it and gives its base URL: the conformance
checks fork, and refuse to fork while a server thread runs in the test process.

``require_program(find, what)`` is how those tests find a CLI: ``find()``'s path, or the test
skips (one line) when it raises, and fails instead when ``CI`` is set (CI must install the CLIs).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts, Turn

HANG_S = 60.0


def conformance_reply(turn: Turn) -> Reply:
    """The reply the requested model's name asks for."""
    model = str(turn.body.get("model", "")) if isinstance(turn.body, dict) else ""
    if model.endswith("-hang"):
        time.sleep(HANG_S)
    if model.endswith("-down"):
        return Reply(http_status=500, error_message="scripted outage")
    status = model.rsplit("-", 1)[-1]
    if len(status) == 3 and status.isdigit() and status != "200":
        return Reply(http_status=int(status), error_message=f"scripted HTTP {status}")
    return Reply(text="OK", usage=TokenCounts(input_tokens=300, output_tokens=2))


@contextlib.contextmanager
def conformance_server() -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT``) of the conformance server, run in a process of its own."""
    process = subprocess.Popen(
        [sys.executable, "-m", "certlab_scripted_models.conformance"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()


def require_program(find: Callable[[], str], what: str) -> str:
    """``find()``, or skip the test saying ``what`` is missing (fail it when ``CI`` is set)."""
    import pytest

    try:
        return find()
    except Exception as error:  # the finder's own refusal (certlab's UsageError), whatever its type
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {what} is not installed (make clis must install it): {error}")
        pytest.skip(f"{what} is not installed, so its real tests are skipped (run `make clis`)")


if __name__ == "__main__":
    server = ScriptedModelServer(conformance_reply).start()
    print(server.port, flush=True)
    while True:
        time.sleep(3600)
