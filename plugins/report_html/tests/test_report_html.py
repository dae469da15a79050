"""The HTML report: one self-contained file opened in headless Chromium; its DOM shows the verdict and the plots."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from certlab_clopper_pearson.rule import interval as exact_interval
from certlab_report_html.render import render
from certlab_report_html.svg import ticks
from made_once import a_vs_b_store

from certlab_core.report.model import Report, build_report
from certlab_core.sdk.services import installed_plugins

ARCHIVED = Path(__file__).resolve().parents[3] / "tests" / "archived_stores"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def report_of(name: str) -> Report:
    folder = ARCHIVED / name
    manifest = json.loads((folder / "manifest.json").read_text())
    decision = json.loads((folder / "decision.json").read_text())
    lines = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    return build_report(manifest, lines, decision, run=name, exact=exact_interval)


def chromium() -> str:
    """Debian's chromium; missing is a failure under CI (the Makefile installs it), else a skip."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed; 'make setup' installs it with apt-get")
        pytest.skip("chromium is not installed (make setup installs it where apt-get works)")
    return found


class DomFacts(HTMLParser):
    """What the test reads from the rendered DOM: the verdict element's text and the plots."""

    def __init__(self) -> None:
        super().__init__()
        self.verdict = ""
        self.in_verdict = False
        self.condition_plots: list[str] = []
        self.oc_plots = 0
        self.polylines = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        if found.get("id") == "verdict":
            self.in_verdict = True
        if tag == "svg" and "condition-plot" in classes:
            self.condition_plots.append(found.get("data-condition") or "")
        if tag == "svg" and "oc-plot" in classes:
            self.oc_plots += 1
        if tag == "polyline":
            self.polylines += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self.in_verdict = False

    def handle_data(self, data: str) -> None:
        if self.in_verdict:
            self.verdict += data


def rendered_dom(page: Path, profile: Path) -> str:
    done = subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("name", ["block", "inconclusive", "error"])
def test_headless_chromium_shows_the_verdict_and_one_plot_per_condition(name: str, tmp_path: Path) -> None:
    report = report_of(name)
    rule = installed_plugins().get("statistical_rules", report.rule)
    page = tmp_path / "report.html"
    page.write_text(render(report, rule), encoding="utf-8")
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"https?://", text, re.IGNORECASE), "the page references a URL"
    assert "<script" not in text and "<link" not in text and "src=" not in text
    facts = DomFacts()
    facts.feed(rendered_dom(page, tmp_path / "profile"))
    assert facts.verdict.strip() == report.verdict
    assert facts.condition_plots == [c.name for c in report.conditions]
    assert facts.oc_plots == 1 and facts.polylines == 3  # P(PASS), P(BLOCK), P(INCONCLUSIVE)


def test_without_the_rule_the_page_says_why_there_is_no_curve() -> None:
    text = render(report_of("block"), None)
    assert 'class="oc-plot"' not in text and "is not installed here" in text
    assert text.count('class="condition-plot"') == 2


def test_the_curve_comes_from_the_rules_plan() -> None:
    calls: list[tuple[float, float, int]] = []

    class Planner:
        name = "clopper-pearson"

        @staticmethod
        def plan(p_baseline: float, p_candidate: float, n: int, alpha: float, delta: float, k: int, looks: int):
            calls.append((p_baseline, p_candidate, n))
            return {"PASS": 0.25, "BLOCK": 0.5, "INCONCLUSIVE": 0.25}

    report = report_of("block")
    text = render(report, Planner())
    assert len(calls) == 41 and {n for _b, _c, n in calls} == {report.n_per_arm}
    assert 'class="oc-plot"' in text


def test_ticks_are_round_and_cover_the_range() -> None:
    assert ticks(-0.42, 0.05) == [-0.4, -0.3, -0.2, -0.1, 0.0]
    assert ticks(-1.0, 1.0) == [-1.0, -0.5, 0.0, 0.5, 1.0]


# ------------------------------------------------------------------- the gate story's BLOCK, measured in the browser

MEASURE = """<script>
for (const svg of document.querySelectorAll("svg.condition-plot")) {
  const middle = (selector) => {
    const found = svg.querySelector(selector);
    if (!found) return null;
    const box = found.getBoundingClientRect();
    return {left: box.left, right: box.right};
  };
  svg.setAttribute("data-measured", JSON.stringify(
    {interval: middle("line.interval"), margin: middle("line.margin"), zero: middle("line.zero")}));
}
</script>"""


class Measured(HTMLParser):
    """The positions the measuring script wrote on each condition plot, and the badges and notes of each figure."""

    def __init__(self) -> None:
        super().__init__()
        self.plots: dict[str, dict[str, dict[str, float] | None]] = {}
        self.badges: dict[str, list[str]] = {}
        self.figure = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "figure":
            self.figure = found.get("data-condition") or ""
            self.badges[self.figure] = []
        if tag == "svg" and found.get("data-measured"):
            self.plots[found.get("data-condition") or ""] = json.loads(found["data-measured"] or "{}")
        if tag == "span" and found.get("data-verdict") and self.figure:
            self.badges[self.figure].append(found["data-verdict"] or "")


@pytest.fixture(scope="module")
def story_block(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """The gate story's confirmatory run (examples/retry/a_vs_b.yaml): a BLOCK, a ceiling, a partly fired fault."""
    folder = a_vs_b_store(tmp_path_factory)  # made once per test run (exit 1 checked there); read only
    manifest = json.loads((folder / "manifest.json").read_text())
    decision = json.loads((folder / "decision.json").read_text())
    lines = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    return build_report(manifest, lines, decision, run=folder.name, exact=exact_interval)


def test_the_story_blocks_plot_draws_interval_margin_and_zero_at_least_20_px_apart(
    story_block: Report, tmp_path: Path
) -> None:
    rule = installed_plugins().get("statistical_rules", story_block.rule)
    page = tmp_path / "report.html"
    page.write_text(render(story_block, rule).replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    facts = Measured()
    facts.feed(rendered_dom(page, tmp_path / "profile"))
    block = facts.plots["reserve-timeout"]
    interval, margin, zero = block["interval"], block["margin"], block["zero"]
    assert interval is not None and margin is not None and zero is not None
    margin_x, zero_x = (margin["left"] + margin["right"]) / 2, (zero["left"] + zero["right"]) / 2
    assert interval["left"] < interval["right"] < margin_x < zero_x
    assert margin_x - interval["right"] >= 20 and zero_x - margin_x >= 20, block
    # the ceiling is reported only: no PASS or BLOCK badge beside it; the gating conditions keep theirs
    assert facts.badges["confirm-down"] == ["reported only"]
    assert facts.badges["reserve-timeout"][0] == "BLOCK" and facts.badges["slow-stock"][0] == "PASS"
    header = page.read_text(encoding="utf-8").split("<ul class=reasons>", 1)[1].split("</ul>", 1)[0]
    ceiling = next(item for item in header.split("<li>") if item.startswith("confirm-down"))
    assert "reported only, never gated" in ceiling and "PASS" not in ceiling and "BLOCK" not in ceiling


def test_a_fault_that_fired_in_some_trials_or_never_is_said_beside_the_counts(story_block: Report) -> None:
    text = render(story_block, None)
    figure = text.split('data-condition="reserve-timeout"', 1)[1].split("</figure>", 1)[0]
    assert "fault tool_timeout on reserve fired in 60/200 baseline and 60/200 candidate trials" in figure
    never = render(report_of("error"), None)
    assert '<p class="firing warn">fault json:loads on stock never fired: not tested as declared</p>' in never
