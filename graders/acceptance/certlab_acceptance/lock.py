"""``certlab lock``: seal a task's held-out cases, refusing a leaky layout.

The lock (``EXPERIMENT_DIR/.certlab/lock.json``, sealed) holds a copy of the cases taken
at lock time, from which every score is computed, and the fingerprints of the cases, the
predictions registered so far, the scorer (every installed grader's package) and the
kernel's own files. Before every arm, before scoring and after scoring they are taken
again; any movement refuses the verdict (ERROR) and names what moved.

Refused at lock time: cases inside the fixture or the visible tests, or the fixture inside
the cases' folder; a symlink, a hard link or a plain copy of a case file anywhere in the
fixture or the tests; a case whose input the visible tests call with equal literal
arguments; and a fixture or test file that holds most of the held-out answers.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from certlab_acceptance import fingerprints, visible_calls
from certlab_acceptance.cases import HeldOutCase, cases_sha256, check_modules, read_cases, read_cases_bytes
from certlab_acceptance.fingerprints import check_unmoved
from certlab_acceptance.user_task import UserTask
from certlab_core.plugin import InstrumentError, UsageError
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock
from certlab_core.sdk import canonical, safe_io, trees
from certlab_core.sdk.workcopy import sha256_file

LOCK_FOLDER = ".certlab"
LOCK_FILE = "lock.json"
LOCK_SCHEMA = "certlab.lock/1"
PREDICTIONS_FILE = "predictions.jsonl"


def lock_path(root: Path) -> Path:
    return root / LOCK_FOLDER / LOCK_FILE


def predictions_path(root: Path) -> Path:
    return root / LOCK_FOLDER / PREDICTIONS_FILE


def make_lock_folder(root: Path, what: str) -> Path:
    """The task's ``.certlab`` folder, made if need be, for the ``what`` certlab writes there; something else in its
    place, or a link (certlab writes only into a real folder), is one line (exit 4)."""
    folder = root / LOCK_FOLDER
    try:
        folder.mkdir(exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"{folder}: cannot make certlab's folder there ({error.strerror}); move what is in its place"
        ) from None
    if folder.is_symlink():
        raise UsageError(f"{root}: its folder {folder} is a link; certlab writes the {what} only into a real folder")
    return folder


def _inside(path: Path, folder: Path) -> bool:
    path, folder = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return path == folder or folder in path.parents


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------- refusals


def layout_refusals(task: UserTask) -> list[str]:
    """The cases must live in their own folder, apart from everything issued to the agent."""
    problems: list[str] = []
    cases_folder = task.cases.parent
    for label, issued in (("fixture", task.fixture), ("visible tests", task.tests)):
        if _inside(task.cases, issued):
            problems.append(
                f"the held-out cases {_relative(task.cases, task.root)} are inside the {label} "
                f"({_relative(issued, task.root)}), which is issued to the agent; move them to their own folder"
            )
        if _inside(issued, cases_folder):
            problems.append(
                f"the {label} ({_relative(issued, task.root)}) is inside the cases' folder "
                f"({_relative(cases_folder, task.root) or '.'}); give the cases a folder of their own, e.g. cases/"
            )
    return problems


def _case_files(task: UserTask) -> list[Path]:
    folder = task.cases.parent
    if _inside(task.fixture, folder) or _inside(task.tests, folder):
        return [task.cases]
    return sorted(e.path for e in _entries(folder) if e.kind == "file") or [task.cases]


def _entries(folder: Path) -> list[trees.Entry]:
    """Every entry below a folder of the user's task, by a bounded walk (one line when past a work copy's caps)."""
    try:
        return list(trees.walk(folder))
    except trees.TreeTooLarge as error:
        raise UsageError(f"{folder} holds {error.message}; a task must fit in a work copy") from None


def link_refusals(task: UserTask) -> list[str]:
    """No symlink to, hard link of, or plain copy of a case file anywhere in the fixture or the tests."""
    case_files = _case_files(task)
    by_inode = {(f.stat().st_dev, f.stat().st_ino): f for f in case_files}
    by_hash = {sha256_file(f): f for f in case_files}
    real = {os.path.realpath(f): f for f in case_files}
    problems: list[str] = []
    for issued in (task.fixture, task.tests):
        for entry in _entries(issued):
            path = entry.path
            shown = _relative(path, task.root)
            if entry.kind == "symlink":
                target = os.path.realpath(path)
                hit = real.get(target) or next((f for f in case_files if _inside(f, Path(target))), None)
                if hit is not None:
                    problems.append(
                        f"{shown} is a symlink to the held-out cases ({_relative(hit, task.root)}); remove it"
                    )
                continue
            if entry.kind != "file":
                continue
            st = entry.stat
            hit = by_inode.get((st.st_dev, st.st_ino))
            if hit is not None:
                problems.append(
                    f"{shown} is a hard link of the held-out cases ({_relative(hit, task.root)}); remove it"
                )
                continue
            if st.st_size == 0:
                continue
            hit = by_hash.get(sha256_file(path))
            if hit is not None:
                problems.append(f"{shown} is a copy of the held-out cases ({_relative(hit, task.root)}); remove it")
    return problems


def input_refusals(task: UserTask, cases: Sequence[HeldOutCase]) -> list[str]:
    """No held-out input the visible tests call with equal literal arguments."""
    files = sorted(e.path for e in _entries(task.tests) if e.kind != "folder" and e.relpath.endswith(".py"))
    return visible_calls.leaked_inputs(
        cases, visible_calls.suite_calls(files, task.root), _relative(task.cases, task.root)
    )


def answer_refusals(task: UserTask, cases: Sequence[HeldOutCase]) -> list[str]:
    """No file issued to the agent that holds most of the held-out answers."""
    from certlab_acceptance.leakscan import scan_paths

    findings = scan_paths([task.fixture, task.tests], cases, task.root)
    return [
        f"{finding.artefact} holds {finding.found} of the {finding.total} held-out answers; it is issued to the "
        "agent, so remove them from it"
        for finding in findings
        if finding.majority
    ]


def lock_refusals(task: UserTask, cases: Sequence[HeldOutCase]) -> list[str]:
    """Every reason to refuse locking this task, one line each (empty when it may be locked)."""
    problems = layout_refusals(task)
    problems += link_refusals(task)
    problems += input_refusals(task, cases)
    problems += answer_refusals(task, cases)
    if holds_hidden_tests(task):
        problems += hidden_test_refusals(task)
    return problems


def staged_refusals(family: TaskFamily, source: str) -> list[str]:
    """Every reason to refuse another task source's staged task, as a lock refuses a user task (empty: none).

    Its cases must lie outside the issued tree, and the tree's visible tests must not call a held-out
    input, nor any issued file hold most of the answers. The source laid the folder out, so the
    refusals about a user task's layout (its cases folder, its links) are not asked.
    """
    tree, cases_file = Path(family.tree_dir), Path(family.cases_file)
    if _inside(cases_file, tree):
        return [f"the {source} source put the held-out cases ({cases_file.name}) inside the issued tree; it must not"]
    from certlab_acceptance.hidden_tests import is_hidden_tests
    from certlab_acceptance.leakscan import scan_paths

    if is_hidden_tests(cases_file.read_bytes()):
        return []
    cases = read_cases(cases_file)
    check_modules(cases, family.module_names, cases_file.name)
    files = [tree / relpath for relpath in trees.visible_test_modules(tree, family.test_paths)]
    problems = visible_calls.leaked_inputs(cases, visible_calls.suite_calls(files, tree), cases_file.name)
    problems += [
        f"{finding.artefact} holds {finding.found} of the {finding.total} held-out answers; it is issued to the "
        "agent, so the task is refused"
        for finding in scan_paths([tree], cases, tree)
        if finding.majority
    ]
    return problems


def hidden_test_refusals(task: UserTask) -> list[str]:
    """No file issued to the agent that is a copy of a held-out test file (a task built from a commit)."""
    from certlab_acceptance.hidden_tests import read_tests_bytes

    tests = read_tests_bytes(task.cases.read_bytes(), _relative(task.cases, task.root))
    hidden = {text.encode("utf-8") for test in tests for text in test.files.values() if text}
    problems: list[str] = []
    for issued in (task.fixture, task.tests):
        for entry in _entries(issued):
            if entry.kind == "file" and entry.stat.st_size and entry.path.read_bytes() in hidden:
                problems.append(
                    f"{_relative(entry.path, task.root)} is a copy of a held-out test file; it is issued to the "
                    "agent, so remove it (the held-out version replaces the visible one only at grading)"
                )
    return problems


def holds_hidden_tests(task: UserTask) -> bool:
    from certlab_acceptance.hidden_tests import is_hidden_tests

    try:
        return is_hidden_tests(task.cases.read_bytes())
    except OSError:
        return False


def read_task_cases(task: UserTask) -> list[HeldOutCase]:
    """The task's held-out call cases, checked; a task of held-out test files has none (its tests are checked)."""
    if holds_hidden_tests(task):
        from certlab_acceptance.hidden_tests import read_tests_bytes

        read_tests_bytes(task.cases.read_bytes(), _relative(task.cases, task.root))
        return []
    cases = read_cases(task.cases)
    check_modules(cases, task.module_names, _relative(task.cases, task.root))
    return cases


# ----------------------------------------------------------------------------- fingerprints


def lock_sources(
    cases_file: Path, registry: Any, predictions: Path | None = None, kernel: bool = True, oracle: Path | None = None
) -> dict[str, str]:
    """What a lock fingerprints: the cases file, the predictions (for a task), the scorer, the kernel, and the
    oracle's answer (``task.oracle``) of a task that knows it."""
    sources = {fingerprints.CASES_GROUP: str(cases_file)}
    if oracle is not None:
        sources[fingerprints.ORACLE_GROUP] = str(oracle)
    if kernel:
        sources[fingerprints.KERNEL_GROUP] = str(fingerprints.kernel_source())
    sources.update(fingerprints.scorer_sources(registry))
    if predictions is not None:
        sources[fingerprints.PREDICTIONS_GROUP] = str(predictions)
    return sources


def _write_copy(data: bytes, scratch: Path) -> Path:
    scratch.mkdir(parents=True, exist_ok=True)
    copy = scratch / "acceptance.locked.jsonl"
    copy.write_bytes(data)
    copy.chmod(0o400)
    return copy


def take_lock(
    cases_file: Path, registry: Any, scratch: Path, experiment_dir: Path | None = None, oracle: Path | None = None
) -> AcceptanceLock:
    """A lock taken now, for one run (a family, or a task that was never locked): a copy of the cases,
    and the fingerprints of the cases and the scorer (the kernel's files only with ``certlab lock``)."""
    data = cases_file.read_bytes()
    sources = lock_sources(cases_file, registry, kernel=False, oracle=oracle)
    prints = fingerprints.fingerprint(sources)
    copy = _write_copy(data, scratch)
    return AcceptanceLock(
        cases_file=str(copy),
        cases_sha256=cases_sha256(data),
        fingerprints=prints,
        sources=sources,
        experiment_dir=str(experiment_dir or cases_file.parent),
        seal=fingerprints.digest_of(prints),
    )


def write_lock(task: UserTask, registry: Any, again: bool = False) -> tuple[Path, dict[str, Any]]:
    """Refuse a leaking task (UsageError listing every reason), else write and return the sealed lock."""
    path = lock_path(task.root)
    if path.exists() and not again:
        raise UsageError(f"{task.root} is already locked ({_relative(path, task.root)}); pass --again to lock it anew")
    cases = read_task_cases(task)
    problems = lock_refusals(task, cases)
    if problems:
        raise LockRefused(problems)
    data = task.cases.read_bytes()
    sources = lock_sources(task.cases, registry, predictions_path(task.root), oracle=task.oracle)
    prints = fingerprints.fingerprint(sources)
    document = canonical.sealed(
        {
            "schema": LOCK_SCHEMA,
            "task": task.name,
            "locked_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "certlab_version": importlib.metadata.version("certlab"),
            "cases": {
                "file": _relative(task.cases, task.root),
                "sha256": cases_sha256(data),
                "count": len(cases) or count_lines(data),
                "copy": data.decode("utf-8"),
            },
            "fingerprints": prints,
            "fingerprints_sha256": fingerprints.digest_of(prints),
        }
    )
    make_lock_folder(task.root, "lock")
    safe_io.replace_file(path, canonical.pretty_json(document).encode("utf-8"), "lock", UsageError)
    return path, document


def count_lines(data: bytes) -> int:
    """The held-out cases or tests in a cases file: its non-blank lines."""
    return sum(1 for line in data.splitlines() if line.strip())


class LockRefused(UsageError):
    """The task leaks its held-out cases; ``problems`` holds one line per reason."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(f"lock refused: {len(problems)} problem(s); the first: {problems[0]}")
        self.problems = tuple(problems)


def read_lock(root: Path) -> dict[str, Any] | None:
    """The sealed lock of an experiment directory, or None; a broken or edited lock is an ERROR."""
    from certlab_core.plugin import CertlabError

    path = lock_path(root)
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        document = safe_io.load_json(path, "lock")  # regular file, capped, shallow (certlab_core.sdk.safe_io)
    except CertlabError as error:
        raise InstrumentError(f"{error.message}; lock again with certlab lock --again") from None
    if not isinstance(document, dict) or document.get("schema") != LOCK_SCHEMA:
        raise InstrumentError(f"{path}: not a certlab lock (schema {LOCK_SCHEMA} expected)")
    if not canonical.seal_holds(document):
        raise InstrumentError(f"{path}: the lock was edited after it was sealed; the verdict is refused (ERROR)")
    return document


def open_lock(task: UserTask, registry: Any, scratch: Path) -> AcceptanceLock | None:
    """The task's lock as an AcceptanceLock (its cases copy written to ``scratch``), checked unmoved; or None."""
    document = read_lock(task.root)
    if document is None:
        return None
    path = lock_path(task.root)
    try:
        copy_text: str = document["cases"]["copy"]
        copy_sha: str = document["cases"]["sha256"]
        locked: Mapping[str, str] = document["fingerprints"]
    except (KeyError, TypeError):
        raise InstrumentError(f"{path}: malformed lock (no cases copy or fingerprints)") from None
    data = copy_text.encode("utf-8")
    if cases_sha256(data) != copy_sha:
        raise InstrumentError(f"{path}: the cases copy in the lock does not match its own sha256")
    from certlab_acceptance.hidden_tests import is_hidden_tests, read_tests_bytes

    if is_hidden_tests(data):
        read_tests_bytes(data, f"{path} (the locked copy)")
    else:
        read_cases_bytes(data, f"{path} (the locked copy)")
    lock = AcceptanceLock(
        cases_file=str(_write_copy(data, scratch)),
        cases_sha256=copy_sha,
        fingerprints=locked,
        sources=lock_sources(task.cases, registry, predictions_path(task.root), oracle=task.oracle),
        experiment_dir=str(task.root),
        seal=str(document["seal"]),
    )
    check_unmoved(lock, "opening the lock")
    return lock


def lock_status(task: UserTask, registry: Any) -> list[str]:
    """What moved since the task was locked (empty when nothing did); InstrumentError when unlocked or broken."""
    document = read_lock(task.root)
    if document is None:
        raise UsageError(f"{task.root} is not locked; run certlab lock {task.root}")
    now = fingerprints.fingerprint(lock_sources(task.cases, registry, predictions_path(task.root), oracle=task.oracle))
    return fingerprints.movements(document["fingerprints"], now)


def scratch_folder(prefix: str = "certlab-lock-") -> trees.MadeFolder:
    """A new temp folder, as the handle ``trees.remove_made`` deletes it by (and nothing else at its path)."""
    return trees.make_temp_folder(prefix)
