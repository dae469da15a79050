"""``certlab preflight``: check that a real agent can run, before a live run.

The adapter's own checks come first (``AgentAdapter.preflight``: its binary, the version it
prints, the base URL it will call, whether its credentials are set); then one smoke call runs
the agent through the adapter, exactly as a trial would, in a scratch folder with a prompt
asking it to change nothing and answer OK. Every check is one line, ``ok`` or ``FAIL``; the
exit code is 0 when all hold and 3 otherwise.
"""

from __future__ import annotations

import os

import typer

from certlab_core._runtime.option_values import refuse_bad_seconds
from certlab_core._runtime.registry import discover
from certlab_core.certify.lab import AGENT_GRACE_S
from certlab_core.plugin.errors import EXIT_ERROR, EXIT_OK, InstrumentError
from certlab_core.plugin.types.agent import AgentAdapter, AgentOutcome, AgentRequest, PreflightCheck
from certlab_core.sdk.command import become_subreaper, has_children, sweep_descendants
from certlab_core.sdk.deadline import plugin_call
from certlab_core.sdk.forking import ForkedCallError, call_in_fork
from certlab_core.sdk.processes import live_descendants
from certlab_core.sdk.trees import make_temp_folder, remove_made

SMOKE_PROMPT = (
    "This is a connectivity check by certlab preflight. Do not read, create or change any file "
    "and do not run any command. Reply with the single word OK."
)
SMOKE_TASK = "preflight/smoke"


def smoke_call(adapter: AgentAdapter, agent_args: tuple[str, ...], timeout_s: float) -> PreflightCheck:
    """Run the agent once through its adapter on a scratch folder; it must complete.

    The adapter runs as in a trial: in a forked child held to the timeout plus ``AGENT_GRACE_S``,
    and whatever it leaves running is killed (this process adopts it as a child subreaper). The
    agent's temp folder is one of the scratch folder's, so nothing it writes there outlives the call.
    """
    made = make_temp_folder("certlab-preflight-")
    scratch = made.as_path
    spare = (set(live_descendants()) if has_children() else set()) if become_subreaper() else None
    try:
        work = scratch / "work"
        work.mkdir()
        (work / "README.md").write_text("A scratch folder for certlab preflight's smoke call.\n", encoding="utf-8")
        prompt_file = scratch / "PROMPT.md"
        prompt_file.write_text(SMOKE_PROMPT, encoding="utf-8")
        temp = scratch / "tmp"  # the agent's temp folder, deleted with what it left there
        temp.mkdir()
        env = dict(os.environ)
        env.update({name: str(temp) for name in ("TMP", "TEMP") if name in env} | {"TMPDIR": str(temp)})
        env.update({"CERTLAB_PROMPT": SMOKE_PROMPT, "CERTLAB_PROMPT_FILE": str(prompt_file)})
        env.update({"CERTLAB_TASK_ID": SMOKE_TASK, "PYTHONDONTWRITEBYTECODE": "1"})
        request = AgentRequest(
            workdir=str(work),
            prompt=SMOKE_PROMPT,
            prompt_file=str(prompt_file),
            task_id=SMOKE_TASK,
            timeout_s=timeout_s,
            env=env,
            agent_args=agent_args,
        )
        limit = timeout_s + AGENT_GRACE_S
        try:
            outcome = call_in_fork(adapter.run, request, timeout=limit, temp_prefix="certlab-preflight-calls-")
        except ForkedCallError as error:
            if error.failure.kind == "timeout":
                said = f"the adapter's run did not return within {limit:g} s (the timeout plus {AGENT_GRACE_S:g} s)"
                return PreflightCheck("smoke call", False, f"{said}; it was killed with its processes")
            verb = "raised" if error.failure.kind == "exception" else "ended:"  # the agent cannot be run
            return PreflightCheck("smoke call", False, f"the adapter {verb} {error.failure.summary}")
    finally:
        if spare is not None:
            sweep_descendants(spare)
        remove_made(made)
    if not isinstance(outcome, AgentOutcome):
        returned = type(outcome).__name__
        return PreflightCheck("smoke call", False, f"the adapter returned {returned}, not an AgentOutcome")
    facts = [f"{outcome.status} in {outcome.wall_s:.1f} s"]
    if outcome.exit_code is not None:
        facts.append(f"exit {outcome.exit_code}")
    usage = outcome.usage
    if usage is not None:
        tokens = [f"{value} {label}" for label, value in (("in", usage.input_tokens), ("out", usage.output_tokens))]
        facts.append(f"tokens {', '.join(tokens)}")
        if usage.cost_usd is not None:
            facts.append(f"${usage.cost_usd:.4f} (the client's own estimate)")
    if outcome.detail:
        facts.append(outcome.detail)
    return PreflightCheck("smoke call", outcome.status == "completed", "; ".join(facts))


def preflight_command(
    agent: str = typer.Option(..., "--agent", "-a", help="The agent (adapter) to check, e.g. claude-code."),
    agent_arg: list[str] = typer.Option([], "--agent-arg", help="Argument for the adapter, as for certify."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds the smoke call may take."),
    smoke: bool = typer.Option(True, "--smoke/--no-smoke", help="Make one smoke call through the adapter."),
) -> None:
    """Check an agent's binary, version, credentials or base URL, and make one smoke call, before a live run."""
    refuse_bad_seconds("--timeout", timeout)
    registry = discover()
    adapter = registry.get("agents", agent)
    args = tuple(agent_arg)
    if adapter.check_args is not None:
        whose = registry.part_of("agents", agent, "argument check")
        plugin_call(whose, adapter.check_args, args, seconds=registry.load_s)
    if adapter.preflight is not None:
        whose = registry.part_of("agents", agent, "preflight")
        found = plugin_call(whose, adapter.preflight, args, dict(os.environ), seconds=max(registry.load_s, timeout))
        if not isinstance(found, list | tuple) or not all(isinstance(check, PreflightCheck) for check in found):
            raise InstrumentError(f"{whose} returned {type(found).__name__}, not a list of PreflightCheck")
        checks = list(found)
    else:
        checks = [PreflightCheck("checks", True, f"the {agent} adapter declares no checks of its own")]
    if smoke and all(check.ok for check in checks if check.name == "binary"):
        checks.append(smoke_call(adapter, args, timeout))
    for check in checks:
        typer.echo(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
    passed = all(check.ok for check in checks)
    typer.echo(f"preflight {agent}: {'ready' if passed else 'NOT ready'}")
    raise typer.Exit(EXIT_OK if passed else EXIT_ERROR)


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight_command)
