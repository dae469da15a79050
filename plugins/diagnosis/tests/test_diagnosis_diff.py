"""certlab diff on an archived run store: the first divergence of two trials, and the diff itself, directly."""

from __future__ import annotations

import shutil
from pathlib import Path

from certlab_diagnosis.diff import diff_trials

from certlab_core.testing import run_certlab

# The kernel's archived stores (its re-derive tests' data), read here as any store a user keeps.
ARCHIVED = Path(__file__).resolve().parents[3] / "tests" / "archived_stores"


def test_diff_finds_the_split_right_after_the_injected_timeout() -> None:
    done = run_certlab("diff", str(ARCHIVED / "block"), "baseline/reserve-timeout/4", "candidate/reserve-timeout/4")
    assert done.returncode == 0, done.stderr
    assert "common prefix: 2 event(s)" in done.stdout
    assert "first divergence at event #2:" in done.stdout
    assert "end of calls (agent crashed: ToolTimeout" in done.stdout
    assert "injected fault before it: tool_timeout on reserve at event #1 (right before the split)" in done.stdout
    every = run_certlab(
        "diff", str(ARCHIVED / "block"), "baseline/reserve-timeout/4", "candidate/reserve-timeout/4", "--all-steps"
    )
    assert "  = #0   stock(" in every.stdout and "after the split, A baseline/reserve-timeout/4:" in every.stdout


def test_diff_of_twins_on_a_clean_run_is_identical() -> None:
    done = run_certlab("diff", str(ARCHIVED / "block"), "baseline/clean/0", "candidate/clean/0")
    assert "the two recordings are identical" in done.stdout
    assert "last injected fault: none" in done.stdout


def test_a_trial_diffed_with_itself_names_its_last_fault_before_the_end_not_a_split() -> None:
    # Before: "the two recordings are identical", then "injected fault before it: ... before the split".
    trial = "baseline/reserve-timeout/4"
    done = run_certlab("diff", str(ARCHIVED / "block"), trial, trial)
    assert done.returncode == 0, done.stderr
    assert "the two recordings are identical" in done.stdout and "split" not in done.stdout
    assert "last injected fault: tool_timeout on reserve at event #1 (6 events before the end)" in done.stdout


def test_diff_of_an_unknown_trial_names_the_valid_form() -> None:
    done = run_certlab("diff", str(ARCHIVED / "block"), "baseline/clean/99", "candidate/clean/0")
    assert done.returncode == 4 and "ARM/CONDITION/INDEX" in done.stderr and done.stderr.count("\n") == 1


def test_diff_reads_its_two_lines_past_damage_elsewhere_which_the_gate_reports(tmp_path: Path) -> None:
    # diff decodes only the lines naming its trials; a damaged line elsewhere is the gate's ERROR.
    store = tmp_path / "block"
    shutil.copytree(ARCHIVED / "block", store)
    with (store / "trials.jsonl").open("ab") as handle:
        handle.write(b'{"_gate": \xff\xfe not text}\n')
    done = run_certlab("diff", str(store), "baseline/reserve-timeout/4", "candidate/reserve-timeout/4")
    assert done.returncode == 0, done.stderr
    assert "first divergence at event #2:" in done.stdout
    gate = run_certlab("gate", str(store))
    assert gate.returncode == 3 and "trials.jsonl line 41: not a certlab.trial/1 record" in gate.stdout, gate.stdout


def _event(seq: int, name: str, status: str = "ok", fault: int | None = None) -> dict:
    error = {"type": "ToolTimeout", "message": "late"} if status == "error" else None
    return {"seq": seq, "kind": "tool", "name": name, "args": {}, "status": status, "result": None, "error": error,
            "fault": fault}  # fmt: skip


def test_diff_counts_a_common_prefix_and_an_ended_recording() -> None:
    a = {"id": "a", "events": [_event(0, "s"), _event(1, "r")], "faults": []}
    b = {"id": "b", "events": [_event(0, "s")], "faults": []}
    found = diff_trials(a, b)
    assert (found.common_prefix, found.event_b, found.identical) == (1, None, False)
    assert found.event_a is not None and found.event_a["name"] == "r"
