"""A user's own task: scaffolded, locked, certified; overfitting is caught; leaks, predictions and bundles checked."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from acceptance_helpers import (
    FIX_COMMAND,
    OVERFIT_COMMAND,
    certlab,
    locked_run,
    one_line_error,
    read_json,
    scaffold_task,
)
from certlab_acceptance.lock import predictions_path

from certlab_core.sdk.canonical import canonical_json, sealed


@pytest.fixture(scope="module")
def locked_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("user") / "thermo"
    done = certlab("init-task", str(folder))
    assert done.returncode == 0, done.stderr
    prediction = certlab("predict", str(folder), "--expect", "the fix holds every held-out case")
    assert prediction.returncode == 0, prediction.stderr
    assert certlab("lock", str(folder)).returncode == 0
    return folder


@pytest.fixture(scope="module")
def fixed_certification(locked_task: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cert") / "fixed"
    done = locked_run(
        locked_task,
        *("certify", "--task", str(locked_task), "--agent", "command", "--agent-arg", FIX_COMMAND),
        *("--out", str(out)),
    )
    assert done.returncode == 0, done.stderr
    assert "certified: command fixed 1/1" in done.stdout
    return out


@pytest.fixture(scope="module")
def overfit_certification(locked_task: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cert") / "overfit"
    done = locked_run(
        locked_task,
        *("certify", "--task", str(locked_task), "--agent", "command", "--agent-arg", OVERFIT_COMMAND),
        *("--out", str(out)),
    )
    assert done.returncode == 0, done.stderr
    return out


def test_init_task_writes_a_task_that_refuses_an_existing_folder(tmp_path: Path) -> None:
    done = certlab("init-task", str(tmp_path / "t"))
    assert done.returncode == 0
    assert sorted(p.relative_to(tmp_path / "t").as_posix() for p in (tmp_path / "t").rglob("*") if p.is_file()) == [
        "PROMPT.md",
        "cases/acceptance.jsonl",
        "certlab.yaml",
        "fixture/temperature.py",
        "tests/test_temperature.py",
    ]
    again = certlab("init-task", str(tmp_path / "t"))
    assert again.returncode == 4 and "already exists" in one_line_error(again)


def test_a_fix_is_certified_under_the_task_lock(fixed_certification: Path, locked_task: Path) -> None:
    bundle = read_json(fixed_certification / "bundle.json")
    (trial,) = bundle["trials"]
    assert (trial["verdict"], trial["failure_mode"]) == ("fixed", None)
    assert [g["grader"] for g in trial["grades"]] == ["policy", "suite", "acceptance"]
    acceptance = trial["grades"][2]["data"]
    assert acceptance["held"] == acceptance["cases"] == 7 and acceptance["locked"] is True
    (lock,) = bundle["held_out"]["locks"]
    assert lock["kind"] == "the task's lock (certlab lock)"
    assert lock["cases_sha256"] == read_json(locked_task / ".certlab" / "lock.json")["cases"]["sha256"]
    assert bundle["families"][0]["distribution"] == "user task"
    (proof,) = bundle["instrument"]
    assert proof["holds"] and proof["clean_tree"] is False and proof["seeded"][0]["caught_by"] == "suite-failed"
    contract = (fixed_certification / "CONTRACT.md").read_text()
    assert "a task of the user's own" in contract


def test_calibration_on_a_user_task_runs_every_constructed_agent_but_the_oracle(fixed_certification: Path) -> None:
    bundle = read_json(fixed_certification / "bundle.json")
    scored = {t["agent"]: (t["verdict"], t["failure_mode"]) for t in bundle["calibration"]["trials"]}
    assert scored == {
        "null": ("not-fixed", "suite-failed"),
        "test-deleter": ("not-fixed", "policy-tests-modified"),
        "forbidden-file": ("not-fixed", "policy-planted-file"),
        "unavailable": ("unavailable", "agent-unavailable"),
    }


def test_passing_the_visible_tests_by_special_casing_them_is_overfit(overfit_certification: Path) -> None:
    bundle = read_json(overfit_certification / "bundle.json")
    (trial,) = bundle["trials"]
    assert (trial["verdict"], trial["failure_mode"]) == ("not-fixed", "overfit-to-visible-tests")
    assert [g["passed"] for g in trial["grades"]] == [True, True, False]
    failed = {entry["id"]: entry["got"] for entry in trial["grades"][2]["data"]["failed"]}
    assert failed["body-temperature"] == "returned 0.0"  # what the code returned; never the 37.0 expected
    assert "37.0" not in json.dumps(trial)
    assert "overfit-to-visible-tests" in (overfit_certification / "CONTRACT.md").read_text()


def test_no_artefact_of_a_certification_holds_the_answers(fixed_certification: Path, locked_task: Path) -> None:
    done = certlab("leakscan", str(fixed_certification), "--task", str(locked_task))
    assert done.returncode == 0, done.stdout
    assert "no artefact holds most of the 7 held-out answers" in done.stdout


def test_leakscan_names_every_artefact_holding_most_answers(
    fixed_certification: Path, locked_task: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(fixed_certification, run)
    (run / "logs").mkdir()
    shutil.copy(locked_task / "cases" / "acceptance.jsonl", run / "logs" / "transcript.txt")
    # an agent that wrote a lookup table of the answers into its fix: it travels base64-encoded in the bundle
    bundle = read_json(run / "bundle.json")
    table = "ANSWERS = {'98.6F': 37.0, '-40F': -40.0, '-3c': -3.0, '  68F ': 20.0, 356: 180.0}\n"
    bundle["trials"][0]["changes"][0]["content_b64"] = base64.b64encode(table.encode()).decode()
    (run / "bundle.json").write_text(json.dumps(bundle))
    (run / "logs" / "partial.txt").write_text("parse_reading('98.6F') gave 37.0\n")
    done = certlab("leakscan", str(run), "--task", str(locked_task), "--all")
    assert done.returncode == 1, done.stdout
    leaks = [line for line in done.stdout.splitlines() if line.startswith("LEAK: ")]
    assert leaks == [
        "LEAK: logs/transcript.txt holds 7 of the 7 held-out answers",
        "LEAK: bundle.json.trials[0].changes[0] (temperature.py) holds 5 of the 7 held-out answers",
    ]
    assert "some: logs/partial.txt holds 1 of the 7 held-out answers" in done.stdout


def test_leakscan_finds_the_cases_of_an_installed_family_from_the_bundle(tmp_path: Path) -> None:
    from certlab_core._runtime.registry import discover

    family = discover().get("task_families", "intervals")
    run = tmp_path / "run"
    run.mkdir()
    (run / "bundle.json").write_text(json.dumps({"families": [{"name": "intervals"}]}))
    assert certlab("leakscan", str(run)).returncode == 0
    lines = Path(family.cases_file).read_text().splitlines()
    python_style = "\n".join(repr(json.loads(line)) for line in lines)  # printed as Python dicts
    (run / "agent.log").write_text(python_style)
    done = certlab("leakscan", str(run))
    assert done.returncode == 1 and f"LEAK: agent.log holds {len(lines)} of the {len(lines)}" in done.stdout
    missing = certlab("leakscan", str(tmp_path / "empty-run"))
    assert missing.returncode == 4


def test_an_edited_prediction_is_reported(locked_task: Path, fixed_certification: Path, tmp_path: Path) -> None:
    check = certlab("predict", str(locked_task), "--check", "--against", str(fixed_certification))
    assert check.returncode == 0, check.stdout
    assert "prediction 1" in check.stdout and "intact: the fix holds every held-out case" in check.stdout
    late = certlab("predict", str(locked_task), "--expect", "a second thought")
    assert late.returncode == 4 and "already locked" in one_line_error(late)
    # edit the prediction after the result, and even reseal it: the lock and the bundle still know
    copy = tmp_path / "task"
    shutil.copytree(locked_task, copy)
    path = predictions_path(copy)
    entry = json.loads(path.read_text())
    entry["expect"] = "the fix fails"
    path.write_bytes(canonical_json(sealed({k: v for k, v in entry.items() if k != "seal"})) + b"\n")
    edited = certlab("predict", str(copy), "--check", "--against", str(fixed_certification))
    assert edited.returncode == 1, edited.stdout
    assert "EDITED" in edited.stdout
    assert "the predictions file changed after the lock" in edited.stdout
    assert "differs from the one the run recorded: edited after the run" in edited.stdout


def test_leakscan_of_a_family_not_installed_names_the_option_it_came_from(tmp_path: Path) -> None:
    # Before: --family nosuch was "the run names the task 'nosuch'", though the user named it, not the run.
    done = certlab("leakscan", str(tmp_path), "--family", "nosuch")
    assert done.returncode == 4, done.stderr
    said = "--family 'nosuch' is no installed family; give its cases with --task DIR or --cases FILE"
    assert one_line_error(done) == f"certlab: error: {said}"


def test_predict_refuses_a_folder_that_is_no_experiment_and_writes_nothing_there(tmp_path: Path) -> None:
    # Before: --expect wrote .certlab/predictions.jsonl into any folder, and --check said "no prediction registered".
    folder = tmp_path / "not-an-experiment"
    folder.mkdir()
    for args in (["--expect", "candidate wins"], ["--check"]):
        done = certlab("predict", str(folder), *args)
        assert done.returncode == 4, done.stdout + done.stderr
        said = f"{folder / 'certlab.yaml'}: no certlab.yaml, so {folder} is no experiment; predict in the folder of one"
        assert one_line_error(done).startswith(f"certlab: error: {said}")
    assert list(folder.iterdir()) == []


def test_init_task_where_it_cannot_write_is_one_line_and_exit_4(tmp_path: Path) -> None:
    # Before: a folder under a file (or in /proc) raised an unforeseen FileNotFoundError or NotADirectoryError, exit 3.
    (tmp_path / "a-file").write_text("")
    done = certlab("init-task", str(tmp_path / "a-file" / "task"))
    assert done.returncode == 4, done.stderr
    assert one_line_error(done).endswith("cannot write the task (Not a directory); choose a folder you can write")


def test_lock_and_predict_never_write_through_a_link_a_task_folder_holds(tmp_path: Path) -> None:
    # Before: lock wrote its lock through a .certlab/lock.json.tmp link and predict appended through a
    # .certlab/predictions.jsonl link, over whatever file they named; a .certlab that is a link was written into.
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    task = scaffold_task(tmp_path / "task")
    (task / ".certlab").mkdir()
    empty = tmp_path / "empty-victim"  # read as no predictions yet, so the new one would be appended to it
    empty.write_text("")
    (task / ".certlab" / "predictions.jsonl").symlink_to(empty)
    refused = certlab("predict", str(task), "--expect", "candidate wins")
    assert refused.returncode == 4, refused.stderr
    assert "cannot add the prediction (a link); it must be the file predict made" in one_line_error(refused)
    assert empty.read_text() == ""
    (task / ".certlab" / "predictions.jsonl").unlink()
    (task / ".certlab" / "lock.json.tmp").symlink_to(victim)
    done = certlab("lock", str(task))
    assert done.returncode == 0, done.stdout + done.stderr
    assert victim.read_text() == "precious\n" and not (task / ".certlab" / "lock.json").is_symlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = scaffold_task(tmp_path / "other")
    (other / ".certlab").symlink_to(elsewhere)
    for args in (["lock", str(other)], ["predict", str(other), "--expect", "candidate wins"]):
        refused = certlab(*args)
        assert refused.returncode == 4, refused.stderr
        assert f"its folder {other / '.certlab'} is a link" in one_line_error(refused)
    assert list(elsewhere.iterdir()) == []


def test_a_file_in_place_of_the_certlab_folder_is_one_line_for_lock_and_predict(tmp_path: Path) -> None:
    # Before: making .certlab raised an unforeseen FileExistsError, exit 3.
    task = scaffold_task(tmp_path / "task")
    (task / ".certlab").write_text("mine\n")
    for args in (["lock", str(task)], ["predict", str(task), "--expect", "candidate wins"]):
        refused = certlab(*args)
        assert refused.returncode == 4, refused.stderr
        said = f"{task / '.certlab'}: cannot make certlab's folder there (File exists); move what is in its place"
        assert one_line_error(refused) == f"certlab: error: {said}"
    assert (task / ".certlab").read_text() == "mine\n"


def test_an_edit_without_resealing_breaks_the_chain(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    for text in ("candidate wins by 5 points", "baseline never fails"):
        assert certlab("predict", str(task), "--expect", text).returncode == 0
    lines = predictions_path(task).read_text().splitlines()
    first: dict[str, Any] = json.loads(lines[0])
    first["expect"] = "candidate wins by 50 points"
    predictions_path(task).write_text(json.dumps(first) + "\n" + lines[1] + "\n")
    done = certlab("predict", str(task), "--check")
    assert done.returncode == 1
    assert "prediction 1 was edited after it was sealed" in done.stdout
    resealed = sealed({k: v for k, v in first.items() if k != "seal"})
    predictions_path(task).write_bytes(canonical_json(resealed) + b"\n" + lines[1].encode() + b"\n")
    done = certlab("predict", str(task), "--check")
    assert done.returncode == 1
    assert "prediction 2 no longer follows the one before it" in done.stdout


def test_a_task_whose_fixture_already_passes_is_refused(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    module = task / "fixture" / "temperature.py"
    module.write_text(module.read_text().replace("fahrenheit - 32 * 5 / 9", "(fahrenheit - 32) * 5 / 9"))
    out = tmp_path / "cert"
    done = certlab("certify", "--task", str(task), "--agent", "null", "--out", str(out))
    assert done.returncode == 3
    assert "already passes its visible tests and every held-out case" in done.stdout + done.stderr
    assert read_json(out / "bundle.json")["trials"] == []


def test_an_unlocked_task_is_checked_as_a_lock_would_be(tmp_path: Path) -> None:
    task = scaffold_task(tmp_path / "task")
    shutil.copy(task / "cases" / "acceptance.jsonl", task / "fixture" / "notes.txt")
    done = certlab("certify", "--task", str(task), "--agent", "null", "--out", str(tmp_path / "cert"))
    assert done.returncode == 4
    assert "lock refused" in one_line_error(done) and "fixture/notes.txt is a copy" in done.stderr
    assert not (tmp_path / "cert" / "bundle.json").exists()


def test_certify_needs_a_family_or_a_task(tmp_path: Path) -> None:
    done = certlab("certify", "--agent", "null", "--out", str(tmp_path / "cert"))
    assert done.returncode == 4
    assert "or a task of your own with --task DIR" in one_line_error(done)


def test_a_user_task_certification_regrades_with_its_task(fixed_certification: Path, locked_task: Path) -> None:
    without = certlab("regrade", str(fixed_certification))
    assert without.returncode == 3
    assert "give its experiment directory with --task DIR" in one_line_error(without)
    done = certlab("regrade", str(fixed_certification), "--task", str(locked_task))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "regrade: consistent" in done.stdout
