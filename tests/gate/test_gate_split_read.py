"""The decision's pass split over forked workers reads a store as one pass does: same trials, problems, report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from certlab_core._runtime.registry import discover
from certlab_core.evidence.integrity import AttemptLedger
from certlab_core.gate.decision import decision_of
from certlab_core.gate.manifest import manifest_document
from certlab_core.gate.store import TRIALS, iter_raw_line_bytes, open_manifest
from certlab_core.gate.summaries import _line_ranges, read_summaries, verify_lines
from certlab_core.report.model import ReportAccumulator
from certlab_core.sdk.canonical import unstructure

ARCHIVED = Path(__file__).resolve().parent.parent / "archived_stores"


def _store(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(ARCHIVED / name, folder)
    return folder


def _both(folder: Path, workers: int) -> tuple[tuple, tuple]:
    manifest = open_manifest(folder)
    assert len(_line_ranges(folder / TRIALS, workers, 0)) == workers
    rule = discover().get("statistical_rules", manifest.rule.name)
    results = []
    for split in (False, True):
        ledger = AttemptLedger(manifest.infra_exit_codes)
        accumulator = ReportAccumulator(manifest_document(manifest))
        if split:
            splitter = _Both(ledger, accumulator)
            trials = read_summaries(manifest, folder / TRIALS, splitter, workers=workers, least=0)
        else:
            splitter = _Both(ledger, accumulator)
            trials = verify_lines(manifest, iter_raw_line_bytes(folder / TRIALS), splitter.observe)
        decision = decision_of(manifest, trials, rule)
        report = splitter.accumulator.report(decision)
        results.append(
            (trials.latest, trials.attempts, trials.problems, decision, splitter.ledger.finish(), unstructure(report))
        )
    return results[0], results[1]


class _Both:
    """The gate's ledger and the report's accumulator watching the same pass."""

    def __init__(self, ledger: AttemptLedger, accumulator: ReportAccumulator) -> None:
        self.ledger, self.accumulator = ledger, accumulator

    def observe(self, number, raw, summary) -> None:
        self.ledger.observe(number, raw, summary)
        self.accumulator.observe(number, raw, summary)

    def fresh(self) -> _Both:
        return _Both(self.ledger.fresh(), self.accumulator.fresh())

    def absorb(self, other: _Both) -> None:
        self.ledger.absorb(other.ledger)
        self.accumulator.absorb(other.accumulator)


@pytest.mark.parametrize(
    ("name", "workers"), [("block", 2), ("block", 3), ("inconclusive", 2), ("inconclusive", 3), ("error", 2)]
)
def test_split_read_equals_one_pass(tmp_path: Path, name: str, workers: int) -> None:
    one, split = _both(_store(tmp_path, name), workers)
    assert split == one


def test_split_read_equals_one_pass_on_a_damaged_store(tmp_path: Path) -> None:
    folder = _store(tmp_path, "block")
    lines = (folder / TRIALS).read_bytes().split(b"\n")[:-1]
    assert len(lines) > 10
    broken = lines[3][:-3] + b'"}'  # its seal cut short: it no longer holds
    # a broken seal early, an empty line, and the first line written again at the end (after any split)
    damaged = [*lines[:3], broken, b"", *lines[4:], lines[0]]
    (folder / TRIALS).write_bytes(b"\n".join(damaged) + b"\n")
    one, split = _both(folder, 2)
    assert one[2], "the damaged store has problems"
    assert any("recorded twice" in problem for problem in one[2])
    assert split == one


def test_split_read_equals_one_pass_when_every_line_reports_usage(tmp_path: Path) -> None:
    # Usage travels back from a worker in its own form (a tuple, not a record): the report must not see a difference.
    import json

    from certlab_core.gate.store import seal_line

    folder = _store(tmp_path, "block")
    lines = [json.loads(raw) for raw in (folder / TRIALS).read_bytes().split(b"\n") if raw]
    resealed = []
    for number, line in enumerate(lines):
        line["usage"] = {"shape": "claude-json", "input_tokens": 1000 + number, "output_tokens": 7 * number,
                         "cost_usd": 0.001 * number, "cost_source": "client-estimate"}  # fmt: skip
        resealed.append(seal_line(line))
    (folder / TRIALS).write_text("".join(resealed), encoding="utf-8")
    one, split = _both(folder, 3)
    assert split == one
    usage = {arm["arm"]: arm for arm in one[5]["usage"]}
    assert usage["baseline"]["trials_reporting"] == usage["candidate"]["trials_reporting"] == 20


def test_the_report_counts_the_upstream_errors_each_arm_recovered_from(tmp_path: Path) -> None:
    # A coding arm's line names the model calls the real upstream failed (upstream_errors), its _gate summary how
    # many: the report counts them per arm for trials that were not ERROR, read whole, from the summary, or split.
    import json

    from certlab_report_text.render import render_text

    from certlab_core.gate.store import seal_line

    folder = _store(tmp_path, "block")
    lines = [json.loads(raw) for raw in (folder / TRIALS).read_bytes().split(b"\n") if raw]
    resealed, expected = [], {"baseline": [0, 0], "candidate": [0, 0]}
    for number, line in enumerate(lines):
        if number % 3 == 0:
            line["upstream_errors"] = ["upstream-429"] * (1 + number % 2)
            if line["outcome"] != "error":
                expected[line["arm"]][0] += 1
                expected[line["arm"]][1] += len(line["upstream_errors"])
        resealed.append(seal_line(line))
    assert '"upstream_errors":' in resealed[0].split('"_marks"')[0]  # in the summary the gate decodes
    (folder / TRIALS).write_text("".join(resealed), encoding="utf-8")
    one, split = _both(folder, 3)
    assert split == one
    seen = {"baseline": [0, 0], "candidate": [0, 0]}
    for condition in one[5]["conditions"]:
        for side in ("baseline", "candidate"):
            seen[side][0] += condition[side]["recovered_trials"]
            seen[side][1] += condition[side]["recovered_errors"]
    assert seen == expected and expected["baseline"][1] > 0
    manifest = open_manifest(folder)
    accumulator = ReportAccumulator(manifest_document(manifest))
    for line in lines:  # read whole, as a line written before lines led with their summary
        accumulator.add(line)
    rule = discover().get("statistical_rules", manifest.rule.name)
    trials = verify_lines(manifest, iter_raw_line_bytes(folder / TRIALS), lambda *_: None)
    report = accumulator.report(decision_of(manifest, trials, rule))
    assert unstructure(report)["conditions"] == one[5]["conditions"]
    assert "upstream error" in render_text(report) and "recovered from" in render_text(report)
    from certlab_report_html.render import render as render_html
    from certlab_report_markdown.render import render as render_markdown

    for page in (render_html(report, rule), render_markdown(report)):
        assert "the agents recovered from" in page and fmt_recovered(report) in page


def fmt_recovered(report: object) -> str:
    """The first arm's recovered-errors phrase, as every format writes it."""
    from certlab_core.sdk import report_format

    arm = next(a for c in report.conditions for a in (c.baseline, c.candidate) if a.recovered_errors)  # type: ignore[attr-defined]
    return report_format.recovered(arm)
