"""Before the first trial: can the agent's programs start in the containment?

An adapter names the programs its ``run`` starts (``AgentAdapter.programs``). Each is
resolved as the sandbox resolves it (its interpreter, venv, ``node_modules`` or prefix) and
checked to be an executable file inside the containment. A program the sandbox cannot show
makes every trial ``agent-unavailable`` with one line naming the path and what to declare,
never a failed fix that would count against the agent.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence

import attrs

from certlab_core.plugin.errors import InstrumentError
from certlab_core.plugin.types.agent import AgentAdapter, AgentOutcome, AgentRequest
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.command import run_contained
from certlab_core.sdk.containment import contained_environment
from certlab_core.sdk.deadline import plugin_call, plugin_wait_s

CHECK_TIMEOUT_S = 30.0
# Inside the sandbox: the name of each program given that is not an executable file there.
CHECK_SCRIPT = 'for p in "$@"; do [ -x "$p" ] && [ ! -d "$p" ] || echo "$p"; done'


def program_problem(programs: Sequence[str], containment: Containment) -> str | None:
    """One line naming the first program that cannot start inside ``containment``; None when all can."""
    if not containment.contained or not programs:
        return None
    env = contained_environment(os.environ)
    found = [_found(p, env) for p in programs]
    missing = [p for p, path in zip(programs, found, strict=True) if path is None]
    if missing:
        return f"the agent's program {missing[0]} is not found on PATH"
    paths = [path for path in found if path is not None]
    with tempfile.TemporaryDirectory(prefix="certlab-program-check-") as scratch:
        out = os.path.join(scratch, "out")
        work = os.path.join(scratch, "work")
        os.mkdir(work)
        for path in paths:  # what the sandbox cannot show at all (inside certlab's installation): one line
            try:
                containment.launch([path], work, env).release()
            except OSError as error:
                return str(error)
        with open(out, "wb") as stdout:
            run = run_contained(
                ["/bin/sh", "-c", CHECK_SCRIPT, "sh", *paths],
                cwd=work,
                env=env,
                timeout_s=CHECK_TIMEOUT_S,
                stdout=stdout,
                containment=containment,
                readable=paths,
            )
        with open(out, "rb") as handle:
            hidden = handle.read(4096).decode("utf-8", "replace").split()
    if run.status == "unstartable":
        return run.detail
    if hidden:
        return (
            f"the sandbox {containment.name} hides {hidden[0]}, which the agent needs: declare it with "
            "run_command(readable=...) in the adapter (docs/plugins.md), or install it elsewhere"
        )
    return None


def _found(program: str, env: dict[str, str]) -> str | None:
    if "/" in program:
        return os.path.abspath(program) if os.path.exists(program) else None
    return shutil.which(program, path=env.get("PATH", os.defpath))


def declared_programs(agent: AgentAdapter, agent_args: Sequence[str]) -> tuple[str, ...]:
    """What the adapter's ``programs`` names, under the plugin wait: one that raises, never returns or names no
    list of paths is one line naming it (exit 3), as its other quick callables are."""
    assert agent.programs is not None
    whose = f"the adapter {agent.name}'s programs()"
    named = plugin_call(whose, agent.programs, tuple(agent_args), seconds=plugin_wait_s())
    if isinstance(named, str) or not isinstance(named, Sequence) or not all(isinstance(p, str) for p in named):
        raise InstrumentError(f"{whose} returned {type(named).__name__}, not a list of paths")
    return tuple(named)


def checked_agent(
    agent: AgentAdapter, agent_args: Sequence[str], containment: Containment, say: Callable[[str], None]
) -> AgentAdapter:
    """``agent`` as it is when its programs start inside the containment, else one whose trials are unavailable."""
    if agent.programs is None:
        return agent
    problem = program_problem(declared_programs(agent, agent_args), containment)
    if problem is None:
        return agent
    say(f"warning: {agent.name}: {problem}; its trials are agent-unavailable, not graded")

    def unavailable(request: AgentRequest) -> AgentOutcome:
        return AgentOutcome(status="unavailable", detail=problem)

    return attrs.evolve(agent, run=unavailable)
