"""SandboxConformance rejects sandboxes that contain less than they promise.

The broken ones: the hook spec's own example (a CPU limit and nothing else: it hides no file,
stops no write, leaves a daemon running and offers the harness's interpreter), bwrap with the
harness's whole environment handed in instead of the request's, and bwrap showing the host's
temp folder. bwrap itself passes in certlab-sandbox-bwrap's tests.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from certlab_core.plugin.types.sandbox import ResourceLimit, Sandbox, SandboxLaunch, SandboxRequest
from certlab_core.testing import SandboxConformance
from certlab_core.testing.sandbox_checks import run_probe, run_shell

REJECTED = (AssertionError, pytest.fail.Exception)


def cpu_only_launch(request: SandboxRequest) -> SandboxLaunch:
    def before_exec() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (request.limits.cpu_s, request.limits.cpu_s))

    def limits_hit(exit_code: int | None) -> tuple[ResourceLimit, ...]:
        return ("cpu",) if exit_code in (-signal.SIGXCPU, 128 + signal.SIGXCPU) else ()

    return SandboxLaunch(argv=request.argv, env=request.env, before_exec=before_exec, limits_hit=limits_hit)


CPU_ONLY = Sandbox(
    name="cpu-only",
    description="a CPU limit alone",
    probe=lambda: None,
    launch=cpu_only_launch,
    python=lambda: sys.executable,
)


class CpuOnly(SandboxConformance):
    def sandbox(self) -> Sandbox:
        return CPU_ONLY


@pytest.fixture(scope="module")
def cpu_only_probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_probe(CPU_ONLY, tmp_path_factory.mktemp("cpu-only"))


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ("test_a_hidden_file_is_unreadable", "a hidden file was read"),
        ("test_a_write_outside_the_writable_folders_never_reaches_the_host", r"reached the host's folder\(s\)"),
        ("test_its_python_has_pytest_and_nothing_of_certlab", "python\\(\\) imports certlab"),
    ],
)
def test_a_sandbox_that_hides_nothing_fails_the_containment_checks(
    cpu_only_probe: dict[str, Any], check: str, message: str
) -> None:
    with pytest.raises(REJECTED, match=message):
        getattr(CpuOnly(), check)(cpu_only_probe)


def test_a_sandbox_that_hides_nothing_still_passes_what_it_does_do(cpu_only_probe: dict[str, Any]) -> None:
    checks = CpuOnly()
    checks.test_the_environment_is_the_requests_and_nothing_of_the_harness(cpu_only_probe)
    checks.test_the_work_copy_and_the_writable_folders_can_be_written(cpu_only_probe)


def test_a_daemon_the_program_left_outlives_a_sandbox_that_does_not_contain_processes(tmp_path: Path) -> None:
    with pytest.raises(REJECTED, match="outlived it"):
        CpuOnly().test_a_process_left_behind_in_a_session_of_its_own_dies_with_the_program(CPU_ONLY, tmp_path)


def test_a_sandbox_without_a_file_size_limit_fails_that_check(tmp_path: Path) -> None:
    run = run_shell(CPU_ONLY, tmp_path / "run", "true")
    assert run.status == "completed"
    with pytest.raises(REJECTED, match="file-size limit"):
        CpuOnly().test_a_program_past_its_file_size_limit_is_stopped_and_named(CPU_ONLY, tmp_path / "check")


def test_bwrap_handing_in_the_harness_environment_fails_the_environment_check(tmp_path: Path) -> None:
    bwrap = pytest.importorskip("certlab_sandbox_bwrap.plugin")
    reason = bwrap.probe()
    if reason is not None:
        pytest.skip(f"no bwrap sandbox here: {reason}")

    def leaky_launch(request: SandboxRequest) -> SandboxLaunch:
        return attrs.evolve(bwrap.launch(request), env={**os.environ, **request.env})

    leaky = Sandbox(
        name="leaky", description="bwrap, leaking", probe=bwrap.probe, launch=leaky_launch, python=bwrap.agent_python
    )

    class Leaky(SandboxConformance):
        def sandbox(self) -> Sandbox:
            return leaky

    with pytest.raises(REJECTED, match="the harness's own variable reached the program"):
        Leaky().test_the_environment_is_the_requests_and_nothing_of_the_harness(run_probe(leaky, tmp_path))


def test_bwrap_showing_the_host_temp_folder_fails_the_unshown_file_check(tmp_path: Path) -> None:
    bwrap = pytest.importorskip("certlab_sandbox_bwrap.plugin")
    reason = bwrap.probe()
    if reason is not None:
        pytest.skip(f"no bwrap sandbox here: {reason}")
    shown = str(tmp_path)

    def showing_launch(request: SandboxRequest) -> SandboxLaunch:
        launch = bwrap.launch(request)
        at = launch.argv.index("--bind")  # after its private /tmp, before the work copy's own bind
        argv = [*launch.argv[:at], "--ro-bind", shown, shown, *launch.argv[at:]]
        return attrs.evolve(launch, argv=argv, handoff=None)

    showing = Sandbox(
        name="showing",
        description="bwrap, and the temp folder",
        probe=bwrap.probe,
        launch=showing_launch,
        python=bwrap.agent_python,
        visible=bwrap.visible,
    )

    class Showing(SandboxConformance):
        def sandbox(self) -> Sandbox:
            return showing

    probed = run_probe(showing, tmp_path / "probe")
    Showing().test_the_work_copy_and_the_writable_folders_can_be_written(probed)  # it still runs the probe
    with pytest.raises(REJECTED, match="a host file the request does not show was read"):
        Showing().test_a_host_file_the_request_does_not_show_is_unreadable(probed)
