"""The command adapter against real shell processes: environment, exit codes, timeouts, leftovers, tails."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from certlab_command.plugin import check_command_line, run

from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.agent import AgentRequest
from certlab_core.sdk.command import TAIL_BYTES


def request(tmp_path: Path, cmdline: str, timeout: float = 30.0) -> AgentRequest:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    prompt_file = tmp_path / "PROMPT.md"
    prompt_file.write_text("fix it\n")
    env = dict(os.environ, CERTLAB_PROMPT="fix it\n", CERTLAB_PROMPT_FILE=str(prompt_file), CERTLAB_TASK_ID="fam/t1")
    return AgentRequest(
        workdir=str(work), prompt="fix it\n", prompt_file=str(prompt_file), task_id="fam/t1",
        timeout_s=timeout, env=env, agent_args=(cmdline,),
    )  # fmt: skip


def test_runs_in_the_work_copy_with_the_prompt_and_no_stdin(tmp_path: Path) -> None:
    req = request(
        tmp_path, 'pwd > where; echo "$CERTLAB_TASK_ID" > task; cat "$CERTLAB_PROMPT_FILE" > prompt; cat > stdin'
    )
    outcome = run(req)
    work = Path(req.workdir)
    assert outcome.status == "completed" and outcome.exit_code == 0
    assert (work / "where").read_text().strip() == str(work)
    assert (work / "task").read_text().strip() == "fam/t1"
    assert (work / "prompt").read_text() == "fix it\n"
    assert (work / "stdin").read_text() == ""
    assert not Path(req.prompt_file).is_relative_to(work)


def test_only_exit_75_and_the_shells_could_not_run_mean_unavailable(tmp_path: Path) -> None:
    assert run(request(tmp_path, "exit 75")).status == "unavailable"
    failed = run(request(tmp_path, "echo oops >&2; exit 3"))
    assert failed.status == "completed" and failed.exit_code == 3 and failed.stderr_tail == "oops\n"
    # Before: a program the shell could not find (exit 127), an interpreter missing where the agent runs, was a
    # completed run: every trial the agent's own not-fixed, for an agent that never ran.
    missing = run(request(tmp_path, "/no/such/interpreter --go"))
    assert missing.status == "unavailable" and missing.exit_code == 127
    assert missing.detail.startswith("the agent exited 127: a program its command line runs was not found (")
    assert "/no/such/interpreter" in missing.detail
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    cannot = run(request(tmp_path, str(tmp_path / "not-executable")))
    assert cannot.status == "unavailable" and cannot.exit_code == 126


def test_timeout_terminates_the_process_group(tmp_path: Path) -> None:
    started = time.monotonic()
    outcome = run(request(tmp_path, "sleep 30 & sleep 30", timeout=0.5))
    assert outcome.status == "timeout" and "timed out" in outcome.detail
    assert time.monotonic() - started < 5


def test_an_agent_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    started = time.monotonic()
    outcome = run(request(tmp_path, "trap '' TERM; while :; do sleep 0.1; done", timeout=0.3))
    elapsed = time.monotonic() - started
    assert outcome.status == "timeout"
    assert 5.0 <= elapsed < 15.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_leftover_processes_are_named_and_killed(tmp_path: Path) -> None:
    req = request(tmp_path, "sleep 300 & echo $! > bg; setsid sleep 301 & echo $! > escaped; exit 0")
    outcome = run(req)
    work = Path(req.workdir)
    pids = [int((work / name).read_text()) for name in ("bg", "escaped")]
    named = " ".join(outcome.leftover_processes)
    assert "sleep 300" in named and "sleep 301" in named
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def test_only_the_last_64_kib_of_output_is_kept(tmp_path: Path) -> None:
    outcome = run(request(tmp_path, "head -c 200000 /dev/zero | tr '\\0' a; echo END"))
    assert len(outcome.stdout_tail.encode()) == TAIL_BYTES
    assert outcome.stdout_tail.endswith("aEND\n")


@pytest.mark.parametrize(
    ("cmdline", "message"),
    [
        ("", "empty"),
        ("no-such-program-xyz --flag", "not on PATH"),
        ("/no/such/file", "not an executable"),
        ("FOO=1 'unterminated", "cannot be parsed"),
    ],
)
def test_bad_command_lines_are_refused_before_running(cmdline: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_command_line(cmdline)


def test_a_program_or_script_named_by_a_relative_path_is_refused_naming_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: --agent-arg ./agent.sh passed this check (it is there, where certify starts), then every trial ran
    # it in its work copy, where it is not: sh exited 127, and each trial was the agent's not-fixed (suite-failed).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agent.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "agent.sh").chmod(0o755)
    for cmdline, named in (
        ("./agent.sh --go", "./agent.sh"),
        ("python3 agent.sh", "agent.sh"),
        ("sh agent.sh", "agent.sh"),
    ):
        with pytest.raises(UsageError, match="by a relative path") as refused:
            check_command_line(cmdline)
        assert str(refused.value).startswith(f"the agent command names {named} by a relative path")
        assert str(refused.value).endswith(f"give its absolute path ({tmp_path / 'agent.sh'})")
    check_command_line(f"{tmp_path / 'agent.sh'} --go")
    check_command_line(f"python3 {tmp_path / 'agent.sh'}")
    check_command_line("python3 -m json.tool")  # no file named: nothing to find


def test_shell_words_and_assignments_are_accepted() -> None:
    check_command_line("cd . && true")
    check_command_line("FOO=1 sh -c 'exit 0'")
