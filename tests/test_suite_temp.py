"""tools/suite_temp.py, through which ``make test`` runs pytest: a temp folder of the run's own, checked after."""

from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "suite_temp.py"


def suite_temp(machine_temp: Path, script: str) -> subprocess.CompletedProcess[str]:
    """The tool running ``sh -c script``, its own folder made in ``machine_temp``."""
    return subprocess.run(
        [sys.executable, str(TOOL), "sh", "-c", script],
        env={**os.environ, "TMPDIR": str(machine_temp)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_run_that_leaves_only_pytests_folder_passes_and_its_folder_is_removed(tmp_path: Path) -> None:
    # pytest's own folder stays in the run's temp folder, a read-only folder of a test's among it.
    pytest_own = f'"$TMPDIR/pytest-of-{getpass.getuser()}"'
    done = suite_temp(tmp_path, f"mkdir -p {pytest_own}/locked/x && chmod 500 {pytest_own}/locked")
    assert (done.returncode, done.stderr) == (0, "")
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_leaves_something_in_its_temp_folder_fails_naming_it(tmp_path: Path) -> None:
    done = suite_temp(tmp_path, 'mkdir "$TMPDIR/certlab-trial-1" && touch "$TMPDIR/certlab-trial-1/work" "$TMPDIR/x"')
    assert done.returncode == 1
    (folder,) = tmp_path.iterdir()
    assert folder.name.startswith("certlab-suite-")
    assert f"the run left 2 entries in its temp folder {folder}" in done.stderr
    assert done.stderr.splitlines()[1:] == ["  certlab-trial-1/ (1 entries inside)", "  x"]


def test_a_failing_run_keeps_its_code_and_its_folder(tmp_path: Path) -> None:
    done = suite_temp(tmp_path, f'mkdir "$TMPDIR/pytest-of-{getpass.getuser()}" && exit 5')
    assert done.returncode == 5
    (folder,) = tmp_path.iterdir()
    assert done.stderr == f"suite_temp: the run's temp folder is kept for a look: {folder}\n"


def test_sigterm_reaches_the_command_and_the_check_still_runs(tmp_path: Path) -> None:
    # The command leaves a file when it is stopped; the tool waits for it and reports the file.
    script = 'trap \'touch "$TMPDIR/stopped"; exit 143\' TERM; touch "$TMPDIR/../started"; while :; do sleep 0.05; done'
    tool = subprocess.Popen(
        [sys.executable, str(TOOL), "sh", "-c", script],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists():
        assert tool.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    tool.send_signal(signal.SIGTERM)
    _, stderr = tool.communicate(timeout=30)
    assert tool.returncode == 143
    assert stderr.splitlines()[1:] == ["  stopped"]
