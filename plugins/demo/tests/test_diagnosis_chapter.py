"""The demo's diagnosis chapter holds from start to end on the gate chapter's confirmatory store."""

from __future__ import annotations

from pathlib import Path

import pytest
from certlab_demo import chapter_diagnosis as demo_diagnosis
from certlab_demo.chapter_gate import A_VS_B, store_marker
from certlab_demo.tour import CHAPTERS, DemoContext
from made_once import a_vs_b_store

REPO = Path(__file__).resolve().parents[3]


def test_the_chapter_follows_the_gate_chapter() -> None:
    assert CHAPTERS.index("certlab_demo.chapter_diagnosis") == CHAPTERS.index("certlab_demo.chapter_gate") + 1


def test_every_step_of_the_diagnosis_chapter_holds(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    context = DemoContext(workdir=tmp_path)
    # what the gate chapter leaves: the confirmatory A against B store, which this chapter reads, never reruns
    assert REPO / A_VS_B == REPO / "examples" / "retry" / "a_vs_b.yaml"
    store = a_vs_b_store(tmp_path_factory)  # made once per test run (exit 1 checked there)
    store_marker(context, "a-vs-b").write_text(str(store), encoding="utf-8")
    findings = [step.run(context) for step in demo_diagnosis.steps(context)]
    assert len(findings) == 6
    assert findings[1].startswith("of 200 trials, B failed in all 60 where a reservation was missing")
    assert "right after the injected reserve timeout" in findings[2]
    assert "1-minimal" in findings[3] and "reproduced" in findings[4]
    runs = sorted(p.name for p in store.parent.iterdir())
    assert len(runs) == 1 and runs[0].startswith("retry-a-vs-b-")  # A against B ran once
