"""The user-task source, and another installed source's task locked and scored like a user task."""

from __future__ import annotations

import hashlib
import shutil
import types
from pathlib import Path

import attrs
import pytest
from certlab_acceptance.lock import LockRefused
from certlab_acceptance.scaffold import scaffold
from certlab_acceptance.user_task import GATE_TASK_KEYS

from certlab_core._runtime.registry import discover
from certlab_core.certify.acceptance import open_held_out, recognising_source
from certlab_core.gate.descriptor import Task
from certlab_core.plugin import Defect, TaskFamily, TaskSource, hookimpl
from certlab_core.testing import run_certlab

CASES = '{"id": "neg", "call": "sign:sign", "args": [-2], "expect": -1}\n'


def folder_task(root: Path) -> Path:
    """A folder another source reads: ``tree/`` (the code and its tests), ``TASK.md``, ``acceptance.jsonl``."""
    (root / "tree" / "tests").mkdir(parents=True)
    (root / "tree" / "sign.py").write_text("def sign(x):\n    return (x < 0) - (x > 0)\n", encoding="utf-8")
    (root / "tree" / "tests" / "test_sign.py").write_text(
        "from sign import sign\n\ndef test_sign():\n    assert sign(3) == 1\n", encoding="utf-8"
    )
    (root / "TASK.md").write_text("Fix sign.py.\n", encoding="utf-8")
    (root / "acceptance.jsonl").write_text(CASES, encoding="utf-8")
    return root


def folder_source_module(cases_in_tree: bool = False) -> types.ModuleType:
    """A source of ``folder_task`` folders; ``cases_in_tree``: one that stages the cases inside the issued tree."""

    def recognises(directory: Path, /) -> bool:
        return (directory / "tree").is_dir() and (directory / "TASK.md").is_file()

    def stage(directory: Path, dest: Path, /) -> TaskFamily:
        shutil.copytree(directory / "tree", dest / "tree")
        return TaskFamily(
            name="sign-folder",
            version="0",
            description="a folder task",
            tree_dir=str(dest / "tree"),
            prompt_file=str(directory / "TASK.md"),
            cases_file=str((dest / "tree" if cases_in_tree else directory) / "acceptance.jsonl"),
            allowed_paths=["sign.py"],
            test_paths=["tests"],
            module_names=["sign"],
            clean_tree=False,
            defects=[Defect(id="as-issued", defect_class="user-task", description="as issued", seeds=[])],
        )

    @hookimpl
    def certlab_task_sources() -> list[TaskSource]:
        return [TaskSource(name="folder", description="tree/ and TASK.md", recognises=recognises, stage=stage)]

    module = types.ModuleType("folder_source")
    module.certlab_task_sources = certlab_task_sources  # type: ignore[attr-defined]
    return module


def test_the_user_task_source_recognises_a_scaffolded_task_and_no_other_folder(tmp_path: Path) -> None:
    registry = discover()
    scaffold(tmp_path / "task")
    (tmp_path / "empty").mkdir()
    source = recognising_source(registry, tmp_path / "task")
    assert source is not None and source.name == "user-task"
    assert recognising_source(registry, tmp_path / "empty") is None
    family = source.stage(tmp_path / "task", tmp_path / "staged")
    assert family.name == "task" and Path(family.tree_dir, "tests").is_dir() and not family.clean_tree


def test_the_gate_task_keys_this_source_lets_by_are_the_descriptors() -> None:
    # They were copied once, and task.twins came later: every descriptor with it was read as a broken user task.
    assert set(GATE_TASK_KEYS) == {field.name for field in attrs.fields(Task)}


def test_an_experiments_own_certlab_yaml_is_no_user_task_and_runs(tmp_path: Path) -> None:
    # The gate's descriptor is certlab.yaml too (certlab init writes it): its task: mapping (world, input, twins)
    # is no user task's, and reading the folder as one refused every run of it in one misleading line.
    example = Path(__file__).resolve().parents[3] / "examples" / "retry" / "a_vs_b.yaml"
    (tmp_path / "ab").mkdir()
    descriptor = tmp_path / "ab" / "certlab.yaml"
    descriptor.write_text(example.read_text().replace("n_per_arm: 200", "n_per_arm: 3"), encoding="utf-8")
    registry = discover()
    assert recognising_source(registry, tmp_path / "ab") is None
    done = run_certlab("run", str(descriptor), "--out", str(tmp_path / "runs"), "-q", timeout=120)
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr  # a verdict, whichever
    assert "verdict: " in done.stdout
    # A user task whose task: mapping is wrong is still read as one, so that its loader says what is wrong.
    scaffold(tmp_path / "task")
    config = tmp_path / "task" / "certlab.yaml"
    config.write_text(config.read_text() + "\ntask:\n  fixtrue: fixture\n", encoding="utf-8")
    source = recognising_source(registry, tmp_path / "task")
    assert source is not None and source.name == "user-task"


def test_another_sources_task_is_staged_by_it_and_locked_when_the_certification_starts(tmp_path: Path) -> None:
    registry = discover()
    registry.add_plugin(folder_source_module(), "folder-source", "folder-source", "1")
    directory = folder_task(tmp_path / "folder")
    held_out = open_held_out(registry, [], [str(directory)])
    try:
        (family,) = held_out.families
        assert family.name == "sign-folder"
        assert Path(family.tree_dir).is_relative_to(held_out.scratch)  # staged into the run's scratch, by the source
        lock = held_out.lock_for("sign-folder")
        assert lock is not None and lock.experiment_dir == str(directory)
        assert lock.cases_sha256 == hashlib.sha256(CASES.encode()).hexdigest()
        held_out.check("before the agent arm")  # nothing moved
        (entry,) = held_out.document()["locks"]  # type: ignore[misc]
        assert entry["kind"] == "taken when the certification started (a folder task)"  # type: ignore[index]
        facts = held_out.family_facts(family)
        assert facts is not None and facts["distribution"] == "user task" and "repository" not in facts
    finally:
        held_out.close()
    assert not held_out.scratch.exists()


def test_another_sources_task_whose_visible_tests_call_a_held_out_input_is_refused(tmp_path: Path) -> None:
    registry = discover()
    registry.add_plugin(folder_source_module(), "folder-source", "folder-source", "1")
    directory = folder_task(tmp_path / "folder")
    (directory / "tree" / "tests" / "test_sign.py").write_text(
        "from sign import sign\n\ndef test_sign():\n    assert sign(-2) == -1\n", encoding="utf-8"
    )
    with pytest.raises(LockRefused) as refused:
        open_held_out(registry, [], [str(directory)])
    assert refused.value.problems == (
        "held-out case 'neg' (acceptance.jsonl:1) is also called in the visible tests: tests/test_sign.py:4 calls "
        "sign with the same literal arguments; change the case's input",
        "tests/test_sign.py holds 1 of the 1 held-out answers; it is issued to the agent, so the task is refused",
    )


def test_another_sources_task_with_its_cases_in_the_issued_tree_is_refused(tmp_path: Path) -> None:
    registry = discover()
    registry.add_plugin(folder_source_module(cases_in_tree=True), "folder-source", "folder-source", "1")
    directory = folder_task(tmp_path / "folder")
    (directory / "acceptance.jsonl").rename(directory / "tree" / "acceptance.jsonl")
    with pytest.raises(LockRefused) as refused:
        open_held_out(registry, [], [str(directory)])
    assert refused.value.problems == (
        "the folder source put the held-out cases (acceptance.jsonl) inside the issued tree; it must not",
    )
