"""A scripted model server in a process of its own, for the adapters' conformance checks (which fork).

``python conformance_server.py`` prints its port, then serves until killed. The model name a
request asks for picks the answer: ``...-down`` gets HTTP 500, ``...-401`` (or any other
three-digit status after the last dash) that status, ``...-hang`` no answer for a minute,
any other "OK".
"""

from __future__ import annotations

import time

from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts, Turn

HANG_S = 60.0


def conformance_reply(turn: Turn) -> Reply:
    model = str(turn.body.get("model", "")) if isinstance(turn.body, dict) else ""
    if model.endswith("-hang"):
        time.sleep(HANG_S)
    if model.endswith("-down"):
        return Reply(http_status=500, error_message="scripted outage")
    status = model.rsplit("-", 1)[-1]
    if len(status) == 3 and status.isdigit() and status != "200":
        return Reply(http_status=int(status), error_message=f"scripted HTTP {status}")
    return Reply(text="OK", usage=TokenCounts(input_tokens=300, output_tokens=2))


if __name__ == "__main__":
    server = ScriptedModelServer(conformance_reply).start()
    print(server.port, flush=True)
    while True:
        time.sleep(3600)
