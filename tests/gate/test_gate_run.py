"""Running experiments: verdicts, stores that recompute, determinism, looks, and every way a run becomes ERROR."""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gate_helpers import AGENTS, certlab, descriptor, lines, local_session, recompute, run, write, write_module

from certlab_core._runtime.registry import Registry
from certlab_core.gate.manifest import read_manifest
from certlab_core.gate.runner import rerun_trial
from certlab_core.gate.store import seal_line
from certlab_core.sdk.canonical import pretty_json, sealed

TOOLSET = """
from certlab_core.gate.boundary import ToolRejected
from certlab_core.plugin.types.tool_world import OracleVerdict, WorldInstance

def build(task_input, seed):
    state = {"count": 0}

    def bump():
        state["count"] += 1
        return {"count": state["count"]}

    def explode():
        raise KeyError("a bug in the world")

    return WorldInstance(task={"goal": 2}, tools={"bump": bump, "explode": explode}, snapshot=lambda: dict(state))

def oracle(task, snapshot):
    return OracleVerdict(passed=snapshot["count"] == task["goal"], detail=f"count {snapshot['count']}")

def broken_oracle(task, snapshot):
    raise RuntimeError("the oracle itself is broken")
"""

AGENTS_SOURCE = """
import os, sys, time
from pathlib import Path

def good(task, tools, rng):
    for _ in range(task["goal"]):
        tools.call("bump")
    return {"done": True, "usage": {"input_tokens": 10, "output_tokens": 2}}

def overshoot(task, tools, rng):
    for _ in range(task["goal"] + 1):
        tools.call("bump")
    return {}

def crash(task, tools, rng):
    tools.call("bump")
    raise ValueError("the agent's own bug")

def slow(task, tools, rng):
    time.sleep(30)

def snooze(task, tools, rng):
    time.sleep(1.2)
    return good(task, tools, rng)

def chatty(task, tools, rng):
    while True:
        try:
            tools.call("bump")
        except Exception:
            pass

def breaks_world(task, tools, rng):
    try:
        tools.call("explode")
    except Exception:
        pass
    return {}

def infra(task, tools, rng):
    sys.exit(75)

def hard_infra(task, tools, rng):
    os._exit(75)

def infra_once(task, tools, rng):
    marker = Path(os.environ["MARKERS"]) / str(rng.random())
    if not marker.exists():
        marker.write_text("seen")
        sys.exit(75)
    return good(task, tools, rng)
"""


def toolset_descriptor(baseline: str, candidate: str, n: int = 2, **changes: Any) -> dict[str, Any]:
    data = descriptor(
        task={"world": "toolset:build", "input": {}},
        oracle="toolset:oracle",
        arms={"baseline": {"agent": f"agents:{baseline}"}, "candidate": {"agent": f"agents:{candidate}"}},
        conditions=[{"name": "clean", "bucket": "benign"}],
        n_per_arm=n,
        budgets={"tool_calls": 20, "seconds": 2},
    )
    data.update(changes)
    return data


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_module(tmp_path, "toolset", TOOLSET)
    write_module(tmp_path, "agents", AGENTS_SOURCE)
    return tmp_path


def outcomes(store: Path) -> dict[str, tuple[str, str | None]]:
    return {line["id"]: (line["outcome"], line["failure_mode"] or line["error"]) for line in lines(store)}


# --------------------------------------------------------------------------- verdicts


def test_a_against_b_blocks(registry: Registry, tmp_path: Path) -> None:
    store, decision = run(registry, write(tmp_path, descriptor(n_per_arm=30)), tmp_path / "runs")
    assert decision["verdict"] == "BLOCK" and decision["exit_code"] == 1
    (condition,) = decision["conditions"]
    assert condition["counts"] == {
        "baseline": {"successes": 30, "trials": 30},
        "candidate": {"successes": 0, "trials": 30},
    }
    assert condition["failure_modes"]["candidate"] == {"tool-fault-uncaught": 30}
    assert condition["faults"][0]["fired"] == {"baseline": 30, "candidate": 30}
    assert (store / "decision.json").read_text() == pretty_json(decision)


def test_a_against_a_passes(registry: Registry, tmp_path: Path) -> None:
    arms = {"baseline": {"agent": f"{AGENTS}:agent_a"}, "candidate": {"agent": f"{AGENTS}:agent_a"}}
    _store, decision = run(registry, write(tmp_path, descriptor(n_per_arm=50, arms=arms)), tmp_path / "runs")
    assert decision["verdict"] == "PASS" and decision["exit_code"] == 0
    assert decision["problems"] == [] and decision["warnings"] == []


def test_the_same_manifest_twice_gives_the_same_records_apart_from_timings(registry: Registry, tmp_path: Path) -> None:
    latency = {"fault": "latency", "tool": "stock", "params": {"seconds": 0.0}}
    conditions = [
        {"name": "reserve-timeout", "bucket": "falsify", "faults": [{"fault": "tool_timeout", "tool": "reserve"}]},
        {"name": "clean", "bucket": "benign", "faults": [latency]},
    ]
    path = write(tmp_path, descriptor(n_per_arm=6, conditions=conditions))
    first, _ = run(registry, path, tmp_path / "one")
    second, _ = run(registry, path, tmp_path / "two", workers=1)

    def stripped(store: Path) -> list[str]:
        out = []
        for line in lines(store):
            line.pop("timings")
            line.pop("seal")
            out.append(json.dumps(line, sort_keys=True))
        return sorted(out)

    assert stripped(first) == stripped(second)
    assert len(stripped(first)) == 24
    assert (first / "manifest.json").read_bytes() == (second / "manifest.json").read_bytes()
    assert (first / "decision.json").read_bytes() == (second / "decision.json").read_bytes()


# --------------------------------------------------------------------------- what a trial is


def test_agent_failures_are_fails_and_are_named(registry: Registry, folder: Path) -> None:
    data = toolset_descriptor("crash", "slow", n=2, budgets={"tool_calls": 20, "seconds": 0.5})
    store, decision = run(registry, write(folder, data), folder / "runs")
    found = outcomes(store)
    assert found["baseline/clean/0"] == ("failure", "agent-crashed")
    assert found["candidate/clean/0"] == ("failure", "agent-timeout")
    assert decision["verdict"] == "INCONCLUSIVE" and decision["problems"] == []
    line = next(x for x in lines(store) if x["id"] == "baseline/clean/0")
    assert line["agent"]["detail"] == "ValueError: the agent's own bug" and line["oracle"] is None


def test_budgets_and_the_oracle_decide_not_the_agent(registry: Registry, folder: Path) -> None:
    data = toolset_descriptor("chatty", "overshoot", n=2)
    store, _decision = run(registry, write(folder, data), folder / "runs")
    found = outcomes(store)
    assert found["baseline/clean/1"] == ("failure", "budget-exceeded")
    assert found["candidate/clean/1"] == ("failure", "oracle-rejected")
    judged = next(x for x in lines(store) if x["id"] == "candidate/clean/1")
    assert judged["oracle"] == {"passed": False, "detail": "count 3"} and judged["agent"]["status"] == "completed"


def test_usage_reported_by_the_agent_is_recorded(registry: Registry, folder: Path) -> None:
    store, _decision = run(registry, write(folder, toolset_descriptor("good", "good", n=1)), folder / "runs")
    line = lines(store)[0]
    assert line["outcome"] == "success" and line["usage"]["input_tokens"] == 10
    assert line["agent"]["returned"]["done"] is True


def test_the_report_reads_usage_from_a_lines_tail_as_a_whole_parse_does(registry: Registry, folder: Path) -> None:
    from certlab_clopper_pearson.rule import interval as exact_interval

    from certlab_core.report.model import build_report
    from certlab_core.report.reading import load_report

    store, decision = run(registry, write(folder, toolset_descriptor("good", "good", n=3)), folder / "runs")
    report, _rule = load_report(store, registry, (1, 2, 4))  # reads each line's usage, its last key, alone
    manifest = json.loads((store / "manifest.json").read_text())
    whole = build_report(  # parses every line whole
        manifest, lines(store), decision, run=store.name, exact=exact_interval
    )
    assert report.usage == whole.usage and report.cost == whole.cost
    assert [u.input_tokens for u in report.usage] == [30, 30] and [u.output_tokens for u in report.usage] == [6, 6]


@pytest.mark.parametrize(
    ("baseline", "changes", "expected"),
    [
        ("breaks_world", {}, "world-broken: tool explode raised KeyError"),
        ("good", {"oracle": "toolset:broken_oracle"}, "oracle-broken: RuntimeError: the oracle itself is broken"),
        ("infra", {}, "infra-exit-code: the agent exited with 75"),
        ("hard_infra", {}, "infra-exit-code: the agent exited with 75"),
        (
            "good",
            {
                "conditions": [
                    {"name": "clean", "bucket": "benign", "faults": [{"fault": "agents:missing", "tool": "bump"}]}
                ]
            },
            "injector-broken",
        ),
    ],
    ids=["world", "oracle", "sys-exit-75", "os-exit-75", "injector"],
)
def test_a_broken_instrument_is_an_error_and_invalidates_the_experiment(
    registry: Registry, folder: Path, baseline: str, changes: dict[str, Any], expected: str
) -> None:
    data = toolset_descriptor(baseline, "good", n=2, **changes)
    if "conditions" in changes:  # a fault reference must import when sealing: point it at a real function
        write_module(folder, "badfaults", "def explode(context):\n    raise RuntimeError('injector bug')\n")
        data["conditions"][0]["faults"][0]["fault"] = "badfaults:explode"
    store, decision = run(registry, write(folder, data), folder / "runs")
    assert decision["verdict"] == "ERROR" and decision["exit_code"] == 3
    errors = [line for line in lines(store) if line["outcome"] == "error"]
    assert errors and errors[0]["error"].startswith(expected), errors[0]["error"]
    assert any(problem.endswith(errors[0]["error"]) for problem in decision["problems"])
    assert all(c["verdict"] == "ERROR" for c in decision["conditions"])


def test_an_infra_error_is_retried_once_and_every_attempt_stays(
    registry: Registry, folder: Path, monkeypatch: Any
) -> None:
    markers = folder / "markers"
    markers.mkdir()
    monkeypatch.setenv("MARKERS", str(markers))
    data = toolset_descriptor("infra_once", "good", n=3)
    store, decision = run(registry, write(folder, data), folder / "runs", retry_infra=True)
    attempts = sorted(
        (line["id"], line["attempt"], line["outcome"]) for line in lines(store) if line["arm"] == "baseline"
    )
    assert attempts == [(f"baseline/clean/{i}", a, o) for i in range(3) for a, o in ((1, "error"), (2, "success"))]
    assert decision["verdict"] != "ERROR" and decision["trials"]["attempts"] == 9


def test_an_infra_error_that_remains_is_error(registry: Registry, folder: Path) -> None:
    store, decision = run(
        registry, write(folder, toolset_descriptor("infra", "good", n=2)), folder / "runs", retry_infra=True
    )
    assert decision["verdict"] == "ERROR"
    assert {line["attempt"] for line in lines(store) if line["arm"] == "baseline"} == {1, 2}


def test_a_fault_that_never_fired_is_reported(registry: Registry, folder: Path) -> None:
    data = toolset_descriptor("good", "good", n=2)
    data["conditions"] = [
        {"name": "late", "bucket": "falsify", "faults": [{"fault": "tool_timeout", "tool": "bump", "on_calls": [9]}]}
    ]
    store, decision = run(registry, write(folder, data), folder / "runs")
    assert all(
        line["faults"] == [{"index": 0, "fault": "tool_timeout", "tool": "bump", "fired": False, "fired_at": []}]
        for line in lines(store)
    )
    assert decision["conditions"][0]["faults"][0]["never_fired"] is True
    assert decision["warnings"] == [
        "late: fault 0 (tool_timeout on bump) never fired; this condition did not test what it names"
    ]


def test_a_contract_violation_by_the_candidate_forces_block(registry: Registry, folder: Path) -> None:
    data = toolset_descriptor("good", "overshoot", n=2, contract={"max_calls_per_tool": {"bump": 2}})
    data["oracle"] = "toolset:oracle"
    _store, decision = run(registry, write(folder, data), folder / "runs")
    assert decision["contract_violations"] == {"baseline": 0, "candidate": 2}
    assert decision["verdict"] == "BLOCK"
    assert any("broke its behaviour contract" in reason for reason in decision["reasons"])


# --------------------------------------------------------------------------- looks


def test_the_run_stops_at_the_first_decisive_look(registry: Registry, tmp_path: Path) -> None:
    data = descriptor(n_per_arm=40, rule={"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 4})
    store, decision = run(registry, write(tmp_path, data), tmp_path / "runs")
    assert decision["verdict"] == "BLOCK"
    assert decision["conditions"][0]["look"] == 1 and decision["trials"]["run"] == 20
    # a trial past the decisive look, however genuine, makes the store ERROR
    manifest = read_manifest(store / "manifest.json")
    extra = rerun_trial(manifest, "baseline/reserve-timeout/10", registry)
    with (store / "trials.jsonl").open("a") as handle:
        handle.write(seal_line(extra))
    again = recompute(registry, store)
    assert again["verdict"] == "ERROR"
    assert again["problems"] == [
        "1 trial(s) ran past a decisive look (first: baseline/reserve-timeout/10); "
        "the store does not follow its stopping rule"
    ]


def test_an_undecided_look_runs_the_next(registry: Registry, tmp_path: Path) -> None:
    arms = {"baseline": {"agent": f"{AGENTS}:agent_a"}, "candidate": {"agent": f"{AGENTS}:agent_c"}}
    data = descriptor(
        n_per_arm=40, arms=arms, rule={"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 2}
    )
    _store, decision = run(registry, write(tmp_path, data), tmp_path / "runs")
    assert decision["trials"]["run"] == 80
    assert decision["conditions"][0]["looks_run"] == 2
    assert decision["verdict"] == "INCONCLUSIVE" and decision["exit_code"] == 2


# --------------------------------------------------------------------------- the store


@pytest.fixture(scope="module")
def finished(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("finished")
    store, _decision = run(registry, write(tmp, descriptor(n_per_arm=12)), tmp / "runs")
    return store


def copy_store(store: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / store.name
    shutil.copytree(store, target)
    return target


def test_certlab_gate_recomputes_from_the_store_alone(finished: Path) -> None:
    done = certlab("gate", str(finished))
    assert done.returncode == 1, done.stderr
    assert "verdict: BLOCK" in done.stdout and f"run: {finished}" in done.stdout
    done = certlab("gate", str(finished), "--json")
    assert done.stdout == (finished / "decision.json").read_text()


def test_resealing_the_manifest_with_another_rule_after_the_trials_is_error(finished: Path, tmp_path: Path) -> None:
    store = copy_store(finished, tmp_path)
    document = json.loads((store / "manifest.json").read_text())
    document["rule"]["name"] = "newcombe"
    (store / "manifest.json").write_text(pretty_json(sealed(document)))
    (store / "decision.json").unlink()
    done = certlab("gate", str(store))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "its identity does not match the manifest (the manifest was resealed" in done.stdout
    assert "verdict: ERROR" in done.stdout


@pytest.mark.parametrize("damage", ["edit", "delete", "duplicate", "garbage", "decision"])
def test_a_store_edited_by_hand_is_error(finished: Path, tmp_path: Path, damage: str) -> None:
    store = copy_store(finished, tmp_path)
    raw = (store / "trials.jsonl").read_text().splitlines(keepends=True)
    if damage == "edit":
        index = next(i for i, text in enumerate(raw) if '"outcome":"failure"' in text)
        raw[index] = raw[index].replace('"outcome":"failure"', '"outcome":"success"')
        expected = "the seal does not match the content"
    elif damage == "delete":
        del raw[5]
        expected = "are missing"
    elif damage == "duplicate":
        raw.append(raw[0])
        expected = "is recorded twice"
    elif damage == "garbage":
        raw.append("{oops\n")
        expected = "not JSON"
    else:
        decision = json.loads((store / "decision.json").read_text())
        decision["verdict"] = "PASS"
        (store / "decision.json").write_text(json.dumps(decision))
        expected = "decision.json was edited by hand"
    (store / "trials.jsonl").write_text("".join(raw))
    done = certlab("gate", str(store))
    assert done.returncode == 3, done.stdout + done.stderr
    assert expected in done.stdout, done.stdout
    assert "Traceback" not in done.stderr


def test_a_broken_manifest_is_one_line_exit_3(finished: Path, tmp_path: Path) -> None:
    store = copy_store(finished, tmp_path)
    (store / "manifest.json").write_text(
        (store / "manifest.json").read_text().replace('"n_per_arm": 12', '"n_per_arm": 13')
    )
    done = certlab("gate", str(store))
    assert done.returncode == 3
    assert done.stderr.strip().count("\n") == 0 and "the manifest was edited after sealing" in done.stderr


def test_the_parent_imports_neither_the_agents_nor_scipy_while_trials_run(tmp_path: Path) -> None:
    path = write(tmp_path, descriptor(n_per_arm=2))
    script = f"""
import sys, threading
from pathlib import Path
from certlab_core._runtime.registry import discover
from certlab_core.gate.descriptor import load_descriptor
from certlab_core.gate.manifest import build_manifest
from certlab_core.gate.executor_sessions import open_executor
from certlab_core.gate.runner import plan_run, run_experiment
from certlab_core.gate.store import create_run
registry = discover()
path = Path({str(path)!r})
manifest = build_manifest(load_descriptor(path), path, registry)
plan = plan_run(manifest, registry)
folder = create_run(Path({str(tmp_path / "runs")!r}), manifest)
with open_executor(registry, "local", 2, None, {{}}) as session:
    run_experiment(plan, folder, session)
print(sorted(m for m in ("scipy", "numpy", "certlab_retry_world.agents") if m in sys.modules), threading.active_count())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] 1"


def test_earlier_runs_are_listed_in_the_report_not_in_the_decision(registry: Registry, tmp_path: Path) -> None:
    path = write(tmp_path, descriptor(n_per_arm=3))
    first, _ = run(registry, path, tmp_path / "runs")
    second, _decision = run(registry, path, tmp_path / "runs")
    done = certlab("gate", str(second))
    assert f"earlier runs of test-exp (not part of this decision):\n  {first.name}: " in done.stdout
    assert first.name not in (second / "decision.json").read_text()


def test_a_broken_record_sink_is_an_instrument_error(registry: Registry, tmp_path: Path) -> None:
    from certlab_core.gate.descriptor import load_descriptor
    from certlab_core.gate.manifest import build_manifest
    from certlab_core.gate.runner import plan_run, run_experiment
    from certlab_core.gate.store import create_run
    from certlab_core.plugin.errors import InstrumentError

    path = write(tmp_path, descriptor(n_per_arm=2))
    manifest = build_manifest(load_descriptor(path), path, registry)
    store = create_run(tmp_path / "runs", manifest)
    # Every write past 4 KiB of a file fails (EFBIG, the signal ignored), as on a full disk. A link to
    # /dev/full did this before; the sink now refuses a link in its place, as one to a user's file.
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))  # a trial line is longer
        with (
            local_session(2) as session,
            pytest.raises(InstrumentError, match=r"the record sink failed .*; the experiment is invalid") as raised,
        ):
            run_experiment(plan_run(manifest, registry), store, session)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, ignored)
    assert raised.value.exit_code == 3


def test_the_gate_reads_each_lines_summary_and_still_accepts_a_line_without_one(finished: Path, tmp_path: Path) -> None:
    import hashlib

    store = copy_store(finished, tmp_path)
    raw = (store / "trials.jsonl").read_text().splitlines(keepends=True)
    assert all(text.startswith('{"_gate":{') for text in raw)
    line = json.loads(raw[0])
    line.pop("_gate")
    line.pop("seal")
    body = json.dumps(line, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    line["seal"] = hashlib.sha256(body.encode()).hexdigest()
    raw[0] = json.dumps(line, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    (store / "trials.jsonl").write_text("".join(raw))
    (store / "decision.json").unlink()
    done = certlab("gate", str(store))
    assert done.returncode == 1 and "verdict: BLOCK" in done.stdout, done.stdout


def test_a_record_holding_unicode_line_separators_reads_back_whole(registry: Registry, folder: Path) -> None:
    write_module(folder, "odd_agents", "def odd(task, tools, rng):\n    tools.call('bump')\n    tools.call('bump')\n"
                 "    return {'note': 'a\\u2028b\\u2029c\\x85d\\x1ce'}\n")  # fmt: skip
    data = toolset_descriptor("good", "good", n=2)
    data["arms"]["candidate"]["agent"] = "odd_agents:odd"
    store, decision = run(registry, write(folder, data), folder / "runs")
    assert decision["problems"] == [] and decision["trials"]["run"] == 4
    odd = next(line for line in lines(store) if line["arm"] == "candidate")
    assert odd["agent"]["returned"]["note"] == "a\u2028b\u2029c\x85d\x1ce"


LIGHTS_PLUGIN = """
from certlab_core.plugin import hookimpl
from certlab_core.plugin.types.tool_world import OracleVerdict, ToolWorld, WorldInstance

def build(task_input, seed):
    state = {"on": False}

    def switch(on):
        state["on"] = bool(on)
        return {"on": state["on"]}

    return WorldInstance(task={}, tools={"switch": switch}, snapshot=lambda: dict(state))

def oracle(task, snapshot):
    return OracleVerdict(passed=snapshot["on"])

@hookimpl
def certlab_tool_worlds():
    return [ToolWorld(name="lights", description="one switch", tools=["switch"], build=build, oracle=oracle)]
"""


def test_a_world_registered_in_process_runs_from_forked_zygotes(tmp_path: Path) -> None:
    """A plugin no fresh interpreter could import by name: the zygotes are forked from the parent instead."""
    import types

    from certlab_core._runtime.registry import discover

    module = types.ModuleType("lights_in_process")
    exec(compile(LIGHTS_PLUGIN, module.__name__, "exec"), module.__dict__)
    registry = discover(only=("clopper-pearson",), extra=[("lights", module)])
    write_module(tmp_path, "light_agents", "def on(task, tools, rng):\n    tools.call('switch', on=True)\n")
    data = descriptor(
        task={"world": "lights"},
        arms={"baseline": {"agent": "light_agents:on"}, "candidate": {"agent": "light_agents:on"}},
        conditions=[{"name": "clean", "bucket": "benign"}],
        n_per_arm=50,
    )
    from certlab_core.gate.descriptor import load_descriptor
    from certlab_core.gate.manifest import build_manifest
    from certlab_core.gate.runner import plan_run

    path = write(tmp_path, data)
    assert not plan_run(build_manifest(load_descriptor(path), path, registry), registry).spawnable
    store, decision = run(registry, path, tmp_path / "runs")
    assert decision["verdict"] == "PASS" and len(lines(store)) == 100


@pytest.mark.parametrize("index", ["²", "٣", "07", "-1", ""])
def test_a_resealed_line_whose_id_is_not_a_scheduled_index_is_error_not_a_crash(
    finished: Path, tmp_path: Path, index: str
) -> None:
    # Each of these passes str.isdigit() or int() in some form; none is an index the schedule writes.
    store = copy_store(finished, tmp_path)
    raw = (store / "trials.jsonl").read_text().splitlines(keepends=True)
    line = json.loads(raw[0])
    arm, condition, _index = line["id"].split("/")
    line["id"] = f"{arm}/{condition}/{index}"
    raw[0] = seal_line(line)
    (store / "trials.jsonl").write_text("".join(raw))
    (store / "decision.json").unlink()
    done = certlab("gate", str(store))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "is not a trial this manifest schedules" in done.stdout and "Traceback" not in done.stderr
    report = certlab("report", str(store))
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    assert "ERROR" in report.stdout


def test_a_line_holding_nan_is_a_broken_seal_not_an_internal_error(finished: Path, tmp_path: Path) -> None:
    # JSON readers accept NaN; certlab's canonical form refuses it, so no such line was sealed by certlab.
    store = copy_store(finished, tmp_path)
    raw = (store / "trials.jsonl").read_text().splitlines(keepends=True)
    line = json.loads(raw[0])
    for key in ("_gate", "_marks"):
        line.pop(key)
    line["budget_exceeded"] = float("nan")
    raw[0] = json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n"
    (store / "trials.jsonl").write_text("".join(raw))
    for command in ("gate", "report", "rederive"):
        done = certlab(command, str(store))
        assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = certlab("gate", str(store))
    assert done.returncode == 3 and "trials.jsonl line 1: the seal does not match the content" in done.stdout


def test_a_sealed_line_reporting_infinite_or_odd_usage_is_read_without_a_crash(finished: Path, tmp_path: Path) -> None:
    # 1e400 reads back as an infinite float: no token count, not a traceback. The seal is made over the raw text.
    import hashlib

    store = copy_store(finished, tmp_path)
    raw = (store / "trials.jsonl").read_text().splitlines(keepends=True)
    for number, odd in ((0, '{"input_tokens":1e400,"shape":"claude-json"}'), (1, '{"cost_usd":true,"shape":7}')):
        text = raw[number].rstrip("\n")
        assert text.endswith(',"usage":null}')
        seal = json.loads(text)["seal"]
        body = text.replace(f',"seal":"{seal}"', "")[: -len("null}")] + odd + "}"
        digest = hashlib.sha256(body.encode()).hexdigest()
        at = body.index(',"seed":')  # the seal sits before seed in sorted keys
        raw[number] = body[:at] + f',"seal":"{digest}"' + body[at:] + "\n"
    (store / "trials.jsonl").write_text("".join(raw))
    done = certlab("report", str(store), "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    usage = {arm["arm"]: arm for arm in json.loads(done.stdout)["usage"]}
    assert usage["candidate"]["trials_reporting"] + usage["baseline"]["trials_reporting"] == 2


def test_a_long_trial_shows_a_heartbeat_naming_it_and_the_records_do_not(
    registry: Registry, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from certlab_core.gate.descriptor import load_descriptor
    from certlab_core.gate.manifest import build_manifest
    from certlab_core.gate.progress import ProgressLine
    from certlab_core.gate.runner import plan_run, run_experiment
    from certlab_core.gate.store import create_run

    monkeypatch.setenv("CERTLAB_HEARTBEAT_S", "0.3")
    path = write(folder, toolset_descriptor("snooze", "good", n=1))
    plan = plan_run(build_manifest(load_descriptor(path), path, registry), registry)
    store = create_run(folder / "runs", plan.manifest)
    stream = io.StringIO()
    with local_session(1) as session:
        run_experiment(plan, store, session, progress=ProgressLine(2, stream=stream))
    said = stream.getvalue()
    beats = [line for line in said.splitlines() if line.startswith("still running: ")]
    assert len(beats) >= 2, said
    assert re.fullmatch(r"still running: baseline/clean/0 for 0:0\d; elapsed 0:0\d", beats[0]), beats
    assert [line["outcome"] for line in lines(store)] == ["success", "success"]
    assert "still running" not in "".join(p.read_text() for p in store.iterdir() if p.is_file())
