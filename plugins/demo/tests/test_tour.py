"""The tour's runner: independent steps run at once, a step waits for those it reads, the output is in step order."""

from __future__ import annotations

import importlib
import json
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from certlab_demo import chapter_gate, tour
from certlab_demo.tour import DemoContext, DemoFailed, DemoStep, say

from certlab_core.testing import run_certlab


def _run(tmp_path: Path, steps: list[DemoStep], jobs: int) -> int:
    return tour.run_steps(steps, DemoContext(workdir=tmp_path), jobs)


def test_independent_steps_run_at_once_and_print_in_step_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = threading.Barrier(2, timeout=10)

    def first(context: DemoContext) -> str:
        both.wait()  # holds only if the second step runs at the same time
        time.sleep(0.3)  # and finishes after it
        say("  first says this")
        return "first held"

    def second(context: DemoContext) -> str:
        both.wait()
        say("  second says this")
        return "second held"

    steps = [DemoStep("one", first), DemoStep("two", second)]
    assert _run(tmp_path, steps, jobs=2) == 0
    out = capsys.readouterr().out
    assert out.index("[1/2] one") < out.index("first says this") < out.index("held: first held")
    assert out.index("held: first held") < out.index("[2/2] two") < out.index("second says this")
    assert "demo: all 2 steps held" in out and "CPU-s)" in out


def test_one_job_runs_the_steps_one_after_another(tmp_path: Path) -> None:
    started: list[str] = []
    running = threading.Lock()

    def step(name: str) -> DemoStep:
        def run(context: DemoContext) -> str:
            if not running.acquire(blocking=False):
                raise DemoFailed(f"{name} started while another step ran")
            started.append(name)
            time.sleep(0.05)
            running.release()
            return name

        return DemoStep(name, run)

    assert _run(tmp_path, [step("a"), step("b"), step("c")], jobs=1) == 0
    assert started == ["a", "b", "c"]


def test_a_step_starts_once_what_it_reads_has_held(tmp_path: Path) -> None:
    def slow_writer(context: DemoContext) -> str:
        time.sleep(0.3)
        (context.workdir / "store").write_text("written", encoding="utf-8")
        return "wrote the store"

    def reader(context: DemoContext) -> str:
        return (context.workdir / "store").read_text(encoding="utf-8")

    steps = [DemoStep("write", slow_writer, "store"), DemoStep("read", reader, after=("store",))]
    assert _run(tmp_path, steps, jobs=2) == 0


def test_a_failed_step_ends_the_demo_there_with_the_steps_before_it_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(context: DemoContext) -> str:
        raise DemoFailed("this did not hold")

    def slow(context: DemoContext) -> str:
        time.sleep(0.3)
        return "slow held"

    ran_after: list[str] = []

    def needs_the_failed(context: DemoContext) -> str:
        ran_after.append("ran")
        return "should not run"

    steps = [
        DemoStep("slow", slow),
        DemoStep("fails", fails, "failing"),
        DemoStep("waits for it", needs_the_failed, after=("failing",)),
    ]
    assert _run(tmp_path, steps, jobs=2) == 1
    out = capsys.readouterr().out
    assert "held: slow held" in out and "demo: step 2 did not hold: this did not hold" in out
    assert "[3/3]" not in out and ran_after == []


def test_a_step_may_wait_only_for_an_earlier_step() -> None:
    steps = [DemoStep("reads", lambda c: "", after=("later",)), DemoStep("later", lambda c: "", "later")]
    with pytest.raises(ValueError, match="waits for \\['later'\\]"):
        tour.check_order(steps)


def test_every_demo_step_waits_only_for_earlier_steps(tmp_path: Path) -> None:
    context = DemoContext(workdir=tmp_path)
    steps = [step for chapter in tour.CHAPTERS for step in importlib.import_module(chapter).steps(context)]
    tour.check_order(steps)
    assert len(steps) == 22


def test_steps_that_keep_figures_at_once_lose_none(tmp_path: Path) -> None:
    # The gate chapter's runs each add their figures to one file; three of its steps run at once.
    context = DemoContext(workdir=tmp_path)

    def keep(name: str) -> None:
        for number in range(40):
            chapter_gate._keep(context, f"{name}-{number}", number)

    threads = [threading.Thread(target=keep, args=(name,)) for name in ("a", "b", "c", "d")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    figures = json.loads((tmp_path / chapter_gate.FIGURES).read_text(encoding="utf-8"))
    assert len(figures) == 160


def test_a_temporary_working_folder_is_removed_after_a_tour_that_held_and_kept_after_one_that_did_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every ``certlab demo`` without ``--keep`` left its folder of runs and certifications in the temp folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    used: list[Path] = []

    def tour_that(code: int) -> Callable[[Path], int]:
        def run(workdir: Path) -> int:
            (workdir / "bundle.json").write_text("{}")
            used.append(workdir)
            return code

        return run

    assert tour.in_working_folder(None, tour_that(0)) == 0
    assert used[-1].parent == tmp_path and not used[-1].exists()
    assert tour.in_working_folder(None, tour_that(1)) == 1
    assert (used[-1] / "bundle.json").is_file()
    assert f"kept for a look: {used[-1]}" in capsys.readouterr().out
    kept = tmp_path / "mine"
    assert tour.in_working_folder(kept, tour_that(0)) == 0 and (kept / "bundle.json").is_file()


def test_a_relative_keep_folder_is_handed_to_the_steps_as_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # certlab demo --keep out failed at step 7: the formula-fixer's --agent-arg out/formula-fixer.sh was relative,
    # and the agent runs in its work copy, where no out/ is ("formula-fixer scored not-fixed (suite-failed)").
    monkeypatch.chdir(tmp_path)
    given: list[Path] = []
    assert tour.in_working_folder(Path("out"), lambda workdir: given.append(workdir) or 0) == 0
    assert given == [tmp_path / "out"] and given[0].is_dir()


@pytest.mark.parametrize("kind", ["folder-with-files", "file", "under-a-file"])
def test_a_keep_folder_that_is_not_new_or_empty_is_refused_in_one_line_before_any_step(
    tmp_path: Path, kind: str
) -> None:
    # Before: --keep / wrote the tour's score of files and folders into the root folder, a folder of the user's got
    # them mixed in with its own, and a file there (or a folder under one) raised FileExistsError, exit 3.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    keep = {"folder-with-files": mine, "file": mine / "notes.txt", "under-a-file": mine / "notes.txt" / "tour"}[kind]
    done = run_certlab("demo", "--keep", str(keep))
    assert done.returncode == 4, done.stdout + done.stderr
    said = {
        "folder-with-files": f"--keep {keep} already holds files; give a new or empty folder for the tour",
        "file": f"--keep {keep}: cannot use the folder (File exists); give a new or empty folder",
        "under-a-file": f"--keep {keep}: cannot use the folder (Not a directory); give a new or empty folder",
    }[kind]
    assert done.stderr.strip().splitlines() == [f"certlab: error: {said}"] and done.stdout == ""
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_an_interrupted_tour_removes_its_temporary_working_folder_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ctrl-C kept the half-made folder "for a look", in the temp folder, every time a tour was stopped.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    used: list[Path] = []

    def stopped(workdir: Path) -> int:
        (workdir / "runs").mkdir()
        used.append(workdir)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tour.in_working_folder(None, stopped)
    assert list(tmp_path.iterdir()) == []
    assert capsys.readouterr().out == f"demo: interrupted; removed its working folder {used[0]}\n"
