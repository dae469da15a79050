"""What the author API promises a plugin, checked through a real certification of intervals.

An adapter that raises is an infrastructure error (``agent-unavailable``, exit 3) with its
message kept, never a failed fix; a grader names failure modes of its own once it declares
them, and one it does not declare makes the certification refuse, naming the grader; a
certification without the acceptance grader says that the held-out cases went unscored, and
a grader's ``check_changes`` fails a passed trial by its recorded changes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap
import types
from pathlib import Path

import pytest
from conftest import run_certlab

from certlab_core._runtime.registry import Registry, discover
from certlab_core.certify.certification import CertifyOptions, certify
from certlab_core.certify.contract import render_contract
from certlab_core.certify.lab import Task, TrialSpec, run_trial
from certlab_core.gate.family import outcome_of
from certlab_core.plugin import AgentAdapter, TaskFamily
from certlab_core.sdk.grading import grader_chain

BUILT_IN = ("intervals", "calibration", "policy", "suite", "acceptance", "sandbox-none", "executor-local")

RAISING_ADAPTER = """
from certlab_core.plugin import AgentAdapter, hookimpl

def run(request):
    raise FileNotFoundError("fixbot is not on PATH")

@hookimpl
def certlab_agents():
    return [AgentAdapter(name="raiser", description="an adapter whose run raises", run=run)]
"""

# A grader that runs first and names a mode of its own when the agent leaves NOTES.txt behind.
NOTES_GRADER = """
import pathlib
from certlab_core.plugin import AgentAdapter, AgentOutcome, GradeResult, Grader, hookimpl

MODE = {mode!r}

def grade(request):
    if (pathlib.Path(request.workdir) / "NOTES.txt").exists():
        return GradeResult(grader="no-notes", passed=False, failure_mode=MODE, detail="NOTES.txt left behind")
    return GradeResult(grader="no-notes", passed=True)

def run(request):
    (pathlib.Path(request.workdir) / "NOTES.txt").write_text("I looked\\n")
    return AgentOutcome(status="completed")

@hookimpl
def certlab_graders():
    return [Grader(name="no-notes", order=5, description="no NOTES.txt", grade=grade, failure_modes=("notes-left",))]

@hookimpl
def certlab_agents():
    return [AgentAdapter(name="note-taker", description="leaves NOTES.txt", run=run)]
"""

# A grader whose check_changes fails a trial for any change it made, whatever the chain said (an example only).
CHANGES_CHECK = """
from certlab_core.plugin import GradeResult, Grader, hookimpl

def grade(request):
    return GradeResult(grader="no-changes", passed=True)

def check_changes(request, changes):
    return {mode!r} if changes else None

@hookimpl
def certlab_graders():
    return [Grader(name="no-changes", order=5, description="refuses every change", grade=grade,
                   failure_modes=("changed",), check_changes=check_changes)]
"""


def module_from_source(tmp_path: Path, name: str, source: str) -> types.ModuleType:
    """A plugin module with a real file, as an installed one has (graders are fingerprinted by their files)."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def certify_with(registry: Registry, agent: str) -> tuple[dict, int, tuple[str, ...]]:
    result = certify(registry, CertifyOptions(families=("intervals",), agent=agent, sandbox="none"), lambda _m: None)
    return result.bundle, result.exit_code, result.problems


def test_an_adapter_that_raises_is_unavailable_with_its_message_never_a_failed_fix(tmp_path: Path) -> None:
    registry = discover(only=BUILT_IN, extra=[("raiser", module_from_source(tmp_path, "raiser", RAISING_ADAPTER))])
    bundle, exit_code, _problems = certify_with(registry, "raiser")
    assert exit_code == 3
    assert bundle["summary"]["unavailable"] == 6 and bundle["summary"]["fixed"] == 0
    assert {(t["verdict"], t["failure_mode"]) for t in bundle["trials"]} == {("unavailable", "agent-unavailable")}
    said = "the adapter raiser raised FileNotFoundError: fixbot is not on PATH"
    assert {t["agent_detail"] for t in bundle["trials"]} == {said}
    assert bundle["agent_details"] == [{"detail": said, "trials": [t["id"] for t in bundle["trials"]]}]
    assert said in render_contract(bundle, registry)


def test_in_a_gate_an_adapter_that_raises_is_an_error_not_a_failure(tmp_path: Path) -> None:
    registry = discover(only=BUILT_IN, extra=[("raiser", module_from_source(tmp_path, "raiser", RAISING_ADAPTER))])
    family = registry.get(TaskFamily, "intervals")
    spec = TrialSpec(task=Task(family, family.defects[0]), agent=registry.get(AgentAdapter, "raiser"), repeat=1)
    outcome = outcome_of(run_trial(spec, []), infra_exit_codes=(75,))
    assert outcome["error"] == "agent-unavailable: the adapter raiser raised FileNotFoundError: fixbot is not on PATH"
    assert outcome["agent"]["detail"].endswith("fixbot is not on PATH")


def test_a_grader_names_a_failure_mode_it_declares(tmp_path: Path) -> None:
    module = module_from_source(tmp_path, "notes_declared", NOTES_GRADER.format(mode="notes-left"))
    registry = discover(only=BUILT_IN, extra=[("notes", module)])
    bundle, exit_code, problems = certify_with(registry, "note-taker")
    assert (exit_code, problems) == (0, ())
    assert {t["failure_mode"] for t in bundle["trials"]} == {"notes-left"}
    assert "`notes-left` ×6" in render_contract(bundle, registry)


def test_a_grader_that_names_an_undeclared_mode_stops_the_certification_naming_it(tmp_path: Path) -> None:
    module = module_from_source(tmp_path, "notes_undeclared", NOTES_GRADER.format(mode="made-up"))
    registry = discover(only=BUILT_IN, extra=[("notes", module)])
    _bundle, exit_code, problems = certify_with(registry, "note-taker")
    assert exit_code == 3
    assert problems and all("grader no-notes returned an undeclared failure mode: 'made-up'" in p for p in problems)
    assert "notes-left" in problems[0]  # the modes it does declare


@pytest.fixture(scope="module")
def without_acceptance(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("no-acceptance") / "certification"
    env = dict(os.environ, CERTLAB_PLUGINS="intervals,calibration,policy,suite,sandbox-none,executor-local")
    done = run_certlab(
        "certify", "--family", "intervals", "--agent", "null", "--out", str(out), "--sandbox", "none", env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


def test_without_certlab_acceptance_the_console_and_the_contract_say_held_out_cases_went_unscored(
    without_acceptance: tuple[Path, str],
) -> None:
    out, stdout = without_acceptance
    # What would score them comes from the provider lists (certlab-all's names certlab-acceptance).
    notice = (
        "held-out cases not scored: no installed grader declares the held-out role (pip install certlab-acceptance;"
    )
    assert f"notice: {notice}" in stdout
    assert notice in (out / "CONTRACT.md").read_text()
    assert any(notice in n for n in json.loads((out / "bundle.json").read_text())["notices"])


def test_a_graders_check_of_the_changes_fails_a_passed_trial_with_the_mode_it_declares(tmp_path: Path) -> None:
    family = discover(only=BUILT_IN).get(TaskFamily, "intervals")
    for extra, expected in (((), ("fixed", None)), ((CHANGES_CHECK.format(mode="changed"),), ("not-fixed", "changed"))):
        plugins = [("changes", module_from_source(tmp_path, "changes_check", source)) for source in extra]
        registry = discover(only=BUILT_IN, extra=plugins)
        graders = grader_chain(registry)
        oracle = registry.get(AgentAdapter, "oracle")
        record = run_trial(TrialSpec(Task(family, family.defects[0]), oracle, 1), graders)
        assert [g.grader for g in record.grades] == [g.name for g in graders]  # the whole chain passed
        assert (record.verdict, record.failure_mode) == expected


BROKEN_CHECK = """
import time
from certlab_core.plugin import GradeResult, Grader, hookimpl

def grade(request):
    return GradeResult(grader="judge", passed=True)

def check_changes(request, changes):
    {body}

@hookimpl
def certlab_graders():
    return [Grader(name="judge", order=5, description="judges the changes", grade=grade, check_changes=check_changes)]
"""


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("raise RuntimeError('judge broke')", "grader judge's check of the changes raised RuntimeError: judge broke"),
        ("while True: time.sleep(0.05)", "grader judge's check of the changes did not return within 0.5 s"),
        ("return 42", "grader judge's check of the changes returned int, not a failure mode or None"),
        ("return 'made-up'", "grader judge judged the changes with an undeclared mode: 'made-up' is neither"),
    ],
    ids=["raises", "never-returns", "returns-no-mode", "undeclared-mode"],
)
def test_a_graders_check_of_the_changes_that_breaks_is_a_grader_error_naming_it_never_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, said: str
) -> None:
    from certlab_core.plugin import GradeRequest, GradeResult
    from certlab_core.plugin.types.grader import Change
    from certlab_core.sdk import grading

    monkeypatch.setattr(grading, "CHANGES_CHECK_TIMEOUT_S", 0.5)
    module = module_from_source(tmp_path, "broken_check", BROKEN_CHECK.format(body=body))
    registry = discover(only=BUILT_IN, extra=[("judge", module)])
    family = registry.get(TaskFamily, "intervals")
    request = GradeRequest(workdir=str(tmp_path), family=family, defect=family.defects[0], issued={})
    noted = (Change(path="NOTES.txt", kind="added", sha256="0" * 64, content_b64="", size=0),)
    passed = grading.ChainResult((GradeResult("judge", True),))
    chain, mode = grading.checked_changes(passed, grader_chain(registry), request, noted)
    assert mode is None and not chain.passed
    assert chain.grades == passed.grades and chain.error is not None and chain.error.startswith(said), chain.error
    # A chain that failed is never checked: its error stays the chain's own.
    failed = grading.ChainResult((GradeResult("judge", False, "tests-failed"),))
    assert grading.checked_changes(failed, grader_chain(registry), request, noted) == (failed, None)


def test_without_certlab_acceptance_a_certification_records_no_lock(without_acceptance: tuple[Path, str]) -> None:
    out, _stdout = without_acceptance
    bundle = json.loads((out / "bundle.json").read_text())
    assert bundle["held_out"] == {"locks": []} and bundle["predictions"] == []


def test_without_certlab_acceptance_a_task_of_your_own_is_refused_naming_what_to_install(tmp_path: Path) -> None:
    from certlab_acceptance.scaffold import scaffold  # init-task is certlab-acceptance's command too

    env = dict(os.environ, CERTLAB_PLUGINS="intervals,calibration,policy,suite,executor-local")
    scaffold(tmp_path / "task")
    done = run_certlab(
        "certify", "--task", str(tmp_path / "task"), "--agent", "null", "--out", str(tmp_path / "c"), env=env
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line == (
        f"certlab: error: --task {tmp_path / 'task'}: no task source is installed to read a task of your own "
        "(pip install certlab-acceptance)"
    )


def test_without_certlab_acceptance_its_commands_are_not_there(tmp_path: Path) -> None:
    env = dict(os.environ, CERTLAB_PLUGINS="intervals,calibration,policy,suite,executor-local")
    for command in ("init-task", "lock", "leakscan", "predict", "task"):
        done = run_certlab(command, str(tmp_path), env=env)
        assert done.returncode == 4 and "Traceback" not in done.stderr, done.stderr
        assert f"unknown command '{command}'" in done.stderr and "(certlab-acceptance)" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("raises", "the model boundary stuck's open raised OSError: no port today"),
        ("hangs", "the model boundary stuck's open did not return within 1 s (CERTLAB_PLUGIN_LOAD_S sets the wait)"),
    ],
)
def test_a_model_boundary_whose_open_breaks_stops_the_trial_in_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, how: str, said: str
) -> None:
    import time

    from certlab_core.plugin import InstrumentError
    from certlab_core.plugin.types.model_boundary import ModelBoundary, ModelRun, ModelSession
    from certlab_core.sdk.model_boundary import ModelBoundaryPlan

    def open_session(run: ModelRun) -> ModelSession:
        if how == "raises":
            raise OSError("no port today")
        while True:  # a proxy that never comes up
            time.sleep(0.05)

    monkeypatch.setenv("CERTLAB_PLUGIN_LOAD_S", "1")
    registry = discover(only=BUILT_IN)
    family = registry.get(TaskFamily, "intervals")
    boundary = ModelBoundaryPlan(ModelBoundary(name="stuck", description="never opens", open=open_session))
    spec = TrialSpec(Task(family, family.defects[0]), registry.get(AgentAdapter, "oracle"), 1, model_boundary=boundary)
    with pytest.raises(InstrumentError) as refused:
        run_trial(spec, grader_chain(registry))
    assert refused.value.message == said
