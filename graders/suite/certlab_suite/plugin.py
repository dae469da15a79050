"""The suite grader: the visible tests on a copy, counted by pytest's hooks.

The tests run in a fresh process forked from this grader's process; their outcomes come
back over a pipe, collected by a pytest plugin object from ``pytest_collection_finish``
and ``pytest_runtest_logreport``. Nothing is read from pytest's output, so code that
prints success, exits at import time or collects nothing cannot pass.

Under a sandbox the agent's code must not run in a fork of this process (it holds the
registry, so the seeded defects, in memory): the tests run in the sandbox instead, in a
fresh process forked for the grading by the run's grading server (``suite_server.py``,
started once per run by ``serve`` and warm with pytest), or, where no server is in reach (a
trial on an executor's worker, a server that stopped answering), in a new interpreter of
the agent environment. A task with an environment of its own (``TaskFamily.environment_dir``, its
project's dependencies and pytest) is graded by that environment's interpreter: on a server of its
own, started in that environment, or in a new interpreter of it, contained or not.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from attrs import define, frozen

from certlab_core.plugin import Grader, GradeRequest, GradeResult, InstrumentError, hookimpl
from certlab_core.plugin import failure_modes as fm
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk import trees
from certlab_core.sdk.containment import active_containment
from certlab_core.sdk.forking import ForkedCallError, call_in_fork
from certlab_core.sdk.safe_io import parse_json, read_capped_text
from certlab_core.sdk.workcopy import copy_tree

NAME = "suite"
SUITE_TIMEOUT_S = 120.0
LOG_TAIL_BYTES = 4096
SERVER_GRACE_S = 30.0  # past the suite's own time limit (and a server's start), a silent server is given up
SERVER_EXIT_S = 5.0  # a run's servers, told to end together, may take this long before they are killed
REPORT_KEYS = {"collected": list, "outcomes": dict, "collect_errors": list, "strays": list}


def _tail(path: Path, tree: Path) -> str:
    """The end of pytest's log, with the copy's temporary location replaced by ``<work>``."""
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-LOG_TAIL_BYTES:].decode("utf-8", "replace").replace(str(tree), "<work>")


def well_formed(report: object) -> bool:
    """Whether a test process's report has the shape ``judge`` reads, down to each name and outcome being text
    and the exit code an integer (it may come from the graded code itself)."""
    if not isinstance(report, dict) or not all(isinstance(report.get(k), kind) for k, kind in REPORT_KEYS.items()):
        return False
    outcomes = report["outcomes"]
    texts = [*report["collected"], *report["collect_errors"], *report["strays"], *outcomes, *outcomes.values()]
    exit_code = report.get("exit_code")
    return (exit_code is None or type(exit_code) is int) and all(isinstance(text, str) for text in texts)


def judge(run: dict[str, Any], expected: tuple[str, ...], log_tail: str) -> GradeResult:
    """Decide from the hooks' report alone: every expected test ran and passed."""
    outcomes: dict[str, str] = run["outcomes"]
    if run["strays"]:
        return GradeResult(
            NAME,
            False,
            fm.SUITE_NOT_RUN,
            "the code under test was imported from outside the copy: " + "; ".join(run["strays"]),
        )
    discovering = not expected
    wanted = tuple(run["collected"]) if discovering else expected
    if not wanted:
        return GradeResult(NAME, False, fm.SUITE_NOT_RUN, "no test was collected\n" + log_tail)
    ran = [nodeid for nodeid in wanted if nodeid in outcomes]
    if not ran:
        return GradeResult(NAME, False, fm.SUITE_NOT_RUN, f"none of the {len(wanted)} expected tests ran\n" + log_tail)
    data: dict[str, Any] = {"collected": list(run["collected"])} if discovering else {}
    skipped = [nodeid for nodeid in wanted if outcomes.get(nodeid) == "skipped"]
    if discovering and skipped:  # a proof leaves out what the tree it discovers on skips (a marker for another Python)
        data["skipped"] = skipped
    # Discovering, a skip is no failure: it is reported, and the proof does not expect it; expected, it fails.
    failing = [n for n in wanted if outcomes.get(n) != "passed" and not (discovering and n in data.get("skipped", ()))]
    if failing or run["collect_errors"]:
        shown = ", ".join(failing[:8]) + (f" (+{len(failing) - 8} more)" if len(failing) > 8 else "")
        detail = f"{len(wanted) - len(failing)}/{len(wanted)} expected tests passed"
        if failing:
            detail += f"; not passed: {shown}"
        if run["collect_errors"]:
            detail += f"; collection errors in {', '.join(run['collect_errors'][:3])}"
        return GradeResult(NAME, False, fm.SUITE_FAILED, detail + "\n" + log_tail, dict(data, failed=failing))
    ran_count = len(wanted) - len(skipped) if discovering else len(wanted)
    said = f"{ran_count}/{ran_count} expected tests passed" + (
        f" ({len(skipped)} skipped)" if discovering and skipped else ""
    )
    return GradeResult(NAME, True, None, said, data)


@frozen
class TestRun:
    """What one pytest run on a copy of a work tree gave: the hooks' report, or why none came, and the log's end."""

    #: The report (``well_formed``: collected, outcomes, collect_errors, strays, exit_code), None when none came.
    report: dict[str, Any] | None
    #: Why no report came ("the test process did not report: ..."), empty when one did.
    why: str
    #: The end of pytest's log, the copy's location replaced by ``<work>``.
    log_tail: str


def run_tests(
    workdir: str,
    environment: str | None,
    test_paths: Sequence[str],
    module_names: Sequence[str],
    *,
    prepare: Callable[[Path], None] | None = None,
    first_failure: bool = False,
    outcomes_only: bool = False,
    timeout_s: float = SUITE_TIMEOUT_S,
) -> TestRun:
    """Run pytest on ``test_paths`` (folders, files or node ids) in a copy of ``workdir`` the way this grader runs
    the visible tests, and return what its hooks saw.

    ``prepare(tree)`` changes the copy first (the acceptance grader lays its held-out test files
    over it there). ``outcomes_only`` formats no traceback and leaves the asserts as written (the
    outcomes are the same, the log says less): for a caller that records outcomes alone.

    The run is a fresh fork of one of the run's warm servers when one is up for the active
    containment and ``environment`` (a task's own venv, None: the agent environment); else,
    contained or in a task environment, a new interpreter under the active containment; else a
    fork of this (the harness's) process.
    """
    contained = active_containment().contained
    if contained or environment is not None:
        served = _run_on_server(
            workdir, environment, test_paths, module_names, prepare, first_failure, outcomes_only, timeout_s
        )
        if served is not None:
            return served
    made = trees.make_temp_folder("certlab-suite-")
    scratch = made.as_path
    try:
        tree = scratch / "tree"
        copy_tree(Path(workdir), tree)
        if prepare is not None:
            prepare(tree)
        log = scratch / "pytest.log"
        if contained or environment is not None:
            return _run_contained(
                scratch, tree, log, environment, test_paths, module_names, first_failure, outcomes_only, timeout_s
            )
        from certlab_suite.visible_suite import run_pytest  # the test runner, imported by a grading, not by discovery

        try:
            report = call_in_fork(
                run_pytest,
                str(tree),
                tuple(test_paths),
                tuple(module_names),
                str(log),
                first_failure,
                outcomes_only,
                timeout=timeout_s,
            )
        except ForkedCallError as error:
            return TestRun(None, f"the test process did not report: {error.failure.summary}", _tail(log, tree))
        if not well_formed(report):
            return TestRun(None, "the test process did not report (its report is not one)", _tail(log, tree))
        return TestRun(report, "", _tail(log, tree))
    finally:
        trees.remove_made(made)  # the graded code wrote here: iterative, and only the folder made


def grade(request: GradeRequest) -> GradeResult:
    """Copy the work tree, run its visible tests in a fresh process, and count the results."""
    run = run_tests(
        request.workdir,
        request.family.environment_dir,
        request.family.test_paths,
        request.family.module_names,
        first_failure=request.first_failure,
    )
    if run.report is None:
        return GradeResult(NAME, False, fm.SUITE_NOT_RUN, f"{run.why}\n" + run.log_tail)
    return judge(run.report, tuple(request.expected_tests), run.log_tail)


def _contained_environment() -> dict[str, str]:
    """The test process's environment: the kernel's allow-list of the harness's variables, no key, no HOME."""
    from certlab_core.sdk.containment import contained_environment

    return contained_environment(os.environ)


def environment_python(environment: str) -> str:
    """The interpreter of a task environment (a venv made when the task was built)."""
    return str(Path(environment) / "bin" / "python")


def _reported(text: str, log: Path, tree: Path) -> TestRun:
    """The run a contained test process's report text describes (it may come from anyone: checked first)."""
    try:
        report = parse_json(text, "the test process's report")
    except InstrumentError:  # too large, too deep, not JSON
        report = None
    if not well_formed(report):
        return TestRun(None, "the test process did not report (its report is not one)", _tail(log, tree))
    return TestRun(report, "", _tail(log, tree))


# ----------------------------------------------------------------------------- the run's grading servers


@define
class GradingServer:
    """One grading server of a run: its process in the sandbox, its pipes, and the one folder it grades in.

    Trials forked after it started share it one grading at a time (an ``flock`` on ``lock``);
    a server that stopped answering is marked ``broken`` (a file) and no longer used.
    """

    containment: Containment
    #: the task environment it runs in (``TaskFamily.environment_dir``), None for the agent environment
    environment: str | None
    folder: Path
    lock: Path
    broken: Path
    process: subprocess.Popen[bytes]
    release: Any

    def usable(self) -> bool:
        # Not ``process.poll()``: in a trial forked after the start the server is no child of ours, and
        # ``poll`` would call it exited. A server that went away is found by its pipe, and marked broken.
        return not self.broken.exists()


_servers: list[GradingServer] = []


@contextlib.contextmanager
def serve(containment: Containment, slots: int, environments: tuple[str | None, ...] = (None,)) -> Iterator[None]:
    """Start ``slots`` grading servers inside ``containment`` for each environment (None: the agent environment's)
    for the ``with`` block (the kernel's ``serve`` hook): a task's tests run in its own environment's pytest.

    Uncontained (the harness grading a proof or a calibration), only task environments get servers, each
    grading a fork of it with no namespaces of its own (as a fresh interpreter would run); the agent
    environment's gradings are forks of the harness there already."""
    from certlab_suite import suite_server, visible_suite

    made = trees.make_temp_folder("certlab-suite-servers-")
    base = made.as_path
    runner = base / "runner"
    runner.mkdir()
    for module in (suite_server, visible_suite):
        shutil.copyfile(str(module.__file__), runner / Path(str(module.__file__)).name)
    started: list[GradingServer] = []
    try:
        contained = containment.contained
        served = [e for e in dict.fromkeys(environments) if contained or e is not None]
        chosen = [(environment, n) for environment in served for n in range(slots)]
        for number, (environment, _slot) in enumerate(chosen):
            folder = base / f"grading-{number}"
            folder.mkdir()
            python = containment.python() if environment is None else environment_python(environment)
            argv = [python, "-I", str(runner / "suite_server.py"), *((suite_server.FRESH_FLAG,) if contained else ())]
            launch = containment.launch(
                argv,
                str(folder),
                _contained_environment(),
                writable=(str(folder),),
                readable=(str(runner),),
                nested_namespaces=contained,  # each grading's own mount and IPC namespace: nothing outlives it
            )
            with (base / f"server-{number}.log").open("ab") as log:
                process = subprocess.Popen(
                    list(launch.argv),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    cwd=folder,
                    env=dict(launch.env),
                    start_new_session=True,
                    preexec_fn=launch.before_exec,
                )
            lock, broken = base / f"server-{number}.lock", base / f"server-{number}.broken"
            lock.touch()
            started.append(GradingServer(containment, environment, folder, lock, broken, process, launch.release))
        _servers.extend(started)
        yield
    except BaseException:
        _stop_servers(started, at_once=True)
        raise
    else:
        _stop_servers(started, at_once=False)
    finally:
        trees.remove_made(made)


def _stop_servers(servers: Sequence[GradingServer], at_once: bool) -> None:
    """Stop ``servers``: each told to end (its stdin closed) and all awaited together for up to
    ``SERVER_EXIT_S``, the rest killed; ``at_once`` (left on an error: a service that broke, a trial
    that hung) killed straight away, well within the kernel's wait for a leaving service. Cut short
    by that wait all the same, the servers still waited for are killed: none outlives the run."""
    try:
        for server in servers:
            with contextlib.suppress(ValueError):
                _servers.remove(server)
            if at_once:
                server.process.kill()
            with contextlib.suppress(OSError):
                assert server.process.stdin is not None
                server.process.stdin.close()
        ends = time.monotonic() + SERVER_EXIT_S
        for server in servers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.process.wait(timeout=max(0.0, ends - time.monotonic()))
    finally:  # past the wait, or cut short by the kernel's: the rest are killed, so none outlives the run
        for server in servers:
            if server.process.poll() is None:
                server.process.kill()
                server.process.wait()
            if server.process.stdout is not None:
                server.process.stdout.close()
            server.release()


def _same(served: Containment, wanted: Containment) -> bool:
    """Whether a server started under ``served`` grades for ``wanted``: the same sandbox, or both uncontained (an
    uncontained run's note, such as ``--sandbox none``'s, says why, and changes nothing of how it runs)."""
    return served == wanted or not (served.contained or wanted.contained)


@contextlib.contextmanager
def _a_free_server(containment: Containment, environment: str | None) -> Iterator[GradingServer | None]:
    """A usable server of this containment and environment, held for the block (waiting for one when all are
    busy); else None."""
    mine = [s for s in _servers if _same(s.containment, containment) and s.environment == environment and s.usable()]
    if not mine:
        yield None
        return
    handles: list[IO[str]] = []
    try:
        chosen: GradingServer | None = None
        for server in mine:
            handle = server.lock.open("r")
            handles.append(handle)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            chosen = server
            break
        if chosen is None:  # all busy: wait for one, chosen by this process
            index = os.getpid() % len(mine)
            fcntl.flock(handles[index], fcntl.LOCK_EX)
            chosen = mine[index]
        yield chosen if chosen.usable() else None
    finally:
        for held in handles:
            held.close()


def _empty(folder: Path) -> None:
    """Remove what a grading left in the server's folder (the graded code wrote there): iteratively, no link."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        for name in os.listdir(fd):
            trees.remove_at(fd, name)
    finally:
        os.close(fd)


def _ask(server: GradingServer, message: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
    """Send one request and read lines until its reply (a line left by an earlier, killed caller is skipped)."""
    assert server.process.stdin is not None and server.process.stdout is not None
    try:
        server.process.stdin.write((json.dumps(message) + "\n").encode("utf-8"))
        server.process.stdin.flush()
    except OSError:
        return None
    fd = server.process.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while True:
        while b"\n" not in buffer:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            continue
        if isinstance(reply, dict) and reply.get("id") == message["id"]:
            return reply


def _run_on_server(
    workdir: str,
    environment: str | None,
    test_paths: Sequence[str],
    module_names: Sequence[str],
    prepare: Callable[[Path], None] | None,
    first_failure: bool,
    outcomes_only: bool,
    timeout_s: float,
) -> TestRun | None:
    """The run on one of the run's servers, in a fresh fork of it (in the sandbox); None when none is in reach."""
    with _a_free_server(active_containment(), environment) as server:
        if server is None:
            return None
        try:
            _empty(server.folder)
            tree, log = server.folder / "tree", server.folder / "pytest.log"
            copy_tree(Path(workdir), tree)
            if prepare is not None:
                prepare(tree)
            message = {
                "id": uuid.uuid4().hex,
                "tree": str(tree),
                "log": str(log),
                "modules": list(module_names),
                "test_paths": list(test_paths),
                "timeout_s": timeout_s,
                "first_failure": first_failure,
                "outcomes_only": outcomes_only,
            }
            reply = _ask(server, message, timeout_s + SERVER_GRACE_S)
            if reply is None:  # gone or silent (the graded code may have killed it): graded afresh, without it
                server.broken.touch()
                return None
            text = reply.get("report_text")
            if not isinstance(text, str):
                failure = str(reply.get("failure") or "no report")
                return TestRun(None, f"the test process did not report ({failure})", _tail(log, tree))
            return _reported(text, log, tree)
        finally:
            _empty(server.folder)


def _run_contained(
    scratch: Path,
    tree: Path,
    log: Path,
    environment: str | None,
    test_paths: Sequence[str],
    module_names: Sequence[str],
    first_failure: bool,
    outcomes_only: bool,
    timeout_s: float,
) -> TestRun:
    """The agent's code under the run's sandbox: a new interpreter of the agent environment, out of the key's reach.

    The test process is this distribution's ``visible_suite.py``, copied into the scratch
    folder (certlab's installation is hidden inside); it writes the hooks' report as JSON.
    """
    from certlab_core.sdk.command import run_contained
    from certlab_suite import visible_suite

    containment = active_containment()
    runner = scratch / "runner"
    runner.mkdir()
    script = runner / "visible_suite.py"
    shutil.copyfile(visible_suite.__file__, script)
    result = scratch / "result.json"
    argv = [
        containment.python() if environment is None else environment_python(environment),
        "-I",
        str(script),
        *((visible_suite.FIRST_FAILURE_FLAG,) if first_failure else ()),
        *((visible_suite.OUTCOMES_ONLY_FLAG,) if outcomes_only else ()),
        str(result),
        str(tree),
        str(log),
        ",".join(module_names),
        *test_paths,
    ]
    env = _contained_environment()
    ran = run_contained(
        argv, cwd=str(tree), env=env, timeout_s=timeout_s, containment=containment, writable=(str(scratch),)
    )
    if not result.exists() and not result.is_symlink():
        return TestRun(
            None, f"the test process did not report ({ran.detail or f'exit status {ran.exit_code}'})", _tail(log, tree)
        )
    try:  # the graded code could write it: no link followed, no FIFO waited on, capped
        if result.is_symlink():
            raise InstrumentError(f"{result}: a symlink, not the report")
        text = read_capped_text(result, "test report")
    except InstrumentError as error:
        return TestRun(None, f"the test process did not report ({error.message})", _tail(log, tree))
    return _reported(text, log, tree)


@hookimpl
def certlab_graders() -> list[Grader]:
    return [
        Grader(
            name=NAME,
            order=20,
            description="every visible test collected on the clean tree ran and passed, counted by pytest's hooks",
            grade=grade,
            failure_modes=(fm.SUITE_FAILED, fm.SUITE_NOT_RUN),
            serve=serve,
        )
    ]
