"""The adversarial suite's figure: one line per sandbox mode, from this run's results, printed by the controller.

Each corpus test adds its result to its report's ``user_properties`` (which pytest-xdist carries from a
worker to the controller); ``tests/conftest.py`` takes these two hooks in, so the lines are printed in the
main process whether the tests ran there or on workers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

PROPERTY = "adversarial"
_results: list[dict[str, Any]] = []


def result_property(mode: str, strategy: str, target: str, verdict: str, answer_key: bool) -> tuple[str, str]:
    entry = {"mode": mode, "strategy": strategy, "target": target, "verdict": verdict, "answer_key": answer_key}
    return PROPERTY, json.dumps(entry, sort_keys=True)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == PROPERTY and isinstance(value, str):
            _results.append(json.loads(value))


def figure_lines(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for mode in sorted({r["mode"] for r in results}):
        mine = [r for r in results if r["mode"] == mode]
        strategies = len({r["strategy"] for r in mine})
        targets = len({r["target"] for r in mine})
        fixed = [r for r in mine if r["verdict"] == "fixed"]
        caught = len(mine) - len(fixed)
        caught_text = f"{strategies} x {targets}" if caught == strategies * targets == len(mine) else str(caught)
        line = (
            f"adversarial ({mode}): {strategies} strategies x {targets} targets tried, "
            f"{caught_text} caught or contained, {len(fixed)} passed as fixed"
        )
        if fixed:
            marked = sum(1 for r in fixed if r["answer_key"])
            line += f" ({marked} of them answer-key readers, marked: seen by no instrument without a sandbox)"
        lines.append(line)
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in figure_lines(_results):
        terminalreporter.write_line(line)
