"""certlab certify: the bundle's shape and seal, the contract, calibration, and every refusal."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import WaitingAgent, make_certification, run_certlab

from certlab_core._runtime.registry import Registry, discover
from certlab_core.certify.certification import CertifyOptions, certify
from certlab_core.plugin.errors import CertlabError
from certlab_core.sdk.canonical import seal_holds

BUNDLE_KEYS = {
    "schema", "seal", "origin", "agent", "families", "plugins", "environment", "harness_commit", "graders",
    "instrument", "calibration", "trials", "summary",
}  # fmt: skip
TRIAL_KEYS = {
    "id", "family", "task", "defect_class", "repeat", "verdict", "failure_mode", "changes", "diff", "output_tail",
    "timings", "usage",
}  # fmt: skip


def load(folder: Path) -> dict:
    return json.loads((folder / "bundle.json").read_text())


def test_bundle_has_the_documented_shape_and_a_valid_seal(oracle_certification: Path) -> None:
    bundle = load(oracle_certification)
    assert set(bundle) >= BUNDLE_KEYS
    assert bundle["schema"] == "certlab.certification/1"
    assert seal_holds(bundle)
    assert bundle["agent"]["name"] == "oracle" and bundle["agent"]["distribution"] == "certlab-calibration"
    family = bundle["families"][0]
    assert family["name"] == "intervals" and len(family["taskset_sha256"]) == 64 and len(family["prompt_sha256"]) == 64
    assert [g["name"] for g in bundle["graders"]][:2] == ["policy", "suite"]
    for trial in bundle["trials"]:
        assert set(trial) >= TRIAL_KEYS
        assert trial["verdict"] in ("fixed", "not-fixed", "unavailable")


def test_summary_recounts_the_trials(oracle_certification: Path, script_certification: Path) -> None:
    for folder in (oracle_certification, script_certification):
        bundle = load(folder)
        trials = bundle["trials"]
        assert bundle["summary"] == {
            "scheduled": len(trials),
            "fixed": sum(t["verdict"] == "fixed" for t in trials),
            "graded": sum(bool(t["grades"]) for t in trials),
            "unavailable": sum(t["verdict"] == "unavailable" for t in trials),
        }


def test_oracle_fixes_all_six_and_calibration_is_kept_apart(oracle_certification: Path) -> None:
    bundle = load(oracle_certification)
    assert bundle["summary"]["fixed"] == 6 == bundle["summary"]["scheduled"]
    scores: dict[str, list[str]] = {}
    for trial in bundle["calibration"]["trials"]:
        scores.setdefault(trial["agent"], []).append(trial["failure_mode"] or trial["verdict"])
    assert scores["null"] == ["suite-failed"] * 6
    assert scores["oracle"] == ["fixed"] * 6
    assert scores["test-deleter"] == ["policy-tests-modified"] * 6
    assert scores["forbidden-file"] == ["policy-planted-file"] * 6
    assert scores["unavailable"] == ["agent-unavailable"] * 6
    assert all("agent" not in t for t in bundle["trials"])


def test_command_agent_changes_are_recorded_exactly(script_certification: Path) -> None:
    bundle = load(script_certification)
    fixed = [t for t in bundle["trials"] if t["verdict"] == "fixed"]
    assert {t["defect_class"] for t in fixed} == {"off-by-one", "comparison-strictness"}
    for trial in fixed:
        (change,) = trial["changes"]
        assert change["path"] == "intervals.py" and change["kind"] == "modified"
        assert "pattern-fixer: done" in trial["output_tail"]["stdout"]
        assert trial["diff"].startswith("--- a/intervals.py")
        assert base64.b64decode(change["content_b64"])
    unfixed = [t for t in bundle["trials"] if t["verdict"] != "fixed"]
    assert {t["failure_mode"] for t in unfixed} == {"suite-failed"}
    contract = (script_certification / "CONTRACT.md").read_text()
    assert "pattern-fixer" in contract and "suite-failed" in contract and "2 of 6 trials fixed" in contract


def test_environment_is_recorded_without_environment_variables(oracle_certification: Path) -> None:
    text = (oracle_certification / "bundle.json").read_text()
    bundle = json.loads(text)
    assert "certlab" in bundle["environment"]["distributions"]
    assert os.environ.get("PATH", "no-path") not in text


def test_contract_states_the_instrument_and_the_limits(oracle_certification: Path) -> None:
    contract = (oracle_certification / "CONTRACT.md").read_text()
    assert "each of the 6 seeded trees fails them" in contract
    assert "| oracle | 6/6 |" in contract
    assert "bounds no rate" in contract
    assert "sandbox" in contract


def test_repeated_trials_give_exact_intervals(registry: Registry, tmp_path: Path) -> None:
    folder = make_certification(registry, tmp_path / "k2", "oracle", trials=2)
    bundle = load(folder)
    assert bundle["summary"]["scheduled"] == 12
    assert sorted({t["repeat"] for t in bundle["trials"]}) == [1, 2]
    contract = (folder / "CONTRACT.md").read_text()
    assert "Clopper-Pearson" in contract
    assert "[0.158, 1.000]" in contract  # 2/2 at 95%: the exact interval's lower end is 0.025 ** 0.5
    assert "failure-free runs" in contract


def test_unavailable_agent_exits_3_with_the_bundle_written(tmp_path: Path) -> None:
    done = run_certlab("certify", "--family", "intervals", "--agent", "unavailable", "--out", str(tmp_path / "u"), "-q")
    assert done.returncode == 3, done.stderr
    bundle = load(tmp_path / "u")
    assert bundle["summary"]["unavailable"] == 6 and bundle["summary"]["fixed"] == 0
    assert {t["failure_mode"] for t in bundle["trials"]} == {"agent-unavailable"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--family", "nosuch", "--agent", "oracle"], "unknown task family 'nosuch' (valid: "),
        (["--family", "intervals", "--agent", "nosuch"], "unknown agent 'nosuch' (valid: "),
        (["--family", "intervals", "--agent", "command"], "give it with --agent-arg"),
        (["--family", "intervals", "--agent", "command", "--agent-arg", "no-such-agent-cli --go"], "is not on PATH"),
        (["--family", "intervals", "--agent", "command", "--agent-arg", "/nonexistent/agent"], "not an executable"),
        (["--family", "intervals", "--agent", "oracle", "--trials", "0"], "--trials must be 1 to 10000 (got 0)"),
        # a hundred million built every trial's record in memory first (4.6 GB, and no trial ran)
        (["--family", "intervals", "--agent", "oracle", "--trials", "100000000"], "--trials must be 1 to 10000"),
        # finite, so it passed; the trial's deadline past it was infinite: internal error: OverflowError
        (["--family", "intervals", "--agent", "oracle", "--agent-timeout", "1e308"], "at most 604800 (a week)"),
        # nan passed the old check (and no trial had a time limit); inf reached the bundle's JSON: internal error
        (["--family", "intervals", "--agent", "oracle", "--agent-timeout", "nan"], "--agent-timeout nan: give a"),
        (["--family", "intervals", "--agent", "oracle", "--agent-timeout", "inf"], "--agent-timeout inf: give a"),
        (["--family", "intervals", "--agent", "oracle", "--agent-timeout", "0"], "of seconds above 0"),
        # taken as the CPUs' count without a word, where run refused it
        (["--family", "intervals", "--agent", "oracle", "-w", "-3"], "--workers -3: give a number of trials at once"),
    ],
)
def test_bad_input_is_one_line_and_exit_4(tmp_path: Path, args: list[str], message: str) -> None:
    done = run_certlab("certify", *args, "--out", str(tmp_path / "out"))
    assert done.returncode == 4, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("certlab: error: ") and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "bundle.json").exists()


def test_a_token_budget_needs_the_model_boundary_and_a_positive_count(registry: Registry) -> None:
    from certlab_core.plugin.errors import UsageError

    with pytest.raises(UsageError, match="--token-budget must be at least 1"):
        certify(registry, CertifyOptions(families=("intervals",), agent="oracle", token_budget=0), lambda _m: None)
    with pytest.raises(UsageError, match="counted at the model boundary, and oracle would run without one"):
        certify(registry, CertifyOptions(families=("intervals",), agent="oracle", token_budget=500), lambda _m: None)


def test_a_built_in_family_that_certlab_plugins_leaves_out_says_so(tmp_path: Path) -> None:
    env = dict(os.environ, CERTLAB_PLUGINS="intervals,calibration,policy,suite,executor-local")
    done = run_certlab("certify", "--family", "ledger", "--agent", "oracle", "--out", str(tmp_path / "o"), env=env)
    assert done.returncode == 4
    assert "valid: intervals" in done.stderr
    assert "the plugin ledger (certlab-ledger), which CERTLAB_PLUGINS leaves out: add ledger to CERTLAB_PLUGINS" in (
        done.stderr
    )


def test_existing_certification_is_never_overwritten(oracle_certification: Path) -> None:
    before = (oracle_certification / "bundle.json").read_bytes()
    done = run_certlab("certify", "--family", "intervals", "--agent", "null", "--out", str(oracle_certification))
    assert done.returncode == 4 and "already holds a certification" in done.stderr
    assert (oracle_certification / "bundle.json").read_bytes() == before


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    done = run_certlab("--debug", "certify", "--family", "nosuch", "--agent", "oracle", "--out", str(tmp_path / "o"))
    assert done.returncode == 4 and "Traceback" in done.stderr


@pytest.fixture
def in_test_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's temp folder is the test's: a plugin made in-process makes its files there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


UNCAUGHT_FAMILY = """
import pathlib, tempfile
from certlab_core.plugin import hookimpl
from certlab_core.plugin.types.family import Defect, Seed, TaskFamily

ROOT = pathlib.Path(tempfile.mkdtemp())
(ROOT / "tree" / "tests").mkdir(parents=True)
(ROOT / "tree" / "half.py").write_text("def half(x):\\n    return x // 2\\n\\n\\ndef unused():\\n    return 1\\n")
(ROOT / "tree" / "tests" / "test_half.py").write_text(
    "from half import half\\n\\ndef test_half():\\n    assert half(4) == 2\\n"
)
(ROOT / "TASK.md").write_text("fix half.py\\n")
(ROOT / "cases.jsonl").write_text("")

@hookimpl
def certlab_task_families():
    return [TaskFamily(
        name="half", version="1", description="a defect its suite cannot see",
        tree_dir=str(ROOT / "tree"), prompt_file=str(ROOT / "TASK.md"), cases_file=str(ROOT / "cases.jsonl"),
        allowed_paths=["half.py"], test_paths=["tests"], module_names=["half"],
        defects=[
            Defect("caught", "off-by-one", "halves wrongly", [Seed("half.py", "x // 2", "x // 2 + 1")]),
            Defect("unseen", "dead-code", "changes code no test calls", [Seed("half.py", "return 1", "return 2")]),
        ],
    )]
"""


def test_a_defect_the_suite_misses_is_refused_by_name(certlab_temp_plugin, in_test_temp) -> None:  # type: ignore[no-untyped-def]
    registry = certlab_temp_plugin(UNCAUGHT_FAMILY, name="half_family", only=("calibration", "policy", "suite"))
    result = certify(registry, CertifyOptions(families=("half",), agent="oracle"), lambda _m: None)
    assert result.exit_code == 3
    assert result.bundle["trials"] == [] and result.bundle["calibration"]["trials"] == []
    assert any("defect unseen (dead-code) is not caught" in p for p in result.problems)


def test_registry_refuses_a_name_given_twice(certlab_temp_plugin, in_test_temp) -> None:  # type: ignore[no-untyped-def]
    twin = UNCAUGHT_FAMILY.replace('name="half"', 'name="intervals"')
    registry = certlab_temp_plugin(twin, name="twin_family", only=("intervals",))
    with pytest.raises(
        CertlabError, match=r"two plugins provide the task family 'intervals': .*certlab-intervals 1.0.0"
    ):
        registry.get("task_families", "intervals")


def test_plugins_json_lists_what_each_provides() -> None:
    done = run_certlab("plugins", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    by_name = {p["name"]: p for p in payload["plugins"]}
    assert by_name["intervals"]["distribution"] == "certlab-intervals"
    assert by_name["calibration"]["provides"]["agents"] == [
        "forbidden-file",
        "honest-reporter",
        "null",
        "oracle",
        "special-caser",
        "test-deleter",
        "unavailable",
    ]
    assert by_name["policy"]["provides"]["graders"] == ["policy"]


def test_only_named_plugins_load() -> None:
    registry = discover(only=("intervals", "policy"))
    assert registry.names("task_families") == ["intervals"]
    assert registry.names("graders") == ["policy"]
    assert registry.names("agents") == []


def test_the_contract_names_the_version_the_agents_program_reports() -> None:
    from certlab_core.certify.contract import version_text

    assert version_text({"version": "1.2"}) == "version `1.2`"  # a bundle from before, or an adapter that cannot tell
    assert version_text({"version": "2.1.197", "reported_version": "2.1.197"}) == (
        "version `2.1.197` (as the agent's program reports it)"
    )
    assert version_text({"version": "1.0", "reported_version": "2.1.197"}) == (
        "version `1.0` as given (the agent's program reports `2.1.197`)"
    )


def test_the_contract_lists_each_trial_that_recovered_from_upstream_errors() -> None:
    from certlab_core.certify.contract import recovered_lines

    trials = [
        {"id": "intervals/a/1", "verdict": "fixed", "failure_mode": None,
         "model": {"call_statuses": ["upstream-429", "ok"]}},
        {"id": "intervals/b/1", "verdict": "not-fixed", "failure_mode": "suite-failed",
         "model": {"call_statuses": ["ok", "upstream-500", "upstream-500", "ok"]}},
        {"id": "intervals/c/1", "verdict": "unavailable", "failure_mode": "agent-unavailable",
         "model": {"call_statuses": ["upstream-429"]}},  # it ended on the outage: not recovered
        {"id": "intervals/d/1", "verdict": "fixed", "failure_mode": None, "model": None},
    ]  # fmt: skip
    lines = recovered_lines(trials)
    assert "Errors of the model API the agent recovered from: 3 in 2 trial(s)" in lines[1]
    assert lines[3:] == [
        "- `intervals/a/1`: fixed, after 1 upstream error (HTTP 429)",
        "- `intervals/b/1`: not-fixed (suite-failed), after 2 upstream errors (HTTP 500 ×2)",
    ]
    assert recovered_lines(trials[2:]) == []


def test_a_trial_that_hangs_past_every_limit_of_its_own_is_killed_and_refused_in_one_line(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A certification's trials had no limit of their own: a trial hung anywhere but in its agent and graders (each
    # held to a deadline) held certify forever. The limit, shortened here to stand for a hang, kills it and all it
    # started.
    from certlab_core.certify import trial_runs
    from certlab_core.plugin.errors import InstrumentError

    agent = WaitingAgent(tmp_path)
    monkeypatch.setattr(trial_runs, "trial_time_limit_s", lambda _timeout_s, _graders: 3.0)
    options = CertifyOptions(
        families=("intervals",), agent="command", agent_args=(str(agent.script),), agent_timeout_s=30, workers=1,
        sandbox="none", mutants=False,
    )  # fmt: skip
    with pytest.raises(InstrumentError, match=r"ran past 3 s \(its agent's timeout and every grader's limit\)"):
        certify(registry, options, lambda _m: None)
    assert agent.started() and agent.alive() == []


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin certify to fewer than it may use")
def test_workers_0_are_the_cpus_certify_may_run_on_not_the_machines(tmp_path: Path) -> None:
    # Before: certify counted os.cpu_count(), so pinned to one CPU (taskset, a container's cpuset) it ran
    # as many trials at once as the machine has CPUs; run counted the CPUs it may use.
    pinned = (
        f"import os, runpy; os.sched_setaffinity(0, {{{min(os.sched_getaffinity(0))}}}); "
        "runpy.run_module('certlab_core.cli', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", pinned, "certify", "-f", "intervals", "-a", "null", "--no-mutants", "--sandbox", "none",
         "-w", "0", "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    in_flight = [line.split("in flight: ")[1] for line in done.stderr.splitlines() if "in flight: " in line]
    assert in_flight and all(", " not in trials for trials in in_flight), in_flight
