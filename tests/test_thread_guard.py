"""The root conftest fails the test that leaves a thread running, only it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TESTS = """
import threading, time
import pytest

@pytest.fixture(scope="module")
def server():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="module-server", daemon=True)
    thread.start()
    yield
    stop.set()

def test_leaves_a_thread():
    threading.Thread(target=time.sleep, args=(30,), name="left-behind", daemon=True).start()

def test_its_thread_ends_soon_after():
    threading.Thread(target=time.sleep, args=(0.2,), name="ends-soon", daemon=True).start()

def test_uses_a_module_server(server):
    pass

def test_a_later_test(server):
    pass
"""


def test_only_the_test_that_leaves_a_thread_running_fails(tmp_path: Path) -> None:
    guard = (REPO / "conftest.py").read_text()
    assert "LINGER_S = 10.0" in guard
    (tmp_path / "conftest.py").write_text(guard.replace("LINGER_S = 10.0", "LINGER_S = 1.0"))
    (tmp_path / "test_threads.py").write_text(textwrap.dedent(TESTS))
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-rE",
        "test_threads.py",
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "4 passed, 1 error" in done.stdout, done.stdout
    (error,) = [line for line in done.stdout.splitlines() if line.startswith("ERROR ")]
    assert error.startswith("ERROR test_threads.py::test_leaves_a_thread - AssertionError"), error
    assert "the test left 1 thread(s) running 1 s after its teardown: left-behind; stop what" in done.stdout
