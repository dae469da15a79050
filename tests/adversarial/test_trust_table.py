"""docs/trust-model.md's trust table is what tools/trust_table.py makes of the corpus: one row per cheat."""

from __future__ import annotations

import runpy
from pathlib import Path

from .corpus import EVIDENCE_ATTACKS, STRATEGIES

ROOT = Path(__file__).resolve().parent.parent.parent


def test_the_trust_table_matches_the_corpus() -> None:
    tool = runpy.run_path(str(ROOT / "tools" / "trust_table.py"))
    page = (ROOT / "docs" / "trust-model.md").read_text(encoding="utf-8")
    section = tool["table"](tool["load_corpus"]())
    assert section in page, "docs/trust-model.md's trust table is stale: run .venv/bin/python tools/trust_table.py"
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| cheat")]
    names = [s.name for s in STRATEGIES] + [a.name for a in EVIDENCE_ATTACKS]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows if not row.startswith("| attack")] == names
