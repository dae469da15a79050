"""The demo's held-out acceptance chapter holds from start to end: every step's own check passes."""

from __future__ import annotations

from pathlib import Path

from certlab_demo import chapter_acceptance as demo_acceptance
from certlab_demo.tour import CHAPTERS, DemoContext


def test_the_chapter_follows_the_certification_chapter() -> None:
    assert CHAPTERS.index("certlab_demo.chapter_acceptance") == CHAPTERS.index("certlab_demo.chapter_certify") + 1


def test_every_step_of_the_acceptance_chapter_holds(tmp_path: Path) -> None:
    context = DemoContext(workdir=tmp_path)
    findings = [step.run(context) for step in demo_acceptance.steps(context)]
    assert len(findings) == 5
    assert findings[1].startswith("refused: fixture/examples.jsonl is a copy of the held-out cases")
    assert findings[2] == "formula-fixer: fixed, 7/7 held-out cases held"
    assert findings[3].startswith("test-memoriser: not-fixed (overfit-to-visible-tests: visible tests pass")
    assert findings[4] == "leakscan: no artefact holds most of the 7 held-out answers"
