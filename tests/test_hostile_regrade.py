"""Regrade of hostile evidence: it materialises only inside its own temp folder, and says it runs code.

A forger edits a bundle's recorded changes and reseals it: the seal is unkeyed, so it holds.
Regrade must still never write outside its temp folder (a change through a recorded symlink,
an absolute or ``..`` path, a special file are refused as tampered, exit 3), and it must say
plainly that it ran the code the evidence holds, in fresh processes. Replay's included files,
the diagnosis plugin's, are checked in its tests (``test_diagnosis_hostile_replay``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certlab_core.certify.bundle_documents import summary_of
from certlab_core.plugin.errors import InstrumentError
from certlab_core.plugin.types.grader import Change
from certlab_core.sdk.canonical import sealed
from certlab_core.sdk.workcopy import Tampered, apply_changes, write_inside

REPO = Path(__file__).resolve().parent.parent
PUBLISHED = REPO / "certifications" / "pattern-fixer-intervals-k3" / "bundle.json"


def change(path: str, kind: str, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {"path": path, "kind": kind, "sha256": None, "content_b64": None}
    return {
        "path": path,
        "kind": kind,
        "sha256": hashlib.sha256(data).hexdigest(),
        "content_b64": base64.b64encode(data).decode(),
        "size": len(data),
    }


def resealed(folder: Path, bundle: dict[str, Any]) -> Path:
    bundle.pop("seal", None)
    folder.mkdir(parents=True)
    (folder / "bundle.json").write_text(json.dumps(sealed(bundle)))
    return folder


def forged_bundle(folder: Path, trials: list[dict[str, Any]]) -> Path:
    """The published pattern-fixer certification cut to its first run of each task (``settings.trials`` 1), with
    ``trials`` in place of the published trials of the same ids, summed again and resealed: a forgery that still
    covers the taskset once, as regrade demands."""
    bundle = json.loads(PUBLISHED.read_text())
    forged = {trial["id"]: trial for trial in trials}
    bundle["trials"] = [forged.pop(t["id"], t) for t in bundle["trials"] if t["repeat"] == 1] + list(forged.values())
    bundle["settings"]["trials"] = 1
    bundle["summary"] = summary_of(bundle["trials"])
    return resealed(folder, bundle)


def published_trial(index: int, **changes: Any) -> dict[str, Any]:
    trial: dict[str, Any] = json.loads(PUBLISHED.read_text())["trials"][index]
    trial.update(changes)
    return trial


def regrade(folder: Path) -> tuple[subprocess.CompletedProcess[str], int]:
    process = subprocess.Popen(
        # Uncontained on purpose: these tests show what regrade itself refuses (tests/test_sandbox.py: contained).
        [sys.executable, "-m", "certlab_core.cli", "regrade", str(folder), "--workers", "2", "--sandbox", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err), process.pid


def test_regrade_refuses_a_change_written_through_a_recorded_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "users-files"
    outside.mkdir()
    (outside / "notes.txt").write_text("mine\n")
    trial = published_trial(
        0,
        verdict="not-fixed",
        failure_mode="policy-planted-file",
        changes=[
            change("escape", "symlink", str(outside).encode()),
            change("escape/notes.txt", "modified", b"overwritten by a forged bundle\n"),
        ],
    )
    done, _pid = regrade(forged_bundle(tmp_path / "cert", [trial]))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "passes through escape, which is a symlink" in done.stderr, done.stderr
    assert done.stderr.count("certlab: error:") == 1 and "internal error" not in done.stderr
    assert (outside / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in outside.iterdir()) == ["notes.txt"]


def test_regrade_of_resealed_code_says_it_ran_it_in_fresh_processes_and_deletes_nothing_outside(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "users-files"
    outside.mkdir()
    (outside / "notes.txt").write_text("mine\n")
    marker = tmp_path / "ran-on-import"
    fixed = published_trial(0)
    source = base64.b64decode(fixed["changes"][0]["content_b64"])
    planted = source + f"\nimport os as _os\nopen({str(marker)!r}, 'a').write(str(_os.getpid()) + '\\n')\n".encode()
    fixed["changes"] = [change("intervals.py", "modified", planted)]
    deleting = published_trial(
        1,
        verdict="not-fixed",
        failure_mode="policy-planted-file",
        changes=[change("escape", "symlink", str(outside).encode()), change("escape/notes.txt", "deleted", None)],
    )
    # A genuine trial whose 2 GB file was kept as hash and size only: re-applied as a sparse stand-in.
    oversized = published_trial(
        3,
        verdict="not-fixed",
        failure_mode="policy-oversized-change",
        changes=[dict(change("big.bin", "added", None), sha256="0" * 64, size=2 << 30, omitted=True)],
    )
    done, pid = regrade(forged_bundle(tmp_path / "cert", [fixed, deleting, oversized]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recorded not-fixed (policy-oversized-change), re-earned not-fixed (policy-oversized-change)" in done.stderr
    assert "note: this ran the code this bundle holds, in fresh processes but uncontained" in done.stdout
    ran_in = {int(line) for line in marker.read_text().split()}
    assert ran_in and pid not in ran_in  # the bundle's code ran, never in the regrade process itself
    assert (outside / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize(
    "path", ["/tmp/escape.py", "../escape.py", "a/../../escape.py", "", ".", "a//b.py", "a/./b.py", "x\0.py"]
)
def test_a_path_that_leaves_the_tree_is_tampered(tmp_path: Path, path: str) -> None:
    root = tmp_path / "work"
    root.mkdir()
    with pytest.raises(Tampered, match="leaves the work copy"):
        apply_changes(root, [Change(path, "added", hashlib.sha256(b"x").hexdigest(), "eA==")])
    with pytest.raises(Tampered):
        write_inside(root, path, b"x")
    assert not (tmp_path / "escape.py").exists()


def test_a_change_through_a_link_or_onto_a_special_file_is_tampered(tmp_path: Path) -> None:
    root, outside = tmp_path / "work", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "file").write_text("")
    os.mkfifo(root / "pipe")
    x = hashlib.sha256(b"x").hexdigest()
    for path, needle in (
        ("link/a.py", "passes through link, which is a symlink"),
        ("file/a.py", "passes through file, which is not a folder"),
        ("pipe", "meets a special file"),
    ):
        with pytest.raises(Tampered, match=needle):
            apply_changes(root, [Change(path, "added", x, "eA==")])
    with pytest.raises(Tampered, match="passes through link"):
        apply_changes(root, [Change("link/a.py", "deleted", None, None)])
    assert list(outside.iterdir()) == []
    assert isinstance(Tampered("x"), InstrumentError)  # exit 3


def test_a_folder_replaced_by_a_link_still_round_trips(tmp_path: Path) -> None:
    from certlab_core.sdk.workcopy import record_changes, tree_hashes

    def issue(root: Path) -> dict[str, str]:
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "c.py").write_text("c\n")
        (root / "a.py").write_text("a\n")
        return tree_hashes(root)

    work, again = tmp_path / "work", tmp_path / "again"
    issued = issue(work)
    shutil.rmtree(work / "pkg")
    (work / "pkg").symlink_to("elsewhere")
    changes = record_changes(work, issued)
    assert [(c.path, c.kind) for c in changes] == [("pkg", "symlink"), ("pkg/c.py", "deleted")]
    issue(again)
    apply_changes(again, changes)
    assert record_changes(again, issued) == changes


PARTS = st.sampled_from(["a", "b.py", "..", ".", "", "link", "/", "/tmp", "pipe"])
PATHS = st.lists(PARTS, min_size=1, max_size=4).map("/".join)
KINDS = st.sampled_from(["added", "modified", "deleted", "symlink", "hardlink", "bogus"])
TARGETS = st.sampled_from([b"../../outside", b"/", b"a", b"link", b"..", b"\xff"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(PATHS, KINDS, TARGETS, st.booleans()), max_size=6))
def test_any_recorded_changes_stay_inside_the_tree(
    tmp_path_factory: pytest.TempPathFactory, made: list[tuple[str, str, bytes, bool]]
) -> None:
    base = tmp_path_factory.mktemp("apply")
    root, outside = base / "work", base / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (root / "link").symlink_to(outside)
    os.mkfifo(root / "pipe")
    changes = []
    for path, kind, data, omitted in made:
        content = None if kind == "deleted" else data
        changes.append(
            Change(
                path,
                kind,
                None if content is None else hashlib.sha256(content).hexdigest(),
                None if content is None or omitted else base64.b64encode(content).decode(),
                size=64 if omitted else None,
                omitted=omitted and content is not None,
            )
        )
    try:
        apply_changes(root, changes, link_dir=base)
    except Tampered as error:
        assert "\n" not in error.message
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert (outside / "keep.txt").read_text() == "keep"
    assert sorted(p.name for p in base.iterdir() if not p.name.startswith("link-")) == ["outside", "work"]


# --------------------------------------------------------------------------- coverage of the taskset


def test_one_fixed_trial_copied_six_times_and_resealed_is_tampered(tmp_path: Path) -> None:
    """Once "consistent": every copy re-earns its fixed verdict, and the summary said 6/6."""
    bundle = json.loads(PUBLISHED.read_text())
    fixed = next(t for t in bundle["trials"] if t["verdict"] == "fixed")
    bundle["trials"] = [dict(fixed) for _ in range(6)]
    bundle["settings"]["trials"] = 1
    bundle["summary"] = {"scheduled": 6, "fixed": 6, "graded": 6, "unavailable": 0}
    done, _pid = regrade(resealed(tmp_path / "cert", bundle))
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and "its trials do not cover the taskset once each (6 trials: 1 of each of 6 tasks)" in lines[0]
    )
    assert f"duplicated {fixed['id']} (6 times)" in lines[0] and "missing 5 of 6" in lines[0], lines[0]
    assert "consistent" not in done.stdout


def recorded(trials: list[dict[str, Any]]) -> list[Any]:
    from certlab_core.certify.regrade import RecordedTrial
    from certlab_core.sdk.canonical import structure

    return [structure(t, RecordedTrial) for t in trials]


@pytest.fixture(scope="module")
def intervals() -> dict[str, Any]:
    from certlab_core._runtime.registry import discover

    return {"intervals": discover().get("task_families", "intervals")}


def test_each_task_and_each_trial_index_once_is_the_only_coverage_that_holds(intervals: dict[str, Any]) -> None:
    from certlab_core.certify.regrade import coverage_problem

    bundle = json.loads(PUBLISHED.read_text())
    trials = bundle["trials"]
    assert coverage_problem(bundle, recorded(trials), intervals) is None  # the published K = 3 bundle

    def problem(chosen: list[dict[str, Any]], **settings: Any) -> str:
        found = coverage_problem(
            {**bundle, "settings": {**bundle["settings"], **settings}}, recorded(chosen), intervals
        )
        assert found is not None and "\n" not in found
        return found

    assert "missing 1 of 18: intervals/merge-keeps-empty/3" in problem(trials[:-1])
    assert "duplicated intervals/length-counts-end/1 (2 times)" in problem([*trials[:-1], trials[0]])
    beyond = dict(trials[-1], id=trials[-1]["task"] + "/4", repeat=4)
    assert "not in the taskset: intervals/merge-keeps-empty/4" in problem([*trials[:-1], beyond])
    relabelled = dict(trials[-1], id="intervals/length-counts-end/3")  # a trial of one task named as another's
    assert "whose id is not their family, task and index: intervals/length-counts-end/3" in problem(
        [*trials[:-1], relabelled]
    )
    assert "missing 12 of 18" in problem(trials[:6])  # the first runs of a K = 3 certification alone
    assert "(6 trials: 1 of each of 6 tasks)" in problem(trials[:5], trials=1)
    assert "no number of trials per task" in problem(trials, trials="3")
    assert "missing 18 of 18" in problem([])  # no trials, and nothing recorded that stopped them


def test_a_certification_refused_before_its_trials_covers_nothing_and_is_not_tampered(
    intervals: dict[str, Any],
) -> None:
    from certlab_core.certify.regrade import coverage_problem

    bundle = json.loads(PUBLISHED.read_text())
    failed_calibration = {**bundle, "calibration": {**bundle["calibration"], "problems": ["calibration: null ..."]}}
    unproved = {**bundle, "instrument": [{**bundle["instrument"][0], "holds": False}]}
    for refused in (failed_calibration, unproved):
        assert coverage_problem(refused, [], intervals) is None
    assert coverage_problem(unproved, recorded(bundle["trials"][:1]), intervals) is not None


def test_a_summary_its_trials_do_not_sum_to_is_a_mismatch(tmp_path: Path) -> None:
    bundle = json.loads(PUBLISHED.read_text())
    bundle["trials"] = [t for t in bundle["trials"] if t["repeat"] == 1]
    bundle["settings"]["trials"] = 1
    bundle["summary"] = dict(summary_of(bundle["trials"]), fixed=6)
    done, _pid = regrade(resealed(tmp_path / "cert", bundle))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "mismatch: summary: recorded" in done.stdout and "regrade: mismatch" in done.stdout


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        # cattrs alone read each of these as something else, and the resealed bundle regraded consistent
        (lambda t: t.update(repeat="1"), "trials[0].repeat: expected an integer, found text"),
        (lambda t: t.update(verdict=["fixed"]), "trials[0].verdict: expected text, found an array"),
        (lambda t: t["changes"][0].update(omitted="false"), "trials[0].changes[0].omitted: expected true or false"),
    ],
)
def test_a_resealed_trial_whose_value_is_of_another_kind_is_one_line_naming_it(
    edit: Any, said: str, tmp_path: Path
) -> None:
    bundle = json.loads(PUBLISHED.read_text())
    edit(bundle["trials"][0])
    done, _pid = regrade(resealed(tmp_path / "cert", bundle))
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "malformed trials" in lines[0] and said in lines[0], done.stderr
    assert "consistent" not in done.stdout
