"""The report's and the contract's exact intervals are the default rule's (Clopper-Pearson's): no second copy."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from certlab_clopper_pearson import rule

from certlab_core._runtime.default_rule import NO_EXACT_INTERVAL, GuardedInterval, exact_interval
from certlab_core._runtime.registry import discover
from certlab_core.certify.contract import rule_interval_text
from certlab_core.report.model import build_report
from certlab_core.sdk import report_format

KERNEL = Path(__file__).resolve().parents[1] / "certlab_core"
ARCHIVED = Path(__file__).resolve().parent / "archived_stores" / "block"


def test_the_exact_interval_is_the_installed_rules_own_function() -> None:
    interval = exact_interval(discover())
    assert isinstance(interval, GuardedInterval) and interval.interval is rule.interval
    # Called through its guard, it gives the rule's own answers.
    for successes, n, alpha in ((0, 1, 0.05), (3, 10, 0.05), (10, 10, 0.01), (7, 40, 0.1)):
        assert interval(successes, n, alpha) == rule.interval(successes, n, alpha)


def test_without_a_default_rule_there_is_no_exact_interval_and_the_contract_says_what_to_install() -> None:
    without = discover(only=["newcombe", "rule-support"])  # newcombe does not mark itself the default
    assert exact_interval(without) is None
    assert rule_interval_text(without, 3, 10) == NO_EXACT_INTERVAL
    assert "install a statistical rule that marks itself the default" in NO_EXACT_INTERVAL


def test_a_report_built_without_the_rule_shows_no_exact_interval_and_with_it_the_rules_figures() -> None:
    manifest = json.loads((ARCHIVED / "manifest.json").read_text())
    decision = json.loads((ARCHIVED / "decision.json").read_text())
    lines = [json.loads(line) for line in (ARCHIVED / "trials.jsonl").read_text().splitlines()]
    bare = build_report(manifest, lines, decision)
    ruled = build_report(manifest, lines, decision, exact=rule.interval)
    for condition, with_rule in zip(bare.conditions, ruled.conditions, strict=True):
        for arm, arm_with_rule in (
            (condition.baseline, with_rule.baseline),
            (condition.candidate, with_rule.candidate),
        ):
            assert arm.exact is None and report_format.interval(arm.exact) == "–"
            decided = arm_with_rule.successes + arm_with_rule.failures
            assert arm_with_rule.exact == rule.interval(arm_with_rule.successes, decided, ruled.alpha)


def test_no_kernel_module_computes_a_beta_quantile() -> None:
    # The kernel once had its own Clopper-Pearson (report/intervals.py) beside the rule's.
    found = []
    for path in KERNEL.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            named = isinstance(node, ast.FunctionDef) and ("clopper" in node.name or "quantile" in node.name)
            if named and node.name != "t_quantile":  # type: ignore[union-attr]  # Student's t, for the cost report
                found.append(f"{path.relative_to(KERNEL)}:{node.lineno} {node.name}")  # type: ignore[union-attr]
    assert found == []


def test_the_markdown_report_heads_the_exact_interval_with_the_rule_that_computed_it() -> None:
    # It said "exact (Clopper-Pearson)" whichever rule marked itself the default and computed the figures.
    from certlab_report_markdown.render import render

    manifest = json.loads((ARCHIVED / "manifest.json").read_text())
    decision = json.loads((ARCHIVED / "decision.json").read_text())
    lines = [json.loads(line) for line in (ARCHIVED / "trials.jsonl").read_text().splitlines()]
    installed = build_report(manifest, lines, decision, exact=exact_interval(discover()))
    wald = GuardedInterval("the rule wald", rule.interval, 5.0, "Wald")
    another = build_report(manifest, lines, decision, exact=wald)
    unnamed = build_report(manifest, lines, decision, exact=rule.interval)
    assert (installed.exact_name, another.exact_name, unnamed.exact_name) == ("Clopper-Pearson", "Wald", "")
    assert "| exact (Clopper-Pearson) |" in render(installed)
    assert "| exact (Wald) |" in render(another) and "Clopper-Pearson" not in render(another)
    assert "| exact |" in render(unnamed)
