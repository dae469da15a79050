"""The fixbot adapter: ``fixbot --prompt-file FILE``; exit 69: API down."""

import shutil

from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest, hookimpl
from certlab_core.sdk.command import run_command

EX_UNAVAILABLE = 69  # fixbot's own exit code for "could not reach my API"


def run(request: AgentRequest) -> AgentOutcome:
    program = shutil.which("fixbot", path=request.env.get("PATH"))
    if program is None:
        return AgentOutcome(status="unavailable", detail="fixbot is not on PATH; install it or add it to PATH")
    argv = [program, "--prompt-file", request.prompt_file, *request.agent_args]
    return run_command(request, argv, unavailable_exit_codes=(EX_UNAVAILABLE,))


@hookimpl
def certlab_agents() -> list[AgentAdapter]:
    return [AgentAdapter(name="fixbot", description="the fixbot agent CLI, headless", run=run)]
