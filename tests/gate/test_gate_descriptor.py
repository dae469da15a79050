"""The descriptor: the examples load, bad input gives one clear line per problem (exit 4), never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gate_helpers import AGENTS, EXAMPLES, certlab, descriptor, write, write_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certlab_core._runtime.registry import Registry
from certlab_core.gate.descriptor import Descriptor, descriptor_from_data, load_descriptor, read_yaml
from certlab_core.gate.manifest import build_manifest
from certlab_core.plugin.errors import UsageError


@pytest.mark.parametrize("name", ["a_vs_b.yaml", "a_vs_a.yaml", "a_vs_c.yaml"])
def test_examples_load_and_seal(name: str, registry: Registry) -> None:
    spec = load_descriptor(EXAMPLES / name)
    manifest = build_manifest(spec, EXAMPLES / name, registry)
    assert len(manifest.seal) == 64
    assert manifest.n_per_arm == 200
    assert {c.bucket for c in manifest.conditions} == {"falsify", "benign", "ceiling"}
    assert manifest.schedule.gating_conditions == 2


def test_examples_show_every_key() -> None:
    """The normative examples write every key of every record, so a reader sees the whole format."""
    import attrs
    import yaml

    data = yaml.safe_load((EXAMPLES / "a_vs_b.yaml").read_text())

    def check(cls: type, value: Any, where: str) -> None:
        missing = [f.name for f in attrs.fields(cls) if f.name not in value]
        assert not missing, f"{where} does not show {missing}"

    from certlab_core.gate import descriptor as d

    check(d.Descriptor, data, "descriptor")
    check(d.Task, data["task"], "task")
    check(d.Arm, data["arms"]["baseline"], "arms.baseline")
    check(d.Rule, data["rule"], "rule")
    check(d.Budgets, data["budgets"], "budgets")
    check(d.Contract, data["contract"], "contract")
    for condition in data["conditions"]:
        check(d.Condition, condition, condition["name"])
        for fault in condition["faults"]:
            check(d.FaultDeclaration, fault, f"{condition['name']} fault")


def problems(data: Any) -> list[str]:
    with pytest.raises(UsageError) as raised:
        descriptor_from_data(data, "certlab.yaml")
    return raised.value.message.split("\ncertlab: error: ")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"n_per_arm": "ten"}, "certlab.yaml: n_per_arm: expected a whole number, got the text 'ten'"),
        ({"n_per_arm": True}, "certlab.yaml: n_per_arm: expected a whole number, got the boolean true"),
        ({"seeed": 3}, "certlab.yaml: seeed: unknown key; did you mean 'seed'?"),
        ({"rule": {"name": "clopper-pearson", "alpha": 1.5}}, "certlab.yaml: rule.alpha: 1.5 is outside (0, 1)"),
        ({"rule": {"delta": -0.1}}, "certlab.yaml: rule.delta: -0.1 is outside"),
        ({"rule": {"looks": 11}}, "certlab.yaml: rule.looks: 11 looks do not fit 10 trials per arm"),
        ({"rule": {"alpah": 0.05}}, "certlab.yaml: rule.alpah: unknown key; did you mean 'alpha'?"),
        ({"conditions": []}, "certlab.yaml: conditions: add at least one condition"),
        (
            {"conditions": [{"name": "c", "bucket": "falsfy"}]},
            "certlab.yaml: conditions[0].bucket: the text 'falsfy' is not one of 'falsify', 'benign', 'ceiling' "
            "(did you mean 'falsify'?)",
        ),
        ({"conditions": [{"name": "c", "bucket": "ceiling"}]}, "certlab.yaml: conditions: no condition gates"),
        (
            {"conditions": [{"name": "c", "bucket": "benign"}, {"name": "c", "bucket": "benign"}]},
            "certlab.yaml: conditions[1].name: the condition 'c' is named twice",
        ),
        ({"experiment": "has space"}, "certlab.yaml: experiment: 'has space' is not an id"),
        ({"arms": {"baseline": {"agent": "not a reference"}, "candidate": {"agent": f"{AGENTS}:agent_b"}}},
         "certlab.yaml: arms.baseline.agent: 'not a reference' is not module:function"),
        ({"arms": {"baseline": {"agent": f"{AGENTS}:agent_a"}}}, "certlab.yaml: arms.candidate: missing; add it"),
        ({"task": {"world": "retry-inventory", "family": "intervals"}}, "certlab.yaml: task: name exactly one of"),
        ({"budgets": {"seconds": 0}}, "certlab.yaml: budgets.seconds: 0.0 is outside (0, 86400]"),
        ({"budgets": {"tokens": 0}}, "certlab.yaml: budgets.tokens: a budget must be at least 1"),
        ({"budgets": {"tokens": 5000}}, "certlab.yaml: budgets.tokens: a tool world has no model boundary to count"),
        ({"infra_exit_codes": [0]}, "certlab.yaml: infra_exit_codes[0]: 0 is not an exit code"),
        (
            {"contract": {"forbidden_tools": ["reserve"], "required_tools": ["reserve"]}},
            "certlab.yaml: contract: reserve both forbidden and required",
        ),
    ],
)  # fmt: skip
def test_bad_values_are_one_clear_line(change: dict[str, Any], expected: str) -> None:
    found = problems(descriptor(**change))
    assert any(line.startswith(expected) for line in found), found


def test_every_problem_is_reported_at_once() -> None:
    found = problems(descriptor(n_per_arm="x", seeed=1, rule={"alpha": 2.0}))
    assert len(found) == 2  # the shape errors; values are checked once the shape holds
    assert {line.split(":")[1].strip() for line in found} == {"n_per_arm", "seeed"}


def test_family_tasks_refuse_what_the_boundary_would_observe() -> None:
    data = descriptor(
        task={"family": "intervals"},
        oracle="graders",
        arms={
            "baseline": {"adapter": "command", "args": ["true"]},
            "candidate": {"adapter": "command", "args": ["true"]},
        },
        contract={"max_tool_calls": 3},
    )
    found = problems(data)
    assert any("contract: the tool boundary cannot observe" in line for line in found), found
    assert any("a family task has no tool boundary, only the model boundary" in line for line in found), found


def test_yaml_syntax_error_names_the_place(tmp_path: Path) -> None:
    path = tmp_path / "certlab.yaml"
    path.write_text("experiment: x\ntask: [unclosed\n")
    with pytest.raises(UsageError, match=r"certlab.yaml: line \d+, column \d+: not valid YAML"):
        load_descriptor(path)


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "certlab.yaml"
    path.write_text("experiment: x\nexperiment: y\n")
    with pytest.raises(UsageError, match="the key 'experiment' is given twice"):
        load_descriptor(path)


def test_a_missing_file_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such descriptor"):
        load_descriptor(tmp_path / "nope.yaml")


# --------------------------------------------------------------------------- checks against the plugins


def manifest_problems(registry: Registry, folder: Path, data: dict[str, Any]) -> list[str]:
    path = write(folder, data)
    with pytest.raises(UsageError) as raised:
        build_manifest(load_descriptor(path), path, registry)
    return raised.value.message.split("\ncertlab: error: ")


def test_a_fault_naming_a_tool_the_world_lacks(registry: Registry, tmp_path: Path) -> None:
    data = descriptor(
        conditions=[{"name": "c", "bucket": "falsify", "faults": [{"fault": "tool_timeout", "tool": "reserv"}]}]
    )
    (line,) = manifest_problems(registry, tmp_path, data)
    assert line.startswith(
        "certlab.yaml: conditions[0].faults[0].tool: the world has no tool 'reserv' (did you mean 'reserve'?)"
    )


def test_an_unknown_fault_lists_the_valid_ones(registry: Registry, tmp_path: Path) -> None:
    data = descriptor(
        conditions=[{"name": "c", "bucket": "falsify", "faults": [{"fault": "tool_timout", "tool": "reserve"}]}]
    )
    (line,) = manifest_problems(registry, tmp_path, data)
    assert "unknown fault 'tool_timout'" in line and "tool_timeout" in line


def test_a_contract_the_boundary_cannot_observe_is_refused(registry: Registry, tmp_path: Path) -> None:
    data = descriptor(contract={"forbidden_tools": ["delete_all"], "max_calls_per_tool": {"refund": 1}})
    found = manifest_problems(registry, tmp_path, data)
    assert len(found) == 2
    assert all("cannot observe it" in line for line in found), found


def test_a_decision_fault_must_target_the_decision_channel(registry: Registry, tmp_path: Path) -> None:
    data = descriptor(
        conditions=[
            {"name": "c", "bucket": "falsify", "faults": [{"fault": "decision_unavailable", "tool": "reserve"}]}
        ]
    )
    (line,) = manifest_problems(registry, tmp_path, data)
    assert "acts on model decisions; set tool: decide" in line


def test_fault_parameters_are_checked(registry: Registry, tmp_path: Path) -> None:
    data = descriptor(
        conditions=[
            {"name": "c", "bucket": "falsify", "faults": [{"fault": "latency", "tool": "stock", "params": {"secs": 1}}]}
        ]
    )
    (line,) = manifest_problems(registry, tmp_path, data)
    assert "the fault latency has no parameter 'secs'" in line


def test_a_reference_that_does_not_import(registry: Registry, tmp_path: Path) -> None:
    write_module(tmp_path, "broken_agents", "raise RuntimeError('import-time failure')\n")
    data = descriptor(
        arms={"baseline": {"agent": "no_such_module:agent"}, "candidate": {"agent": "broken_agents:agent"}}
    )
    found = manifest_problems(registry, tmp_path, data)
    assert any(
        line.startswith("certlab.yaml: arms.baseline.agent: no_such_module:agent does not import") for line in found
    )
    assert any("arms.candidate.agent: broken_agents:agent importing it raised RuntimeError" in line for line in found)


def test_unknown_world_rule_and_bad_world_input(registry: Registry, tmp_path: Path) -> None:
    data = descriptor(task={"world": "retry-inventori", "input": {}}, rule={"name": "clopper"})
    found = manifest_problems(registry, tmp_path, data)
    assert any("task.world: unknown tool world 'retry-inventori'" in line for line in found)
    assert any("rule.name: unknown statistical rule 'clopper'" in line for line in found)
    found = manifest_problems(registry, tmp_path, descriptor(task={"world": "retry-inventory", "input": {"orders": 0}}))
    assert found == ["certlab.yaml: task.input: orders must be a whole number from 1 to 1000, got 0"]


def test_the_cli_prints_each_problem_on_its_own_line_and_exits_4(tmp_path: Path) -> None:
    path = write(tmp_path, descriptor(n_per_arm="x", seeed=1))
    done = certlab("run", str(path), "--out", str(tmp_path / "runs"))
    assert done.returncode == 4
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("certlab: error: certlab.yaml: ") for line in lines), done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------- arbitrary input


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    containers,
    max_leaves=20,
)

KEYS = [
    *("schema", "experiment", "task", "oracle", "arms", "conditions", "rule", "n_per_arm", "seed", "budgets"),
    *("contract", "infra_exit_codes", "world", "input", "baseline", "candidate", "agent", "name", "bucket", "faults"),
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), json_values, max_size=8) | json_values)
def test_arbitrary_data_is_a_descriptor_or_one_usage_error(data: Any) -> None:
    try:
        result = descriptor_from_data(data, "certlab.yaml")
    except UsageError as error:
        assert error.message and all(
            line.startswith("certlab.yaml") for line in error.message.split("\ncertlab: error: ")
        )
    else:
        assert isinstance(result, Descriptor)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(list(descriptor())), json_values, max_size=4))
def test_a_valid_descriptor_with_arbitrary_values_replaced(changes: dict[str, Any]) -> None:
    try:
        result = descriptor_from_data(descriptor(**changes), "certlab.yaml")
    except UsageError as error:
        assert error.message.startswith("certlab.yaml: ")
    else:
        assert isinstance(result, Descriptor)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_is_yaml_or_one_usage_error(text: str) -> None:
    try:
        data = read_yaml(text, "certlab.yaml")
    except UsageError as error:
        assert error.message.startswith("certlab.yaml: ")
    else:
        try:
            descriptor_from_data(data, "certlab.yaml")
        except UsageError as error:
            assert error.message.startswith("certlab.yaml")
