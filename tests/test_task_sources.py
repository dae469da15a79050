"""The kernel finds a user's own task through a task source, and the held-out grader by its role.

The kernel reads no experiment directory itself: certify's ``--task DIR`` is refused in one
line when no installed source recognises the folder, or when none is installed. The grader of
the held-out cases is the one whose record declares ``role="held_out"``, whatever its name.
"""

from __future__ import annotations

import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from certlab_core._runtime.registry import Registry, new_plugin_manager
from certlab_core.plugin import Defect, Grader, GradeResult, TaskFamily, TaskSource, UsageError, hookimpl
from certlab_core.plugin.errors import EXIT_USAGE
from certlab_core.plugin.types.grader import GRADER_ROLES, HELD_OUT_ROLE

MARKER = "FOLDER_TASK"


def folder_source_module() -> types.ModuleType:
    """A plugin with one task source, which recognises only a folder holding ``FOLDER_TASK``."""

    def recognises(directory: Path, /) -> bool:
        return (directory / MARKER).is_file()

    def stage(directory: Path, dest: Path, /) -> TaskFamily:
        raise AssertionError("not staged in these tests")

    @hookimpl
    def certlab_task_sources() -> list[TaskSource]:
        return [TaskSource(name="folder", description="a marked folder", recognises=recognises, stage=stage)]

    module = types.ModuleType("folder_source")
    module.certlab_task_sources = certlab_task_sources  # type: ignore[attr-defined]
    return module


def test_a_task_folder_with_no_source_installed_is_one_line_naming_the_distribution(tmp_path: Path) -> None:
    from certlab_core.certify.acceptance import open_held_out

    registry = Registry(new_plugin_manager())
    with pytest.raises(UsageError) as refused:
        open_held_out(registry, [], [str(tmp_path)])
    message = str(refused.value)
    assert message == (
        f"--task {tmp_path}: no task source is installed to read a task of your own (pip install certlab-acceptance)"
    )


def test_a_task_folder_no_installed_source_recognises_is_one_line_naming_the_sources(tmp_path: Path) -> None:
    from certlab_core.certify.acceptance import open_held_out, recognising_source

    registry = Registry(new_plugin_manager())
    registry.add_plugin(folder_source_module(), "folder-source", "folder-source", "1")
    with pytest.raises(UsageError) as refused:
        open_held_out(registry, [], [str(tmp_path)])
    assert (
        str(refused.value) == f"--task {tmp_path}: no installed task source recognises this folder (installed: folder)"
    )
    (tmp_path / MARKER).write_text("", encoding="utf-8")
    source = recognising_source(registry, tmp_path)
    assert source is not None and source.name == "folder"


def test_a_task_folder_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    from certlab_core.certify.acceptance import task_source_for

    registry = Registry(new_plugin_manager())
    with pytest.raises(UsageError, match=r"^--task x: no such experiment directory$"):
        task_source_for(registry, tmp_path / "missing", "--task x")


def test_certify_refuses_a_folder_no_source_reads_in_one_line_with_the_usage_exit(tmp_path: Path) -> None:
    folder = tmp_path / "not-a-task"
    folder.mkdir()
    (folder / "notes.txt").write_text("nothing a task source reads\n", encoding="utf-8")
    argv = ["certify", "--task", str(folder), "--agent", "null", "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"--task {folder}: no installed task source recognises this folder (installed: user-task)" in lines[0]


# ----------------------------------------------------------------------------- the held-out role


def grader(name: str, role: str | None = None) -> Grader:
    return Grader(
        name=name,
        order=1,
        description="a grader",
        grade=lambda request: GradeResult(grader=name, passed=True),
        role=role,  # type: ignore[arg-type]
    )


def family_with_cases(tmp_path: Path) -> TaskFamily:
    cases = tmp_path / "acceptance.jsonl"
    cases.write_text('{"id": "a", "call": "m:f", "expect": 1}\n', encoding="utf-8")
    return TaskFamily(
        name="toy",
        version="1",
        description="a toy",
        tree_dir=str(tmp_path),
        prompt_file=str(cases),
        cases_file=str(cases),
        allowed_paths=["m.py"],
        test_paths=["tests"],
        module_names=["m"],
        defects=[Defect(id="d", defect_class="c", description="d", seeds=[])],
    )


def test_a_grader_role_outside_the_roles_is_refused_when_the_record_is_made() -> None:
    assert GRADER_ROLES == (HELD_OUT_ROLE,)
    with pytest.raises(ValueError, match=r"Grader.role must be one of held_out; got 'visible'"):
        grader("cases", role="visible")


def test_the_held_out_grader_is_the_one_declaring_the_role_not_the_one_named_acceptance(tmp_path: Path) -> None:
    from certlab_core.certify.certification import held_out_notices
    from certlab_core.certify.twins import visible_passed

    family = family_with_cases(tmp_path)
    named_only = [grader("suite"), grader("acceptance")]
    assert held_out_notices([family], named_only) != []  # a grader's name plays no role
    by_role = [grader("suite"), grader("cases", role=HELD_OUT_ROLE)]
    assert held_out_notices([family], by_role) == []
    failed_held_out = [GradeResult(grader="suite", passed=True), GradeResult(grader="cases", passed=False)]
    assert visible_passed(failed_held_out, by_role)  # the held-out grader is not the visible side
    assert not visible_passed(failed_held_out, [grader("suite"), grader("cases")])


def test_the_mutation_proof_counts_only_the_held_out_graders_kills_apart_and_its_cache_keeps_them(
    tmp_path: Path,
) -> None:
    from certlab_mutation.cache import _document, _proof_of
    from certlab_mutation.engine import Mutant, MutantResult, MutationProof

    mutants = tuple(Mutant(f"m.py:{n}:1:compare", "m.py", n, 1, "compare", n, n + 1, "<", "<=") for n in (1, 2))
    results = (MutantResult(mutants[0].id, "failed", "suite"), MutantResult(mutants[1].id, "failed", "cases"))
    proof = MutationProof("toy", mutants, results, 0.9, held_out_graders=("cases",))
    assert (proof.killed, proof.killed_by_suite) == (2, 1)
    assert [m.id for m in proof.suite_survivors] == [mutants[1].id]
    assert MutationProof("toy", mutants, results, 0.9).killed_by_suite == 2  # no held-out grader: all the suite's
    cached = _proof_of(_document(proof), family_with_cases(tmp_path))
    assert cached is not None and cached.held_out_graders == ("cases",)
    older = {key: value for key, value in _document(proof).items() if key != "held_out_graders"}
    assert _proof_of(older, family_with_cases(tmp_path)) is None  # a cache written before the role is a miss


def test_the_gate_on_a_folder_of_ones_own_task_with_no_source_installed_names_what_to_install(tmp_path: Path) -> None:
    import json
    import os

    from certlab_acceptance.scaffold import scaffold

    task = tmp_path / "thermo"
    scaffold(task)
    descriptor = {
        "schema": "certlab.experiment/1",
        "experiment": "thermo",
        "task": {"family": "thermo"},
        "oracle": "graders",
        "arms": {"baseline": {"adapter": "null"}, "candidate": {"adapter": "null"}},
        "conditions": [{"name": "clean", "bucket": "benign"}],
        "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
        "n_per_arm": 2,
        "seed": 3,
    }
    (task / "certlab.yaml").write_text(json.dumps(descriptor), encoding="utf-8")  # JSON is YAML
    env = dict(os.environ, CERTLAB_PLUGINS="intervals,calibration,policy,suite,clopper-pearson")
    done = subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", "run", "certlab.yaml", "--out", "runs", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=task,
        env=env,
    )
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line == (
        f"certlab: error: {task}: task.family 'thermo' is not installed, and no task source is installed to read "
        "a task of your own there (pip install certlab-acceptance)"
    )
    assert not (task / "runs").exists()


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (RuntimeError("no disk today"), "recognises raised RuntimeError: no disk today"),
        ("yes", "recognises returned str, not a bool"),
        # Before, one that never returned held certify --task, run and regrade for good.
        (None, "recognises did not return within 1 s (CERTLAB_PLUGIN_LOAD_S sets the wait)"),
    ],
)
def test_a_task_source_whose_recognises_raises_hangs_or_answers_no_bool_is_named_in_one_line(
    tmp_path: Path, answer: object, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, the exception was a traceback and a truthy answer ("yes") took every folder as the source's.
    from certlab_core.certify.acceptance import recognising_source
    from certlab_core.plugin.errors import InstrumentError

    monkeypatch.setenv("CERTLAB_PLUGIN_LOAD_S", "1")

    def recognises(directory: Path, /) -> bool:
        if isinstance(answer, Exception):
            raise answer
        while answer is None:
            time.sleep(0.05)
        return answer  # type: ignore[return-value]

    @hookimpl
    def certlab_task_sources() -> list[TaskSource]:
        return [TaskSource(name="odd", description="odd", recognises=recognises, stage=lambda _d, _t, /: None)]  # type: ignore[arg-type,return-value]

    module = types.ModuleType("odd_source")
    module.certlab_task_sources = certlab_task_sources  # type: ignore[attr-defined]
    registry = Registry(new_plugin_manager())
    registry.add_plugin(module, "odd-source", "odd-source", "1")
    with pytest.raises(InstrumentError) as refused:
        recognising_source(registry, tmp_path)
    assert str(refused.value) == f"{tmp_path}: the task source odd's {said}"
