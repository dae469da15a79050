"""AdapterConformance catches the adapters it exists to catch: each check fails on an adapter that breaks its rule.

The naive adapter is the 20 lines a plugin author writes without the SDK: ``subprocess.run``
in the work copy. Its agent leaves a daemon behind in a new session with a cleared
environment; without ``run_command`` nothing finds it, and its outcome says it left nothing.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest
from certlab_core.sdk.command import run_command
from certlab_core.testing import AdapterConformance, Scenario

DAEMON = "setsid env -i /bin/sh -c 'sleep 30' </dev/null >/dev/null 2>&1 &"


def naive_run(request: AgentRequest) -> AgentOutcome:
    if request.env.get("MODE") == "down":
        raise ConnectionError("the API is down")
    script = "sleep 3" if request.env.get("MODE") == "hang" else DAEMON  # past the check's 2 s timeout
    started = time.monotonic()
    done = subprocess.run(["/bin/sh", "-c", script], cwd=request.workdir, env=dict(request.env), check=False)
    return AgentOutcome(status="completed", exit_code=done.returncode, wall_s=time.monotonic() - started)


def homesick_run(request: AgentRequest) -> AgentOutcome:
    return run_command(request, ["/bin/sh", "-c", 'echo "remember me" > "$HOME/.fixbot-history"'])


def sdk_run(request: AgentRequest) -> AgentOutcome:
    if request.env.get("MODE") == "down":
        return AgentOutcome(status="unavailable", detail="the API is down")
    return run_command(request, ["/bin/sh", "-c", "sleep 30" if request.env.get("MODE") == "hang" else "true"])


class Checks(AdapterConformance):
    run_fn = staticmethod(sdk_run)
    hanging = Scenario(env={"MODE": "hang"})
    unavailable = Scenario(env={"MODE": "down"})

    def adapter(self) -> AgentAdapter:
        return AgentAdapter(name="under-test", description="an adapter under test", run=type(self).run_fn)


class Naive(Checks):
    run_fn = staticmethod(naive_run)


class Homesick(Checks):
    run_fn = staticmethod(homesick_run)
    sandbox = "none"  # contained, its HOME is the sandbox's own: the write reaches no folder of the host's


def test_contained_the_write_into_home_stays_in_the_sandboxs_own_home(tmp_path: Path) -> None:
    reason = pytest.importorskip("certlab_sandbox_bwrap.plugin").probe()
    if reason is not None:
        pytest.skip(f"no bwrap sandbox here: {reason}")

    class ContainedHomesick(Checks):
        run_fn = staticmethod(homesick_run)

    ContainedHomesick().test_it_writes_nowhere_but_the_work_copy(tmp_path)


def test_an_adapter_built_on_run_command_passes_every_check(tmp_path: Path) -> None:
    checks = Checks()
    checks.test_a_normal_run_completes_and_leaves_nothing_behind(tmp_path / "normal")
    checks.test_it_honours_the_timeout(tmp_path / "timeout")
    checks.test_it_reports_its_own_infrastructure_failure_as_unavailable(tmp_path / "down")
    checks.test_it_writes_nowhere_but_the_work_copy(tmp_path / "writes")


def test_the_naive_adapter_leaves_its_daemon_behind_and_says_it_left_nothing(tmp_path: Path) -> None:
    run = Naive().run_once(Scenario(), tmp_path)
    assert run.outcome.leftover_processes == ()
    assert any("sleep 30" in line for line in run.leftovers), run.leftovers
    with pytest.raises(AssertionError, match="processes left running"):
        Naive().test_a_normal_run_completes_and_leaves_nothing_behind(tmp_path / "again")


def test_the_naive_adapter_ignores_the_timeout(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="timeout"):
        Naive().test_it_honours_the_timeout(tmp_path)


def test_an_adapter_that_raises_on_its_own_outage_fails_the_unavailable_check(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="raised instead of reporting unavailable: ConnectionError"):
        Naive().test_it_reports_its_own_infrastructure_failure_as_unavailable(tmp_path)


def test_an_adapter_that_writes_into_home_fails_the_writes_check(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"HOME/\.fixbot-history"):
        Homesick().test_it_writes_nowhere_but_the_work_copy(tmp_path)
