"""Tasks built from a repository's own bug fixes, and from SWE-bench instances.

A bug-fix commit is a ready-made task: its parent is the defect, the tests its fix adds or
changes are the acceptance. The task written is a user task (``certlab_acceptance.user_task``):

- ``fixture/`` is the repository at the parent, without its tests folder, and ``tests/`` that
  folder at the parent: the work copy issued, with none of the fix's test changes;
- ``cases/acceptance.jsonl`` holds one held-out test (``hidden_tests``) per test of the fix
  that fails at the parent and passes at the commit (FAIL_TO_PASS), with the fix's versions
  of the test files it changed; ``certlab lock`` seals them;
- ``cases/oracle.patch`` is the source part of the fix, and ``oracle/`` the fixture with it
  applied: the oracle's answer (``certlab prove --task DIR --fixed DIR/oracle``);
- ``cases/source.json`` says where the task came from: commit, parent, FAIL_TO_PASS,
  PASS_TO_PASS (the visible suite, which passes at both), and the environment.

Every file of the repository is read as hostile data: git is asked for trees and blobs only
(no work tree, no hook, no filter, no diff driver), paths are checked, totals are capped.
The tests run offline, as the graders run them: in the run's sandbox when there is one, with
certlab's own empty pytest configuration, in the task's own environment when the project declares
dependencies (``task_env``, installed once, now). A commit that does not qualify is refused in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from attrs import frozen

from certlab_acceptance.cases import json_object_line
from certlab_acceptance.hidden_tests import HiddenTest, PytestRun, cases_text, run_tests, safe_relpath
from certlab_acceptance.task_env import TaskEnvironment, declared_requirements, make_environment
from certlab_acceptance.user_task import NOT_MODULES, TASK_FILE
from certlab_core.plugin import UsageError
from certlab_core.sdk import trees
from certlab_core.sdk.containment import active_containment

GIT_TIMEOUT_S = 60.0
MAX_FILES = 5_000
MAX_BYTES = 64 << 20
SOURCE_SCHEMA = "certlab.task-source/1"
PROMPT_TEMPLATE = """\
{statement}
---
The visible tests are in `{tests}/`. Fix the code so that the problem above is solved and the
visible tests still pass. Do not change the tests; change only {allowed}.
"""


class NotQualified(UsageError):
    """A commit (or instance) that cannot become a task: one line saying why."""


# ----------------------------------------------------------------------------- git, as data only


def _git_env() -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "HOME", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    return env


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """``git`` in ``repo`` with no hook, no fsmonitor and no external diff; a failure is one UsageError."""
    argv = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "diff.external="]
    argv += ["-C", str(repo), *args]
    try:
        done = subprocess.run(
            argv, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S, env=_git_env(), check=False
        )
    except FileNotFoundError:
        raise UsageError("git is not installed; certlab reads a repository's commits with git") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{repo}: git {args[0]} took more than {GIT_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        message = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
        raise UsageError(f"{repo}: git {args[0]} failed ({message[:200]})")
    return done.stdout


def open_repository(repo: Path) -> Path:
    if not repo.is_dir():
        raise UsageError(f"{repo}: no such folder; give a local git repository (a clone)")
    try:
        git(repo, "rev-parse", "--git-dir")
    except UsageError:
        raise UsageError(f"{repo}: not a git repository; give a local clone") from None
    return repo


def repository_name(repo: Path) -> str:
    """The name a task records of its repository (its folder's, without ``.git``): the per-repository summary's key."""
    name = repo.resolve().name
    return name.removesuffix(".git") or name


def resolve_commit(repo: Path, rev: str) -> str:
    if not rev or rev.startswith("-") or any(c.isspace() for c in rev):
        raise UsageError(f"{rev!r} is not a commit name")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").decode().strip()
    except UsageError:
        raise UsageError(f"{repo}: no commit {rev!r} in the repository") from None


def parent_of(repo: Path, commit: str) -> str:
    words = git(repo, "rev-list", "--parents", "-n", "1", commit).decode().split()
    if len(words) == 1:
        raise NotQualified(f"{commit[:12]} is the repository's first commit: it has no parent to be the defect")
    if len(words) > 2:
        raise NotQualified(f"{commit[:12]} is a merge commit: give the commit of the fix itself")
    return words[1]


@frozen
class Blob:
    mode: str
    data: bytes


def read_tree(repo: Path, commit: str) -> dict[str, Blob]:
    """Every file of a commit's tree as {path: Blob}: regular files and symlinks; submodules are left out."""
    listing = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    entries: list[tuple[str, str, str]] = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _tab, raw_path = record.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        path = raw_path.decode("utf-8", "surrogateescape")
        if kind != "blob":
            continue
        if not safe_relpath(path) or path.split("/")[0] == ".git":
            raise NotQualified(f"{commit[:12]}: the tree holds a path certlab does not write ({path[:80]!r})")
        entries.append((path, mode, sha))
    if len(entries) > MAX_FILES:
        raise NotQualified(f"{commit[:12]}: {len(entries)} files, more than a task's {MAX_FILES}")
    batch = git(repo, "cat-file", "--batch", stdin="".join(f"{sha}\n" for _p, _m, sha in entries).encode())
    files: dict[str, Blob] = {}
    offset, total = 0, 0
    for path, mode, _sha in entries:
        header_end = batch.find(b"\n", offset)
        header = batch[offset:header_end].split() if header_end >= 0 else []
        if len(header) != 3 or header[1] != b"blob" or not header[2].isdigit():
            raise NotQualified(
                f"{commit[:12]}: git could not give the file {path[:80]!r} (a shallow or damaged clone?)"
            )
        size = int(header[2])
        total += size
        if total > MAX_BYTES:
            raise NotQualified(f"{commit[:12]}: more than {MAX_BYTES >> 20} MB of files, past what a task may hold")
        files[path] = Blob(mode, batch[header_end + 1 : header_end + 1 + size])
        offset = header_end + 1 + size + 1
    return files


def write_files(files: Mapping[str, Blob], dest: Path) -> None:
    """Write a tree read by :func:`read_tree` into the new folder ``dest`` (symlinks as symlinks, never followed)."""
    dest.mkdir(parents=True)
    for path in sorted(files):
        blob = files[path]
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if blob.mode == "120000":
            os.symlink(blob.data.decode("utf-8", "surrogateescape"), target)
            continue
        target.write_bytes(blob.data)
        if blob.mode == "100755":
            target.chmod(0o755)


def changed_paths(repo: Path, parent: str, commit: str) -> dict[str, str]:
    """{path: A, M or D} of what the commit changed (renames as a deletion and an addition)."""
    raw = git(repo, "diff-tree", "-r", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", "--name-status",
              parent, commit)  # fmt: skip
    words = [w.decode("utf-8", "surrogateescape") for w in raw.split(b"\0") if w]
    return {words[i + 1]: words[i][0] for i in range(0, len(words) - 1, 2)}


# ----------------------------------------------------------------------------- what a fix is made of


def is_test_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1]
    in_tests = any(part in ("tests", "test", "testing") for part in parts[:-1])
    return in_tests or name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def tests_folder(test_changes: Iterable[str], label: str) -> str:
    """The one top-level folder holding every test the fix changed (a task issues its tests as one folder)."""
    tops = {PurePosixPath(p).parts[0] for p in test_changes}
    if len(tops) != 1 or any(len(PurePosixPath(p).parts) < 2 for p in test_changes):
        shown = ", ".join(sorted(test_changes)[:3])
        raise NotQualified(
            f"{label}: the fix's tests ({shown}) are not all inside one top-level tests folder; "
            "certlab issues a task's visible tests as one folder"
        )
    return tops.pop()


def _diff_text(old: bytes | None, new: bytes | None, path: str) -> str:
    import difflib

    def lines(data: bytes | None) -> list[str]:
        return [] if data is None else data.decode("utf-8", "replace").splitlines(keepends=True)

    return "".join(
        difflib.unified_diff(
            lines(old),
            lines(new),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null",
        )
    )


# ----------------------------------------------------------------------------- the checks, offline


@frozen
class Checked:
    """What the runs found: the held-out tests, the visible suite's node ids, how long it took."""

    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    runs: tuple[tuple[str, float], ...]


def _run(
    label: str, files: Mapping[str, Blob], targets: Sequence[str], scratch: Path, python: str | None = None
) -> PytestRun:
    import time

    folder = scratch / label
    tree = folder / "tree"
    write_files(files, tree)
    started = time.monotonic()
    run = run_tests(tree, targets, folder, python=python)
    _TIMES.append((label, round(time.monotonic() - started, 3)))
    return run


_TIMES: list[tuple[str, float]] = []


def _first(items: Iterable[str]) -> str:
    return next(iter(sorted(items)), "")


def check_fix(
    label: str,
    parent_files: Mapping[str, Blob],
    fixed_files: Mapping[str, Blob],
    oracle_files: Mapping[str, Blob],
    test_files: Sequence[str],
    tests_dir: str,
    scratch: Path,
    declared_f2p: Sequence[str] | None = None,
    declared_p2p: Sequence[str] | None = None,
    python: str | None = None,
) -> Checked:
    """Run the fix's tests at the fix and at the parent, and the visible suite at the parent and the oracle.

    Refuses (NotQualified, one line) tests that cannot run offline here, tests that do not fail
    at the parent, a fix that does not make them pass, and a visible suite that does not pass.
    """
    _TIMES.clear()
    hidden = {p: fixed_files[p] for p in test_files}
    at_fix = _run("at-fix", fixed_files, test_files, scratch, python)
    if at_fix.collect_errors or at_fix.exit_code not in (0, 1) or not at_fix.outcomes:
        why = (at_fix.collect_errors or [f"pytest exited {at_fix.exit_code} with no test run"])[0]
        raise NotQualified(f"{label}: the fix's tests cannot be run offline in the task's environment ({why[:160]})")
    at_parent = _run("at-parent", {**parent_files, **hidden}, test_files, scratch, python)
    passed_at_fix = {n for n in at_fix.outcomes if at_fix.passed(n)}
    failing_at_parent = {n for n in at_fix.outcomes if not at_parent.passed(n)}
    if declared_f2p is not None:
        missing = [n for n in declared_f2p if n not in at_fix.outcomes]
        if missing:
            raise NotQualified(f"{label}: FAIL_TO_PASS names {missing[0]}, which the fix's tests do not hold")
        not_failing = [n for n in declared_f2p if n not in failing_at_parent]
        if not_failing:
            raise NotQualified(f"{label}: {not_failing[0]} does not fail at the parent; it cannot be held out")
        not_passing = [n for n in declared_f2p if n not in passed_at_fix]
        if not_passing:
            raise NotQualified(f"{label}: the fix does not make {not_passing[0]} pass")
        f2p = sorted(declared_f2p)
    else:
        if not failing_at_parent:
            raise NotQualified(f"{label}: none of the tests the fix adds or changes fails at its parent")
        f2p = sorted(failing_at_parent & passed_at_fix)
        if not f2p:
            raise NotQualified(f"{label}: the fix does not make its tests pass ({_first(failing_at_parent)} fails)")
    visible = _run("visible-at-parent", parent_files, [tests_dir], scratch, python)
    if visible.collect_errors or visible.exit_code not in (0, 1):
        why = (visible.collect_errors or [f"pytest exited {visible.exit_code}"])[0]
        raise NotQualified(f"{label}: the visible tests cannot be run offline at the parent ({why[:160]})")
    p2p_all = {n for n in visible.outcomes if visible.passed(n)}
    # a test the fix changed is held out in its new version; its old one stays visible, but is not counted twice
    p2p = sorted((p2p_all - set(f2p)) if declared_p2p is None else set(declared_p2p))
    wanted_failing = [n for n in p2p if n not in p2p_all]
    if declared_p2p is not None and wanted_failing:
        raise NotQualified(f"{label}: PASS_TO_PASS names {wanted_failing[0]}, which does not pass at the parent")
    if visible.failing():
        raise NotQualified(
            f"{label}: the visible suite does not pass at the parent ({len(visible.failing())} failing, "
            f"first {visible.failing()[0]}); a task's visible suite must pass before and after the fix"
        )
    if not p2p:
        raise NotQualified(f"{label}: the visible suite at the parent holds no passing test")
    at_oracle = _run("visible-at-oracle", oracle_files, [tests_dir], scratch, python)
    broken = [n for n in p2p if not at_oracle.passed(n)]
    if broken:
        raise NotQualified(f"{label}: the fix's source change breaks the visible test {broken[0]}")
    return Checked(tuple(f2p), tuple(p2p), tuple(_TIMES))


# ----------------------------------------------------------------------------- the environment


DECLARED_SETUP = ("pyproject.toml", "setup.py", "setup.cfg", "tox.ini", ".pytest.ini", "pytest.ini")


def environment_record(parent_files: Mapping[str, Blob], environment: TaskEnvironment | None) -> dict[str, Any]:
    """How the task's tests are run, recorded honestly: the interpreter the graders use, the project on its path.

    With ``environment`` (the project declares dependencies: ``task_env``), the task's own venv,
    made once now: its id, requirements, what it holds and its content hash. Without one, the
    agent environment's pytest (under the sandbox; the harness's own interpreter when
    uncontained) and ``installed: []``. Either way the project's own folder is first on the path
    and its declared setup files are recorded by hash. The record's ``sha256`` goes into every
    held-out test, so into the taskset's hash.
    """
    containment = active_containment()
    python = containment.python() if environment is None else environment.python
    probe = "import sys, pytest; print(sys.version.split()[0], pytest.__version__)"
    try:
        done = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=False)
        versions = done.stdout.split() if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        versions = []
    declared = {
        path: hashlib.sha256(blob.data).hexdigest()
        for path, blob in sorted(parent_files.items())
        if path in DECLARED_SETUP or PurePosixPath(path).name.startswith("requirements")
    }
    if environment is None:
        kind = "agent-environment" if containment.contained else "harness-interpreter"
        own: dict[str, Any] = {"installed": []}
    else:
        kind = "task-environment"
        own = {
            "id": environment.id,
            "requirements": list(environment.requirements),
            "installed": list(environment.installed),
            "content_sha256": environment.sha256,
            "installed_from": environment.source,
        }
    record: dict[str, Any] = {
        "kind": kind,
        **own,
        "python": versions[0] if len(versions) == 2 else platform.python_version(),
        "pytest": versions[1] if len(versions) == 2 else "unknown",
        "project_on_path": True,
        "declared_setup": declared,
        "pytest_config": "certlab's own, empty (the project's pytest options and plugins are not read)",
        "checked_under": containment.name,
        "network": "none (the sandbox has no network)" if containment.contained else "not cut (built uncontained)",
    }
    record["sha256"] = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    return record


# ----------------------------------------------------------------------------- writing the task


@frozen
class Built:
    out: Path
    name: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    runs: tuple[tuple[str, float], ...]


def task_name_for(label: str) -> str:
    import re

    slug = re.sub(r"[^a-z0-9._-]+", "-", label.lower()).strip("-._")
    return slug[:63] or "task"


def _modules(files: Mapping[str, Blob], tests_dir: str) -> list[str]:
    tops: set[str] = set()
    for path in files:
        parts = PurePosixPath(path).parts
        if parts[0] == tests_dir or parts[0].startswith("."):
            continue
        if len(parts) == 1 and path.endswith(".py") and PurePosixPath(path).stem not in NOT_MODULES:
            tops.add(PurePosixPath(path).stem)
        elif len(parts) > 1 and f"{parts[0]}/__init__.py" in files:
            tops.add(parts[0])
    return sorted(tops)


def check_writable(out: Path) -> None:
    """Refuse an ``--out`` whose nearest existing folder this user cannot write in (a file on its path, read-only)."""
    nearest = next(folder for folder in (out.absolute(), *out.absolute().parents) if folder.exists())
    if not nearest.is_dir() or not os.access(nearest, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: {nearest} is no folder this user can write in; choose one you can write")


def build_task(
    label: str,
    parent_files: Mapping[str, Blob],
    fixed_files: Mapping[str, Blob],
    changes: Mapping[str, str],
    statement: str,
    out: Path,
    source: Mapping[str, Any],
    declared_f2p: Sequence[str] | None = None,
    declared_p2p: Sequence[str] | None = None,
    name: str | None = None,
) -> Built:
    """Check the fix and write the task into ``out`` (a new or empty folder); NotQualified when it does not qualify."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} already exists and is not an empty folder; choose a new one")
    check_writable(out)  # before the fix's tests run, not after
    test_changes = sorted(p for p in changes if is_test_path(p))
    source_changes = sorted(p for p in changes if not is_test_path(p))
    if not test_changes:
        raise NotQualified(f"{label}: the fix changes no test, so there is nothing to hold out")
    if not source_changes:
        raise NotQualified(f"{label}: the fix changes only tests, so there is no defect at its parent")
    tests_dir = tests_folder(test_changes, label)
    test_files = [p for p in test_changes if changes[p] != "D" and p.endswith(".py")]
    runnable = [p for p in test_files if PurePosixPath(p).name != "conftest.py"]
    if not runnable:
        raise NotQualified(f"{label}: the fix adds or changes no test module (only deletions or conftest.py)")
    if any(p.split("/")[0] == tests_dir for p in source_changes):
        raise NotQualified(f"{label}: the fix changes a non-test file inside the tests folder {tests_dir}/")
    oracle_files = dict(parent_files)
    for path in source_changes:
        if path in fixed_files:
            oracle_files[path] = fixed_files[path]
        else:
            oracle_files.pop(path, None)
    requirements = declared_requirements({p: b.data for p, b in parent_files.items()}, label)
    task_environment = make_environment(requirements, label) if requirements else None
    made = trees.make_temp_folder("certlab-from-commit-")
    try:
        checked = check_fix(
            label, parent_files, fixed_files, oracle_files, runnable, tests_dir, made.as_path, declared_f2p,
            declared_p2p, None if task_environment is None else task_environment.python,
        )  # fmt: skip
    finally:
        trees.remove_made(made)
    environment = environment_record(parent_files, task_environment)
    hidden_files = {p: fixed_files[p].data.decode("utf-8", "replace") for p in test_files}
    tests = [
        HiddenTest(id=node, test=node, files=hidden_files, environment=environment["sha256"])
        for node in checked.fail_to_pass
    ]
    modules = _modules(parent_files, tests_dir)
    allowed = sorted({*source_changes, *(f"{m}.py" if f"{m}.py" in parent_files else f"{m}/*" for m in modules)})
    task_name = name or task_name_for(label)
    fixture = {p: b for p, b in parent_files.items() if p.split("/")[0] != tests_dir}
    visible = {p[len(tests_dir) + 1 :]: b for p, b in parent_files.items() if p.split("/")[0] == tests_dir}
    oracle_fixture = {p: b for p, b in oracle_files.items() if p.split("/")[0] != tests_dir}
    patch = "".join(
        _diff_text(
            parent_files[p].data if p in parent_files else None, fixed_files[p].data if p in fixed_files else None, p
        )
        for p in source_changes
    )
    try:  # a folder it cannot write (read-only, a file on its path) is one line, not an unforeseen OSError
        out.mkdir(parents=True, exist_ok=True)
        write_files(fixture, out / "fixture")
        write_files(visible, out / "tests")
        write_files(oracle_fixture, out / "oracle")
        (out / "cases").mkdir()
        (out / "cases" / "acceptance.jsonl").write_text(cases_text(tests), encoding="utf-8")
        (out / "cases" / "oracle.patch").write_text(patch, encoding="utf-8")
        record = {
            "schema": SOURCE_SCHEMA,
            **source,
            "FAIL_TO_PASS": list(checked.fail_to_pass),
            "PASS_TO_PASS": list(checked.pass_to_pass),
            "held_out_files": sorted(hidden_files),
            "source_changes": source_changes,
            "environment": environment,
        }
        (out / "cases" / "source.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", "utf-8")
        shown_allowed = ", ".join(f"`{p}`" for p in allowed)
        (out / "PROMPT.md").write_text(
            PROMPT_TEMPLATE.format(statement=statement.strip() + "\n", tests=tests_dir, allowed=shown_allowed), "utf-8"
        )
        config = {
            "task": {
                "name": task_name,
                "version": "1",
                "description": f"the fix of {label}"[:200],
                "fixture": "fixture",
                "tests": "tests",
                "prompt": "PROMPT.md",
                "cases": "cases/acceptance.jsonl",
                "allowed_paths": allowed,
                "modules": modules or None,
                "defect_class": "real-bug",
                "oracle": "oracle",
                "environment": None if task_environment is None else task_environment.id,
            }
        }
        if task_environment is None:
            del config["task"]["environment"]
        if not modules:
            del config["task"]["modules"]
        import yaml

        header = (
            f"# A task built by certlab from {label}; its held-out tests are cases/acceptance.jsonl (lock them:\n"
            f"#   certlab lock {out.name}), the oracle's answer cases/oracle.patch, fixed tree oracle/.\n"
        )
        (out / TASK_FILE).write_text(header + yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        raise UsageError(
            f"--out {out}: cannot write the task{where}: {error.strerror}; choose a folder you can write"
        ) from None
    environment_runs = () if task_environment is None else (("environment", task_environment.seconds),)
    return Built(out, task_name, checked.fail_to_pass, checked.pass_to_pass, (*environment_runs, *checked.runs))


def from_commit(repo: Path, rev: str, out: Path, statement: str | None = None) -> Built:
    """The task of one bug-fix commit of a local repository, written into ``out``."""
    repo = open_repository(repo)
    commit = resolve_commit(repo, rev)
    parent = parent_of(repo, commit)
    label = f"commit {commit[:12]}"
    changes = changed_paths(repo, parent, commit)
    message = git(repo, "log", "-1", "--format=%B", commit).decode("utf-8", "replace").strip()
    text = statement if statement is not None else message
    built = build_task(
        label,
        read_tree(repo, parent),
        read_tree(repo, commit),
        changes,
        text,
        out,
        {"kind": "commit", "repository": repository_name(repo), "commit": commit, "parent": parent},
        name=f"commit-{commit[:12]}",
    )
    return built


# ----------------------------------------------------------------------------- SWE-bench instances


SWEBENCH_KEYS = ("instance_id", "repo", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
MAX_JSONL_BYTES = 64 << 20


def _node_list(value: object, key: str, where: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise UsageError(f"{where}: {key} is neither a list nor a JSON-encoded list of test ids") from None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UsageError(f"{where}: {key} must be a list of pytest node ids")
    return list(value)


def read_instances(path: Path) -> list[dict[str, Any]]:
    """The SWE-bench-format instances of a JSONL file, each checked for the keys a task needs."""
    from certlab_core.sdk import safe_io

    text = safe_io.read_capped_text(path, "SWE-bench instances", UsageError, f"{path}: no such file")
    instances: list[dict[str, Any]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        data = json_object_line(raw, where, "each line must be one SWE-bench instance as a JSON object")
        missing = [k for k in SWEBENCH_KEYS if k not in data]
        if missing:
            raise UsageError(f"{where}: no {missing[0]!r}; a SWE-bench instance has {', '.join(SWEBENCH_KEYS)}")
        for key in ("instance_id", "repo", "base_commit", "patch", "test_patch"):
            if not isinstance(data[key], str) or not data[key]:
                raise UsageError(f"{where}: {key} must be a non-empty text")
        data["FAIL_TO_PASS"] = _node_list(data["FAIL_TO_PASS"], "FAIL_TO_PASS", where)
        data["PASS_TO_PASS"] = _node_list(data["PASS_TO_PASS"], "PASS_TO_PASS", where)
        if not data["FAIL_TO_PASS"]:
            raise UsageError(f"{where}: FAIL_TO_PASS is empty; an instance needs a test that its patch makes pass")
        data["_where"] = where
        instances.append(data)
    if not instances:
        raise UsageError(f"{path}: no instance in the file")
    return instances


def apply_patch(files: Mapping[str, Blob], patch: str, scratch: Path, what: str) -> dict[str, Blob]:
    """``files`` with a unified diff applied by ``git apply`` in a folder of its own (paths checked by git)."""
    folder = scratch / what
    write_files(files, folder)
    subprocess.run(["git", "init", "-q", str(folder)], check=True, capture_output=True, timeout=GIT_TIMEOUT_S)
    try:
        git(folder, "apply", "--whitespace=nowarn", "-", stdin=patch.encode("utf-8"))
    except UsageError as error:
        raise NotQualified(f"the {what} does not apply to the base commit ({error.message.split('(', 1)[-1]}") from None
    shutil.rmtree(folder / ".git")
    result: dict[str, Blob] = {}
    for entry in trees.walk(folder):
        if entry.kind == "file":
            mode = "100755" if os.access(entry.path, os.X_OK) else "100644"
            result[entry.relpath] = Blob(mode, entry.path.read_bytes())
        elif entry.kind == "symlink":
            result[entry.relpath] = Blob("120000", os.readlink(entry.path).encode("utf-8", "surrogateescape"))
    return result


def _patch_paths(patch: str) -> dict[str, str]:
    """{path: A, M or D} named by a unified diff's ``---``/``+++`` lines."""
    found: dict[str, str] = {}
    old: str | None = None
    for line in patch.splitlines():
        if line.startswith("--- "):
            old = line[4:].split("\t")[0]
        elif line.startswith("+++ ") and old is not None:
            new = line[4:].split("\t")[0]
            if new == "/dev/null":
                found[old.removeprefix("a/")] = "D"
            elif old == "/dev/null":
                found[new.removeprefix("b/")] = "A"
            else:
                found[new.removeprefix("b/")] = "M"
            old = None
    return found


def from_instance(instance: Mapping[str, Any], repos: Path, out: Path) -> Built:
    """One SWE-bench-format instance as a task: its repository's clone in ``repos`` (owner__name, or name)."""
    where = str(instance.get("_where", instance["instance_id"]))
    owner_name = str(instance["repo"])
    candidates = [repos / owner_name.replace("/", "__"), repos / owner_name.split("/")[-1], repos / owner_name]
    repo = next((c for c in candidates if c.is_dir() and ".." not in owner_name.split("/")), None)
    if repo is None:
        raise UsageError(f"{where}: no clone of {owner_name} in {repos} (looked for {candidates[0].name}, "
                         f"{candidates[1].name})")  # fmt: skip
    repo = open_repository(repo)
    base = resolve_commit(repo, str(instance["base_commit"]))
    label = f"instance {instance['instance_id']}"
    parent_files = read_tree(repo, base)
    made = trees.make_temp_folder("certlab-swebench-")
    try:
        fixed = apply_patch(parent_files, str(instance["patch"]), made.as_path, "patch")
        fixed = apply_patch(fixed, str(instance["test_patch"]), made.as_path, "test_patch")
    finally:
        trees.remove_made(made)
    changes = {**_patch_paths(str(instance["patch"])), **_patch_paths(str(instance["test_patch"]))}
    test_side = set(_patch_paths(str(instance["test_patch"])))
    source_side = set(_patch_paths(str(instance["patch"])))
    if any(is_test_path(p) for p in source_side) or not all(is_test_path(p) for p in test_side):
        raise NotQualified(
            f"{label}: its patch and test_patch do not split into source and tests as certlab reads paths"
        )
    statement = str(instance.get("problem_statement") or f"Fix the problem of {instance['instance_id']}.")
    return build_task(
        label,
        parent_files,
        fixed,
        changes,
        statement,
        out,
        {
            "kind": "swebench",
            "instance_id": instance["instance_id"],
            "repo": owner_name,
            "repository": owner_name,
            "base_commit": base,
        },
        declared_f2p=instance["FAIL_TO_PASS"],
        declared_p2p=instance["PASS_TO_PASS"] or None,
        name=task_name_for(str(instance["instance_id"])),
    )


# ----------------------------------------------------------------------------- many commits


def candidate_commits(repo: Path, since: str) -> list[str]:
    """The non-merge commits after ``since`` up to HEAD, oldest first, that change both a test and a source file."""
    base = resolve_commit(repo, since)
    listed = git(repo, "rev-list", "--reverse", "--no-merges", f"{base}..HEAD").decode().split()
    found: list[str] = []
    for commit in listed:
        words = git(repo, "rev-list", "--parents", "-n", "1", commit).decode().split()
        if len(words) != 2:
            continue
        changes = changed_paths(repo, words[1], commit)
        if any(is_test_path(p) for p in changes) and any(not is_test_path(p) for p in changes):
            found.append(commit)
    return found


def from_commits(
    repo: Path, since: str, out: Path, say: Callable[[str], None]
) -> tuple[list[Built], list[tuple[str, str]]]:
    """Every commit after ``since`` that qualifies, built into ``out/commit-<sha12>`` (each said as it is built);
    the rejected ones, with why, oldest first."""
    repo = open_repository(repo)
    check_writable(out)
    built: list[Built] = []
    rejected: list[tuple[str, str]] = []
    listed = git(repo, "rev-list", "--reverse", "--no-merges", f"{resolve_commit(repo, since)}..HEAD").decode().split()
    candidates = set(candidate_commits(repo, since))
    for commit in listed:
        if commit not in candidates:
            rejected.append((commit, "it does not change both a test and a source file"))
            continue
        try:
            task = from_commit(repo, commit, out / f"commit-{commit[:12]}")
        except NotQualified as refusal:
            rejected.append((commit, refusal.message))
            continue  # nothing was written: a task's folder is made only once its checks held
        built.append(task)
        say(f"built {task.out}: {len(task.fail_to_pass)} held-out, {len(task.pass_to_pass)} visible tests")
    return built, rejected
