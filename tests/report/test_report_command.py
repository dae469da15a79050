"""certlab report on archived run stores: verdicts, arms, clusters, faults, errors, pass^k."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from certlab_clopper_pearson.rule import interval as exact_interval
from report_helpers import ARCHIVED, run_certlab

from certlab_core.gate.events import failure_fingerprint
from certlab_core.report.model import build_report, pass_hat_k
from certlab_core.sdk.wilson import wilson


def _report(name: str, *args: str) -> dict:
    done = run_certlab("report", str(ARCHIVED / name), "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_block_report_has_bounds_arms_clusters_and_faults() -> None:
    report = _report("block", "--pass-k", "1,2,20")
    assert report["verdict"] == "BLOCK" and report["exit_code"] == 1
    timeout, clean = report["conditions"]
    assert (timeout["name"], timeout["verdict"]) == ("reserve-timeout", "BLOCK")
    assert timeout["upper"] < -report["delta"]
    assert (timeout["baseline"]["successes"], timeout["candidate"]["successes"]) == (10, 0)
    assert [p["k"] for p in timeout["baseline"]["pass_k"]] == [1, 2, 20]
    assert timeout["baseline"]["pass_k"][2]["value"] is None  # k above the trials: no estimate
    assert timeout["faults"][0]["candidate_fired"] == 10
    (cluster,) = timeout["clusters"]
    assert cluster["candidate"] == 10 and cluster["baseline"] == 0
    assert cluster["failure_mode"] == "tool-fault-uncaught"
    assert cluster["event"] == "vs passing twin: end of calls, right after reserve -> error ToolTimeout (injected)"
    assert clean["verdict"] == "INCONCLUSIVE" and clean["clusters"] == []
    assert report["infra_errors"] == [] and report["decision_file"] == "matches"


def test_error_report_keeps_infrastructure_errors_apart_and_flags_faults_that_never_fired() -> None:
    report = _report("error")
    assert report["verdict"] == "ERROR" and report["problems"]
    (condition,) = report["conditions"]
    assert condition["baseline"]["errors"] == 1 and condition["baseline"]["failures"] == 0
    assert condition["clusters"] == []
    assert all(e["error"].startswith("injector-broken:") and e["final"] for e in report["infra_errors"])
    assert condition["faults"][0]["baseline_fired"] == 0


def test_text_report_and_a_reporter_plugin(tmp_path: Path) -> None:
    text = run_certlab("report", str(ARCHIVED / "inconclusive"))
    assert text.returncode == 0 and "INCONCLUSIVE (exit 2)" in text.stdout
    out = tmp_path / "r.md"
    done = run_certlab("report", str(ARCHIVED / "block"), "--format", "markdown", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "**BLOCK**" in out.read_text()


def test_an_edited_decision_file_is_noted_and_the_verdict_recomputed(tmp_path: Path) -> None:
    store = tmp_path / "block"
    shutil.copytree(ARCHIVED / "block", store)
    (store / "decision.json").write_text((store / "decision.json").read_text().replace("BLOCK", "PASS"))
    report = json.loads(run_certlab("report", str(store), "--json").stdout)
    assert report["verdict"] == "BLOCK" and report["decision_file"] == "differs"


def test_earlier_runs_of_the_same_experiment_are_listed(tmp_path: Path) -> None:
    for name in ("first", "second"):
        shutil.copytree(ARCHIVED / "block", tmp_path / name)
    report = json.loads(run_certlab("report", str(tmp_path / "second"), "--json").stdout)
    assert [(r["run"], r["verdict"]) for r in report["earlier_runs"]] == [("first", "BLOCK")]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--pass-k", "1,x"], "--pass-k"),
        (["--format", "pdf"], "unknown reporter 'pdf'"),
        (["--json", "--format", "markdown"], "exclusive"),
    ],
)
def test_bad_report_arguments_are_one_line(args: list[str], needle: str) -> None:
    done = run_certlab("report", str(ARCHIVED / "block"), *args)
    assert done.returncode == 4
    assert needle in done.stderr and done.stderr.count("\n") == 1


# --------------------------------------------------------------------------- the pieces, directly


def _event(seq: int, name: str, status: str = "ok", fault: int | None = None) -> dict:
    error = {"type": "ToolTimeout", "message": "late"} if status == "error" else None
    return {"seq": seq, "kind": "tool", "name": name, "args": {}, "status": status, "result": None, "error": error,
            "fault": fault}  # fmt: skip


def test_fingerprint_without_a_passing_twin_is_the_first_error() -> None:
    trial = {"failure_mode": "tool-fault-uncaught", "faults": [{"index": 0, "fault": "tool_timeout", "tool": "x"}],
             "events": [_event(0, "a"), _event(1, "x", "error", 0)]}  # fmt: skip
    fingerprint, event = failure_fingerprint(trial, None)
    assert fingerprint == "tool-fault-uncaught @ first error: x -> error ToolTimeout (injected)"
    twin = {"outcome": "failure", "events": []}
    assert failure_fingerprint(trial, twin)[1] == event


def test_reading_intervals_and_pass_k() -> None:
    low, high = exact_interval(0, 10, 0.05)
    assert low == 0.0 and abs(high - 0.30849) < 1e-4
    assert wilson(10, 10, 0.05)[1] == 1.0
    assert pass_hat_k(3, 4, 2) == 0.5 and pass_hat_k(1, 1, 2) is None


def test_the_report_model_is_a_pure_function_of_its_inputs() -> None:
    manifest = json.loads((ARCHIVED / "block" / "manifest.json").read_text())
    decision = json.loads((ARCHIVED / "block" / "decision.json").read_text())
    lines = [json.loads(line) for line in (ARCHIVED / "block" / "trials.jsonl").read_text().splitlines()]
    forward = build_report(manifest, lines, decision)
    backward = build_report(manifest, list(reversed(lines)), decision)
    assert forward == backward
