"""Held-out test files: pytest node ids run against hidden test files.

A task built from a bug-fix commit (``from_commit``) is scored by the tests its fix added or
changed (FAIL_TO_PASS). Its cases file holds one line per such test::

    {"id": "tests/test_parse.py::test_x", "test": "tests/test_parse.py::test_x",
     "files": {"tests/test_parse.py": "<the held-out version of the file>"}, "environment": "<sha256>"}

``files`` are laid over a copy of the submitted work tree only when it is graded (a held-out
version of a changed test file replaces the visible one there, never in the work copy); the
file is written into the lock's copy with the line, so ``certlab lock`` seals it like any case.
A grading runs them as the suite grader runs the visible tests (``certlab_suite``'s ``run_tests``:
a fork of one of the run's warm servers, in the sandbox and the task's environment, else a new
interpreter there), with the same empty pytest configuration; building a task runs them through
``pytest_host.py`` in a new interpreter (``run_tests`` here). A test holds when pytest reports it
passed and its run exited as such a run does (``judge_tests``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from attrs import field, frozen

from certlab_acceptance.cases import json_object_line
from certlab_core.plugin import UsageError
from certlab_core.sdk.containment import active_containment, contained_environment

TEST_KEYS = frozenset({"id", "test", "files", "environment"})
HOST_FILE = Path(__file__).with_name("pytest_host.py")
NODE_PATTERN = re.compile(r"^[A-Za-z0-9_./-]+\.py::[^\s]+$")
MAX_TESTS = 1_000
MAX_REPORT_BYTES = 4 << 20
RUN_TIMEOUT_S = 300.0


def _str_map(value: Mapping[str, str]) -> dict[str, str]:
    """A record's mapping field as a plain dict (attrs converts it when the record is made)."""
    return dict(value)


@frozen
class HiddenTest:
    """One held-out test: its pytest node id, and the hidden files laid over the tree to run it."""

    id: str
    test: str
    files: Mapping[str, str] = field(converter=_str_map)
    #: the sha256 of the task's environment record (``cases/source.json``): in the cases, so in the taskset's hash
    environment: str = ""
    line: int = 0

    @property
    def path(self) -> str:
        return self.test.split("::", 1)[0]


def _texts(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(value) for value in values)


@frozen
class PytestRun:
    """What one pytest run reported: its exit code, each node id's outcome, the collection errors."""

    exit_code: int
    outcomes: Mapping[str, str] = field(converter=_str_map)
    collect_errors: tuple[str, ...] = field(converter=_texts, default=())

    def passed(self, nodeid: str) -> bool:
        return self.outcomes.get(nodeid) == "passed"

    def failing(self) -> list[str]:
        return sorted(node for node, outcome in self.outcomes.items() if outcome in ("failed", "error"))


def safe_relpath(text: object) -> bool:
    """A relative POSIX path inside a tree: no absolute path, no '..', no empty part."""
    if not isinstance(text, str) or not text or "\\" in text or "\x00" in text:
        return False
    path = PurePosixPath(text)
    return not path.is_absolute() and all(part not in ("", ".", "..") for part in text.split("/"))


def is_hidden_tests(data: bytes) -> bool:
    """Whether a cases file's first line is a held-out test (``"test"``) rather than a call case."""
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            first = json.loads(raw)
        except ValueError:
            return False
        return isinstance(first, dict) and "test" in first and "call" not in first
    return False


def parse_tests(text: str, path: Path | str) -> list[HiddenTest]:
    """Every held-out test of a cases file's text, checked; a problem is one UsageError naming file and line."""
    fix = "each line must be a JSON object {id, test: 'path.py::name', files: {path: text}}"
    found: list[HiddenTest] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        data = json_object_line(raw, where, fix)
        unknown = sorted(set(data) - TEST_KEYS)
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; {fix}")
        case_id, test, files = data.get("id"), data.get("test"), data.get("files", {})
        environment = data.get("environment", "")
        if not isinstance(environment, str):
            raise UsageError(f"{where}: test {case_id!r}: 'environment' must be the environment record's sha256")
        if not isinstance(case_id, str) or not case_id.strip():
            raise UsageError(f"{where}: 'id' must be a non-empty string; {fix}")
        if not isinstance(test, str) or not NODE_PATTERN.match(test) or not safe_relpath(test.split("::", 1)[0]):
            raise UsageError(
                f"{where}: test {case_id!r}: 'test' must be a pytest node id 'path.py::name' (got {test!r})"
            )
        if not isinstance(files, dict) or not all(
            safe_relpath(key) and isinstance(value, str) for key, value in files.items()
        ):
            raise UsageError(f"{where}: test {case_id!r}: 'files' must map relative paths to their text")
        if case_id in seen:
            raise UsageError(f"{where}: the test id {case_id!r} was already used on line {seen[case_id]}")
        seen[case_id] = number
        found.append(HiddenTest(id=case_id, test=test, files=files, environment=environment, line=number))
        if len(found) > MAX_TESTS:
            raise UsageError(f"{path}: more than {MAX_TESTS} held-out tests; split the task")
    if not found:
        raise UsageError(f"{path}: no held-out test in the file")
    return found


def read_tests_bytes(data: bytes, path: Path | str) -> list[HiddenTest]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(f"{path}: not UTF-8 text ({error.reason}); save the cases file as UTF-8") from None
    return parse_tests(text, path)


def cases_text(tests: Sequence[HiddenTest]) -> str:
    """The cases file's text for ``tests`` (the inverse of :func:`parse_tests`)."""
    return "".join(
        json.dumps({"id": t.id, "test": t.test, "files": dict(t.files), "environment": t.environment}, sort_keys=True)
        + "\n"
        for t in tests
    )


def lay_over(tests: Sequence[HiddenTest], tree: Path) -> None:
    """Write the hidden files over ``tree`` (a grading copy): a held-out version replaces the visible file."""
    written: dict[str, str] = {}
    for test in tests:
        for relpath, text in test.files.items():
            if written.get(relpath, text) != text:
                raise UsageError(f"held-out tests disagree on the text of {relpath}; rebuild the task")
            written[relpath] = text
    for relpath, text in written.items():
        target = tree / relpath
        for parent in [target.parent, *target.parent.parents]:
            if parent == tree:
                break
            if parent.is_symlink():
                raise UsageError(f"{relpath}: a folder on its path is a symlink in the copy; it is not written")
        if target.is_symlink() or target.is_dir():
            target.unlink() if target.is_symlink() else shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _read_report(path: Path) -> dict[str, Any] | None:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_REPORT_BYTES:
            return None
        report = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(report, dict)
        or not isinstance(report.get("exit_code"), int)
        or not isinstance(report.get("outcomes"), dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in report["outcomes"].items())
        or not isinstance(report.get("collect_errors"), list)
    ):
        return None
    return report


def run_tests(
    tree: Path, nodeids: Sequence[str], scratch: Path, timeout_s: float = RUN_TIMEOUT_S, python: str | None = None
) -> PytestRun:
    """Run ``nodeids`` (or the tree's whole suite when given a folder) in ``tree`` under the active containment.

    ``scratch`` (a folder of the caller's, outside ``tree``) gets the host, pytest's log and the
    report. A run that writes no readable report, or runs past ``timeout_s``, reports exit
    code -1 and no outcome: nothing holds.
    """
    containment = active_containment()
    host = scratch / HOST_FILE.name
    shutil.copyfile(HOST_FILE, host)
    report = scratch / "hidden-tests.report.json"
    report.unlink(missing_ok=True)
    chosen = python or containment.python()
    argv = [chosen, "-I", str(host), str(tree), str(report), *nodeids]
    launch = containment.launch(argv, str(tree), contained_environment(os.environ), writable=(str(scratch),))
    try:
        with (scratch / "hidden-tests.log").open("ab") as log:
            process = subprocess.Popen(
                list(launch.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=tree,
                env=dict(launch.env),
                start_new_session=True,
                preexec_fn=launch.before_exec,
            )
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return PytestRun(-1, {}, (f"the tests ran past {timeout_s:g} s and were killed",))
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # whatever the tests left running
    finally:
        launch.release()
    found = _read_report(report)
    if found is None:
        return PytestRun(-1, {}, (f"pytest wrote no readable report (exit status {process.returncode})",))
    return PytestRun(found["exit_code"], found["outcomes"], tuple(str(e) for e in found["collect_errors"]))


def pytest_run(report: Mapping[str, Any] | None, why: str) -> PytestRun:
    """The run a test process's report describes (the suite grader's ``TestRun.report``, None: ``why`` none came).

    A run with no report, or one whose code under test was imported from outside the copy,
    reports exit code -1 and no outcome: nothing holds.
    """
    if report is None:
        return PytestRun(-1, {}, (why,))
    exit_code = report.get("exit_code")
    if not isinstance(exit_code, int):
        return PytestRun(-1, {}, ("the test process reported no exit code",))
    strays = [str(s) for s in report.get("strays") or []]
    if strays:
        return PytestRun(-1, {}, ("the code under test was imported from outside the copy: " + "; ".join(strays),))
    return PytestRun(exit_code, report["outcomes"], tuple(str(e) for e in report["collect_errors"]))


def log_tail(scratch: Path, limit: int = 2000) -> str:
    try:
        return (scratch / "hidden-tests.log").read_bytes()[-limit:].decode("utf-8", "replace")
    except OSError:
        return ""


def judge_tests(tests: Sequence[HiddenTest], run: PytestRun) -> list[tuple[str, bool, str]]:
    """(test id, held, what happened) for each held-out test: it holds when pytest reported it passed, in a run
    that exited 0, or 1 with another test failing (an exit of its own, a crash or no report holds nothing)."""
    results: list[tuple[str, bool, str]] = []
    exit_fits = run.exit_code == 0 or (run.exit_code == 1 and bool(run.failing()))
    for test in tests:
        outcome = run.outcomes.get(test.test)
        ok = outcome == "passed" and exit_fits
        if ok:
            got = ""
        elif outcome is None:
            got = "not run" + (f" ({run.collect_errors[0]})" if run.collect_errors else "")
        elif outcome == "passed":
            got = f"passed, but the run exited {run.exit_code}"
        else:
            got = outcome
        results.append((test.id, ok, got[:200]))
    return results
