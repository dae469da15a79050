"""Benchmark: wall time of one scripted run of each real agent CLI through its adapter, and what the adapter adds.

For each installed CLI (``make clis``), a scripted model server on 127.0.0.1 answers one
fix of a one-file work copy (Claude Code: Read then Edit; aider: one SEARCH/REPLACE block;
Codex: one apply_patch), and a scripted 500 (aider, which retries a 500 for about 85 s, is
stopped at 60 s and must still come out unavailable). Each is run ``--runs`` times through the
adapter's ``run`` and, for the fix, once more as the bare command line the adapter builds
(``subprocess.run``), so the difference is the adapter's own cost. Prints the median wall
time per CLI and case. Nothing leaves loopback.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from certlab_scripted_models import Reply, ScriptedModelServer, TokenCounts, ToolCall, Turn
from certlab_usage import agent_clis

from certlab_core.plugin.types.agent import AgentOutcome, AgentRequest

ORIGINAL = "def length(start, end):\n    return end - start + 1\n"
FIXED = "def length(start, end):\n    return end - start\n"
PROMPT = "In intervals.py, length counts one too many: fix it."
PATCH = (
    "*** Begin Patch\n*** Update File: intervals.py\n@@\n-    return end - start + 1\n+    return end - start\n"
    "*** End Patch\n"
)
BLOCK = (
    "intervals.py\n```python\n<<<<<<< SEARCH\n    return end - start + 1\n=======\n    return end - start\n"
    ">>>>>>> REPLACE\n```\n"
)


def claude_script(work: Path) -> Callable[[Turn], Reply]:
    target = str(work / "intervals.py")
    steps = [
        Reply(tool_calls=(ToolCall("Read", {"file_path": target}),)),
        Reply(
            tool_calls=(
                ToolCall("Edit", {"file_path": target, "old_string": "end - start + 1", "new_string": "end - start"}),
            )
        ),
        Reply(text="Done."),
    ]
    return lambda turn: steps[min(turn.number, len(steps) - 1)]


CLIS: dict[str, dict[str, Any]] = {
    "claude-code": {
        "program": "claude",
        "variable": "CERTLAB_CLAUDE_BIN",
        "cached": "npm/node_modules/.bin/claude",
        "script": claude_script,
        "env": lambda server: {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "k"},
        "args": ("--model=claude-sonnet-4-5",),
        "relative": False,
    },
    "aider": {
        "program": "aider",
        "variable": "CERTLAB_AIDER_BIN",
        "cached": "aider/bin/aider",
        "script": lambda work: [Reply(text=BLOCK, usage=TokenCounts(input_tokens=900, output_tokens=85))],
        "env": lambda server: {"OPENAI_API_BASE": server.openai_base_url, "OPENAI_API_KEY": "k"},
        "args": ("--model=openai/certlab-scripted", "--input-cost-per-token=3e-06", "--file=intervals.py"),
        "relative": True,
    },
    "codex": {
        "program": "codex",
        "variable": "CERTLAB_CODEX_BIN",
        "cached": "npm/node_modules/.bin/codex",
        "script": lambda work: [Reply(tool_calls=(ToolCall("apply_patch", PATCH),)), Reply(text="Done.")],
        "env": lambda server: {"OPENAI_BASE_URL": server.openai_base_url, "OPENAI_API_KEY": "k"},
        "args": (),
        "relative": False,
    },
}


def one_run(adapter: Any, name: str, facts: dict[str, Any], executable: str, outage: bool, bare: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="certlab-bench-") as scratch:
        work = Path(scratch) / "work"
        work.mkdir()
        (work / "intervals.py").write_text(ORIGINAL)
        script = [Reply(http_status=500, error_message="outage")] if outage else facts["script"](work)
        with ScriptedModelServer(script, relative_turns=facts["relative"]) as server:
            env = {**os.environ, **facts["env"](server)}
            args = (f"--bin={executable}", *facts["args"])
            request = AgentRequest(
                workdir=str(work),
                prompt=PROMPT,
                prompt_file="",
                task_id="bench",
                timeout_s=60 if outage and name == "aider" else 120,  # aider retries a 500 for ~85 s
                env=env,
                agent_args=args,
            )
            started = time.perf_counter()
            if bare:
                module = sys.modules[adapter.run.__module__]
                options = agent_clis.parse_options(module._spec(), args)
                with agent_clis.scratch_home(name) as home:
                    argv = (
                        module.command_line(executable, PROMPT, ["intervals.py"], home, options)
                        if name == "aider"
                        else module.command_line(executable, PROMPT, options)
                    )
                    subprocess.run(argv, cwd=work, env=module.environment(env, home, options), capture_output=True)
                outcome: AgentOutcome | None = None
            else:
                outcome = adapter.run(request)
            wall = time.perf_counter() - started
        if outcome is not None:
            expected = "unavailable" if outage else "completed"
            if outcome.status != expected or (not outage and (work / "intervals.py").read_text() != FIXED):
                sys.exit(f"bench: {name} {'outage' if outage else 'fix'}: {outcome.status} ({outcome.detail})")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", action="append", choices=sorted(CLIS))
    options = parser.parse_args()
    from certlab_core._runtime.registry import discover

    registry = discover()
    for name in options.only or CLIS:
        facts = CLIS[name]
        try:
            executable = agent_clis.find_cli(
                name,
                facts["program"],
                explicit=None,
                variable=facts["variable"],
                cached=facts["cached"],
                env=os.environ,
            )
        except Exception as error:
            print(f"{name}: skipped ({error})")
            continue
        adapter = registry.get("agents", name)
        fix = [one_run(adapter, name, facts, executable, False, False) for _ in range(options.runs)]
        bare = [one_run(adapter, name, facts, executable, False, True) for _ in range(options.runs)]
        outage = [one_run(adapter, name, facts, executable, True, False) for _ in range(options.runs)]
        print(
            f"{name}: scripted fix {statistics.median(fix):.2f} s median through the adapter, "
            f"{statistics.median(bare):.2f} s as the bare command line; scripted 500 {statistics.median(outage):.2f} s "
            f"({options.runs} runs each)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
