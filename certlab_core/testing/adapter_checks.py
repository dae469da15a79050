"""``AdapterConformance``: the checks every agent adapter runs on itself.

A third party's adapter subclasses it in its own tests and says how to make its agent
misbehave; pytest then checks four things against the installed adapter:

- it honours the timeout (a run that would go on for ever ends as ``timeout`` soon after it);
- it leaves no process behind (every run happens under a child subreaper, so even a daemon
  that left its session with a cleared environment is found);
- it reports its own infrastructure failure as ``unavailable``, with a ``detail`` line;
- it writes nowhere but the work copy: HOME, TMPDIR and the work copy's parent are fresh,
  watched folders, and a new file anywhere there outside the work copy fails.

Every run happens as a certification runs it: inside the default sandbox (``sandbox``,
``auto``: bwrap where it works), with the kernel's allow-list of environment variables and
what the adapter declares (``AgentAdapter.environment``). An adapter whose program the
sandbox hides fails here, not in a user's certification.

Example (the adapter's ``tests/test_conformance.py``)::

    from certlab_core.testing import AdapterConformance, Scenario

    class TestFixbot(AdapterConformance):
        adapter_name = "fixbot"
        path = "/opt/fixbot/bin"
        hanging = Scenario(env={"FIXBOT_MODE": "hang"})
        unavailable = Scenario(env={"FIXBOT_MODE": "no-api"})
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
from attrs import field, frozen

PR_SET_CHILD_SUBREAPER = 36
TIMEOUT_S = 2.0
#: What a run past its timeout may take on top of it: run_command's SIGTERM grace, and start-up.
TIMEOUT_SLACK_S = 8.0


def _texts(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _text_map(values: Mapping[str, str]) -> dict[str, str]:
    return dict(values)


@frozen
class Scenario:
    """How to make the agent behave one way: extra ``--agent-arg`` values and environment variables."""

    args: tuple[str, ...] = field(default=(), converter=_texts)
    env: Mapping[str, str] = field(factory=dict, converter=_text_map)


@frozen
class ConformanceRun:
    """One run of the adapter under a subreaper: its outcome, what it left running, what it wrote outside."""

    outcome: Any
    raised: str
    leftovers: tuple[str, ...]
    written_outside: tuple[str, ...]
    wall_s: float


def _children_of(pid: int) -> list[tuple[int, str]]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) != pid or fields[0] == "Z":
                continue
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, IndexError, ValueError):
            continue
        found.append((int(entry), cmdline.strip() or "?"))
    return found


def _files_under(root: Path, outside_of: str = "") -> list[str]:
    """Every file and folder under ``root`` (relative), leaving out ``outside_of`` and what it holds."""
    from certlab_core.sdk.trees import walk

    found = []
    for relative in sorted((e.relpath for e in walk(root)), key=lambda relpath: relpath.split("/")):
        if outside_of and (relative == outside_of or relative.startswith(outside_of + "/")):
            continue
        found.append(relative)
    return found


def _run_watched(
    adapter: Any, base: str, scenario: Scenario, environment: Mapping[str, str], timeout_s: float, sandbox: str
) -> Any:
    """In a forked child that is a subreaper: run the adapter once in fresh watched folders, then look around."""
    from certlab_core._runtime.containment import choose_containment
    from certlab_core._runtime.registry import discover
    from certlab_core.plugin.types.agent import AgentRequest
    from certlab_core.sdk.containment import contained_environment, loopback_ports, use_containment

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    root = Path(base)
    home, tmp, parent, prompt_dir = root / "home", root / "tmp", root / "parent", root / "prompt"
    work = parent / "work"
    for folder in (home, tmp, work, prompt_dir):
        folder.mkdir(parents=True)
    (work / "README.md").write_text("A work copy for the adapter conformance checks.\n")
    prompt = "Read README.md; change nothing outside this folder.\n"
    (prompt_dir / "PROMPT.md").write_text(prompt)
    harness = {**os.environ, **environment}
    env = {**contained_environment(harness, adapter.environment), **scenario.env, "HOME": str(home), "TMPDIR": str(tmp)}
    containment = choose_containment(discover(), sandbox, [], lambda _line: None)
    ports = loopback_ports(env)  # a scripted model on the host's loopback is relayed in, as the boundary is
    if ports and containment.contained:
        containment = attrs.evolve(containment, relay_host_ports=ports)
    request = AgentRequest(
        workdir=str(work),
        prompt=prompt,
        prompt_file=str(prompt_dir / "PROMPT.md"),
        task_id="conformance/1",
        timeout_s=timeout_s,
        env=env,
        agent_args=scenario.args,
    )
    started = time.monotonic()
    outcome: Any = None
    raised = ""
    try:
        with use_containment(containment):
            outcome = adapter.run(request)
    except Exception as error:  # an adapter that raises is reported, not a crash of the check
        raised = f"{type(error).__name__}: {error}"
    wall = time.monotonic() - started
    time.sleep(0.2)  # a daemon that detached just before returning has had time to show itself
    leftovers = _children_of(os.getpid())
    for pid, _cmd in leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    written = [f"HOME/{p}" for p in _files_under(home)] + [f"TMPDIR/{p}" for p in _files_under(tmp)]
    written += [f"work copy's parent/{p}" for p in _files_under(parent, outside_of=work.name)]
    return ConformanceRun(
        outcome=outcome,
        raised=raised,
        leftovers=tuple(f"pid {pid}: {cmd}" for pid, cmd in leftovers),
        written_outside=tuple(written),
        wall_s=wall,
    )


class AdapterConformance:
    """The conformance suite every adapter runs against itself; set ``adapter_name`` and the scenarios."""

    adapter_name: str = ""
    #: folders put first on PATH for every run (where the agent's program is found)
    path: str = ""
    #: a run that behaves normally
    normal: Scenario = Scenario()
    #: a run that would go on for ever (the adapter must stop it at the timeout)
    hanging: Scenario | None = None
    #: a run whose own infrastructure fails (a missing binary, an API that refuses)
    unavailable: Scenario | None = None
    #: the containment every run gets, as ``certlab certify --sandbox`` takes it (the default: ``auto``)
    sandbox: str = "auto"

    def adapter(self) -> Any:
        """The adapter under test: the installed one named ``adapter_name``."""
        from certlab_core._runtime.registry import discover
        from certlab_core.plugin.types.agent import AgentAdapter

        if not self.adapter_name:
            pytest.fail("set adapter_name on the AdapterConformance subclass")
        return discover().get(AgentAdapter, self.adapter_name)

    def run_once(self, scenario: Scenario, tmp_path: Path, timeout_s: float = 60.0) -> ConformanceRun:
        from certlab_core.sdk.forking import call_in_fork

        adapter = self.adapter()
        environment = {"PATH": f"{self.path}{os.pathsep}{os.environ.get('PATH', '')}"} if self.path else {}
        result: ConformanceRun = call_in_fork(
            _run_watched, adapter, str(tmp_path), scenario, environment, timeout_s, self.sandbox, timeout=timeout_s + 60
        )
        return result

    def test_a_normal_run_completes_and_leaves_nothing_behind(self, tmp_path: Path) -> None:
        run = self.run_once(self.normal, tmp_path)
        assert not run.raised, f"the adapter raised on a normal run: {run.raised}"
        assert run.outcome.status == "completed", (run.outcome.status, run.outcome.detail)
        assert not run.leftovers, f"processes left running: {run.leftovers}"
        assert not run.written_outside, f"files written outside the work copy: {run.written_outside}"

    def test_it_honours_the_timeout(self, tmp_path: Path) -> None:
        if self.hanging is None:
            pytest.skip("no hanging scenario given: set hanging = Scenario(...)")
        run = self.run_once(self.hanging, tmp_path, timeout_s=TIMEOUT_S)
        assert not run.raised, f"the adapter raised: {run.raised}"
        assert run.outcome.status == "timeout", (run.outcome.status, run.outcome.detail)
        assert run.wall_s < TIMEOUT_S + TIMEOUT_SLACK_S, f"a {TIMEOUT_S} s timeout took {run.wall_s:.1f} s"
        assert not run.leftovers, f"processes left running after the timeout: {run.leftovers}"

    def test_it_reports_its_own_infrastructure_failure_as_unavailable(self, tmp_path: Path) -> None:
        if self.unavailable is None:
            pytest.skip("no unavailable scenario given: set unavailable = Scenario(...)")
        run = self.run_once(self.unavailable, tmp_path)
        assert not run.raised, f"the adapter raised instead of reporting unavailable: {run.raised}"
        assert run.outcome.status == "unavailable", (run.outcome.status, run.outcome.detail)
        assert run.outcome.detail, "an unavailable outcome says why in its detail"
        assert not run.leftovers, f"processes left running: {run.leftovers}"

    def test_it_writes_nowhere_but_the_work_copy(self, tmp_path: Path) -> None:
        for number, scenario in enumerate(s for s in (self.normal, self.unavailable) if s is not None):
            run = self.run_once(scenario, tmp_path / str(number))
            assert not run.written_outside, f"files written outside the work copy: {run.written_outside}"
