"""``certlab lock``: every layout that leaks the held-out cases is refused; fingerprints name what moved."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from certlab_acceptance.fingerprints import check_unmoved, fingerprint, movements
from certlab_acceptance.lock import (
    LockRefused,
    lock_path,
    lock_refusals,
    open_lock,
    read_lock,
    read_task_cases,
    take_lock,
    write_lock,
)
from certlab_acceptance.scaffold import scaffold
from certlab_acceptance.user_task import load_user_task

from certlab_core._runtime.registry import Registry, discover
from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.plugin.types.grader import AcceptanceLock
from certlab_core.testing import run_certlab


def certlab(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, with the time locking a task takes (it runs the task's tests)."""
    return run_certlab(*args, timeout=900)


def scaffold_task(folder: Path) -> Path:
    """A fresh scaffolded task (``certlab init-task``), written by the library call the CLI uses."""
    scaffold(folder)
    return folder


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single ``certlab: error:`` line of a failed command (asserting there is one and no traceback)."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("certlab: error: ")]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return errors[0]


@pytest.fixture(scope="module")
def registry() -> Registry:
    return discover()


def refusals(folder: Path) -> list[str]:
    task = load_user_task(folder)
    return lock_refusals(task, read_task_cases(task))


def set_task_keys(folder: Path, **keys: str) -> None:
    lines = (folder / "certlab.yaml").read_text().splitlines()
    kept = [line for line in lines if not any(line.strip().startswith(f"{key}:") for key in keys)]
    kept += [f"  {key}: {value}" for key, value in keys.items()]
    (folder / "certlab.yaml").write_text("\n".join(kept) + "\n")


def test_the_scaffold_locks_and_nothing_has_moved(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    done = certlab("lock", str(task))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("locked: 7 held-out cases")
    assert "kernel" in done.stdout and "scorer" in done.stdout and "predictions 1" in done.stdout
    lock = read_json(lock_path(task))
    assert lock["schema"] == "certlab.lock/1" and lock["cases"]["count"] == 7
    assert lock["cases"]["copy"] == (task / "cases" / "acceptance.jsonl").read_text()
    assert any(label.startswith("kernel:certlab_core/") for label in lock["fingerprints"])
    assert any(label.startswith("scorer:acceptance/") for label in lock["fingerprints"])
    check = certlab("lock", str(task), "--check")
    assert check.returncode == 0 and "nothing moved" in check.stdout
    again = certlab("lock", str(task))
    assert again.returncode == 4 and "already locked" in one_line_error(again)
    assert certlab("lock", str(task), "--again").returncode == 0


def test_cases_inside_the_fixture_or_the_tests_are_refused(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    shutil.move(task / "cases" / "acceptance.jsonl", task / "fixture" / "acceptance.jsonl")
    set_task_keys(task, cases="fixture/acceptance.jsonl")
    problems = refusals(task)
    assert any("are inside the fixture (fixture)" in p for p in problems), problems
    shutil.move(task / "fixture" / "acceptance.jsonl", task / "tests" / "acceptance.jsonl")
    set_task_keys(task, cases="tests/acceptance.jsonl")
    assert any("are inside the visible tests (tests)" in p for p in refusals(task))


def test_the_fixture_inside_the_cases_folder_is_refused(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    shutil.move(task / "cases" / "acceptance.jsonl", task / "acceptance.jsonl")
    set_task_keys(task, cases="acceptance.jsonl")
    problems = refusals(task)
    assert any("the fixture (fixture) is inside the cases' folder (.)" in p for p in problems), problems
    done = certlab("lock", str(task))
    assert done.returncode == 4
    assert "lock refused" in one_line_error(done)
    assert "refused: the fixture (fixture) is inside the cases' folder" in done.stderr


@pytest.mark.parametrize("how", ["symlink", "hard link", "copy", "symlinked folder"])
def test_a_link_or_copy_of_a_case_file_in_the_fixture_is_refused(tmp_path: Path, how: str) -> None:
    task = scaffold_task(tmp_path / "task")
    cases = task / "cases" / "acceptance.jsonl"
    planted = task / "fixture" / "data" / "reference.txt"
    planted.parent.mkdir()
    if how == "symlink":
        planted.symlink_to(cases)
        says = "fixture/data/reference.txt is a symlink to the held-out cases"
    elif how == "hard link":
        os.link(cases, planted)
        says = "fixture/data/reference.txt is a hard link of the held-out cases"
    elif how == "copy":
        shutil.copy(cases, planted)
        says = "fixture/data/reference.txt is a copy of the held-out cases"
    else:
        (task / "fixture" / "data" / "all").symlink_to(task / "cases", target_is_directory=True)
        says = "fixture/data/all is a symlink to the held-out cases"
    problems = refusals(task)
    assert any(says in p for p in problems), problems
    with pytest.raises(LockRefused):
        write_lock(load_user_task(task), discover())
    assert not lock_path(task).exists()


def test_a_copy_in_the_tests_is_refused_too(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    shutil.copy(task / "cases" / "acceptance.jsonl", task / "tests" / "cases.jsonl")
    assert any("tests/cases.jsonl is a copy of the held-out cases" in p for p in refusals(task))


VISIBLE_LEAKS = {
    "a literal call": 'def test_body():\n    assert parse_reading("98.6F") == 37.0\n',
    "a call inside an expression": "def test_oven():\n    assert round(fahrenheit_to_celsius(356)) == 180\n",
    "a module constant": 'READING = "-40F"\n\ndef test_cold():\n    assert parse_reading(READING) == -40.0\n',
    "a local constant": 'def test_spaces():\n    text = "  68F "\n    assert parse_reading(text) == 20.0\n',
    "a parametrize row": (
        "import pytest\n\n@pytest.mark.parametrize('text, celsius', [('1C', 1.0), ('-3c', -3.0)])\n"
        "def test_rows(text, celsius):\n    assert parse_reading(text) == celsius\n"
    ),
    "an attribute call": 'import temperature\n\ndef test_unit_only():\n    temperature.parse_reading("F")\n',
}


@pytest.mark.parametrize("how", sorted(VISIBLE_LEAKS))
def test_a_held_out_input_called_in_the_visible_tests_is_refused(tmp_path: Path, how: str) -> None:
    task = scaffold_task(tmp_path / "task")
    test_file = task / "tests" / "test_more.py"
    test_file.write_text("from temperature import fahrenheit_to_celsius, parse_reading\n\n" + VISIBLE_LEAKS[how])
    problems = refusals(task)
    leaks = [p for p in problems if "is also called in the visible tests" in p]
    assert len(leaks) == 1, problems
    assert "tests/test_more.py:" in leaks[0] and "cases/acceptance.jsonl:" in leaks[0]


def test_inputs_that_differ_or_are_not_literal_are_not_refused(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    (task / "tests" / "test_more.py").write_text(
        "from temperature import parse_reading\n\n"
        'def test_near_misses(tmp_path):\n    parse_reading("98.6 F")\n    parse_reading(str(tmp_path))\n'
        '    parse_reading("98.6F", strict=True)\n'
    )
    assert refusals(task) == []


def test_a_fixture_file_holding_most_answers_is_refused(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    table = {"98.6F": 37.0, "-40F": -40.0, "-3c": -3.0, "  68F ": 20.0, 356: 180.0}
    (task / "fixture" / "answers.py").write_text(f"KNOWN = {table!r}\n")
    problems = refusals(task)
    assert any("fixture/answers.py holds 5 of the 7 held-out answers" in p for p in problems), problems


def test_fingerprints_name_each_file_that_moved(tmp_path: Path, registry: Registry) -> None:
    kernel_copy = tmp_path / "kernel"
    kernel_copy.mkdir()
    (kernel_copy / "lab.py").write_text("x = 1\n")
    cases = tmp_path / "acceptance.jsonl"
    cases.write_text('{"id": "a", "call": "m:f", "expect": 1}\n')
    sources = {"cases": str(cases), "kernel:certlab_core": str(kernel_copy)}
    locked = fingerprint(sources)
    (kernel_copy / "lab.py").write_text("x = 2\n")
    (kernel_copy / "new.py").write_text("")
    cases.unlink()
    assert movements(locked, fingerprint(sources)) == [
        "the held-out cases file disappeared",
        "the kernel's file certlab_core/lab.py changed",
        "the kernel's file certlab_core/new.py appeared",
    ]
    copy = tmp_path / "copy.jsonl"
    copy.write_text("x")
    lock = AcceptanceLock(
        cases_file=str(copy), cases_sha256="0" * 64, fingerprints=locked, sources=sources, experiment_dir=""
    )
    with pytest.raises(InstrumentError, match=r"^before scoring: moved since the lock: the copy of the held-out"):
        check_unmoved(lock, "before scoring")


def test_a_moved_case_file_or_an_edited_lock_refuses_the_run(tmp_path: Path, registry: Registry) -> None:
    task_dir = scaffold_task(tmp_path / "task")
    task = load_user_task(task_dir)
    write_lock(task, registry)
    assert open_lock(task, registry, tmp_path / "scratch") is not None
    cases = task_dir / "cases" / "acceptance.jsonl"
    cases.write_text(cases.read_text().replace('"expect": 180.0', '"expect": 181.0'))
    with pytest.raises(
        InstrumentError, match="opening the lock: moved since the lock: the held-out cases file changed"
    ):
        open_lock(task, registry, tmp_path / "scratch2")
    check = certlab("lock", str(task_dir), "--check")
    assert check.returncode == 3
    assert "moved: the held-out cases file changed" in check.stdout
    document = read_json(lock_path(task_dir))
    document["cases"]["copy"] = document["cases"]["copy"].replace("37.0", "38.0")
    lock_path(task_dir).write_text(json.dumps(document))
    with pytest.raises(InstrumentError, match="the lock was edited after it was sealed"):
        read_lock(task_dir)


def test_the_score_is_computed_from_the_copy_taken_at_lock_time(tmp_path: Path, registry: Registry) -> None:
    task_dir = scaffold_task(tmp_path / "task")
    cases = task_dir / "cases" / "acceptance.jsonl"
    lock = take_lock(cases, registry, tmp_path / "scratch", task_dir)
    assert Path(lock.cases_file).read_bytes() == cases.read_bytes()
    assert not Path(lock.cases_file).is_relative_to(task_dir)
    assert "kernel:certlab_core" not in lock.sources  # a run's own lock: cases and scorer
    assert any(source.startswith("scorer:") for source in lock.sources)


def test_bad_task_settings_are_one_line(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    (task / "certlab.yaml").write_text("task:\n  name: x\n  colour: blue\n")
    with pytest.raises(UsageError, match=r"certlab.yaml: task: unknown key\(s\) colour; the keys are"):
        load_user_task(task)
    (task / "certlab.yaml").write_text("task: [1, 2\n")
    done = certlab("lock", str(task))
    assert done.returncode == 4 and "not valid YAML" in one_line_error(done)
    (task / "certlab.yaml").write_text("task:\n  fixture: ../elsewhere\n")
    with pytest.raises(UsageError, match="must be a path inside the experiment directory"):
        load_user_task(task)
    (task / "certlab.yaml").write_text("task:\n  tests: missing\n")
    with pytest.raises(UsageError, match=r"task.tests: .*missing is not a folder"):
        load_user_task(task)


def test_a_tuple_in_the_tests_equals_a_list_in_the_cases() -> None:
    from certlab_acceptance.cases import parse_cases
    from certlab_acceptance.visible_calls import leaked_inputs, literal_calls

    cases = parse_cases('{"id": "neg", "call": "intervals:length", "args": [[-4, 6]], "expect": 10}\n', "c.jsonl")
    calls = literal_calls("from intervals import length\n\ndef test_it():\n    assert length((-4, 6)) == 10\n", "t.py")
    assert len(leaked_inputs(cases, calls, "c.jsonl")) == 1
    other = literal_calls("def test_it():\n    assert length((-4, 7)) == 11\n", "t.py")
    assert leaked_inputs(cases, other, "c.jsonl") == []
