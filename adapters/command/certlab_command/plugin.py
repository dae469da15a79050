"""The command adapter: ``/bin/sh -c CMDLINE`` in the work copy, in its own process session.

A user of the SDK's ``run_command``: exit code 75 means the agent's own infrastructure
failed (``unavailable``); no other exit code decides anything; the timeout, the process
session, leftover processes and output tails are ``run_command``'s.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest, UsageError, hookimpl, run_command

NAME = "command"
SHELL_WORDS = frozenset(
    {"cd", "exit", "true", "false", "echo", "printf", "test", "[", "export", "set", "unset", "exec", "eval"}
    | {".", ":", "if", "for", "while", "case", "until", "{", "(", "!"}
)


def check_command_line(cmdline: str) -> None:
    """Refuse, in one line, a command line whose program cannot be found."""
    try:
        words = shlex.split(cmdline)
    except ValueError as error:
        raise UsageError(f"the agent command line cannot be parsed ({error}): {cmdline!r}") from None
    while words and "=" in words[0] and not words[0].startswith("="):
        words.pop(0)
    if not words:
        raise UsageError("the agent command line is empty; give it with --agent-arg 'COMMAND ...'")
    program = words[0]
    if program in SHELL_WORDS:
        return
    if "/" in program:
        path = Path(program)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise UsageError(f"the agent command {program} is not an executable file; check the path and its mode")
    elif shutil.which(program) is None:
        raise UsageError(f"the agent command {program!r} is not on PATH; install it or give its full path")


def run(request: AgentRequest) -> AgentOutcome:
    """Run the command line given as the agent's argument and report what happened."""
    if not request.agent_args:
        raise UsageError("the command agent needs its command line: --agent-arg 'COMMAND ...'")
    return run_command(request, ["/bin/sh", "-c", " ".join(request.agent_args)])


@hookimpl
def certlab_agents() -> list[AgentAdapter]:
    return [
        AgentAdapter(
            name=NAME,
            description="any command-line agent: /bin/sh -c CMDLINE in the work copy (exit 75: agent unavailable)",
            run=run,
            check_args=lambda args: check_command_line(" ".join(args)),
        )
    ]
