"""The gate's commands as a user runs them: schema (from the code, and true of what is written), init, run, gate."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest
import yaml
from conftest import run_certlab
from gate_helpers import EXAMPLES, certlab, descriptor, lines, run, write, write_module

from certlab_core._runtime.registry import Registry
from certlab_core.gate.descriptor import Descriptor
from certlab_core.gate.manifest import Manifest
from certlab_core.gate.schemas import Decision, TrialLine, schema_of
from certlab_core.gate.typed import parse


@pytest.fixture(scope="module")
def store(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cli")
    timeout = {"fault": "tool_timeout", "tool": "reserve"}
    latency = {"fault": "latency", "tool": "stock", "params": {"seconds": 0}}
    down = {"fault": "tool_timeout", "tool": "confirm", "on_calls": "all"}
    data = descriptor(
        n_per_arm=4,
        conditions=[
            {"name": "reserve-timeout", "bucket": "falsify", "faults": [timeout]},
            {"name": "slow", "bucket": "benign", "faults": [latency]},
            {"name": "confirm-down", "bucket": "ceiling", "faults": [down]},
        ],
        contract={"max_tool_calls": 50, "required_tools": ["confirm"], "max_calls_per_tool": {"reserve": 9}},
    )  # fmt: skip
    folder, _decision = run(registry, write(tmp, data), tmp / "runs")
    return folder


def test_certlab_schema_prints_the_descriptors_schema_from_the_records() -> None:
    done = certlab("schema")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    assert schema == schema_of("descriptor")
    assert list(schema["properties"]) == [f.name for f in attrs.fields(Descriptor)]
    assert set(schema["required"]) == {"experiment", "task", "arms", "conditions", "n_per_arm"}
    budgets = schema["$defs"]["Budgets"]["properties"]
    assert "counted at the model boundary" in json.dumps(budgets["tokens"])
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("name", ["a_vs_b.yaml", "a_vs_a.yaml", "a_vs_c.yaml"])
def test_the_examples_validate_against_the_schema(name: str) -> None:
    jsonschema.validate(yaml.safe_load((EXAMPLES / name).read_text()), schema_of("descriptor"))


def test_the_schema_refuses_what_the_reader_refuses() -> None:
    bad = yaml.safe_load((EXAMPLES / "a_vs_b.yaml").read_text())
    bad["rule"]["alpah"] = 0.05
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema_of("descriptor"))


def test_every_document_written_matches_its_schema_and_record(store: Path) -> None:
    for document, cls in (("manifest", Manifest), ("decision", Decision)):
        data = json.loads((store / f"{document}.json").read_text())
        jsonschema.validate(data, schema_of(document))
        record, problems = parse(cls, data, document)
        assert problems == [] and record is not None
    trial_schema = schema_of("trial")
    for line in lines(store):
        jsonschema.validate(line, trial_schema)
        record, problems = parse(TrialLine, line, "trials.jsonl")
        assert problems == [], problems
    assert {line["outcome"] for line in lines(store)} == {"success", "failure"}


def test_schema_of_an_unknown_document_is_a_usage_error() -> None:
    done = certlab("schema", "bundle")
    assert done.returncode == 4 and "choose one of descriptor, manifest, trial, decision" in done.stderr


def test_certlab_gate_writes_junit_and_markdown(store: Path, tmp_path: Path) -> None:
    junit, markdown = tmp_path / "gate.xml", tmp_path / "gate.md"
    done = certlab("gate", str(store), "--junit", str(junit), "--markdown", str(markdown))
    assert done.returncode == 2, done.stderr  # four trials per arm cannot decide
    root = ElementTree.parse(junit).getroot()
    assert len(list(root.iter("testcase"))) >= 3
    assert "INCONCLUSIVE" in markdown.read_text()


@pytest.mark.parametrize(
    ("option", "distribution"), [("--junit", "certlab-report-junit"), ("--markdown", "certlab-report-markdown")]
)
def test_a_report_option_without_its_reporter_plugin_is_refused_before_any_trial_runs(
    option: str, distribution: str, tmp_path: Path
) -> None:
    # Before, the kernel wrote a minimal file of its own; now the report formats are the reporter plugins' alone.
    path = write(tmp_path, descriptor(n_per_arm=20))
    plugins = "retry-world,clopper-pearson,faults"
    env = dict(os.environ, CERTLAB_PLUGINS=plugins)
    done = run_certlab("run", str(path), "--out", str(tmp_path / "runs"), option, str(tmp_path / "r"), env=env)
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert f"certlab: error: {option} {tmp_path / 'r'}: unknown reporter" in done.stderr
    assert distribution in done.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "r").exists()


def test_certlab_run_prints_progress_the_run_line_and_the_verdict(tmp_path: Path) -> None:
    path = write(tmp_path, descriptor(n_per_arm=20))
    done = certlab("run", str(path), "--out", str(tmp_path / "runs"), "--workers", "2")
    assert done.returncode == 1, done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith("run: ") and Path(out[0][5:]).is_dir()
    assert out[-1] == "verdict: BLOCK"
    assert "progress: 40/40 trials, 20 failed, 0 errors" in done.stderr


def test_certlab_run_refuses_a_bad_worker_count(tmp_path: Path) -> None:
    path = write(tmp_path, descriptor(n_per_arm=3))
    done = certlab("run", str(path), "--workers", "-1")
    assert done.returncode == 4 and "--workers -1" in done.stderr


TOOLSET = """
from certlab_core.plugin.types.tool_world import OracleVerdict, WorldInstance

def build(task_input, seed):
    state = {"on": False}

    def switch(on):
        state["on"] = bool(on)
        return {"on": state["on"]}

    return WorldInstance(task={"want": True}, tools={"switch": switch}, snapshot=lambda: dict(state))

def oracle(task, snapshot):
    return OracleVerdict(passed=snapshot["on"] == task["want"])

def careful(task, tools, rng):
    for _ in range(3):
        try:
            tools.call("switch", on=True)
            return {}
        except tools.ToolError:
            pass
    return {}

def hasty(task, tools, rng):
    tools.call("switch", on=True)
    return {}
"""


def test_certlab_init_checks_references_and_writes_a_smoke_descriptor_that_runs(tmp_path: Path) -> None:
    write_module(tmp_path, "lights", TOOLSET)
    args = ["--baseline", "lights:careful", "--candidate", "lights:hasty", "--toolset", "lights:build"]
    done = certlab(
        "init", "lights-smoke", *args, "--oracle", "lights:oracle", "--fault", "tool_error_once:switch", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    written = tmp_path / "certlab.yaml"
    data: dict[str, Any] = yaml.safe_load(written.read_text())
    assert data["experiment"] == "lights-smoke" and data["conditions"][1]["faults"][0]["tool"] == "switch"
    jsonschema.validate(data, schema_of("descriptor"))
    done = certlab("run", "certlab.yaml", "--out", "runs", "--quiet", cwd=tmp_path)
    assert done.returncode in (1, 2), done.stdout + done.stderr  # hasty never survives the error
    assert "condition faults (falsify): baseline 20/20, candidate 0/20" in done.stdout
    # The descriptor leaves the rule's name out: the installed default rule decides, and the manifest names it.
    assert "name" not in data["rule"]
    (manifest,) = (tmp_path / "runs").glob("*/manifest.json")
    assert json.loads(manifest.read_text())["rule"]["name"] == "clopper-pearson"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--baseline", "lights:nope"], "--baseline lights:nope does not resolve"),
        (["--toolset", "missing_mod:build"], "--toolset missing_mod:build does not import"),
        (["--fault", "tool_error_once:lamp"], "the toolset has no tool 'lamp'; its tools: switch"),
        (["--fault", "tool_eror_once:switch"], "unknown fault 'tool_eror_once'"),
        (["--fault", "nocolon"], "--fault 'nocolon' is not NAME:TOOL"),
    ],
)
def test_certlab_init_refuses_bad_references_in_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    write_module(tmp_path, "lights", TOOLSET)
    options = {
        "--baseline": "lights:careful",
        "--candidate": "lights:hasty",
        "--toolset": "lights:build",
        "--oracle": "lights:oracle",
    }
    extra = []
    for i in range(0, len(args), 2):
        if args[i] in options:
            options[args[i]] = args[i + 1]
        else:
            extra += args[i : i + 2]
    argv = [item for pair in options.items() for item in pair] + extra
    done = certlab("init", "x", *argv, cwd=tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr
    assert expected in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "certlab.yaml").exists()
