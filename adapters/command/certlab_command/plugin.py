"""The command adapter: ``/bin/sh -c CMDLINE`` in the work copy, own session.

A user of the SDK's ``run_command``: exit code 75 means the agent's own infrastructure
failed (``unavailable``), and so do 126 and 127, the shell's own for a program it could not
run or find (an interpreter missing where the agent runs: the agent never ran); no other exit
code decides anything; the timeout, the process session, leftover processes and output tails
are ``run_command``'s.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import attrs

from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest, UsageError, hookimpl

NAME = "command"
#: The shell's exit codes for a command it could not run: the agent did not run, it did not fail.
SHELL_COULD_NOT_RUN = {126: "was found but could not be run", 127: "was not found"}
SHELL_WORDS = frozenset(
    {"cd", "exit", "true", "false", "echo", "printf", "test", "[", "export", "set", "unset", "exec", "eval"}
    | {".", ":", "if", "for", "while", "case", "until", "{", "(", "!"}
)


def check_command_line(cmdline: str) -> None:
    """Refuse, in one line, a command line whose program cannot be found where the agent runs.

    The agent runs in each task's work copy: a program, or an interpreter's script, named by a
    relative path is looked for there, not where certify was started, so it is refused.
    """
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
    relative = _relative_program(words)
    if relative is not None:
        raise UsageError(
            f"the agent command names {relative} by a relative path, but the agent runs in each task's work copy: "
            f"give its absolute path ({os.path.abspath(relative)})"
        )
    if "/" in program:
        path = Path(program)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise UsageError(f"the agent command {program} is not an executable file; check the path and its mode")
    elif shutil.which(program) is None:
        raise UsageError(f"the agent command {program!r} is not on PATH; install it or give its full path")


def _relative_program(words: list[str]) -> str | None:
    """The program, or an interpreter's script that is a file here, that ``words`` name by a relative path."""
    program = words[0]
    if "/" in program and not os.path.isabs(program):
        return program
    script = words[1] if len(words) > 1 and os.path.basename(program) in INTERPRETERS else ""
    return script if script and not os.path.isabs(script) and os.path.isfile(script) else None


def run(request: AgentRequest) -> AgentOutcome:
    """Run the command line given as the agent's argument and report what happened."""
    from certlab_core.sdk.command import run_command  # the process machinery, imported by a run, not by discovery

    if not request.agent_args:
        raise UsageError("the command agent needs its command line: --agent-arg 'COMMAND ...'")
    cmdline = " ".join(request.agent_args)
    outcome = run_command(request, ["/bin/sh", "-c", cmdline], readable=program_files(cmdline))
    why = SHELL_COULD_NOT_RUN.get(outcome.exit_code or 0) if outcome.status == "completed" else None
    if why is None:
        return outcome
    said = outcome.stderr_tail.strip().splitlines()[-1:]
    detail = f"the agent exited {outcome.exit_code}: a program its command line runs {why}"
    return attrs.evolve(outcome, status="unavailable", detail=detail + (f" ({said[0][:160]})" if said else ""))


INTERPRETERS = frozenset({"sh", "bash", "dash", "python", "python3", "node", "perl", "ruby"})


def program_files(cmdline: str) -> list[str]:
    """The agent's own program: executable files the command line names, and an interpreter's script.

    A sandbox shows these read-only (they may live in a hidden folder, such as a checkout);
    any other file the command line names stays hidden.
    """
    try:
        words = shlex.split(cmdline)
    except ValueError:
        return []
    shown = {w for w in words if "/" in w and os.path.isfile(w) and os.access(w, os.X_OK)}
    if len(words) > 1 and os.path.basename(words[0]) in INTERPRETERS and os.path.isfile(words[1]):
        shown.add(words[1])
    return sorted(os.path.abspath(w) for w in shown)


def programs(cmdline: str) -> list[str]:
    """The programs the command line starts, checked inside the containment before the first trial."""
    try:
        words = shlex.split(cmdline)
    except ValueError:
        return []
    while words and "=" in words[0] and not words[0].startswith("="):
        words.pop(0)
    first = [words[0]] if words and words[0] not in SHELL_WORDS else []
    return list(dict.fromkeys([*first, *program_files(cmdline)]))


@hookimpl
def certlab_agents() -> list[AgentAdapter]:
    return [
        AgentAdapter(
            name=NAME,
            description="any command-line agent: /bin/sh -c CMDLINE in the work copy (exit 75: agent unavailable)",
            run=run,
            check_args=lambda args: check_command_line(" ".join(args)),
            programs=lambda args: programs(" ".join(args)),
        )
    ]
