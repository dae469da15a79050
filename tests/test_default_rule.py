"""The default rule is the one a record marks so: the kernel names none, and none or two is one line."""

from __future__ import annotations

import json
import os
import shutil
import sys
import types
from pathlib import Path

import attrs
import pytest
import yaml
from certlab_clopper_pearson import rule as clopper_pearson

from certlab_core._runtime.default_rule import GuardedInterval, default_rule, exact_interval
from certlab_core._runtime.registry import discover
from certlab_core.gate.descriptor import Rule, load_descriptor
from certlab_core.gate.manifest import build_manifest, manifest_document
from certlab_core.gate.schemas import schema_of
from certlab_core.plugin import StatisticalRule, hookimpl
from certlab_core.plugin.errors import UsageError
from certlab_core.testing import run_certlab

GATE = ("retry-world", "faults")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "retry"
CERTIFICATIONS = Path(__file__).resolve().parents[1] / "certifications"


def second_default() -> types.ModuleType:
    """An in-process plugin whose rule marks itself the default too (Clopper-Pearson's functions, another name)."""
    module = types.ModuleType("second_default")

    @hookimpl
    def certlab_statistical_rules() -> list[StatisticalRule]:
        return [
            StatisticalRule(
                name="also-default",
                description="a second rule that marks itself the default",
                decide=clopper_pearson.decide,
                interval=clopper_pearson.interval,
                default=True,
            )
        ]

    module.certlab_statistical_rules = certlab_statistical_rules  # type: ignore[attr-defined]
    return module


def without_rule_name(tmp_path: Path) -> Path:
    """The retry example's descriptor (beside its agents) with its rule's name left out."""
    shutil.copytree(EXAMPLES, tmp_path / "retry")
    path = tmp_path / "retry" / "a_vs_b.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data["rule"].pop("name") == "clopper-pearson"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_the_clopper_pearson_record_marks_itself_the_default_and_newcombe_does_not() -> None:
    registry = discover(only=("clopper-pearson", "newcombe"))
    assert registry.get(StatisticalRule, "clopper-pearson").default is True
    assert registry.get(StatisticalRule, "newcombe").default is False
    assert default_rule(registry, "needed").name == "clopper-pearson"
    interval = exact_interval(registry)
    assert isinstance(interval, GuardedInterval) and interval.interval is clopper_pearson.interval


def test_a_default_that_is_not_a_bool_is_refused_by_the_record() -> None:
    with pytest.raises(TypeError):
        StatisticalRule(name="x", description="x", decide=clopper_pearson.decide, interval=clopper_pearson.interval,
                        default="yes")  # type: ignore[arg-type]  # fmt: skip


def test_no_default_installed_is_one_line_naming_the_installed_rules_and_what_to_install() -> None:
    with pytest.raises(UsageError) as refused:
        default_rule(discover(only=("newcombe",)), "--rule is not given")
    assert refused.value.message == (
        "--rule is not given, and no installed statistical rule marks itself the default: name one of the installed "
        "rules (newcombe), or install a rule that does (pip install certlab-clopper-pearson or certlab-newcombe)"
    )
    assert exact_interval(discover(only=("newcombe",))) is None


def test_two_defaults_installed_are_one_line_naming_both() -> None:
    registry = discover(only=("clopper-pearson",), extra=[("second-default", second_default())])
    with pytest.raises(UsageError) as refused:
        default_rule(registry, "--rule is not given")
    message = refused.value.message
    assert "\n" not in message and message.startswith(
        "--rule is not given, and 2 installed statistical rules mark themselves the default: also-default "
    )
    assert "clopper-pearson (certlab-clopper-pearson" in message and message.endswith("uninstall all but one of them")
    with pytest.raises(UsageError, match="2 installed statistical rules mark themselves the default"):
        exact_interval(registry)


def test_a_descriptor_without_a_rule_name_seals_the_default_rules_name(tmp_path: Path) -> None:
    path = without_rule_name(tmp_path)
    descriptor = load_descriptor(path)
    assert descriptor.rule == Rule(name=None, alpha=0.05, delta=0.1, looks=1)
    manifest = build_manifest(descriptor, path, discover(only=(*GATE, "clopper-pearson", "newcombe")))
    assert manifest_document(manifest)["rule"] == {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1}
    assert manifest.plugins["certlab-clopper-pearson"]  # the resolved rule's distribution is sealed, as a named one


def test_a_descriptor_without_a_rule_name_and_no_default_is_refused_at_rule_name(tmp_path: Path) -> None:
    path = without_rule_name(tmp_path)
    with pytest.raises(UsageError) as refused:
        build_manifest(load_descriptor(path), path, discover(only=(*GATE, "newcombe")))
    assert (
        "a_vs_b.yaml: rule.name: left out, so the default rule decides, and no installed statistical rule marks "
        in (refused.value.message)
    )
    registry = discover(only=(*GATE, "clopper-pearson"), extra=[("second-default", second_default())])
    with pytest.raises(UsageError, match=r"rule\.name: left out, so the default rule decides, and 2 installed"):
        build_manifest(load_descriptor(path), path, registry)


def test_an_empty_rule_name_is_refused_at_rule_name_not_taken_for_the_default(tmp_path: Path) -> None:
    path = without_rule_name(tmp_path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["rule"]["name"] = ""
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(UsageError) as refused:
        build_manifest(load_descriptor(path), path, discover(only=(*GATE, "clopper-pearson")))
    assert "a_vs_b.yaml: rule.name: unknown statistical rule ''" in refused.value.message


def test_the_schemas_say_a_descriptor_may_leave_the_rule_name_out_and_a_manifest_always_names_it() -> None:
    descriptor_rule = schema_of("descriptor")["$defs"]["Rule"]
    assert "name" not in descriptor_rule.get("required", [])
    assert "default" in descriptor_rule["properties"]["name"]["description"]
    manifest_rule = schema_of("manifest")["$defs"]["SealedRule"]
    assert "name" in manifest_rule["required"]


def test_the_archived_stores_name_their_rule_and_read_as_before() -> None:
    # A manifest sealed before the default was a record's role reads the same: its rule is named in it.
    from certlab_core.gate.manifest import read_manifest

    archived = Path(__file__).resolve().parent / "archived_stores"
    for store in sorted(archived.iterdir()):
        manifest = read_manifest(store / "manifest.json")
        document = json.loads((store / "manifest.json").read_text())
        assert attrs.asdict(manifest.rule) == document["rule"]


def test_certlab_stats_without_rule_uses_the_default_and_two_defaults_are_one_line(tmp_path: Path) -> None:
    done = run_certlab("stats", "bounds", "--baseline", "9/10", "--candidate", "9/10")
    assert done.returncode == 0, done.stderr
    named = run_certlab("stats", "bounds", "--baseline", "9/10", "--candidate", "9/10", "--rule", "clopper-pearson")
    assert done.stdout == named.stdout
    (tmp_path / "second_default_plugin.py").write_text(
        "from certlab_clopper_pearson import rule\n"
        "from certlab_core.plugin import StatisticalRule, hookimpl\n"
        "@hookimpl\n"
        "def certlab_statistical_rules():\n"
        "    return [StatisticalRule(name='also-default', description='d', decide=rule.decide,\n"
        "                            interval=rule.interval, default=True)]\n"
    )
    dist = tmp_path / "second_default-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: second-default\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[certlab.plugins]\nsecond-default = second_default_plugin\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *(p for p in sys.path if p)]))
    two = run_certlab("stats", "bounds", "--baseline", "9/10", "--candidate", "9/10", env=env)
    assert two.returncode == 4 and "Traceback" not in two.stderr, two.stderr
    (line,) = two.stderr.strip().splitlines()
    assert "--rule is not given, and 2 installed statistical rules mark themselves the default" in line


def test_the_contract_heads_the_default_rules_interval_with_its_own_name() -> None:
    # Every heading said "Clopper-Pearson", whichever rule marked itself the default and computed the intervals.
    from certlab_core._runtime.default_rule import exact_interval_name
    from certlab_core.certify.contract import render_contract

    bundle = json.loads((CERTIFICATIONS / "pattern-fixer-intervals-k3" / "bundle.json").read_text())
    installed = discover(only=("clopper-pearson",))
    assert exact_interval_name(installed) == "Clopper-Pearson"
    assert "| 95% Clopper-Pearson |" in render_contract(bundle, installed)
    another = discover(only=("newcombe",), extra=[("second-default", second_default())])
    assert exact_interval_name(another) == "also-default"  # no interval_name: the rule's name
    contract = render_contract(bundle, another)
    assert "| 95% also-default |" in contract and "Clopper-Pearson" not in contract
    assert exact_interval_name(discover(only=("newcombe",))) == "exact interval"
