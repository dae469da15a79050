"""``SandboxConformance``: the checks every sandbox runs on itself.

A sandbox plugin subclasses it in its own tests, naming the sandbox; pytest then runs real
programs through it the way the kernel does (``run_contained`` under a ``Containment`` that
names the sandbox) and checks what ``certlab_sandboxes`` promises:

- a hidden file is unreadable, and so is a file of the host's that the request does not
  show (unless the sandbox declares its folder visible to every program, ``visible()``);
- the work copy and the writable folders can be written, and a write anywhere else (a
  read-only folder the request shows, a host folder it does not) never reaches the host;
- the environment is the request's: a variable of the harness's own does not leak in;
- ``python()`` is an interpreter with pytest and nothing of certlab;
- a program's exit code comes back; a program past its timeout is stopped; a process the
  program left behind in a session of its own dies with it;
- a program past its CPU or file-size limit is stopped, and ``limits_hit`` names the limit.

A sandbox whose ``probe()`` says it cannot work on this machine is skipped, naming why.

Example (the sandbox's ``tests/test_conformance.py``)::

    from certlab_core.testing import SandboxConformance

    class TestJail(SandboxConformance):
        sandbox_name = "jail"
"""

from __future__ import annotations

import contextlib
import json
import os
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from attrs import frozen

from certlab_core.plugin.types.sandbox import Containment, ResourceLimits, Sandbox
from certlab_core.sdk.command import ContainedRun, run_contained

#: What a program past its timeout may take on top of it: run_command's SIGTERM grace, and start-up.
TIMEOUT_SLACK_S = 8.0
LEAK_VARIABLE = "CERTLAB_CONFORMANCE_HARNESS_SECRET"

# Run inside the sandbox by its own python(): what it can read, write, import and which variables it has.
PROBE = r"""
import json, os, sys
paths = json.loads(sys.argv[1])
seen = {"read": {}, "write": {}, "import": {}}
for name, path in paths["read"].items():
    try:
        with open(path) as handle:
            seen["read"][name] = handle.read()
    except OSError as error:
        seen["read"][name] = None
for name, path in paths["write"].items():
    try:
        with open(path, "w") as handle:
            handle.write("written from inside")
        seen["write"][name] = True
    except OSError:
        seen["write"][name] = False
for module in ("pytest", "certlab_core"):
    try:
        __import__(module)
        seen["import"][module] = True
    except ImportError:
        seen["import"][module] = False
seen["env"] = dict(os.environ)
print(json.dumps(seen))
"""


@frozen
class Layout:
    """The folders of one probe run on the host: the work copy, a writable and a read-only folder, and the rest."""

    work: Path
    scratch: Path
    shown: Path
    outside: Path

    @property
    def hidden_key(self) -> Path:
        return self.shown / "key.txt"


def make_layout(root: Path) -> Layout:
    layout = Layout(work=root / "work", scratch=root / "scratch", shown=root / "shown", outside=root / "outside")
    for folder in (layout.work, layout.scratch, layout.shown, layout.outside):
        folder.mkdir(parents=True)
    (layout.shown / "note.txt").write_text("a file the request shows\n")
    layout.hidden_key.write_text("the answer key\n")
    (layout.outside / "secret.txt").write_text("a file of the host's the request does not show\n")
    return layout


@contextlib.contextmanager
def harness_variable(value: str) -> Iterator[None]:
    """``LEAK_VARIABLE`` set in this process (the harness's environment) for the ``with`` block."""
    before = os.environ.get(LEAK_VARIABLE)
    os.environ[LEAK_VARIABLE] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(LEAK_VARIABLE, None)
        else:
            os.environ[LEAK_VARIABLE] = before


def request_env() -> dict[str, str]:
    """What the kernel passes a contained program: the allow-list of the harness's variables, and one of its own."""
    from certlab_core.sdk.containment import contained_environment

    return {**contained_environment(), "CERTLAB_CONFORMANCE_PASSED": "passed"}


def run_probe(sandbox: Sandbox, root: Path) -> dict[str, Any]:
    """Run ``PROBE`` once in the sandbox; what it saw, and what reached the host."""
    layout = make_layout(root)
    containment = Containment(sandbox=sandbox, hidden=(str(layout.hidden_key),))
    paths = {
        "read": {
            "hidden": str(layout.hidden_key),
            "outside": str(layout.outside / "secret.txt"),
            "shown": str(layout.shown / "note.txt"),
        },
        "write": {
            "work": str(layout.work / "written.txt"),
            "scratch": str(layout.scratch / "written.txt"),
            "shown": str(layout.shown / "written.txt"),
            "outside": str(layout.outside / "written.txt"),
        },
    }
    out = root / "probe.out"
    token = uuid.uuid4().hex
    with harness_variable(token), out.open("wb") as handle:
        run = run_contained(
            [containment.python(), "-c", PROBE, json.dumps(paths)],
            cwd=str(layout.work),
            env=request_env(),
            timeout_s=60,
            stdout=handle,
            stderr=handle,
            containment=containment,
            writable=[str(layout.scratch)],
            readable=[str(layout.shown)],
        )
    text = out.read_text(errors="replace")
    try:
        seen: dict[str, Any] = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"run": run, "problem": f"the probe printed no report ({run.status}, {run.detail}): {text[-400:]}"}
    reached = {name: Path(path).exists() for name, path in paths["write"].items()}
    visible = containment.visible_paths()
    return {"run": run, "seen": seen, "reached": reached, "token": token, "layout": layout, "visible": visible}


def run_shell(sandbox: Sandbox, root: Path, script: str, timeout_s: float = 30, **limits: int) -> ContainedRun:
    """``/bin/sh -c script`` in the sandbox, in a fresh work copy under ``root``."""
    work = root / "work"
    work.mkdir(parents=True)
    containment = Containment(sandbox=sandbox, limits=ResourceLimits(**limits))
    return run_contained(
        ["/bin/sh", "-c", textwrap.dedent(script)],
        cwd=str(work),
        env=request_env(),
        timeout_s=timeout_s,
        containment=containment,
    )


def _inside(path: Path, folders: tuple[str, ...]) -> bool:
    return any(str(path) == f or str(path).startswith(f.rstrip("/") + "/") for f in folders)


class SandboxConformance:
    """The conformance suite every sandbox runs against itself; set ``sandbox_name``."""

    sandbox_name: str = ""

    def sandbox(self) -> Sandbox:
        """The sandbox under test: the installed one named ``sandbox_name``."""
        from certlab_core._runtime.registry import discover

        if not self.sandbox_name:
            pytest.fail("set sandbox_name on the SandboxConformance subclass")
        found: Sandbox = discover().get("sandboxes", self.sandbox_name)
        return found

    @pytest.fixture(scope="class")
    @classmethod
    def working(cls) -> Sandbox:
        """The sandbox, once its probe said it works here (else every check skips, naming why)."""
        sandbox = cls().sandbox()
        reason = sandbox.probe()
        assert reason is None or isinstance(reason, str), f"probe() returned {reason!r}, not None or a line"
        if reason is not None:
            pytest.skip(f"the sandbox {sandbox.name} does not work here: {reason}")
        return sandbox

    @pytest.fixture(scope="class")
    @classmethod
    def probed(cls, working: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        found = run_probe(working, tmp_path_factory.mktemp("sandbox-probe"))
        if "problem" in found:
            pytest.fail(found["problem"])
        return found

    def test_a_hidden_file_is_unreadable(self, probed: dict[str, Any]) -> None:
        assert probed["seen"]["read"]["hidden"] in (None, ""), "a hidden file was read inside the sandbox"

    def test_a_host_file_the_request_does_not_show_is_unreadable(self, probed: dict[str, Any]) -> None:
        layout: Layout = probed["layout"]
        if _inside(layout.outside, probed["visible"]):
            pytest.skip(f"the sandbox shows every program {layout.outside.parent} (its visible())")
        assert probed["seen"]["read"]["outside"] is None, "a host file the request does not show was read"

    def test_a_folder_the_request_shows_is_readable(self, probed: dict[str, Any]) -> None:
        assert probed["seen"]["read"]["shown"] == "a file the request shows\n", probed["seen"]["read"]

    def test_the_work_copy_and_the_writable_folders_can_be_written(self, probed: dict[str, Any]) -> None:
        assert probed["seen"]["write"]["work"] and probed["reached"]["work"], "the work copy could not be written"
        assert probed["seen"]["write"]["scratch"] and probed["reached"]["scratch"], "a writable folder was not"

    def test_a_write_outside_the_writable_folders_never_reaches_the_host(self, probed: dict[str, Any]) -> None:
        reached = [name for name in ("shown", "outside") if probed["reached"][name]]
        assert not reached, f"writes from inside reached the host's folder(s): {reached}"

    def test_the_environment_is_the_requests_and_nothing_of_the_harness(self, probed: dict[str, Any]) -> None:
        env: dict[str, str] = probed["seen"]["env"]
        leaked = sorted(name for name, value in env.items() if probed["token"] in value)
        assert not leaked, f"the harness's own variable reached the program as {leaked}"
        assert env.get("CERTLAB_CONFORMANCE_PASSED") == "passed", "a variable of the request did not reach it"
        home = os.environ.get("HOME")
        assert not home or env.get("HOME") != home, "the program got the harness's HOME"

    def test_its_python_has_pytest_and_nothing_of_certlab(self, probed: dict[str, Any]) -> None:
        imports = probed["seen"]["import"]
        assert imports["pytest"], "python() has no pytest: the graders cannot run the agent's tests"
        assert not imports["certlab_core"], "python() imports certlab: the harness's code is in reach"

    def test_a_programs_exit_code_comes_back(self, working: Sandbox, tmp_path: Path) -> None:
        run = run_shell(working, tmp_path, "echo ran > ran.txt; exit 3")
        assert (run.status, run.exit_code) == ("completed", 3), (run.status, run.exit_code, run.detail)
        assert (tmp_path / "work" / "ran.txt").read_text() == "ran\n"

    def test_a_program_past_its_timeout_is_stopped(self, working: Sandbox, tmp_path: Path) -> None:
        run = run_shell(working, tmp_path, "sleep 30", timeout_s=1)
        assert run.status == "timeout", (run.status, run.exit_code, run.detail)
        assert run.wall_s < 1 + TIMEOUT_SLACK_S, f"a 1 s timeout took {run.wall_s:.1f} s"

    def test_a_process_left_behind_in_a_session_of_its_own_dies_with_the_program(
        self, working: Sandbox, tmp_path: Path
    ) -> None:
        run = run_shell(working, tmp_path, "setsid sleep 61 </dev/null >/dev/null 2>&1 & sleep 0.3; exit 0")
        assert run.status == "completed", (run.status, run.detail)
        assert not run.leftovers, f"what the program started outlived it (the kernel's sweep found it): {run.leftovers}"

    def test_a_program_past_its_file_size_limit_is_stopped_and_named(self, working: Sandbox, tmp_path: Path) -> None:
        run = run_shell(working, tmp_path, "head -c 3000000 /dev/zero > big.bin", file_bytes=1 << 20)
        assert "file-size" in run.limits_hit, (
            f"no file-size limit among the limits hit {run.limits_hit} ({run.status}, exit {run.exit_code})"
        )
        assert (tmp_path / "work" / "big.bin").stat().st_size <= 1 << 20

    def test_a_program_past_its_cpu_limit_is_stopped_and_named(self, working: Sandbox, tmp_path: Path) -> None:
        run = run_shell(working, tmp_path, "while :; do :; done", timeout_s=30, cpu_s=1)
        assert run.status != "timeout", f"a 1 s CPU limit let the program run to its 30 s timeout: {run.detail}"
        assert "cpu" in run.limits_hit, (
            f"no CPU limit among the limits hit {run.limits_hit} ({run.status}, exit {run.exit_code})"
        )
