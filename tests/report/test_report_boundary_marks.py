"""The report fingerprints failures from the lines' ``_marks`` (read for pairs with a failure) as from whole lines."""

from __future__ import annotations

import json
from pathlib import Path

from certlab_core.gate.events import boundary_mark, failure_fingerprint
from certlab_core.gate.store import seal_line
from certlab_core.report.model import ReportAccumulator

ARCHIVED = Path(__file__).resolve().parents[1] / "archived_stores"


def _fingerprints(accumulator: ReportAccumulator) -> dict[str, tuple[str, str] | None]:
    accumulator._finish_pending()
    return {trial_id: trial.fingerprint for trial_id, trial in accumulator.latest.items()}


def test_fingerprints_from_summaries_equal_those_from_whole_lines() -> None:
    folder = ARCHIVED / "block"
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    raws = [raw for raw in (folder / "trials.jsonl").read_bytes().split(b"\n") if raw]
    lines = [json.loads(raw) for raw in raws]
    whole, marked, unmarked = ReportAccumulator(manifest), ReportAccumulator(manifest), ReportAccumulator(manifest)
    for number, (raw, line) in enumerate(zip(raws, lines, strict=True), 1):
        whole.add(line)
        marked.observe(number, raw, line["_gate"])
        # A line written before ``_marks`` existed: its marks are made from its events.
        unmarked.observe(number, seal_line_without_marks(line), line["_gate"])
    expected = _fingerprints(whole)
    assert _fingerprints(marked) == expected == _fingerprints(unmarked)
    assert any(f is not None and "vs passing twin" in f[1] for f in expected.values())
    by_id = {line["id"]: line for line in lines}
    for trial_id, fingerprint in expected.items():
        line = by_id[trial_id]
        if line["outcome"] == "failure":
            arm, rest = trial_id.split("/", 1)
            twin = by_id["/".join(("candidate" if arm == "baseline" else "baseline", rest))]
            assert fingerprint == failure_fingerprint(line, twin)


def seal_line_without_marks(line: dict[str, object]) -> bytes:
    document = {k: v for k, v in line.items() if k != "_marks"}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def test_marks_that_are_not_marks_are_made_from_the_events() -> None:
    folder = ARCHIVED / "block"
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    lines = [json.loads(raw) for raw in (folder / "trials.jsonl").read_bytes().split(b"\n") if raw]
    whole, damaged = ReportAccumulator(manifest), ReportAccumulator(manifest)
    for number, line in enumerate(lines, 1):
        whole.add(line)
        raw = json.dumps({**line, "_marks": [1, 2]}, sort_keys=True, separators=(",", ":")).encode()
        damaged.observe(number, raw, line["_gate"])
    assert _fingerprints(damaged) == _fingerprints(whole)


def test_a_mark_is_the_same_for_the_same_crossing_and_differs_for_another() -> None:
    call = {"seq": 0, "kind": "tool", "name": "reserve", "args": {"qty": 2}, "status": "error",
            "result": None, "error": {"type": "ToolTimeout", "message": "t"}, "fault": 0}  # fmt: skip
    mark = boundary_mark(call)
    assert mark == boundary_mark({**call, "seq": 7})
    assert mark.endswith("efreserve -> error ToolTimeout (injected)")
    assert mark[:16] != boundary_mark({**call, "args": {"qty": 3}})[:16]
    assert json.loads(seal_line({"id": "x", "events": [call]}))["_marks"] == [mark]
