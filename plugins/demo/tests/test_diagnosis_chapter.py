"""The demo's diagnosis chapter holds from start to end on the gate chapter's confirmatory store."""

from __future__ import annotations

from pathlib import Path

from certlab_demo import chapter_diagnosis as demo_diagnosis
from certlab_demo.chapter_gate import A_VS_B, store_marker
from certlab_demo.tour import CHAPTERS, DemoContext

from certlab_core.testing import run_certlab

REPO = Path(__file__).resolve().parents[3]


def test_the_chapter_follows_the_gate_chapter() -> None:
    assert CHAPTERS.index("certlab_demo.chapter_diagnosis") == CHAPTERS.index("certlab_demo.chapter_gate") + 1


def test_every_step_of_the_diagnosis_chapter_holds(tmp_path: Path) -> None:
    context = DemoContext(workdir=tmp_path)
    # what the gate chapter leaves: the confirmatory A against B store, which this chapter reads, never reruns
    done = run_certlab("run", str(REPO / A_VS_B), "--out", str(tmp_path / "runs"), "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr
    store = next(line[len("run: ") :] for line in done.stdout.splitlines() if line.startswith("run: "))
    store_marker(context, "a-vs-b").write_text(store, encoding="utf-8")
    findings = [step.run(context) for step in demo_diagnosis.steps(context)]
    assert len(findings) == 6
    assert findings[1].startswith("of 200 trials, B failed in all 60 where a reservation was missing")
    assert "right after the injected reserve timeout" in findings[2]
    assert "1-minimal" in findings[3] and "reproduced" in findings[4]
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(runs) == 1 and runs[0].startswith("retry-a-vs-b-")  # A against B ran once
