"""certlab replay --trial on a published certification: what it refuses, and in which order it looks."""

from __future__ import annotations

from pathlib import Path

from certlab_core.testing import run_certlab

# A published certification of the null agent: its trials ran without the model boundary, so none holds a recording.
NULL_CERTIFICATION = Path(__file__).resolve().parents[3] / "certifications" / "null-all"
TRIAL = "intervals/length-counts-end/1"


def test_a_trial_without_a_model_recording_is_invalid() -> None:
    done = run_certlab("replay", str(NULL_CERTIFICATION), "--trial", TRIAL, "--sandbox", "none")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == (
        "invalid: the trial holds no model recording (its agent ran without the model boundary)"
    )


def test_a_broken_task_is_refused_before_the_certification_is_read(tmp_path: Path) -> None:
    """--task is registered first, as the command always did: its error (exit 4) comes before the trial's."""
    (tmp_path / "certlab.yaml").write_text("this: [is not\n", encoding="utf-8")
    done = run_certlab("replay", str(NULL_CERTIFICATION), "--trial", TRIAL, "--task", str(tmp_path))
    assert done.returncode == 4, done.stdout + done.stderr
    assert "certlab.yaml: line 2: not valid YAML" in done.stderr
    assert done.stdout == ""
