"""The demo's diagnosis chapter holds from start to end: every step's own check passes."""

from __future__ import annotations

from pathlib import Path

from diagnosis_helpers import REPO

from certlab_core import demo_diagnosis
from certlab_core.demo import CHAPTERS, DemoContext


def test_the_chapter_is_in_the_demo() -> None:
    assert "certlab_core.demo_diagnosis" in CHAPTERS


def test_every_step_of_the_diagnosis_chapter_holds(tmp_path: Path) -> None:
    context = DemoContext(workdir=tmp_path, checkout=REPO)
    findings = [step.run(context) for step in demo_diagnosis.steps(context)]
    assert len(findings) == 7
    assert findings[1].startswith("BLOCK") and findings[2].startswith("PASS")
    assert "1-minimal" in findings[4] and "reproduced" in findings[5]
