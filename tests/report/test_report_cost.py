"""Cost in reports: per-arm figures with intervals, and no cheaper or equal-cost claim the reports cannot carry."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from certlab_core.plugin.types.agent import Usage
from certlab_core.report.cost import cost_report, t_quantile
from certlab_core.report.incomplete_beta import regularized_beta


def claude(cost: float, tokens_in: int = 1000, tokens_out: int = 100) -> Usage:
    return Usage(
        shape="claude-json",
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cached_input_tokens=0,
        cost_usd=cost,
        cost_source="client-estimate",
    )


def codex(tokens_in: int, tokens_out: int) -> Usage:
    return Usage(shape="codex-jsonl", input_tokens=tokens_in, output_tokens=tokens_out, cached_input_tokens=0)


def test_student_t_quantiles_match_scipy() -> None:
    from scipy import stats

    for df in (1, 2, 3.7, 9, 30, 250, 10_000):
        for p in (0.6, 0.9, 0.975, 0.995, 0.9999, 0.025):
            assert math.isclose(t_quantile(p, df), float(stats.t.ppf(p, df)), rel_tol=1e-8, abs_tol=1e-9), (p, df)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.1, 50), st.floats(0.1, 50), st.floats(0.0, 1.0))
def test_the_incomplete_beta_matches_scipy(a: float, b: float, x: float) -> None:
    from scipy import special

    assert math.isclose(regularized_beta(a, b, x), float(special.betainc(a, b, x)), rel_tol=1e-7, abs_tol=1e-10)


def test_figures_per_arm_with_intervals_and_a_claim_when_the_reports_allow_it() -> None:
    report = cost_report(
        {
            "baseline": [claude(0.10), claude(0.12), claude(0.11), None],
            "candidate": [claude(0.05, 500), claude(0.06, 520), claude(0.055, 510)],
        }
    )
    base = report.arms["baseline"]
    assert (base.trials, base.reported) == (4, 3)
    cost = base.figures["cost_usd"]
    assert cost.n == 3 and math.isclose(cost.mean or 0, 0.11) and math.isclose(cost.total or 0, 0.33)
    half = float(__import__("scipy").stats.t.ppf(0.975, 2)) * 0.01 / math.sqrt(3)
    assert math.isclose(cost.low or 0, 0.11 - half) and math.isclose(cost.high or 0, 0.11 + half)
    claims = {c.quantity: c.claim for c in report.comparisons}
    assert claims == {
        "cost_usd": "cheaper",
        "input_tokens": "cheaper",
        "output_tokens": "no difference shown",
        "cached_input_tokens": "no difference shown",
    }


def test_every_dollar_figure_says_it_is_the_clients_own_estimate() -> None:
    report = cost_report(
        {"baseline": [claude(0.10), claude(0.12)], "candidate": [claude(0.05), claude(0.06)]}, alpha=0.1
    )
    lines = report.lines()
    dollar_lines = [line for line in lines if "$" in line]
    assert len(dollar_lines) == 3
    assert all("the client's own estimate" in line for line in dollar_lines)
    assert any(line.startswith("cost: candidate is cheaper than baseline") for line in lines)
    assert all("90%" in line for line in dollar_lines)


@pytest.mark.parametrize(
    ("baseline", "candidate", "reason"),
    [
        ([None, None], [claude(0.1), claude(0.2)], "the baseline arm reported nothing"),
        ([claude(0.1), claude(0.2)], [], "the candidate arm reported nothing"),
        ([codex(10, 2), codex(12, 3)], [claude(0.1), claude(0.2)], "the arms report different shapes"),
        (
            [codex(10, 2), claude(0.2)],
            [claude(0.1), claude(0.2)],
            "the baseline arm's trials report in different shapes",
        ),
    ],
)
def test_no_cheaper_or_equal_cost_claim_without_comparable_reports(
    baseline: list[Usage | None], candidate: list[Usage | None], reason: str
) -> None:
    report = cost_report({"baseline": baseline, "candidate": candidate})
    assert report.comparisons and all(c.claim is None for c in report.comparisons)
    assert all(reason in (c.refused or "") for c in report.comparisons)
    text = "\n".join(report.lines())
    assert "cheaper" not in text and "no difference shown" not in text and "no comparison claimed" in text


def test_a_shape_without_dollars_refuses_the_dollar_comparison_only() -> None:
    report = cost_report({"baseline": [codex(10, 2), codex(12, 3)], "candidate": [codex(20, 2), codex(22, 3)]})
    by_quantity = {c.quantity: c for c in report.comparisons}
    assert by_quantity["cost_usd"].claim is None
    assert "carry no cost" in (by_quantity["cost_usd"].refused or "")
    assert by_quantity["input_tokens"].claim == "costlier"
    assert not any("$" in line for line in report.lines())


def test_dollars_from_different_sources_are_not_compared() -> None:
    other = Usage(shape="claude-json", input_tokens=1, output_tokens=1, cost_usd=0.1, cost_source="invoice")
    report = cost_report({"baseline": [claude(0.1), claude(0.2)], "candidate": [other, other]})
    assert "different sources" in (next(c for c in report.comparisons if c.quantity == "cost_usd").refused or "")


def test_one_report_per_arm_gives_figures_but_no_interval_and_no_claim() -> None:
    report = cost_report({"baseline": [claude(0.1)], "candidate": [claude(0.05)]})
    assert report.arms["baseline"].figures["cost_usd"].low is None
    assert all(c.claim is None for c in report.comparisons)
    assert any("one trial: no interval" in line for line in report.lines())
