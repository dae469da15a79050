"""Property tests: the report model and the diff take any JSON-shaped trial lines without raising."""

from __future__ import annotations

import json
from typing import Any

from certlab_clopper_pearson.rule import interval as exact_interval
from certlab_diagnosis.diff import diff_trials, render_diff
from hypothesis import given, settings
from hypothesis import strategies as st
from report_helpers import ARCHIVED

from certlab_core.report.model import build_report

MANIFEST = json.loads((ARCHIVED / "block" / "manifest.json").read_text())
DECISION = json.loads((ARCHIVED / "block" / "decision.json").read_text())
REAL = [json.loads(line) for line in (ARCHIVED / "block" / "trials.jsonl").read_text().splitlines()]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 30), st.text(max_size=6))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
events = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "seq": values, "kind": st.sampled_from(["tool", "decision"]) | values, "name": values, "args": values,
            "status": st.sampled_from(["ok", "error"]) | values, "result": values, "error": values,
            "fault": st.one_of(st.none(), st.integers(0, 3), values),
        },
    ),
    max_size=4,
)  # fmt: skip
lines = st.fixed_dictionaries(
    {
        "id": st.sampled_from([line["id"] for line in REAL[:6]]) | st.text(max_size=5),
        "arm": st.sampled_from(["baseline", "candidate"]) | values,
        "condition": st.sampled_from(["reserve-timeout", "clean"]) | values,
        "index": st.integers(0, 12) | values,
        "attempt": st.integers(0, 3) | values,
        "outcome": st.sampled_from(["success", "failure", "error"]) | values,
    },
    optional={
        "failure_mode": values, "error": values, "events": events | values, "usage": values, "agent": values,
        "faults": st.lists(st.fixed_dictionaries({}, optional={"index": values, "fired": values}), max_size=2) | values,
        "contract_violations": values,
    },
)  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(st.lists(lines, max_size=8), st.lists(st.integers(0, len(REAL) - 1), max_size=5))
def test_any_lines_give_a_report(made: list[dict[str, Any]], real: list[int]) -> None:
    report = build_report(MANIFEST, [REAL[i] for i in real] + made, DECISION, exact=exact_interval)
    assert report.verdict == "BLOCK"
    for condition in report.conditions:
        assert condition.baseline.successes + condition.baseline.failures + condition.baseline.errors == (
            condition.baseline.trials
        )


@settings(max_examples=120, deadline=None)
@given(lines, lines, st.booleans())
def test_any_two_lines_give_a_diff(first: dict[str, Any], second: dict[str, Any], every: bool) -> None:
    assert render_diff(diff_trials(first, second), all_steps=every).endswith("\n")
