"""The sealed manifest and the schedule: seals, tampering, trial ids, shared seeds, interleaving, identity hashes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from gate_helpers import EXAMPLES, descriptor, write
from hypothesis import given, settings
from hypothesis import strategies as st

from certlab_core._runtime.registry import Registry
from certlab_core.gate.descriptor import load_descriptor
from certlab_core.gate.manifest import (
    Manifest,
    build_manifest,
    manifest_document,
    manifest_from_document,
    read_manifest,
)
from certlab_core.gate.schedule import (
    Identities,
    TrialKey,
    full_order,
    key_of,
    look_order,
    parse_trial_id,
    trial_identity,
)
from certlab_core.plugin.errors import InstrumentError
from certlab_core.sdk.canonical import pretty_json, seal_of, sealed


@pytest.fixture(scope="module")
def manifest(registry: Registry) -> Manifest:
    path = EXAMPLES / "a_vs_b.yaml"
    return build_manifest(load_descriptor(path), path, registry)


def test_the_seal_is_the_sha256_of_the_canonical_document(manifest: Manifest) -> None:
    document = manifest_document(manifest)
    assert document["seal"] == seal_of(document)
    assert manifest_from_document(document, "manifest.json") == manifest


def test_sealing_is_deterministic(registry: Registry, manifest: Manifest) -> None:
    path = EXAMPLES / "a_vs_b.yaml"
    again = build_manifest(load_descriptor(path), path, registry)
    assert again.seal == manifest.seal


def test_the_manifest_records_plugin_versions_and_agent_sources(manifest: Manifest) -> None:
    assert set(manifest.plugins) == {"certlab-retry-world", "certlab-faults", "certlab-clopper-pearson"}
    assert all(len(arm.source_sha256 or "") == 64 for arm in manifest.arms.values())
    assert manifest.task.tools == ("confirm", "reserve", "stock") and manifest.task.decisions


def test_an_edited_manifest_breaks_its_seal(tmp_path: Path, manifest: Manifest) -> None:
    document = manifest_document(manifest)
    document["n_per_arm"] = 199
    path = tmp_path / "manifest.json"
    path.write_text(pretty_json(document))
    with pytest.raises(InstrumentError, match="the seal does not match the content; the manifest was edited"):
        read_manifest(path)


def test_a_resealed_manifest_must_still_be_consistent(manifest: Manifest) -> None:
    document = manifest_document(manifest)
    document["schedule"]["look_sizes"] = [100, 200]
    with pytest.raises(InstrumentError, match="schedule does not follow"):
        manifest_from_document(sealed(document), "manifest.json")


def test_a_missing_or_non_json_manifest(tmp_path: Path) -> None:
    with pytest.raises(InstrumentError, match="missing; this folder is not a certlab run store"):
        read_manifest(tmp_path / "manifest.json")
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(InstrumentError, match="not JSON"):
        read_manifest(tmp_path / "manifest.json")


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)


def json_values(finite: bool = True) -> st.SearchStrategy[Any]:
    floats = st.floats(allow_nan=not finite, allow_infinity=not finite)
    return st.recursive(
        st.none() | st.booleans() | st.integers() | floats | st.text(max_size=8),
        containers,
        max_leaves=15,
    )


@settings(max_examples=300, deadline=None)
@given(json_values(finite=False))
def test_arbitrary_json_is_refused_as_an_instrument_error(document: Any) -> None:
    with pytest.raises(InstrumentError):
        manifest_from_document(document, "manifest.json")


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_resealed_manifest_with_any_value_replaced_is_read_or_refused(
    manifest: Manifest, data: st.DataObject
) -> None:
    """Even with a valid seal, an arbitrary value anywhere is either a manifest or one clear InstrumentError."""
    document = copy.deepcopy(manifest_document(manifest))
    paths: list[list[Any]] = []

    def collect(node: Any, path: list[Any]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for key, value in node.items():
                collect(value, [*path, key])
        elif isinstance(node, list):
            for i, value in enumerate(node):
                collect(value, [*path, i])

    collect(document, [])
    path = data.draw(st.sampled_from([p for p in paths if p and p != ["seal"]]))
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = data.draw(json_values())
    try:
        result = manifest_from_document(json.loads(json.dumps(sealed(document))), "manifest.json")
    except InstrumentError as error:
        assert error.message.startswith("manifest.json: ")
    else:
        assert isinstance(result, Manifest)


# --------------------------------------------------------------------------- the schedule


def test_trial_ids_read_arm_condition_index(manifest: Manifest) -> None:
    assert parse_trial_id("baseline/reserve-timeout/17") == ("baseline", "reserve-timeout", 17)
    assert parse_trial_id("baseline/reserve-timeout/017") is None
    assert parse_trial_id("other/reserve-timeout/1") is None
    assert key_of(manifest, "candidate/slow-stock/199") == TrialKey("candidate", "slow-stock", 199, manifest.seed + 199)
    assert key_of(manifest, "candidate/slow-stock/200") is None
    assert key_of(manifest, "candidate/no-such/1") is None


def test_both_arms_share_the_seed_of_each_index_and_the_order_interleaves(manifest: Manifest) -> None:
    order = list(full_order(manifest))
    assert len(order) == 2 * 200 * 3
    assert [k.id for k in order[:4]] == [
        "baseline/reserve-timeout/0",
        "candidate/reserve-timeout/0",
        "baseline/slow-stock/0",
        "candidate/slow-stock/0",
    ]
    seeds: dict[int, set[int]] = {}
    for key in order:
        seeds.setdefault(key.index, set()).add(key.seed)
    assert all(len(s) == 1 for s in seeds.values())
    assert [k.arm for k in order[:6]] == ["baseline", "candidate"] * 3


def test_looks_split_the_order(manifest: Manifest) -> None:
    looked = attrs.evolve(
        manifest,
        rule=attrs.evolve(manifest.rule, looks=3),
        schedule=attrs.evolve(manifest.schedule, look_sizes=(67, 134, 200)),
    )
    first = list(look_order(looked, 1))
    second = list(look_order(looked, 2, ["slow-stock"]))
    assert {k.index for k in first} == set(range(67))
    assert {k.index for k in second} == set(range(67, 134)) and {k.condition for k in second} == {"slow-stock"}


def test_fast_identities_equal_the_definition(manifest: Manifest) -> None:
    fast = Identities(manifest)
    for key in list(full_order(manifest))[::37]:
        assert fast.of(key) == trial_identity(manifest, key)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: attrs.evolve(m, rule=attrs.evolve(m.rule, name="newcombe")),
        lambda m: attrs.evolve(m, rule=attrs.evolve(m.rule, alpha=0.01)),
        lambda m: attrs.evolve(m, rule=attrs.evolve(m.rule, delta=0.2)),
        lambda m: attrs.evolve(m, plugins={**m.plugins, "certlab-faults": "9.9"}),
        lambda m: attrs.evolve(m, seed=m.seed + 1),
        lambda m: attrs.evolve(m, task=attrs.evolve(m.task, input={"orders": 5})),
        lambda m: attrs.evolve(m, arms={**m.arms, "candidate": attrs.evolve(m.arms["candidate"], agent="x:y")}),
    ],
    ids=["rule", "alpha", "delta", "plugin-version", "seed", "task", "arm"],
)
def test_the_identity_binds_task_arm_seed_rule_and_plugins(manifest: Manifest, change: Any) -> None:
    key = TrialKey("candidate", "reserve-timeout", 3, manifest.seed + 3)
    other = change(manifest)
    moved = TrialKey(key.arm, key.condition, key.index, other.seed + 3)
    assert trial_identity(other, moved) != trial_identity(manifest, key)
    assert Identities(other).of(moved) == trial_identity(other, moved)


def test_the_identity_differs_per_trial(manifest: Manifest) -> None:
    fast = Identities(manifest)
    identities = {fast.of(key) for key in full_order(manifest)}
    assert len(identities) == 1200


def test_a_descriptor_folder_reference_is_sealed_with_its_source_hash(registry: Registry, tmp_path: Path) -> None:
    (tmp_path / "local_agents.py").write_text("def agent(task, tools, rng):\n    return {}\n")
    data = descriptor(arms={"baseline": {"agent": "local_agents:agent"}, "candidate": {"agent": "local_agents:agent"}})
    path = write(tmp_path, data)
    manifest = build_manifest(load_descriptor(path), path, registry)
    import hashlib

    assert (
        manifest.arms["baseline"].source_sha256
        == hashlib.sha256((tmp_path / "local_agents.py").read_bytes()).hexdigest()
    )
