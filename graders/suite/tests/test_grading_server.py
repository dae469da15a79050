"""The suite grader's warm grading server in the bwrap sandbox: a fresh interpreter's verdicts, nothing kept between."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from certlab_suite import plugin as suite

from certlab_core._runtime.registry import discover
from certlab_core.certify.lab import answer_key_paths
from certlab_core.plugin.types.grader import GradeRequest, GradeResult
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.containment import use_containment
from certlab_core.sdk.deadline import TooSlow, deadline
from certlab_core.sdk.services import choose_containment
from certlab_core.sdk.workcopy import materialise

REASON = __import__("certlab_sandbox_bwrap.plugin", fromlist=["probe"]).probe()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no bwrap sandbox here: {REASON}")
FAMILY = discover(only=("intervals",)).get("task_families", "intervals")
MARKER = "certlab-grading-server-test-daemon"


@pytest.fixture(scope="module")
def containment() -> Containment:
    return choose_containment("bwrap", answer_key_paths([FAMILY]), lambda _line: None)


@pytest.fixture
def served(containment: Containment) -> Iterator[Containment]:
    with use_containment(containment), suite.serve(containment, 1):
        yield containment


def request(tmp_path: Path, name: str, suffix: str = "", seeded: bool = False) -> GradeRequest:
    work = tmp_path / name
    defect = FAMILY.defects[0]
    issued = materialise(FAMILY, defect if seeded else None, work)
    module = work / "intervals.py"
    module.write_text(module.read_text() + "\n" + textwrap.dedent(suffix))
    return GradeRequest(workdir=str(work), family=FAMILY, defect=defect, issued=issued)


def on_server(req: GradeRequest) -> GradeResult:
    family = req.family
    run = suite._run_on_server(
        req.workdir,
        family.environment_dir,
        family.test_paths,
        family.module_names,
        None,
        req.first_failure,
        False,
        suite.SUITE_TIMEOUT_S,
    )
    assert run is not None, "the grading did not run on the run's server"
    assert run.report is not None, run.why
    return suite.judge(run.report, tuple(req.expected_tests), run.log_tail)


def test_a_served_grading_gives_the_verdicts_of_a_fresh_interpreter(served: Containment, tmp_path: Path) -> None:
    clean, seeded = request(tmp_path, "clean"), request(tmp_path, "seeded", seeded=True)
    served_clean, served_seeded = on_server(clean), on_server(seeded)
    assert served_clean.passed and served_clean.data["collected"], served_clean.detail
    assert not served_seeded.passed and served_seeded.failure_mode == "suite-failed"
    suite._servers.clear()  # the same gradings with no server in reach: a new interpreter in a sandbox of its own
    fresh_clean, fresh_seeded = suite.grade(clean), suite.grade(seeded)
    assert (fresh_clean.passed, fresh_clean.data) == (True, served_clean.data)
    assert "passed" in served_seeded.detail  # pytest's own log, flushed before the child ended
    assert (fresh_seeded.passed, fresh_seeded.failure_mode) == (False, "suite-failed")


def _daemons() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and MARKER.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_nothing_one_grading_leaves_reaches_the_next(served: Containment, tmp_path: Path) -> None:
    """One trial's code leaves files in the sandbox's /tmp and HOME, and a daemon that rewrites the next tree."""
    leaves = f"""
        import os, subprocess, sys
        for folder in ("/tmp", os.environ["HOME"], "/dev/shm"):
            open(os.path.join(folder, "left-behind"), "w").write("from the first trial")
        script = (
            "import sys, time\\n"
            "time.sleep(0.3)\\n"
            "while True:\\n"
            "    try: open(sys.argv[1], 'a').write('\\\\nraise SystemExit(3)\\\\n')\\n"
            "    except OSError: pass\\n"
            "    time.sleep(0.05)\\n"
        )
        subprocess.Popen([sys.executable, "-c", script, os.path.abspath(__file__), {MARKER!r}], start_new_session=True)
    """
    first = on_server(request(tmp_path, "first", leaves))
    assert first.passed, first.detail
    checks = """
        import os
        for folder in ("/tmp", os.environ["HOME"], "/dev/shm"):
            if os.path.exists(os.path.join(folder, "left-behind")):
                raise RuntimeError("the first trial's file is still in " + folder)
    """
    time.sleep(0.5)  # a surviving daemon would have started writing by now
    second = on_server(request(tmp_path, "second", checks))
    assert second.passed, second.detail
    assert _daemons() == []


def test_no_file_in_dev_nor_a_sysv_segment_outlives_its_grading(served: Containment, tmp_path: Path) -> None:
    """Issue 22: the server unshared IPC once, so a segment and a file in /dev reached every later trial's code."""
    leaves = """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            open("/dev/left-behind", "w").write("from the first trial")
        except OSError:
            pass  # /dev is read-only inside: nothing can be left there
        segment = libc.shmget(0x5EED, 4096, 0o1666)  # IPC_CREAT | 0666
        assert segment >= 0, os.strerror(ctypes.get_errno())
        queue = os.open("/dev/mqueue", os.O_RDONLY)
        os.close(queue)
    """
    first = on_server(request(tmp_path, "first", leaves))
    assert first.passed, first.detail
    checks = """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        assert not os.path.exists("/dev/left-behind"), "a file in /dev outlived its grading"
        assert libc.shmget(0x5EED, 4096, 0) < 0, "the first trial's SysV segment is still there"
        assert open("/proc/sysvipc/shm").read().count("\\n") == 1, "a SysV segment is left"
    """
    second = on_server(request(tmp_path, "second", checks))
    assert second.passed, second.detail


def test_graded_code_that_kills_the_server_is_graded_afresh(served: Containment, tmp_path: Path) -> None:
    kills = """
        import os, signal
        if os.environ.get("HOME") == "/home/agent" and os.getppid() > 1:
            os.kill(os.getppid(), signal.SIGKILL)
    """
    result = suite.grade(request(tmp_path, "killer", kills))
    assert suite._servers[0].broken.exists()
    assert isinstance(result, GradeResult) and result.passed, result.detail  # graded again in a fresh interpreter
    after = suite.grade(request(tmp_path, "after"))
    assert after.passed, after.detail


def test_asked_for_the_first_failure_alone_a_contained_grading_stops_there_with_the_same_verdict(
    served: Containment, tmp_path: Path
) -> None:
    seeded = request(tmp_path, "seeded", seeded=True)
    first = attrs.evolve(seeded, first_failure=True)
    full, on_the_server = on_server(seeded), on_server(first)
    suite._servers.clear()  # and in a new interpreter of the sandbox (the script's --first-failure)
    fresh = suite.grade(first)
    passed = [int(result.detail.split("/")[0]) for result in (full, on_the_server, fresh)]
    assert {(r.passed, r.failure_mode) for r in (full, on_the_server, fresh)} == {(False, "suite-failed")}
    assert passed[1] == passed[2] < passed[0], passed


def test_held_out_node_ids_run_on_the_server_with_the_files_laid_over_its_copy_only(
    served: Containment, tmp_path: Path
) -> None:
    # The acceptance grader's held-out test files go this way: a fork of the warm server, not a new interpreter.
    work = tmp_path / "work"
    materialise(FAMILY, None, work)
    held_out = "tests/test_held_out.py"
    text = (
        "from intervals import *  # noqa\n\n\ndef test_on_the_server():\n"
        "    assert b'suite_server.py' in open('/proc/self/cmdline', 'rb').read()\n"
    )

    def lay(tree: Path) -> None:
        (tree / held_out).write_text(text)

    node = f"{held_out}::test_on_the_server"
    run = suite.run_tests(str(work), None, [node], FAMILY.module_names, prepare=lay)
    assert run.report is not None, run.why
    assert (run.report["exit_code"], run.report["outcomes"]) == (0, {node: "passed"}), run.log_tail
    assert not (work / held_out).exists()
    suite._servers.clear()  # no server in reach: a new interpreter in the sandbox, where the same test fails
    fresh = suite.run_tests(str(work), None, [node], FAMILY.module_names, prepare=lay)
    assert fresh.report is not None and fresh.report["outcomes"] == {node: "failed"}, fresh.why


def test_outcomes_alone_on_the_server_leave_the_asserts_as_written(served: Containment, tmp_path: Path) -> None:
    # A fork of the server is a fresh interpreter's: no test runner above it rewrites the module either way.
    work = tmp_path / "work"
    materialise(FAMILY, None, work)
    held_out = "tests/test_held_out.py"

    def lay(tree: Path) -> None:
        (tree / held_out).write_text("def test_lists():\n    assert [1] == [2]\n")

    node = f"{held_out}::test_lists"
    full, alone = (
        suite.run_tests(str(work), None, [node], FAMILY.module_names, prepare=lay, outcomes_only=o)
        for o in (False, True)
    )
    assert full.report is not None and alone.report is not None, (full.why, alone.why)
    assert full.report["outcomes"] == alone.report["outcomes"] == {node: "failed"}
    assert "assert [1] == [2]" in full.log_tail  # rewritten, the failure names what it compared
    assert "assert [1] == [2]" not in alone.log_tail and "def test_lists" not in alone.log_tail


def test_left_on_an_error_the_servers_are_killed_at_once_and_their_folder_removed(containment: Containment) -> None:
    """CI: a service that broke was followed by this teardown awaiting each server in turn, past the kernel's
    wait of 1 s, which cut it short and left the servers' folder in /tmp."""
    with pytest.raises(RuntimeError, match="a trial hung"), use_containment(containment), suite.serve(containment, 2):
        servers = list(suite._servers)
        raise RuntimeError("a trial hung")
    assert [server.process.returncode for server in servers] == [-signal.SIGKILL] * 2  # not told to end, then awaited
    assert not servers[0].folder.parent.exists()
    assert suite._servers == []


def test_left_after_the_last_grading_the_servers_end_on_their_own(containment: Containment) -> None:
    with use_containment(containment), suite.serve(containment, 2):
        servers = list(suite._servers)
    assert [server.process.returncode for server in servers] == [0, 0]
    assert not servers[0].folder.parent.exists()


def test_a_leaving_cut_short_by_the_kernels_wait_still_kills_every_server(containment: Containment) -> None:
    serving = suite.serve(containment, 2)
    with use_containment(containment):
        serving.__enter__()
        servers = list(suite._servers)
        os.kill(servers[1].process.pid, signal.SIGSTOP)  # its bwrap cannot end: the wait for it runs out
        with pytest.raises(TooSlow), deadline(0.5):
            serving.__exit__(None, None, None)
    # The stopped one is killed; the other ended on its own, or, on a loaded machine where it had not by the
    # deadline, was killed with it: either way none outlives the leaving.
    assert servers[1].process.returncode == -signal.SIGKILL
    assert servers[0].process.returncode in (0, -signal.SIGKILL)
    assert not servers[0].folder.parent.exists()
