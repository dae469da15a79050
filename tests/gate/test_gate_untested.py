"""A gate in which every trial of both arms crashed said PASS, exit 0: now it says that nothing was tested, and why.

The experiment is the one the issue found: an MCP client with a bug of its own dies before its first
tool call, on both sides, so all 240 trials (2 conditions x 60 per arm x 2 arms) end ``agent-crashed``.
The exact rule passes it ([-0.0811, 0.0811] against delta 0.1: a baseline of 0/60 cannot be seen to drop)
and keeps passing it, so the reference figures reproduce; but the verdict line, decision.json, the
Markdown and HTML reports now say that nothing was tested, and why, and a descriptor that declares
``min_baseline_success`` makes such a condition ERROR, exit 3.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_certlab

CLIENT = '''
"""An MCP client with a bug of its own: it dies before its first tool call."""


def agent(task, tools, rng):
    raise RuntimeError("the client's session object was never initialised")
'''

DESCRIPTOR: dict[str, Any] = {
    "schema": "certlab.experiment/1",
    "experiment": "every-trial-crashed",
    "task": {"world": "retry-inventory", "input": {"orders": 2, "existing_share": 0.0, "flaky_confirm_rate": 0.0}},
    "oracle": "world",
    "arms": {
        "baseline": {"agent": "crashing_client:agent", "label": "old"},
        "candidate": {"agent": "crashing_client:agent", "label": "new"},
    },
    "conditions": [
        {"name": "reserve-timeout", "bucket": "falsify", "faults": [{"fault": "tool_timeout", "tool": "reserve"}]},
        {"name": "clean", "bucket": "benign"},
    ],
    "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
    "n_per_arm": 60,
    "seed": 26,
}
WHY = (
    "the baseline succeeded in 0 of 60 trials (0.0%), no more than delta 0.1, so no drop of more than delta could "
    "be seen; all 120 trials of both arms failed as agent-crashed"
)
BELOW = "the baseline succeeded in 0 of 60 trials (0.0%), below the declared min_baseline_success 0.2; all 120 trials"


def experiment(folder: Path, name: str = "certlab.yaml", **changes: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "crashing_client.py").write_text(textwrap.dedent(CLIENT), encoding="utf-8")
    data = json.loads(json.dumps(DESCRIPTOR))
    for key, value in changes.items():
        if key == "conditions_min":
            for condition, minimum in zip(data["conditions"], value, strict=True):
                if minimum is not None:
                    condition["min_baseline_success"] = minimum
        else:
            data[key] = value
    (folder / name).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return folder / name


def run(path: Path) -> tuple[Any, Path, dict[str, Any]]:
    done = run_certlab("run", str(path), "--out", str(path.parent / "runs"), "--quiet", cwd=path.parent)
    (store,) = [line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith("run: ")]
    folder = path.parent / store if not Path(store).is_absolute() else Path(store)
    return done, folder, json.loads((folder / "decision.json").read_text())


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, dict[str, Any]]:
    return run(experiment(tmp_path_factory.mktemp("crashed")))


def test_a_gate_whose_every_trial_crashed_passes_by_the_rule_but_says_nothing_was_tested(crashed: Any) -> None:
    done, _folder, decision = crashed
    assert done.returncode == 0, done.stdout + done.stderr  # the rule is unchanged: its verdict is still PASS
    assert decision["verdict"] == "PASS" and decision["trials"]["run"] == 240
    modes = [c["failure_modes"][arm] for c in decision["conditions"] for arm in ("baseline", "candidate")]
    assert modes == [{"agent-crashed": 60}] * 4
    assert done.stdout.splitlines()[-1] == f"verdict: PASS, but nothing was tested: reserve-timeout, clean: {WHY}"
    assert [c["untested"] for c in decision["conditions"]] == [WHY, WHY]
    assert [c["verdict"] for c in decision["conditions"]] == ["PASS", "PASS"]
    assert decision["warnings"][:2] == [
        f"reserve-timeout: nothing was tested: {WHY}",
        f"clean: nothing was tested: {WHY}",
    ]
    assert "condition clean (benign): baseline 0/60, candidate 0/60, candidate - baseline [-0.0811, 0.0811]: " \
           "PASS: nothing was tested" in done.stdout  # fmt: skip


def test_certlab_gate_recomputes_the_same_decision_and_says_the_same(crashed: Any) -> None:
    done, folder, decision = crashed
    again = run_certlab("gate", str(folder))
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == done.stdout.splitlines()[-1]
    as_json = run_certlab("gate", str(folder), "--json")
    assert json.loads(as_json.stdout) == decision


def test_the_markdown_and_html_reports_say_nothing_was_tested_and_why(crashed: Any, tmp_path: Path) -> None:
    _done, folder, _decision = crashed
    assert run_certlab("report", str(folder), "--format", "markdown", "--out", str(tmp_path / "r.md")).returncode == 0
    markdown = (tmp_path / "r.md").read_text()
    assert markdown.splitlines()[0] == "## ⚠️ certlab: **PASS** on `every-trial-crashed`, but nothing was tested"
    assert f"> **Nothing was tested** in `clean`: {WHY}." in markdown
    assert run_certlab("report", str(folder), "--format", "html", "--out", str(tmp_path / "r.html")).returncode == 0
    html = (tmp_path / "r.html").read_text()
    assert "<code>every-trial-crashed</code>, but <span class=warn>nothing was tested</span></h1>" in html
    assert f"<li><code>reserve-timeout</code>: {WHY}</li>" in html
    text = run_certlab("report", str(folder)).stdout
    assert text.splitlines()[0] == "experiment every-trial-crashed: PASS, but nothing was tested (exit 0)"
    assert f"  NOTHING WAS TESTED in reserve-timeout: {WHY}" in text.splitlines()


def test_a_declared_min_baseline_success_makes_such_a_condition_error_exit_3(tmp_path: Path) -> None:
    done, folder, decision = run(experiment(tmp_path / "minimum", min_baseline_success=0.2))
    assert done.returncode == 3, done.stdout + done.stderr
    assert decision["verdict"] == "ERROR" and decision["exit_code"] == 3 and decision["problems"] == []
    reserve, clean = decision["conditions"]
    assert (reserve["verdict"], reserve["rule_verdict"]) == ("ERROR", "PASS")
    assert reserve["bounds"] == clean["bounds"] and reserve["bounds"]["lower"] == pytest.approx(-0.0811, abs=1e-4)
    assert reserve["untested"].startswith(BELOW)
    assert done.stdout.splitlines()[-1].startswith(
        f"verdict: ERROR: nothing was tested: reserve-timeout, clean: {BELOW}"
    )
    assert decision["reasons"][0].startswith(f"reserve-timeout (falsify): ERROR at look 1: nothing was tested: {BELOW}")
    assert decision["reasons"][0].endswith("(the rule alone said PASS)")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [c["min_baseline_success"] for c in manifest["conditions"]] == [0.2, 0.2]
    markdown = run_certlab("report", str(folder), "--format", "markdown").stdout
    assert markdown.splitlines()[0] == "## ⚠️ certlab: **ERROR** on `every-trial-crashed`: nothing was tested"
    assert "(the rule alone said PASS)." in markdown


def test_a_condition_s_own_minimum_overrides_the_descriptor_s(tmp_path: Path) -> None:
    path = experiment(tmp_path / "own", min_baseline_success=0.2, conditions_min=[None, 0.0])
    done, _folder, decision = run(path)
    assert done.returncode == 3, done.stdout + done.stderr
    reserve, clean = decision["conditions"]
    assert reserve["verdict"] == "ERROR" and clean["verdict"] == "PASS" and "rule_verdict" not in clean
    assert clean["untested"] == WHY  # no minimum to fall below, but still nothing tested, and said so
    assert decision["warnings"][0] == f"clean: nothing was tested: {WHY}"


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"min_baseline_success": 1.5},
            "certlab.yaml: min_baseline_success: 1.5 is not a success rate; give a share from 0 to 1, such as 0.2",
        ),
        (
            {"min_baseline_success": "lots"},
            "certlab.yaml: min_baseline_success: expected a number or null, got the text 'lots'",
        ),
        (
            {"conditions_min": [-0.1, None]},
            "certlab.yaml: conditions[0].min_baseline_success: -0.1 is not a success rate; give a share from 0 to 1, "
            "such as 0.2",
        ),
    ],
)
def test_a_bad_minimum_is_one_line_exit_4(tmp_path: Path, changes: dict[str, Any], line: str) -> None:
    path = experiment(tmp_path / "bad", **changes)
    done = run_certlab("run", str(path), "--out", str(tmp_path / "runs"), cwd=tmp_path / "bad")
    assert done.returncode == 4 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"certlab: error: {line}"]


def test_a_minimum_on_a_ceiling_condition_is_refused(tmp_path: Path) -> None:
    path = experiment(tmp_path / "ceiling")
    data = yaml.safe_load(path.read_text())
    data["conditions"].append({"name": "confirm-down", "bucket": "ceiling", "min_baseline_success": 0.3})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    done = run_certlab("run", str(path), "--out", str(tmp_path / "runs"), cwd=path.parent)
    assert done.returncode == 4
    assert done.stderr.strip() == (
        "certlab: error: certlab.yaml: conditions[2].min_baseline_success: a ceiling condition is never gated, "
        "so no minimum applies to it; remove it"
    )
