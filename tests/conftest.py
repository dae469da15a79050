"""Shared fixtures for the kernel's tests: the installed registry and certifications made once per test run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

# The adversarial suite's figure, printed by the controller (under xdist too): see tests/adversarial/figure.py.
from adversarial.figure import pytest_runtest_logreport, pytest_terminal_summary  # noqa: F401
from made_once import made_once_per_run

from certlab_core._runtime.registry import Registry, discover
from certlab_core.certify.certification import CertifyOptions, certify
from certlab_core.certify.out_folder import write_certification
from certlab_core.sdk.processes import process_state
from certlab_core.testing import run_certlab  # noqa: F401  (the suites' helpers import it from here)

REPO = Path(__file__).resolve().parent.parent

# The certlab command as a terminal starts it, with SIGINT's default action. A process started with SIGINT
# ignored keeps ignoring it, as POSIX means for a shell's background job, and certlab respects that: a test
# that stops certlab with SIGINT must not depend on how its own runner was started (a CI runner may start the
# suite as a background job). runpy runs certlab as ``python -m certlab_core.cli`` does.
CERTLAB_AS_IN_A_TERMINAL = [
    sys.executable,
    "-c",
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('certlab_core.cli', run_name='__main__')",
]


class WaitingAgent:
    """A command agent that records its pid in ``pids`` and then waits two minutes: one a stop must kill."""

    def __init__(self, folder: Path) -> None:
        self.pids = folder / "agents"
        self.pids.mkdir()
        self.script = folder / "waiting_agent.sh"
        self.script.write_text(f'#!/bin/sh\necho $$ > "{self.pids}/$$"\nexec sleep 120\n')
        self.script.chmod(0o755)

    def started(self) -> list[int]:
        return [int(p.name) for p in self.pids.iterdir()]

    def wait_until_started(self, count: int, runner: subprocess.Popen[str], timeout_s: float) -> None:
        """Until ``count`` agents have started, ``runner`` (what starts them) still running."""
        deadline = time.monotonic() + timeout_s
        while len(self.started()) < count:
            assert runner.poll() is None and time.monotonic() < deadline, "the agents did not start in time"
            time.sleep(0.05)

    def alive(self) -> list[int]:
        """The agents that started and still run (a zombie has ended)."""
        return [pid for pid in self.started() if process_state(pid) not in ("Z", "X")]


@pytest.fixture(scope="session")
def registry() -> Registry:
    return discover()


def make_certification(registry: Registry, out: Path, agent: str, **options: Any) -> Path:
    result = certify(
        registry, CertifyOptions(families=("intervals",), agent=agent, workers=2, **options), lambda _m: None
    )
    write_certification(out, result, registry)
    return out


@pytest.fixture(scope="session")
def oracle_certification(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return made_once_per_run(
        tmp_path_factory, "oracle", lambda folder: make_certification(registry, folder / "oracle", "oracle")
    )


@pytest.fixture(scope="session")
def script_certification(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = REPO / "examples" / "agents" / "pattern_fixer.sh"
    return made_once_per_run(
        tmp_path_factory,
        "pattern-fixer",
        lambda folder: make_certification(
            registry, folder / "pattern-fixer", "command", agent_args=(str(script),), agent_name="pattern-fixer"
        ),
    )
