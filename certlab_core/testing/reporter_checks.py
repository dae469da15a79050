"""``ReporterConformance``: the checks every reporter runs on itself.

A reporter plugin subclasses it in its own tests, naming the reporter; pytest then renders
two reports, one with every part filled (a BLOCK over two conditions, faults, failure
clusters, infrastructure errors, usage, earlier runs, and names that hold markup) and one
with nothing in it (no condition ran: ERROR), with and without the rule, and checks that

- its record is well formed (its name, and a ``suffix`` such as ``.md``);
- it renders both reports to text that shows the verdict, and every condition by name;
- it renders the same report to the same text every time;
- the text is well formed for its suffix: ``.xml`` and ``.json`` parse, ``.html`` and
  ``.xml`` escape the markup a name holds (no ``<script>`` of a report's own survives);
- rendering writes no file: not in the working folder, HOME or the temp folder (each a
  fresh, watched folder while it renders, in a forked process).

Example (the reporter's ``tests/test_conformance.py``)::

    from certlab_core.testing import ReporterConformance

    class TestCsv(ReporterConformance):
        reporter_name = "csv"
"""

from __future__ import annotations

import json
import os
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from certlab_core.plugin.report import (
    REPORT_SCHEMA,
    ArmSummary,
    ArmUsage,
    ConditionReport,
    EarlierRun,
    FailureCluster,
    FaultFiring,
    InfraError,
    PassK,
    Report,
)
from certlab_core.plugin.types.reporter import Reporter
from certlab_core.plugin.types.rule import StatisticalRule

#: Markup a name in a report may hold (an experiment's names are the user's): a reporter must not pass it on raw.
MARKUP = "<script>alert(1)</script>"
CONDITIONS = ("reserve-timeout", "calm")


def _arm(arm: str, successes: int, trials: int = 10) -> ArmSummary:
    rate = successes / trials
    return ArmSummary(
        arm=arm,
        label=f"{arm} & <agent>",
        agent=f"agents:{arm}",
        trials=trials,
        successes=successes,
        failures=trials - successes - 1,
        errors=1,
        rate=rate,
        exact=(max(0.0, rate - 0.3), min(1.0, rate + 0.2)),
        wilson=(max(0.0, rate - 0.25), min(1.0, rate + 0.15)),
        pass_k=(PassK(1, rate), PassK(2, rate * rate), PassK(16, None)),
        recovered_trials=1,
        recovered_errors=2,
    )


def sample_report() -> Report:
    """A BLOCK with every part of the model filled, and markup in the names a user gives."""
    blocking = ConditionReport(
        name=CONDITIONS[0],
        bucket="falsify",
        gating=True,
        verdict="BLOCK",
        look=1,
        lower=-0.9,
        upper=-0.4,
        baseline=_arm("baseline", 9),
        candidate=_arm("candidate", 2),
        faults=(FaultFiring(0, "tool_timeout", "reserve", 9, 10, 10, 10),),
        clusters=(
            FailureCluster(
                fingerprint="ab12cd34",
                failure_mode="tool-fault-uncaught",
                event=f"reserve raised ToolTimeout {MARKUP}",
                baseline=0,
                candidate=7,
                examples=("candidate/reserve-timeout/1", "candidate/reserve-timeout/2"),
            ),
        ),
    )
    calm = ConditionReport(
        name=CONDITIONS[1],
        bucket="benign",
        gating=False,
        verdict="PASS",
        look=1,
        lower=-0.1,
        upper=0.2,
        baseline=_arm("baseline", 8),
        candidate=_arm("candidate", 8),
        faults=(),
        clusters=(),
        untested="",
    )
    return Report(
        schema=REPORT_SCHEMA,
        experiment=f"conformance {MARKUP}",
        run="run-1",
        verdict="BLOCK",
        exit_code=1,
        rule="clopper-pearson",
        alpha=0.05,
        delta=0.1,
        looks=1,
        gating_conditions=1,
        n_per_arm=10,
        pass_k=(1, 2, 16),
        conditions=(blocking, calm),
        usage=(
            ArmUsage("baseline", "baseline", 20, 18, 12000, 800, 0.12, ("client-estimate",)),
            ArmUsage("candidate", "candidate", 20, 0, None, None, None, ()),
        ),
        infra_errors=(InfraError("candidate/calm/3", 1, f"worker lost {MARKUP}", final=False),),
        problems=(),
        reasons=(f"{CONDITIONS[0]}: the candidate is worse by more than delta",),
        contract_violations={"candidate": 1},
        trials={"baseline": 20, "candidate": 20},
        earlier_runs=(EarlierRun("run-0", "PASS"), EarlierRun("run-00", None)),
        cost=("cost: no comparison is claimed (the candidate reported none)",),
    )


def empty_report() -> Report:
    """A run in which nothing ran: no condition, no trial, ERROR."""
    return Report(
        schema=REPORT_SCHEMA,
        experiment="conformance-empty",
        run="run-empty",
        verdict="ERROR",
        exit_code=3,
        rule="clopper-pearson",
        alpha=0.05,
        delta=0.1,
        looks=1,
        gating_conditions=0,
        n_per_arm=0,
        pass_k=(),
        conditions=(),
        usage=(),
        infra_errors=(),
        problems=("the store holds no trial",),
        reasons=("the store holds no trial",),
    )


def _files_under(root: Path) -> list[str]:
    from certlab_core.sdk.trees import walk

    return sorted(e.relpath for e in walk(root))


def render_watched(reporter: Reporter, rule: StatisticalRule | None, base: str) -> dict[str, Any]:
    """In a forked process whose working folder, HOME and temp folder are fresh: render each report, look around."""
    root = Path(base)
    folders = {name: root / name for name in ("cwd", "home", "tmp")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    os.chdir(folders["cwd"])
    os.environ["HOME"] = str(folders["home"])
    os.environ["TMPDIR"] = str(folders["tmp"])
    tempfile.tempdir = str(folders["tmp"])
    rendered: dict[str, Any] = {}
    cases = {
        "sample": (sample_report(), None),
        "sample again": (sample_report(), None),
        "empty": (empty_report(), None),
        "sample with the rule": (sample_report(), rule),
        "empty with the rule": (empty_report(), rule),
    }
    for name, (report, with_rule) in cases.items():
        try:
            rendered[name] = reporter.render(report, with_rule)
        except Exception as error:  # reported by the checks, not a crash of them
            rendered[name] = f"raised {type(error).__name__}: {error}"
            rendered.setdefault("raised", {})[name] = rendered[name]
    written = [f"{name}/{p}" for name, folder in folders.items() for p in _files_under(folder)]
    return {"rendered": rendered, "written": written}


class ReporterConformance:
    """The conformance suite every reporter runs against itself; set ``reporter_name``."""

    reporter_name: str = ""
    #: The installed rule handed to ``render`` in the renderings with a rule (skipped there when not installed).
    rule_name: str = "clopper-pearson"

    def reporter(self) -> Reporter:
        """The reporter under test: the installed one named ``reporter_name``."""
        from certlab_core._runtime.registry import discover

        if not self.reporter_name:
            pytest.fail("set reporter_name on the ReporterConformance subclass")
        found: Reporter = discover().get("reporters", self.reporter_name)
        return found

    def rule(self) -> StatisticalRule | None:
        from certlab_core._runtime.registry import discover

        installed = discover().all("statistical_rules")
        found = installed.get(self.rule_name)
        return found if isinstance(found, StatisticalRule) else None

    @pytest.fixture(scope="class")
    @classmethod
    def renderings(cls, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        from certlab_core.sdk.forking import call_in_fork

        checks = cls()
        base = str(tmp_path_factory.mktemp("reporter") / "watched")
        found: dict[str, Any] = call_in_fork(render_watched, checks.reporter(), checks.rule(), base, timeout=120)
        return found

    def _texts(self, renderings: dict[str, Any]) -> dict[str, str]:
        raised = renderings["rendered"].get("raised", {})
        assert not raised, f"render raised: {raised}"
        texts = {k: v for k, v in renderings["rendered"].items() if k != "raised"}
        wrong = {k: type(v).__name__ for k, v in texts.items() if not isinstance(v, str)}
        assert not wrong, f"render returned something other than text: {wrong}"
        return texts

    def test_its_record_is_well_formed(self) -> None:
        reporter = self.reporter()
        assert isinstance(reporter, Reporter), f"{type(reporter).__name__} is not a Reporter record"
        assert reporter.name == self.reporter_name, f"the reporter is named {reporter.name!r}"
        suffix = reporter.suffix
        assert suffix.startswith(".") and len(suffix) > 1 and "/" not in suffix, (
            f"the suffix {suffix!r} is no file ending"
        )

    def test_it_shows_the_verdict_and_every_condition(self, renderings: dict[str, Any]) -> None:
        texts = self._texts(renderings)
        sample = texts["sample"]
        assert "BLOCK" in sample, "the report's verdict BLOCK is not shown"
        missing = [name for name in CONDITIONS if name not in sample]
        assert not missing, f"conditions not shown: {missing}"
        assert "ERROR" in texts["empty"], "an empty report's verdict ERROR is not shown"

    def test_it_renders_a_report_in_which_nothing_ran(self, renderings: dict[str, Any]) -> None:
        texts = self._texts(renderings)
        assert texts["empty"].strip(), "the empty report rendered to nothing"
        if self.rule() is not None:
            assert texts["empty with the rule"].strip(), "the empty report with the rule rendered to nothing"

    def test_the_same_report_renders_to_the_same_text(self, renderings: dict[str, Any]) -> None:
        texts = self._texts(renderings)
        assert texts["sample"] == texts["sample again"], "the same report rendered to two different texts"

    def test_the_text_is_well_formed_for_its_suffix(self, renderings: dict[str, Any]) -> None:
        texts = self._texts(renderings)
        suffix = self.reporter().suffix
        for name, text in texts.items():
            if suffix == ".json":
                try:
                    json.loads(text)
                except ValueError as error:
                    pytest.fail(f"the {name} report is not JSON: {error}")
            if suffix in (".xml", ".svg"):
                try:
                    ET.fromstring(text)
                except ET.ParseError as error:
                    pytest.fail(f"the {name} report is not well-formed XML: {error}")
            if suffix in (".html", ".htm", ".xml", ".svg"):
                assert MARKUP not in text, f"the {name} report passes a name's markup on unescaped: {MARKUP}"

    def test_rendering_writes_no_file(self, renderings: dict[str, Any]) -> None:
        assert not renderings["written"], f"render wrote files: {renderings['written']}"
