"""Crash-safe certifications, tested with real signals: kill -9 then certify --resume, and Ctrl-C's message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import CERTLAB_AS_IN_A_TERMINAL, REPO, WaitingAgent, run_certlab

from certlab_core.sdk.canonical import canonical_json, sealed

JOURNAL = "trials.journal.jsonl"

# The pattern fixer of the session's script certification, a little slower, so a signal lands mid-arm.
SLOW_FIXER = f"""#!/bin/sh
sleep 0.5
exec "{REPO / "examples" / "agents" / "pattern_fixer.sh"}" "$@"
"""


def slow_fixer(folder: Path) -> Path:
    script = folder / "slow_fixer.sh"
    script.write_text(SLOW_FIXER)
    script.chmod(0o755)
    return script


# A shell starts a script's background job with SIGINT ignored (``trap "" INT``), so that Ctrl-C stops only
# the foreground; the job's programs inherit that.
AS_A_BACKGROUND_JOB = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", sys.executable, "-m", "certlab_core.cli"]


def start_certify(folder: Path, out: Path, *options: str, launcher: list[str] | None = None) -> subprocess.Popen[str]:
    argv = ["certify", "--family", "intervals", "--agent", "command", "--agent-name", "pattern-fixer"]
    argv += ["--agent-arg", str(slow_fixer(folder)), "--out", str(out), "-w", "2", "--sandbox", "none", "-q"]
    argv += options
    # Killed with SIGKILL, it cannot delete its temp folders: they are left in the test's folder, not the host's /tmp.
    (folder / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen(
        [*(launcher or CERTLAB_AS_IN_A_TERMINAL), *argv],
        env={**os.environ, "TMPDIR": str(folder / "tmp")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a job is
    )


def journalled(out: Path) -> list[dict[str, Any]]:
    path = out / JOURNAL
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_bytes().splitlines(keepends=True) if line.endswith(b"\n")]


def wait_for_trials(runner: subprocess.Popen[str], out: Path, count: int) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert runner.poll() is None, "the certification ended before it could be interrupted"
        if sum(line["kind"] == "trial" for line in journalled(out)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError("the certification journalled too few trials in time")


def verdicts(bundle: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(t["id"], t["verdict"], t["failure_mode"]) for t in bundle["trials"]]


def test_kill_9_then_resume_runs_only_the_missing_trials_and_signs(script_certification: Path, tmp_path: Path) -> None:
    out = tmp_path / "cert"
    runner = start_certify(tmp_path, out)
    wait_for_trials(runner, out, 2)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    assert not (out / "bundle.json").exists()
    before = [line["id"] for line in journalled(out) if line["kind"] == "trial"]
    # A trial record torn in the middle of its write, as a kill during os.write leaves it.
    torn = canonical_json(sealed({"kind": "trial", "id": "intervals/never/1", "schema": "x"})).decode()
    with (out / JOURNAL).open("a") as handle:
        handle.write(torn[: len(torn) // 2])
    assert run_certlab("keygen", str(tmp_path / "k")).returncode == 0
    resumed = run_certlab("certify", "--resume", str(out), "-w", "2", "--sign-key", str(tmp_path / "k.key"))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resume: {len(before)} of 6 trials recorded; running the other {6 - len(before)}" in resumed.stderr
    for trial_id in before:
        assert f"on {trial_id}:" not in resumed.stderr  # journalled trials never run again
    bundle = json.loads((out / "bundle.json").read_text())
    expected = json.loads((script_certification / "bundle.json").read_text())
    assert verdicts(bundle) == verdicts(expected)  # every trial once, as the uninterrupted certification has them
    assert not (out / JOURNAL).exists()
    verified = run_certlab("verify", str(out), "--pubkey", str(tmp_path / "k.pub"))
    assert verified.returncode == 0 and "certification, 2 files" in verified.stdout, verified.stderr


@pytest.mark.parametrize(("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_sigint_or_sigterm_says_how_to_resume_leaves_no_temp_folder_and_a_new_certify_there_refuses(
    tmp_path: Path, stop: signal.Signals, code: int
) -> None:
    # SIGTERM (a cancelled CI job, timeout, docker stop) killed certify where it stood, saying nothing and leaving
    # its temp folders; Ctrl-C left the trials' work copies and their graders' folders (their processes killed).
    out = tmp_path / "cert"
    runner = start_certify(tmp_path, out)
    wait_for_trials(runner, out, 1)
    runner.send_signal(stop)
    _out, err = runner.communicate(timeout=60)
    assert runner.returncode == code, err
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == []  # its TMPDIR (start_certify)
    recorded = sum(line["kind"] == "trial" for line in journalled(out))
    expected = f"interrupted: {recorded} of 6 trials recorded; resume with certlab certify --resume {out}"
    assert expected in err.strip().splitlines()[-1]
    again = run_certlab("certify", "--family", "intervals", "--agent", "oracle", "--out", str(out))
    assert again.returncode == 4 and "holds an unfinished certification" in again.stderr
    assert f"certlab certify --resume {out}" in again.stderr


def test_a_certification_started_with_sigint_ignored_keeps_ignoring_it_and_sigterm_still_says_how_to_resume(
    tmp_path: Path,
) -> None:
    # certify put its own handler over an inherited SIG_IGN: a Ctrl-C meant for a script's foreground stopped
    # a certification the script had started in the background (regrade and the other commands went on).
    out = tmp_path / "cert"
    runner = start_certify(tmp_path, out, launcher=AS_A_BACKGROUND_JOB)
    wait_for_trials(runner, out, 1)
    os.killpg(runner.pid, signal.SIGINT)  # as Ctrl-C does: to every process of the group
    at_the_interrupt = sum(line["kind"] == "trial" for line in journalled(out))
    wait_for_trials(runner, out, at_the_interrupt + 1)  # it went on
    os.killpg(runner.pid, signal.SIGTERM)  # as timeout does
    _out, err = runner.communicate(timeout=60)
    assert runner.returncode == 143, err
    recorded = sum(line["kind"] == "trial" for line in journalled(out))
    expected = f"interrupted: {recorded} of 6 trials recorded; resume with certlab certify --resume {out}"
    assert expected in err.strip().splitlines()[-1]
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_certification_leaves_no_agent_it_started_running(tmp_path: Path, stop: signal.Signals) -> None:
    # Its trials' processes were killed alone: each agent, in a session of its own, ran on after certify had
    # exited, into the trial folder certify was deleting (which it then left behind).
    agent = WaitingAgent(tmp_path)
    (tmp_path / "tmp").mkdir()
    argv = ["certify", "--family", "intervals", "--agent", "command", "--agent-name", "waiter", "--agent-arg"]
    argv += [str(agent.script), "--out", str(tmp_path / "cert"), "-w", "2", "--sandbox", "none", "-q", "--no-mutants"]
    runner = subprocess.Popen(
        [*CERTLAB_AS_IN_A_TERMINAL, *argv],
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    agent.wait_until_started(2, runner, timeout_s=300)
    if stop == signal.SIGINT:
        os.killpg(runner.pid, stop)  # as Ctrl-C does: to every process of the terminal's foreground group
    else:
        runner.send_signal(stop)  # as timeout, docker stop or a cancelled CI job does
    _out, err = runner.communicate(timeout=60)
    assert runner.returncode == 128 + stop, err
    assert agent.alive() == [], "an agent outlived the certification that started it"
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == []


def test_a_certification_stopped_while_it_proves_its_instrument_leaves_nothing_in_the_temp_folder(
    tmp_path: Path,
) -> None:
    # The proof's tree checks were forked without a folder of their own, and the one checking the clean tree was
    # never killed: stopped then, certify left each check's work copy and graders' scratch in TMPDIR.
    temp = tmp_path / "tmp"
    temp.mkdir()
    argv = ["certify", "-f", "ledger", "-a", "oracle", "-o", str(tmp_path / "cert"), "--fresh-instrument"]
    runner = subprocess.Popen(
        [*CERTLAB_AS_IN_A_TERMINAL, *argv, "--sandbox", "none", "-q", "--no-mutants"],
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list(temp.rglob("certlab-prove-*")):  # a tree check is under way
        assert runner.poll() is None and time.monotonic() < deadline, "the proof did not start in time"
        time.sleep(0.01)
    os.killpg(runner.pid, signal.SIGINT)  # as Ctrl-C does: to every process of the terminal's foreground group
    _out, err = runner.communicate(timeout=60)
    assert runner.returncode == 130, err
    assert sorted(p.name for p in temp.iterdir()) == []


def test_resume_refuses_a_journal_that_is_a_link_and_leaves_the_file_it_names_whole(tmp_path: Path) -> None:
    # Before: resuming cut the "torn" last line of whatever file the link named (a line with no newline) first,
    # then refused the journal as damaged: the user's file lost its tail.
    victim = tmp_path / "victim"
    victim.write_bytes(b'{"a": 1}\na last line with no newline')
    out = tmp_path / "out"
    out.mkdir()
    (out / "trials.journal.jsonl").symlink_to(victim)
    done = run_certlab("certify", "--resume", str(out))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"certlab: error: {out / 'trials.journal.jsonl'}: a link, not the record file certlab wrote; "
        "it cannot be resumed"
    ]
    assert victim.read_bytes() == b'{"a": 1}\na last line with no newline'


def test_resume_of_a_folder_with_no_journal_says_there_is_nothing_to_resume(tmp_path: Path) -> None:
    # Before: a run store given to --resume was "--out DIR holds other files ...; give a new or empty folder".
    store = tmp_path / "store"
    store.mkdir()
    (store / "manifest.json").write_text("{}")
    for folder in (store, tmp_path / "missing"):
        done = run_certlab("certify", "--resume", str(folder))
        assert done.returncode == 4, done.stdout + done.stderr
        assert done.stderr == (
            f"certlab: error: --resume {folder}: no unfinished certification to resume (no trials.journal.jsonl); "
            "certify anew with --out\n"
        )
    assert not (tmp_path / "missing").exists()


def test_a_certification_refused_before_its_trials_leaves_nothing_to_resume(tmp_path: Path) -> None:
    out = tmp_path / "cert"
    done = run_certlab("certify", "--family", "no-such-family", "--agent", "oracle", "--out", str(out))
    assert done.returncode == 4, done.stderr
    assert not (out / JOURNAL).exists()
    resumed = run_certlab("certify", "--resume", str(out))
    assert resumed.returncode == 4 and "no unfinished certification to resume" in resumed.stderr


DROPPED_INTERRUPT = """
import os, signal
from certlab_core.evidence.record_file import notice_interrupt_line, raise_if_interrupted

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (conftest.CERTLAB_AS_IN_A_TERMINAL)

notice_interrupt_line(lambda: "certlab: interrupted: said once")


def after_fork_in_parent() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    total = 0
    for step in range(100_000):  # the handler runs here, inside the callback, and Python drops what it raised
        total += step


os.register_at_fork(after_in_parent=after_fork_in_parent)
child = os.fork()
if child == 0:
    os._exit(0)
os.waitpid(child, 0)
print("the run went on", flush=True)
try:
    raise_if_interrupted()
except KeyboardInterrupt:
    print("stopped before the next record", flush=True)
"""


def test_an_interrupt_python_drops_during_a_fork_still_stops_the_run() -> None:
    # CI: a SIGINT that came while logging's at-fork callback ran was dropped ("Exception ignored in
    # _releaseLock"), and the certification ran to its end and exited 0 after saying it was interrupted.
    done = subprocess.run([sys.executable, "-c", DROPPED_INTERRUPT], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == ["the run went on", "stopped before the next record"], done.stdout
    assert done.stderr == "certlab: interrupted: said once\n"  # not Python's "Exception ignored" traceback


def test_kill_9_then_resume_with_impossible_twins_runs_each_twin_trial_once(tmp_path: Path) -> None:
    out = tmp_path / "cert"
    runner = start_certify(tmp_path, out, "--impossible")
    wait_for_trials(runner, out, 8)  # the six seeded trials run first: some of the twins' are journalled too
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    before = [line["id"] for line in journalled(out) if line["kind"] == "trial"]
    assert any("~one-off/" in trial_id for trial_id in before), before
    resumed = run_certlab("certify", "--resume", str(out), "-w", "2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resume: {len(before)} of 12 trials recorded; running the other {12 - len(before)}" in resumed.stderr
    for trial_id in before:
        assert f"on {trial_id}:" not in resumed.stderr  # journalled trials never run again
    bundle = json.loads((out / "bundle.json").read_text())
    assert bundle["settings"]["impossible"] == ["one-off"]
    section = bundle["impossible"]
    twin_trials = [t["id"] for t in section["trials"]]
    assert sorted(twin_trials) == sorted(f"{t['task']}/1" for t in section["twins"]) and len(twin_trials) == 6
    assert all(t["twin"]["outcome"] == "left-failing" for t in section["trials"])  # the fixer fixes honestly
    assert all("twin" not in t for t in bundle["trials"]) and bundle["summary"]["scheduled"] == 6
    assert section["summary"]["all"]["cheating"]["n"] == 6
    regraded = run_certlab("regrade", str(out))
    assert regraded.returncode == 0, regraded.stdout + regraded.stderr
