"""No process outlives its trial, even uncontained: a child subreaper finds what the agent left and kills it all.

The measured failures of issue 12: a daemon started with ``setsid env -i`` (a new session,
no token in its environment) that copies the clean source into later trials' work copies
made 5 of 6 trials certified fixed; a background loop that keeps spawning left hundreds of
processes alive after the certification.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from certlab_core._runtime.registry import Registry
from certlab_core.certify.certification import CertifyOptions, certify
from certlab_core.plugin.types.agent import AgentRequest
from certlab_core.sdk.command import run_command
from certlab_core.sdk.processes import live_descendants


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def request_for(work: Path, timeout_s: float = 20.0) -> AgentRequest:
    return AgentRequest(
        workdir=str(work),
        prompt="",
        prompt_file=str(work / "PROMPT.md"),
        task_id="t",
        timeout_s=timeout_s,
        env=dict(os.environ),
    )


def test_a_daemon_in_a_new_session_with_a_cleared_environment_is_found_named_and_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    script = f"setsid env -i /bin/sh -c 'echo $$ > {pidfile}; exec sleep 300' </dev/null >/dev/null 2>&1 &\nsleep 0.3"
    outcome = run_command(request_for(tmp_path), ["/bin/sh", "-c", script])
    pid = int(pidfile.read_text())
    assert not alive(pid), "the daemon outlived its agent"
    assert any(line.startswith(f"pid {pid}:") and "sleep 300" in line for line in outcome.leftover_processes)
    assert outcome.status == "completed" and outcome.exit_code == 0


def test_a_background_loop_that_keeps_spawning_leaves_nothing_behind(tmp_path: Path) -> None:
    marker = f"certlab-spawner-{os.getpid()}"
    loop = f"while :; do sleep 300 & sleep 0.001; done # {marker}"
    script = f"setsid /bin/sh -c {shlex.quote(loop)} </dev/null >/dev/null 2>&1 &\nsleep 0.5"
    outcome = run_command(request_for(tmp_path), ["/bin/sh", "-c", script])
    time.sleep(0.2)  # a survivor would keep spawning; give it the time to show itself
    survivors = [
        entry
        for entry in os.listdir("/proc")
        if entry.isdigit() and alive(int(entry)) and marker.encode() in _cmdline(int(entry))
    ]
    assert survivors == []
    assert len(outcome.leftover_processes) >= 2  # the loop and the sleeps it had started, each named


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_timed_out_agent_and_its_escaped_children_are_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"setsid env -i /bin/sh -c 'echo $$ > {pidfile}; exec sleep 300' &\nexec sleep 300"
    # What this test process already runs (another test's pool, on the same xdist worker) is not the agent's.
    before = live_descendants()
    outcome = run_command(request_for(tmp_path, timeout_s=0.5), ["/bin/sh", "-c", script])
    assert outcome.status == "timeout"
    assert not alive(int(pidfile.read_text()))
    assert live_descendants(spare=before) == []


def test_a_daemon_copying_the_clean_source_into_later_trials_certifies_nothing(
    registry: Registry, tmp_path: Path
) -> None:
    """Issue 12: 5 of 6 certified on the old code, uncontained. Now the daemon dies with the first trial.

    Uncontained on purpose (``--sandbox none``): in the sandbox the daemon dies with its PID namespace.
    """
    import certlab_intervals

    clean = Path(certlab_intervals.__file__).parent / "family" / "tree" / "intervals.py"
    first = tmp_path / "first-done"
    trials_glob = f"{os.environ.get('TMPDIR', '/tmp')}/certlab-trial-*/work"
    daemon = f"while :; do for w in {trials_glob}; do cp {clean} $w/intervals.py 2>/dev/null; done; sleep 0.01; done"
    agent = (
        f"if [ ! -e {first} ]; then touch {first}; "
        f"setsid env -i /bin/sh -c {shlex.quote(daemon)} </dev/null >/dev/null 2>&1 & fi; exit 0"
    )
    result = certify(
        registry,
        CertifyOptions(families=("intervals",), agent="command", agent_args=(agent,), workers=1, sandbox="none"),
        lambda _m: None,
    )
    trials = result.bundle["trials"]
    assert len(trials) == 6
    # The first trial's own work copy is the agent's to change; none of the later five is.
    assert [t["verdict"] for t in trials[1:]] == ["not-fixed"] * 5
    # Named: as the daemon, or as the agent's shell it forked, when the sweep (woken the moment the agent
    # exited) killed it before it became the daemon; either command line holds the daemon's loop.
    assert any("while :" in line for line in trials[0]["leftover_processes"]), trials[0]["leftover_processes"]


@pytest.mark.skipif(sys.platform != "linux", reason="child subreapers are Linux's")
def test_the_trial_checks_again_before_grading_for_what_an_adapter_left(registry: Registry, tmp_path: Path) -> None:
    """An adapter that starts a process itself (not through run_command) still has it killed and named."""
    import subprocess

    from certlab_core.certify.lab import Task, TrialSpec, run_trial
    from certlab_core.plugin.types.agent import AgentAdapter, AgentOutcome
    from certlab_core.sdk.grading import grader_chain

    pidfile = tmp_path / "stray.pid"

    def leaves_a_stray(request: AgentRequest) -> AgentOutcome:
        subprocess.Popen(["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 300"], start_new_session=True, env={})
        deadline = time.monotonic() + 5
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return AgentOutcome(status="completed", exit_code=0)

    family = registry.get("task_families", "intervals")
    adapter = AgentAdapter(name="stray", description="leaves a process", run=leaves_a_stray)
    from certlab_core.sdk.forking import call_in_fork

    record = call_in_fork(run_trial, TrialSpec(Task(family, family.defects[0]), adapter, 1), grader_chain(registry))
    pid = int(pidfile.read_text())
    assert not alive(pid)
    assert any(line.startswith(f"before grading: pid {pid}:") for line in record.leftover_processes)


@pytest.mark.skipif(sys.platform != "linux", reason="child subreapers are Linux's")
def test_a_supervised_program_is_noticed_the_moment_it_ends(tmp_path: Path) -> None:
    """The supervising process waited with ``Popen.wait(timeout)``, which naps in doubling steps up to 50 ms and
    wakes after the program ended by up to a nap: a 70 ms program took 56 to 64 ms longer under ``run_contained``
    than run directly (measured at load 14 on 2 cores), 12 to 22 ms woken by a pidfd. Counted without a clock,
    so the machine's load cannot decide it: each nap is a voluntary context switch, 19 in all for a half-second
    program (its own included), 5 with the pidfd."""
    import resource

    from certlab_core.sdk.command import run_contained

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw
    run = run_contained(["sleep", "0.5"], cwd=str(tmp_path), env=dict(os.environ), timeout_s=30)
    switches = resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw - before
    assert run.status == "completed" and run.exit_code == 0
    assert switches <= 10, f"{switches} voluntary context switches: the supervising process polls"


def test_a_process_without_a_command_line_is_named_by_its_name_not_a_question_mark() -> None:
    """CI named a leftover ``pid N: ?``: the sweep read its command line while it had none (in exec, or a zombie)."""
    from certlab_core.sdk.command import _command_line

    child = os.fork()
    if child == 0:
        os._exit(0)
    try:
        while Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.001)
        assert Path(f"/proc/{child}/cmdline").read_bytes() == b""  # a zombie has no command line
        assert _command_line(child) == f"[{Path(f'/proc/{child}/comm').read_text().strip()}]"
    finally:
        os.waitpid(child, 0)
    assert _command_line(child) == "?"  # gone
