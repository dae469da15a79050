"""The acceptance grader: each held-out case in a fresh process of the code.

The submitted code runs in a copy of the work tree taken outside the experiment directory
(deleted after the last case), under a case host started as a new interpreter
(``case_host.py``), which forks one process per case. A case process is given only the
call and its arguments; it returns what the code returned (as JSON data) or the class name
of what it raised. The expected values never leave this process: the comparison is made
here, and a failed case records what the code returned, never what was expected.

A process a case leaves running is named, killed, and the verdict is refused (the grader
raises, so the trial is an ERROR). With a lock (``GradeRequest.acceptance_lock``), the
cases come from the copy taken at lock time, and the fingerprints of the cases, the scorer
and the kernel are checked before and after scoring; any movement refuses the verdict.

The plugin also holds the rest of held-out acceptance: the locks (``lock``, ``held_out``,
given to the kernel through ``certlab_held_out``), the leak scan (``leakscan``: a trial whose
changes hold the answers fails as ``answers-leaked``, through the grader's ``check_changes``),
the predictions (``prediction``), the ``user-task`` source (``user_task``: an experiment directory
read into a family, through ``certlab_task_sources``) and the ``init-task``, ``lock``, ``leakscan``,
``predict`` and ``task`` commands.
"""

from __future__ import annotations

import json
import marshal
import os
import select
import shutil
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from certlab_acceptance.cases import HeldOutCase, check_modules, read_cases_bytes
from certlab_acceptance.fingerprints import check_unmoved
from certlab_acceptance.user_task import SOURCE_NAME, holds_user_task, load_user_task, stage_family
from certlab_core.plugin import (
    Command,
    Grader,
    GradeRequest,
    GradeResult,
    HeldOutAcceptance,
    InstrumentError,
    TaskFamily,
    TaskSource,
    hookimpl,
)
from certlab_core.plugin import failure_modes as fm
from certlab_core.plugin.types.grader import HELD_OUT_ROLE, AcceptanceLock, Change
from certlab_core.plugin.types.held_out import HeldOutIndex, HeldOutRun
from certlab_core.sdk import trees
from certlab_core.sdk.containment import active_containment
from certlab_core.sdk.workcopy import sha256_file

if TYPE_CHECKING:
    import typer

    from certlab_acceptance.hidden_tests import HiddenTest

NAME = "acceptance"
ORDER = 30
CASE_TIMEOUT_S = 10.0
HOST_GRACE_S = 5.0
HOST_FILE = Path(__file__).with_name("case_host.py")
GOT_CHARS = 200
SHOWN_FAILURES = 8


class VerdictRefused(InstrumentError):
    """The score cannot be believed (a process left running, the host gone, something moved)."""


# ----------------------------------------------------------------------------- the cases


def cases_data(request: GradeRequest) -> tuple[bytes, Path]:
    """The held-out cases file's bytes: the copy taken at lock time when locked, else the family's file."""
    lock = request.acceptance_lock
    if lock is not None:
        path = Path(lock.cases_file)
        data = path.read_bytes()
        if sha256_file(path) != lock.cases_sha256:
            raise VerdictRefused("before scoring: the copy of the held-out cases taken at lock time changed")
    else:
        path = Path(request.family.cases_file)
        data = path.read_bytes()
    return data, path


def load_cases(request: GradeRequest) -> list[HeldOutCase]:
    """The held-out call cases: from the copy taken at lock time when locked, else from the family's file."""
    data, path = cases_data(request)
    cases = read_cases_bytes(data, path)
    check_modules(cases, request.family.module_names, path)
    return cases


def _is_inside(path: Path, folder: str) -> bool:
    if not folder:
        return False
    root = os.path.realpath(folder)
    return os.path.realpath(path) == root or os.path.realpath(path).startswith(root + os.sep)


def scoring_folder(request: GradeRequest) -> trees.MadeFolder:
    """A new folder for the scoring copy, checked to be outside the experiment and the task's own folders."""
    made = trees.make_temp_folder("certlab-acceptance-")
    scratch = made.as_path
    forbidden = [request.family.tree_dir, os.path.dirname(request.family.cases_file), request.workdir]
    if request.acceptance_lock is not None:
        forbidden += [request.acceptance_lock.experiment_dir, os.path.dirname(request.acceptance_lock.cases_file)]
    inside = [folder for folder in forbidden if _is_inside(scratch, folder)]
    if inside:
        trees.remove_made(made)
        raise VerdictRefused(
            f"the scoring copy would be inside {inside[0]} (TMPDIR is {tempfile.gettempdir()}); "
            "point TMPDIR outside the experiment directory"
        )
    return made


# ----------------------------------------------------------------------------- talking to the case host


def case_environment() -> dict[str, str]:
    """The case host's environment: the kernel's allow-list of the harness's variables, no key, no HOME."""
    from certlab_core.sdk.containment import contained_environment

    return contained_environment(os.environ)


class CaseHost:
    """The case host process: ``ask(invocation)`` sends one call and returns its JSON reply."""

    def __init__(self, tree: Path, log: Path, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.log = log
        containment = active_containment()
        if containment.contained:  # the agent's code under the run's sandbox, by the agent environment's Python
            host = tree.parent / HOST_FILE.name
            shutil.copyfile(HOST_FILE, host)
            python = containment.python()
            site_dirs = [str(p) for p in sorted(Path(python).parent.parent.glob("lib/python*/site-packages"))]
            argv = [python, "-I", "-S", str(host), str(tree), repr(timeout_s), *site_dirs]
        else:
            argv = [sys.executable, "-I", "-S", str(HOST_FILE), str(tree), repr(timeout_s), *site.getsitepackages()]
        self.launch = containment.launch(argv, str(tree), case_environment(), writable=(str(tree.parent),))
        with log.open("ab") as log_handle:
            self.process = subprocess.Popen(
                list(self.launch.argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_handle,
                cwd=tree,
                env=dict(self.launch.env),
                start_new_session=True,
                preexec_fn=self.launch.before_exec,
            )
        self.buffer = b""

    def ask(self, invocation: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        body = marshal.dumps(invocation)
        try:
            self.process.stdin.write(len(body).to_bytes(4, "big") + body)
            self.process.stdin.flush()
        except BrokenPipeError:
            raise VerdictRefused(f"the case host is gone ({self._how()})") from None
        deadline = time.monotonic() + self.timeout_s + HOST_GRACE_S
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise VerdictRefused("the case host stopped answering; the verdict is refused")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise VerdictRefused(f"the case host died during a case ({self._how()}); the verdict is refused")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            envelope = json.loads(line)
            reply = json.loads(envelope["reply_text"])
            if not isinstance(reply, dict) or not isinstance(reply.get("kind"), str):
                raise ValueError("no kind")
            leftovers = [str(item) for item in envelope["leftovers"]]
        except (ValueError, KeyError, TypeError) as error:
            raise VerdictRefused(f"the case host sent an unreadable answer ({error}); the verdict is refused") from None
        reply["leftovers"] = leftovers
        return reply

    def _how(self) -> str:
        code = self.process.poll()
        return "still running" if code is None else f"exit status {code}"

    def close(self) -> None:
        """End the host (it exits when its input closes); kill it if it does not."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=HOST_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.launch.release()


# ----------------------------------------------------------------------------- judging, here only


def _short(text: str) -> str:
    return text if len(text) <= GOT_CHARS else text[:GOT_CHARS] + "..."


def described(reply: dict[str, Any]) -> str:
    """What the code did, in a few words: this, never the expected value, goes into the record."""
    kind = reply["kind"]
    if kind == "returned":
        return "returned " + _short(json.dumps(reply.get("value"), sort_keys=True))
    if kind == "raised":
        return f"raised {reply.get('name')}"
    if kind == "import-failed":
        return f"its module could not be imported (raised {reply.get('name')})"
    if kind == "unrepresentable":
        return f"returned {reply.get('why')} ({_short(str(reply.get('repr')))}), which is not JSON data"
    if kind == "timeout":
        return "did not return in time (killed)"
    return _short(str(reply.get("detail") or kind))


def held(case: HeldOutCase, reply: dict[str, Any]) -> bool:
    """The comparison, made in the grader: the exception's class name, or ``==`` on JSON data."""
    if case.raises is not None:
        return reply["kind"] == "raised" and reply.get("name") == case.raises
    return reply["kind"] == "returned" and bool(reply.get("value") == case.expect)


def run_cases(
    cases: Sequence[HeldOutCase], tree: Path, log: Path, timeout_s: float, first_failure: bool = False
) -> list[tuple[str, bool, str]]:
    """Each case through the case host: (case id, held, what the code did); refuses on leftovers.

    With ``first_failure`` it stops after the first case that does not hold.
    """
    host = CaseHost(tree, log, timeout_s)
    results: list[tuple[str, bool, str]] = []
    try:
        for number, case in enumerate(cases, start=1):
            reply = host.ask(case.invocation())
            if reply["leftovers"]:
                raise VerdictRefused(
                    f"held-out case {number} ({case.id}) left {len(reply['leftovers'])} process(es) running, "
                    f"now killed: {'; '.join(reply['leftovers'][:3])}; the verdict is refused"
                )
            ok = held(case, reply)
            results.append((case.id, ok, "" if ok else described(reply)))
            if first_failure and not ok:
                break
    finally:
        host.close()
    return results


def grade(request: GradeRequest) -> GradeResult:
    """Score the work copy on the held-out cases; fail as overfit when any case does not hold."""
    started = time.monotonic()
    lock = request.acceptance_lock
    if lock is not None:
        check_unmoved(lock, "before scoring")
    from certlab_acceptance import hidden_tests

    raw, path = cases_data(request)
    tests = hidden_tests.read_tests_bytes(raw, path) if hidden_tests.is_hidden_tests(raw) else None
    if tests is not None:
        results = _held_out_tests(request, tests)
    else:
        cases = load_cases(request)
        made = scoring_folder(request)
        scratch = made.as_path
        try:
            tree = scratch / "tree"
            trees.copy_tree(Path(request.workdir), tree, skip=("__pycache__",))
            results = run_cases(cases, tree, scratch / "host.log", CASE_TIMEOUT_S, request.first_failure)
        finally:
            trees.remove_made(made)
        if scratch.exists():
            raise VerdictRefused(f"the scoring copy {scratch} could not be deleted after the last case")
    if lock is not None:
        check_unmoved(lock, "after scoring")
    failed = [(case_id, got) for case_id, ok, got in results if not ok]
    data: dict[str, Any] = {
        "cases": len(results),
        "held": len(results) - len(failed),
        "failed": [{"id": case_id, "got": got} for case_id, got in failed],
        "locked": lock is not None,
        "wall_s": round(time.monotonic() - started, 4),
    }
    summary = f"{data['held']}/{len(results)} held-out {'cases' if tests is None else 'tests'} held"
    if not failed:
        return GradeResult(NAME, True, None, summary, data)
    shown = "; ".join(f"{case_id}: {got}" for case_id, got in failed[:SHOWN_FAILURES])
    more = f" (+{len(failed) - SHOWN_FAILURES} more)" if len(failed) > SHOWN_FAILURES else ""
    return GradeResult(NAME, False, fm.OVERFIT_TO_VISIBLE_TESTS, f"{summary}; failed: {shown}{more}", data)


def _held_out_tests(request: GradeRequest, tests: Sequence[HiddenTest]) -> list[tuple[str, bool, str]]:
    """Held-out test files, laid over a grading copy only, run by pytest as the suite grader runs the visible tests.

    That is the suite grader's ``run_tests``: a fork of one of the run's warm servers (in the
    sandbox, in the task's own environment when it has one), else a new interpreter under the
    run's sandbox, or, uncontained, a fork of the harness.
    """
    from certlab_suite.plugin import run_tests

    from certlab_acceptance import hidden_tests

    run = run_tests(
        request.workdir,
        request.family.environment_dir,  # the task's own, made when it was built
        [test.test for test in tests],
        request.family.module_names,
        prepare=lambda tree: hidden_tests.lay_over(tests, tree),
        outcomes_only=True,  # the grade records each test's outcome, never what a failure said
        timeout_s=hidden_tests.RUN_TIMEOUT_S,
    )
    return hidden_tests.judge_tests(tests, hidden_tests.pytest_run(run.report, run.why))


def leaked_answers(request: GradeRequest, changes: Sequence[Change], /) -> str | None:
    """``answers-leaked`` when a graded trial's changes hold over half of the held-out answers (``check_changes``).

    The cases are the locked copy when the trial ran under a lock, else the family's own file
    (as when the trial is regraded). An agent that wrote the answer key into the work copy read
    it, whatever its tests say.
    """
    from certlab_acceptance.leakscan import answers_leaked

    lock = request.acceptance_lock
    cases_file = lock.cases_file if lock is not None else request.family.cases_file
    return fm.ANSWERS_LEAKED if answers_leaked(changes, cases_file) else None


@hookimpl
def certlab_graders() -> list[Grader]:
    return [
        Grader(
            name=NAME,
            order=ORDER,
            description="each held-out case in its own fresh process of the submitted code, compared here",
            grade=grade,
            failure_modes=(fm.OVERFIT_TO_VISIBLE_TESTS,),
            check_changes=leaked_answers,
            role=HELD_OUT_ROLE,
        )
    ]


# The held-out operations import their modules when first called, not when the registry is built.
def open_held_out(registry: HeldOutIndex, families: Sequence[TaskFamily], task_dirs: Sequence[str], /) -> HeldOutRun:
    from certlab_acceptance.held_out import open_held_out

    return open_held_out(registry, families, task_dirs)


def register_experiment_task(registry: HeldOutIndex, directory: Path, /) -> TaskFamily | None:
    from certlab_acceptance.held_out import register_experiment_task

    return register_experiment_task(registry, directory)


def experiment_lock(family_name: str, /) -> AcceptanceLock | None:
    from certlab_acceptance.held_out import experiment_lock

    return experiment_lock(family_name)


@hookimpl
def certlab_held_out() -> list[HeldOutAcceptance]:
    return [
        HeldOutAcceptance(
            name=NAME,
            description="a lock of every family's and user task's held-out cases, checked before every arm",
            open=open_held_out,
            register_experiment_task=register_experiment_task,
            experiment_lock=experiment_lock,
            check_lock=check_unmoved,
        )
    ]


def stage_user_task(directory: Path, dest: Path, /) -> TaskFamily:
    """The ``user-task`` source's ``stage``: the experiment directory read, its issued tree built below ``dest``."""
    return stage_family(load_user_task(directory), dest)


@hookimpl
def certlab_task_sources() -> list[TaskSource]:
    return [
        TaskSource(
            name=SOURCE_NAME,
            description="an experiment directory: certlab.yaml, fixture/, tests/, PROMPT.md, cases/acceptance.jsonl",
            recognises=holds_user_task,
            stage=stage_user_task,
        )
    ]


# Each command's one line for ``certlab --help``, which lists them without importing their modules.
COMMAND_LINES = {
    "init-task": "scaffold a small working task of your own: fixture, visible tests, prompt, held-out cases",
    "lock": "seal a task's held-out cases, refusing a layout that leaks them",
    "leakscan": "name every artefact of a run that holds most of the held-out answers",
    "predict": "register a prediction before the run, or check the registered ones",
    "task": "build tasks from a repository's bug-fix commits or SWE-bench instances",
}


def _command(name: str) -> Command:
    """The record of the command ``name``: its module is imported only when a command line needs it."""

    def register(app: typer.Typer, /) -> None:
        if name == "task":
            from certlab_acceptance.task_commands import register as register_task

            register_task(app)
        else:
            from certlab_acceptance.commands import COMMANDS

            app.command(name)(COMMANDS[name])

    return Command(name=name, description=COMMAND_LINES[name], register=register)


@hookimpl
def certlab_commands() -> list[Command]:
    return [_command(name) for name in COMMAND_LINES]
